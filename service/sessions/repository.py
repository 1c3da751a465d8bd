"""All SQL about live sessions. Functions only flush; the caller commits."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from service.sessions.models import LiveObservation, LiveSession


def add(session: Session, row: LiveSession) -> LiveSession:
    session.add(row)
    session.flush()
    return row


def get(session: Session, session_id: uuid.UUID) -> LiveSession | None:
    return session.get(LiveSession, session_id)


def observations(session: Session, session_id: uuid.UUID) -> list[tuple[str, str, int, float]]:
    """``(system, task_id, trial, outcome)`` in the order they were stored."""
    stmt = (
        select(LiveObservation.system, LiveObservation.task_id, LiveObservation.trial, LiveObservation.outcome)
        .where(LiveObservation.session_id == session_id)
        .order_by(LiveObservation.id)
    )
    return [tuple(r) for r in session.execute(stmt)]  # type: ignore[misc]


def insert_new(session: Session, session_id: uuid.UUID, rows: Sequence[tuple[str, str, int, float]]) -> int:
    """Insert rows whose ``(task, system, trial)`` is not stored yet; concurrent inserts of
    the same key wait for each other and the later one does nothing. Rows go in key order, so
    two overlapping appends take their index locks in the same order (in request order they
    could deadlock on Postgres). Returns rows added."""
    if not rows:
        return 0
    rows = sorted(rows, key=lambda r: (r[1], r[0], r[2]))
    dialect = session.get_bind().dialect.name
    insert = pg_insert if dialect == "postgresql" else sqlite_insert
    stmt = insert(LiveObservation).values(
        [{"session_id": session_id, "system": s, "task_id": t, "trial": tr, "outcome": o} for s, t, tr, o in rows]
    ).on_conflict_do_nothing(index_elements=["session_id", "task_id", "system", "trial"])
    return len(session.execute(stmt.returning(LiveObservation.id)).all())
