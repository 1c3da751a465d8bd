"""Placement request and response bodies."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from service.names import ColumnText

PlacementStatus = Literal["running", "concluded", "exhausted"]


class PlacementCreate(BaseModel):
    """Where does a new system rank on a stored board? Declare it before running it."""

    model_config = ConfigDict(extra="forbid")

    dataset_id: uuid.UUID = Field(description="The stored board (its systems' outcomes are the comparison).")
    system: ColumnText = Field(min_length=1, max_length=200, description="The new entry's name (not on the board).")
    group: str | None = Field(default=None, max_length=200,
                              description="Grouping key for coverage (a column or 'col1,col2').")
    rule: str = Field(default="anytime", description="An anytime-valid rule: anytime (default) or anytime_eb.")
    a: float = Field(default=0.05, gt=0.0, lt=1.0, description="Error level of the whole placement.")
    correction: Literal["holm", "bonferroni"] = Field(
        default="holm", description="How a is split over the board's systems so every comparison holds at once."
    )
    width: int = Field(default=1, description="Stop once the rank interval spans at most this many ranks (>= 1).")
    floor: str = Field(default="proportional", description="Coverage floor over the groups.")
    coverage_aware: bool = Field(default=True, description="No comparison concludes while coverage is unmet.")
    trials: int = Field(default=1, ge=1, le=1000, description="Trials per task before a task counts.")
    seed: int | None = Field(default=None, ge=0, le=2**63 - 1,
                             description="Seed of the placement order (default: from the board).")


class PlacementObservationIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    task_id: str
    trial: int = Field(default=0, ge=0)
    outcome: float = Field(ge=0.0, le=1.0, description="In [0, 1]: 1 = pass, fractional rewards allowed.")


class PlacementObservationsCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    observations: list[PlacementObservationIn] = Field(min_length=1)


class BoardComparison(BaseModel):
    system: str
    board_score: float = Field(description="The board system's mean over its own tasks.")
    n_common: int = Field(description="Tasks the board system has (the comparison's population).")
    k: int = Field(description="Of those, observed for the entry.")
    mean_difference: float | None = Field(description="Entry minus board system on the k tasks.")
    decision: Literal["accept", "reject", "defer"] = Field(
        description="accept: the entry is better on the full run; reject: it is not (ties included); defer: open."
    )
    level: float = Field(description="The level this comparison was decided at (a split over the board).")
    stopped_at: int | None = Field(description="Step of its own sequence at which it concluded.")


class NextTasks(BaseModel):
    k: int
    budget_fraction: float | None
    feasible: bool
    reachable: bool
    groups: list[dict]
    task_ids: list[str]


class PlacementState(BaseModel):
    status: PlacementStatus
    k: int = Field(description="Tasks observed for the entry (with all their trials).")
    N: int
    rank_low: int
    rank_high: int
    width: int = Field(description="rank_high - rank_low + 1.")
    entry_score: float | None = Field(description="The entry's mean over its observed tasks.")
    board: list[BoardComparison]
    rivals: list[str] = Field(description="The open comparisons nearest the entry (what the next tasks separate).")
    next: NextTasks | None = Field(description="Tasks to run next: the placement order, meeting coverage.")
    observed_task_ids: list[str]


class PlacementObservationsResult(PlacementState):
    added: int
    duplicates: int


class PlacementRead(PlacementState):
    id: uuid.UUID
    dataset_id: uuid.UUID
    group: str | None
    system: str
    rule: str
    a: float
    correction: str
    requested_width: int
    floor: str
    coverage_aware: bool
    trials: int
    seed: int
    order: list[str] = Field(description="The placement order (fixed at creation, independent of the entry).")
    true_rank_definition: str
    created_at: datetime
