"""Dataset request and response bodies."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from service.names import ColumnText


class DatasetRowsCreate(BaseModel):
    """JSON alternative to a file upload: the records as objects (SPEC §1 fields)."""

    name: ColumnText | None = Field(default=None, max_length=200,
                                    description="Default: 'dataset-' + 8 hex digits of the content hash.")
    rows: list[dict[str, Any]]


class DatasetUpdate(BaseModel):
    """A new name (datasets are otherwise immutable: their records define them)."""

    model_config = ConfigDict(extra="forbid")

    name: ColumnText = Field(min_length=1, max_length=200, pattern=r"\S")


class DatasetDeleted(BaseModel):
    id: uuid.UUID
    deleted_replays: list[uuid.UUID] = Field(description="Finished replays deleted with it (?with_replays=true).")


class SystemSummary(BaseModel):
    name: str
    score: float = Field(description="Mean per-task outcome over the tasks the system ran.")
    n_tasks: int
    task_coverage: float = Field(description="Share of the task universe the system has an outcome for.")
    cost_coverage: float = Field(description="Share of its tasks with a cost.")


class GroupColumn(BaseModel):
    name: str
    n_groups: int
    coverage_from_k: int | None = Field(
        default=None,
        description="Fewest tasks at which the proportional coverage floor of this grouping fits on the task "
        "universe (SPEC §3); a coverage-aware replay defers every smaller budget. Null on datasets stored "
        "before it was computed.",
    )


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
    content_hash: str = Field(description="SHA-256 of the normalised records (the same records as CSV or JSONL, in "
                              "any row order, have the same hash); of the bytes for datasets stored before that.")
    format: str
    size_bytes: int
    n_records: int
    n_systems: int
    n_tasks: int
    created_at: datetime
    summary: DatasetSummary
    notice: str | None = Field(default=None, description="On a re-upload (200): which stored dataset these records "
                               "are, and that a new name was not applied.")


class DatasetPage(BaseModel):
    items: list[DatasetRead]
    total: int
    limit: int = Field(description="The page size used: the one asked for, or fewer where the page's summaries "
                                   "would list more than 20,000 systems (the next page starts at offset + limit).")
    offset: int
