"""Session request and response bodies."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from service.decisions.schemas import Decision, DecisionRead, ObservationIn, Reason, RuleOptions, UniverseIn
from service.names import ColumnText

SessionStatus = Literal["running", "concluded", "exhausted"]


class SessionCreate(RuleOptions):
    """Declare a comparison before the run: A, B, the universe, the rule and the checkpoints."""

    model_config = ConfigDict(extra="forbid")

    system_a: ColumnText = Field(default="A", max_length=200)
    system_b: ColumnText = Field(default="B", max_length=200)
    universe: UniverseIn | None = None
    dataset_id: uuid.UUID | None = Field(default=None, description="Take the universe and groups from a dataset.")
    group: str | None = Field(
        default=None, max_length=200, description="Dataset grouping key (a column or 'col1,col2')."
    )
    rule: str | None = Field(default=None, description="Default anytime: it may conclude after any observation.")
    budgets: list[float] = Field(
        default=[0.25, 0.5, 0.75, 1.0],
        description="Checkpoints (fractions of N, strictly increasing). Fixed-sample rules conclude only at "
        "these; the last is the cap.",
    )
    spending: str | None = Field(
        default=None,
        description="How a fixed-sample rule spends a over the checkpoints (SPEC §4.4): obrien_fleming (default), "
        "pocock, or none (level a at every checkpoint: optional stopping, kept for comparison). Not for anytime.",
    )
    trials: int = Field(default=1, ge=1, le=1000, description="Trials per system and task before a task counts.")
    seed: int | None = Field(
        default=None, ge=0, le=2**63 - 1, description="Seed of the recommended order (default: from the universe)."
    )


class ObservationsCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    observations: list[ObservationIn] = Field(min_length=1)


class Checkpoint(BaseModel):
    budget: float
    k: int
    level: float | None = Field(description="The level the rule is consulted at here (null for anytime).")


class HistoryEntry(BaseModel):
    event: Literal["checkpoint", "stop"]
    budget: float | None = Field(description="The checkpoint's budget fraction (null for an anytime stop).")
    k: int
    level: float | None = Field(default=None, description="The checkpoint's level (fixed-sample rules).")
    decision: Decision
    reason: Reason
    mean_difference: float | None
    statistic: dict[str, float | int | None]


class SessionState(BaseModel):
    status: SessionStatus
    k: int = Field(description="Tasks observed for both systems.")
    N: int
    observed_task_ids: list[str] = Field(
        default_factory=list, description="The k observed tasks in the order they became observed (resume from here)."
    )
    current: DecisionRead
    history: list[HistoryEntry]


class ObservationsResult(SessionState):
    added: int = Field(description="New observations stored by this request.")
    duplicates: int = Field(description="Observations already stored with the same outcome (ignored).")


class SessionRead(SessionState):
    id: uuid.UUID
    dataset_id: uuid.UUID | None
    group: str | None
    system_a: str
    system_b: str
    policy: str | None
    rule: str
    coverage_aware: bool
    delta: float
    a: float
    floor: str
    bootstrap: int | Literal["exact"]
    budgets: list[float]
    spending: str | None = Field(description="The checkpoints' spending function (null for anytime).")
    trials: int
    seed: int
    checkpoints: list[Checkpoint]
    order: list[str] = Field(description="Recommended task order: stratified, seeded; prefixes meet coverage.")
    created_at: datetime
