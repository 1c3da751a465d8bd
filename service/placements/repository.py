"""All SQL about placements. Functions only flush; the caller commits."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from service.placements.models import Placement, PlacementObservation


def add(session: Session, row: Placement) -> Placement:
    session.add(row)
    session.flush()
    return row


def get(session: Session, placement_id: uuid.UUID) -> Placement | None:
    return session.get(Placement, placement_id)


def observations(session: Session, placement_id: uuid.UUID) -> list[tuple[str, int, float]]:
    """``(task_id, trial, outcome)`` in the order they were stored."""
    stmt = (
        select(PlacementObservation.task_id, PlacementObservation.trial, PlacementObservation.outcome)
        .where(PlacementObservation.placement_id == placement_id)
        .order_by(PlacementObservation.id)
    )
    return [tuple(r) for r in session.execute(stmt)]  # type: ignore[misc]


def insert_new(session: Session, placement_id: uuid.UUID, rows: Sequence[tuple[str, int, float]]) -> int:
    """Insert rows whose ``(task, trial)`` is not stored yet (a concurrent insert of the same
    key waits and then does nothing). Key order, as for sessions: overlapping appends lock alike.
    Returns the rows added."""
    if not rows:
        return 0
    rows = sorted(rows, key=lambda r: (r[0], r[1]))
    insert = pg_insert if session.get_bind().dialect.name == "postgresql" else sqlite_insert
    stmt = (
        insert(PlacementObservation)
        .values([{"placement_id": placement_id, "task_id": t, "trial": tr, "outcome": o} for t, tr, o in rows])
        .on_conflict_do_nothing(index_elements=["placement_id", "task_id", "trial"])
    )
    return len(session.execute(stmt.returning(PlacementObservation.id)).all())
