"""Evaluation-statistics request and response bodies (SPEC §8)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, ValidationInfo, field_validator

Level = Field(default=0.95, gt=0.0, lt=1.0, description="Confidence level in (0, 1).")


# --------------------------------------------------------------------------- calculator requests


MAX_CURVE = 1_000


class PassKCreate(BaseModel):
    """One task's trials: ``c`` passes in ``n`` trials; ``k`` omitted = every k from 1 to n."""

    n: int = Field(ge=1, le=10_000, description="Trials of the task (exact binomial coefficients: bounded).")
    c: int = Field(ge=0, description="Passes among them.")
    k: int | None = Field(default=None, ge=1, validate_default=True,
                          description="Subset size; at most n. Needed when n > 1000.")

    @field_validator("c")
    @classmethod
    def _c_at_most_n(cls, v: int, info: ValidationInfo) -> int:
        n = info.data.get("n")
        if n is not None and v > n:
            raise ValueError(f"c={v} exceeds the number of trials n={n}")
        return v

    @field_validator("k")
    @classmethod
    def _k_at_most_n(cls, v: int | None, info: ValidationInfo) -> int | None:
        n = info.data.get("n")
        if v is not None and n is not None and v > n:
            raise ValueError(f"k={v} exceeds the number of trials n={n}")
        if v is None and n is not None and n > MAX_CURVE:  # the whole curve is one value per k (named k, not "")
            raise ValueError(f"give k when n > {MAX_CURVE} (the curve would have n values)")
        return v


class BoundCreate(BaseModel):
    """Exact one-sided binomial bounds from ``successes`` in ``n`` runs."""

    successes: int = Field(ge=0)
    n: int = Field(ge=1, le=10**15, description="Runs (at most 1e15: exact in double precision).")
    level: float = Level

    @field_validator("n")
    @classmethod
    def _n_at_least_successes(cls, v: int, info: ValidationInfo) -> int:
        s = info.data.get("successes")
        if s is not None and s > v:
            raise ValueError(f"n={v} is smaller than successes={s}")
        return v


class RunsCreate(BaseModel):
    """Fewest runs for an upper failure-rate bound at most ``max_failure_rate``."""

    max_failure_rate: float = Field(gt=0.0, lt=1.0)
    failures: int = Field(default=0, ge=0, description="Failures allowed among the runs.")
    level: float = Level


class MarginCreate(BaseModel):
    """Margin of error of a score over ``n`` tasks (``n`` may be fractional)."""

    n: float = Field(gt=0.0, description="Tasks.")
    p: float = Field(default=0.5, ge=0.0, le=1.0, description="Score (0.5 is the worst case).")
    level: float = Level


class TasksCreate(BaseModel):
    """Tasks needed for a target margin of error (a fraction, e.g. 0.03 for ±3 pp)."""

    margin: float = Field(gt=0.0, le=1.0)
    p: float = Field(default=0.5, ge=0.0, le=1.0)
    level: float = Level


class GapCreate(BaseModel):
    """Minimum significant gap at ``n`` tasks, unpaired vs paired with correlation ``rho``."""

    n: float = Field(gt=0.0)
    p: float = Field(default=0.5, ge=0.0, le=1.0)
    rho: float = Field(default=0.0, ge=-1.0, le=1.0)
    level: float = Level


class PowerCreate(BaseModel):
    """Tasks needed to detect a paired difference ``delta`` with the given power."""

    delta: float = Field(gt=0.0, le=1.0, description="Difference to detect, as a fraction.")
    power: float = Field(default=0.8, gt=0.0, lt=1.0)
    rho: float = Field(default=0.0, ge=-1.0, le=1.0)
    p: float = Field(default=0.5, ge=0.0, le=1.0)
    sd_diff: float | None = Field(default=None, ge=0.0, description="Sd of per-task differences (overrides p, rho).")
    level: float = Level


# --------------------------------------------------------------------------- calculator responses


class PassKRead(BaseModel):
    k: int
    pass_at_k: float | None
    pass_hat_k: float | None


class PassKCurveRead(BaseModel):
    n: int
    c: int
    values: list[PassKRead]


