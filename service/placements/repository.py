"""All SQL about placements. Functions only flush; the caller commits."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.db import insert_new_rows
from service.placements.models import Placement, PlacementObservation


def add(session: Session, row: Placement) -> Placement:
    session.add(row)
    session.flush()
    return row


def get(session: Session, placement_id: uuid.UUID, *, lock: bool = False) -> Placement | None:
    """The row; with ``lock``, locked to the commit (``FOR UPDATE`` on Postgres; SQLite's write
    transactions already run one at a time)."""
    return session.get(Placement, placement_id, with_for_update=lock or None)


def observations(session: Session, placement_id: uuid.UUID) -> list[tuple[str, int, float]]:
    """``(task_id, trial, outcome)`` in the order they were stored."""
    stmt = (
        select(PlacementObservation.task_id, PlacementObservation.trial, PlacementObservation.outcome)
        .where(PlacementObservation.placement_id == placement_id)
        .order_by(PlacementObservation.id)
    )
    return [tuple(r) for r in session.execute(stmt)]  # type: ignore[misc]


def insert_new(session: Session, placement_id: uuid.UUID, rows: Sequence[tuple[str, int, float]]) -> int:
    """Insert the ``(task, trial, outcome)`` rows whose key is not stored yet; returns rows added."""
    values = [{"placement_id": placement_id, "task_id": t, "trial": tr, "outcome": o} for t, tr, o in rows]
    return insert_new_rows(session, PlacementObservation, values, ("placement_id", "task_id", "trial"))
