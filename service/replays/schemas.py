"""Replay request and response bodies. The create body mirrors ``sufficiency replay``."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Status = Literal["queued", "running", "succeeded", "failed", "cancelled"]


class CustomPolicy(BaseModel):
    """A policy outside the named ones (SPEC §4): an order, a rule, coverage-aware or not."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(default=None, max_length=200)
    order: Literal["uniform", "stratified", "cost_ascending", "neyman"]
    rule: Literal["forced", "bootstrap", "paired_normal", "mcnemar", "serfling", "anytime", "anytime_eb"]
    coverage_aware: bool = False
    checkpoints: list[float] | str | None = Field(default=None, description="This policy's schedule (SPEC §4.4).")
    spending: str | None = None


class ReplayCreate(BaseModel):
    """A dataset and the replay spec; omitted options take the engine defaults (SPEC §3–§6)."""

    model_config = ConfigDict(extra="forbid")

    dataset_id: uuid.UUID
    policies: list[str | CustomPolicy] | None = Field(
        default=None, description="Named policies (SPEC §4.3) or custom ones; default coverage_bootstrap."
    )
    deltas: list[float] | None = Field(default=None, description="Thresholds δ in percentage points.")
    budgets: list[float] | str | None = Field(
        default=None, description="Budget fractions, or 'start:stop:step' / '0.1,0.25'."
    )
    orders: int | None = Field(default=None, description="Sampled orders R per pair.")
    checkpoints: list[float] | str | None = Field(
        default=None,
        description="A schedule for every fixed-sample policy (SPEC §4.4): fractions, or '0.02:0.5:0.02,1'. "
        "At budget k a case ends at its first conclusive checkpoint <= k; budgets report mean_tasks_used.",
    )
    spending: str | None = Field(default=None, description="obrien_fleming (default), pocock or none.")
    bootstrap: list[int | Literal["exact"]] | None = Field(default=None, description="Resample counts B.")
    a: list[float] | None = Field(default=None, description="Rule levels.")
    floors: list[Literal["proportional", "slack", "one_per_group", "none"]] | None = None
    groups: list[str | None] | None = Field(
        default=None, description="Grouping keys: a metadata column, 'col1,col2', or null for one group."
    )
    orientation: Literal["directed", "one_per_pair"] | None = None
    min_task_coverage: float | None = None
    alpha: float | None = None
    gamma: float | None = None
    eta: float | None = None
    seed: int | None = None
    seeds: int | None = None
    pairs: str | None = Field(
        default=None, max_length=20_000,
        description="Which pairs count (SPEC §5.1): 'all', 'involving:S1,S2', 'adjacent', 'top:K', 'min_gap:X' (pp), "
        "joined by '+' (intersection), e.g. 'top:10+min_gap:2'.",
    )
    gap_classes: list[float] | None = Field(
        default=None, max_length=41, description="Edges in pp of the |Δ_full| classes; default 0, 1, 2, 5, 10, 100."
    )


class ReplayLinks(BaseModel):
    self: str
    report: str
    report_csv: str
    metrics: str
    pairs: str


class ReplayRead(BaseModel):
    id: uuid.UUID
    dataset_id: uuid.UUID
    status: Status
    progress: float = Field(description="Share of the cases replayed, in [0, 1] (moves within a chunk too).")
    n_cases: int | None = Field(default=None, description="pairs x orders x budgets x configurations x seeds.")
    estimated_seconds: float | None = Field(
        default=None, description="Run time on one worker predicted at submission from the case count and a per-case "
        "cost measured on the replay's first pairs (null for replays of about a second).")
    eta_seconds: float | None = Field(
        default=None, description="Seconds left: from the rate so far once running, the estimate while queued.")
    n_pairs: int
    n_chunks: int
    chunks_done: int
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    error: str | None
    spec: dict[str, Any]
    links: ReplayLinks


class ReplayPage(BaseModel):
    items: list[ReplayRead]
    total: int
    limit: int
    offset: int


class MetricRowRead(BaseModel):
    policy: str
    group: str | None
    floor: str
    a: float
    bootstrap: str
    delta: float
    budget: float | None = Field(description="Null on per-configuration rows (minimum_sufficient_budget...).")
    metric: str
    value: float | None


class MetricPage(BaseModel):
    items: list[MetricRowRead]
    total: int
    limit: int
    offset: int


class PairRowRead(BaseModel):
    """One directed pair of a configuration (SPEC §5): shares of its cases at each budget."""

    a: str
    b: str
    n_tasks: int
    delta_full: float = Field(description="Δ_full = mean(A) − mean(B) over the pair's tasks (a fraction).")
    full_decision: Literal["positive", "negative"]
    accept: list[float] = Field(description="Share of the pair's cases ending accept, per budget of the spec.")
    reject: list[float]
    defer: list[float]


class PairPage(BaseModel):
    """A page of a configuration's per-pair rows: the rows the CLI report lists under
    ``configurations[config].per_pair``, after the filters, in the chosen order."""

    config: int
    budgets: list[float]
    items: list[PairRowRead]
    matched: int = Field(description="Pairs left by the filters.")
    total: int = Field(description="Pairs of the configuration.")
    limit: int
    offset: int
