"""All SQL about live sessions. Functions only flush; the caller commits."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.db import insert_new_rows
from service.sessions.models import LiveObservation, LiveSession


def add(session: Session, row: LiveSession) -> LiveSession:
    session.add(row)
    session.flush()
    return row


def get(session: Session, session_id: uuid.UUID, *, lock: bool = False) -> LiveSession | None:
    """The row; with ``lock``, locked to the commit (``FOR UPDATE`` on Postgres; SQLite's write
    transactions already run one at a time)."""
    return session.get(LiveSession, session_id, with_for_update=lock or None)


def observations(session: Session, session_id: uuid.UUID) -> list[tuple[str, str, int, float]]:
    """``(system, task_id, trial, outcome)`` in the order they were stored."""
    stmt = (
        select(LiveObservation.system, LiveObservation.task_id, LiveObservation.trial, LiveObservation.outcome)
        .where(LiveObservation.session_id == session_id)
        .order_by(LiveObservation.id)
    )
    return [tuple(r) for r in session.execute(stmt)]  # type: ignore[misc]


def insert_new(session: Session, session_id: uuid.UUID, rows: Sequence[tuple[str, str, int, float]]) -> int:
    """Insert the ``(system, task, trial, outcome)`` rows whose key is not stored yet; returns rows added."""
    values = [{"session_id": session_id, "system": s, "task_id": t, "trial": tr, "outcome": o} for s, t, tr, o in rows]
    return insert_new_rows(session, LiveObservation, values, ("session_id", "task_id", "system", "trial"))
