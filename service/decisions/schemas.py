"""Decision request and response bodies (SPEC §7)."""

from __future__ import annotations

import uuid
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Decision = Literal["accept", "reject", "defer"]
Reason = Literal["decided", "coverage_unmet", "coverage_infeasible", "insufficient_evidence", "awaiting_checkpoint"]


class UniverseIn(BaseModel):
    """The task universe: ids, and one group label per id (omit for a single group)."""

    model_config = ConfigDict(extra="forbid")

    task_ids: list[str]
    groups: list[str | None] | None = Field(default=None, description="Group label of each task, same length.")


class ObservationIn(BaseModel):
    """One attempt: ``system`` is the name given as ``system_a`` or ``system_b``."""

    model_config = ConfigDict(extra="forbid")

    task_id: str
    system: str
    trial: int = 0
    outcome: float = Field(description="In [0, 1]: 1 = pass, fractional rewards allowed.")


class RuleOptions(BaseModel):
    """How to decide (shared by decisions and sessions)."""

    policy: str | None = Field(
        default=None,
        description="A named policy (SPEC §4.3); sets the rule and coverage-awareness. Its order is not used.",
    )
    rule: str | None = Field(
        default=None, description="forced, bootstrap, paired_normal, mcnemar, serfling or anytime."
    )
    delta: float = Field(default=0.0, description="Threshold δ in percentage points.")
    a: float = Field(default=0.05, description="Level of the rule.")
    floor: str = Field(default="proportional", description="Coverage floor: proportional, slack, one_per_group, none.")
    bootstrap: int | Literal["exact"] = Field(default="exact", description="Resamples B, or the exact distribution.")
    coverage_aware: bool | None = Field(default=None, description="Defer while coverage is unmet (default yes).")


class DecisionCreate(RuleOptions):
    """Observed outcomes of A and B, the universe (inline or a dataset's), and the rule."""

    model_config = ConfigDict(extra="forbid")

    system_a: str = "A"
    system_b: str = "B"
    universe: UniverseIn | None = None
    dataset_id: uuid.UUID | None = Field(default=None, description="Take the universe and groups from a dataset.")
    group: str | None = Field(
        default=None, max_length=200, description="Dataset grouping key: a column or 'col1,col2'; none = one group."
    )
    observations: list[ObservationIn] | None = Field(
        default=None, description="Attempts in the order they finished (one row per system, task, trial)."
    )
    outcomes: dict[str, dict[str, float | list[float]]] | None = Field(
        default=None,
        description="Compact form: {system: {task_id: outcome or [outcome per trial]}}; the sequence of "
        "observed tasks follows the keys of system_a unless `order` is given.",
    )
    order: list[str] | None = Field(default=None, description="Sequence in which tasks were observed (anytime).")
    budgets: list[float] | None = Field(default=None, description="Budget grid (fractions) for `next`.")
    budget: float | None = Field(default=None, description="The run's budget cap, a fraction of N.")
    seed: int = Field(default=0, ge=0, description="Mixed into the seeds of `next` tie-breaks and finite bootstraps.")
    calibration: bool = Field(default=True, description="Look up a finished replay of the dataset.")
    forecast: bool = Field(
        default=False,
        description="Also estimate the further tasks to a conclusion (simulated continuations; a few ms to ~0.1 s).",
    )


class CoverageGroup(BaseModel):
    group: str
    n: int
    required: int
    observed: int
    missing: int


class Coverage(BaseModel):
    floor: str
    coverage_aware: bool
    k: int
    feasible: bool
    met: bool
    groups: list[CoverageGroup]


class NextGroup(BaseModel):
    group: str
    missing: int = Field(description="Tasks the group lacks of its floor at the next budget point.")
    run: int = Field(description="Tasks of this group to run now (floor plus share of the remaining slots).")
    task_ids: list[str]


class NextTasks(BaseModel):
    k: int = Field(description="The next budget point (observed tasks).")
    budget_fraction: float | None
    feasible: bool
    reachable: bool = Field(description="Coverage can be met at k from the observed tasks plus k minus current.")
    groups: list[NextGroup]
    task_ids: list[str] = Field(description="The tasks to run, interleaved across groups.")


class Counts(BaseModel):
    observed: int
    a_wins: int
    b_wins: int
    ties: int
    a_only: int
    b_only: int
    pending: int
    unobserved: int


class Calibration(BaseModel):
    """Replayed error rates of the same policy, δ and floor on the dataset (SPEC §5–§6)."""

    replay_id: uuid.UUID
    policy: str
    group: str | None
    bootstrap: str
    budget: float | None = Field(description="The replayed budget nearest to k/N.")
    false_accept_rate: float | None
    false_reject_rate: float | None
    defer_rate: float | None
    minimum_sufficient_budget: float | None


class Interval(BaseModel):
    """Each bound holds at the rule's level a (two-sided coverage 1 - 2a); it excludes δ exactly
    when the rule concludes. For anytime the confidence sequence: valid wherever the run stops."""

    lower: float | None
    upper: float | None
    k: int = Field(description="Tasks it is computed on (the stop for anytime).")
    level_each_side: float
    coverage: float | None
    anytime_valid: bool


class Forecast(BaseModel):
    """Simulated continuations drawn from the observed differences, run through the same rule."""

    expected_more_tasks: float | None
    p10: int
    median: int
    p90: int
    conclude_share: float | None = Field(description="Share of continuations that conclude within the cap.")
    cap: int
    simulations: int


class BehindGroup(BaseModel):
    group: str
    missing: int


class CoverageWarning(BaseModel):
    groups: list[BehindGroup]
    missing: int
    blocked_conclusion: bool = Field(description="The rule's evidence alone would conclude now.")
    message: str


class DecisionRead(BaseModel):
    decision: Decision
    reason: Reason
    rule: str
    rule_decision: Decision | None = Field(description="The rule's verdict before coverage is applied.")
    k: int
    N: int
    budget_fraction: float | None
    mean_difference: float | None
    delta: float
    a: float
    counts: Counts
    statistic: dict[str, float | int | None]
    coverage: Coverage
    next: NextTasks | None
    budget_exhausted: bool
    warning: str | None
    interval: Interval | None = Field(
        default=None, description="The confidence interval for Δ the rule implies at the stop (SPEC §7)."
    )
    forecast: Forecast | None = Field(
        default=None, description="Further tasks to a conclusion if the rest looks like the observed tasks."
    )
    coverage_warning: CoverageWarning | None = Field(
        default=None, description="The harness's order is behind the coverage floors: which groups, how many tasks."
    )
    calibration: Calibration | None = None
