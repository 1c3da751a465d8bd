"""Dataset request and response bodies."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class DatasetRowsCreate(BaseModel):
    """JSON alternative to a file upload: the records as objects (SPEC §1 fields)."""

    name: str = Field(default="dataset", max_length=200)
    rows: list[dict[str, Any]]


class SystemSummary(BaseModel):
    name: str
    score: float = Field(description="Mean per-task outcome over the tasks the system ran.")
    n_tasks: int
    task_coverage: float = Field(description="Share of the task universe the system has an outcome for.")
    cost_coverage: float = Field(description="Share of its tasks with a cost.")


class GroupColumn(BaseModel):
    name: str
    n_groups: int


class DatasetSummary(BaseModel):
    systems: list[SystemSummary]
    group_columns: list[GroupColumn]
    trials_min: int
    trials_max: int
    single_trial: bool
    binary: bool
    cost_coverage: float = Field(description="Share of observed (system, task) cells that have a cost.")


class DatasetRead(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: uuid.UUID
    name: str
    content_hash: str
    format: str
    size_bytes: int
    n_records: int
    n_systems: int
    n_tasks: int
    created_at: datetime
    summary: DatasetSummary


class DatasetPage(BaseModel):
    items: list[DatasetRead]
    total: int
    limit: int
    offset: int