class BoundRead(BaseModel):
    successes: int
    n: int
    level: float
    success_lower: float
    success_upper: float
    failure_lower: float
    failure_upper: float


class RunsRead(BaseModel):
    runs: int
    max_failure_rate: float
    failures: int
    level: float


class MarginRead(BaseModel):
    n: float
    p: float
    level: float
    margin: float


class TasksRead(BaseModel):
    margin: float
    p: float
    level: float
    tasks: int


class GapRead(BaseModel):
    n: float
    unpaired: float
    paired: float


class PowerRead(BaseModel):
    tasks: int
    delta: float
    power: float
    rho: float
    level: float


# --------------------------------------------------------------------------- dataset statistics


class IntervalRead(BaseModel):
    low: float | None
    high: float | None
    method: str


class SystemPassKRead(BaseModel):
    k: int = Field(description="Subset size: 1 up to the system's largest trial count, or 100 (PASS_K_MAX).")
    pass_at_k: float | None
    pass_hat_k: float | None
    n_tasks: int
    n_excluded: int = Field(description="Tasks with fewer than k trials, left out at this k.")


class ClusteredRead(BaseModel):
    mean: float | None
    se: float | None = Field(description="CR1 cluster-robust standard error of the mean.")
    se_iid: float | None
    design_effect: float | None
    effective_tasks: float | None = Field(description="n_tasks / design_effect, capped at n_tasks (see the note).")
    n_tasks: int
    n_clusters: int
    effective_tasks_note: str | None = Field(
        default=None, description="Set when the cap applied: a design effect below 1 is CR1 noise, not information."
    )


class SystemStatsRead(BaseModel):
    system: str
    n_tasks: int
    n_trials: int
    mean: float | None
    se: float | None
    normal: IntervalRead
    wilson: IntervalRead
    clopper_pearson: IntervalRead | None
    clustered: ClusteredRead | None
    interval: IntervalRead = Field(description="The interval the leaderboard shows (method named).")
    pass_k: list[SystemPassKRead]


class LeaderboardRowRead(BaseModel):
    rank: int
    stats: SystemStatsRead
    rank_low: int = Field(description="1 + systems significantly better (corrected pairwise family).")
    rank_high: int = Field(description="S - systems significantly worse; with holm the intervals are simultaneous.")
    letters: list[str] | None = Field(
        description="Compact letters: two systems share one iff not significantly different (equal scores always do)."
    )


class ComparisonRead(BaseModel):
    higher: str
    lower: str
    rank_higher: int
    rank_lower: int
    n_tasks: int
    diff: float | None
    se: float | None
    test: str
    p_value: float | None
    p_adjusted: float | None
    distinguishable: bool
    ci_low: float | None = Field(description="Paired interval for diff at the chosen level (not corrected).")
    ci_high: float | None
    ci_method: str


class TieGroupRead(BaseModel):
    first_rank: int
    last_rank: int
    systems: list[str]
    description: str


class UnequalTaskSetsRead(BaseModel):
    code: Literal["unequal_task_sets"]
    message: str
    smallest_overlap: int
    pair: list[str]
    min_tasks: int
    max_tasks: int


class LeaderboardRead(BaseModel):
    level: float
    cluster: str | None
    correction: Literal["holm", "bh", "none"]
    n_clusters: int | None
    rows: list[LeaderboardRowRead]
    adjacent: list[ComparisonRead]
    matrix: list[ComparisonRead] | None
    ties: Literal["cliques", "adjacent", "leader"]
    tie_groups: list[TieGroupRead]
    definition: str
    unequal_task_sets: UnequalTaskSetsRead | None = Field(
        description="Present when systems ran different tasks: the smallest pairwise overlap and its pair."
    )
    rank_definition: str
    letters_note: str | None


class PairRead(BaseModel):
    a: str
    b: str
    n_tasks: int
    mean_a: float | None
    mean_b: float | None
    diff: float | None
    se_paired: float | None
    se_unpaired: float | None
    correlation: float | None
    clustered: ClusteredRead | None
    test: str
    p_value: float | None
    n_plus: int | None
    n_minus: int | None
    mcnemar_p: float | None
    min_gap_unpaired: float | None
    min_gap_paired: float | None
    bootstrap: IntervalRead | None
    n_boot: int | None
