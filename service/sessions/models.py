"""A live session (what is compared, under which rule and schedule) and its observations."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, Boolean, Float, ForeignKey, Integer, String, UniqueConstraint, Uuid
from sqlalchemy.orm import Mapped, mapped_column

from service.db import Base, UTCDateTime, utcnow

BigId = BigInteger().with_variant(Integer, "sqlite")  # SQLite autoincrements INTEGER keys only


class LiveSession(Base):
    __tablename__ = "live_sessions"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    dataset_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("datasets.id", ondelete="RESTRICT"), index=True, default=None
    )
    grouping: Mapped[str | None] = mapped_column(String(200), default=None)
    system_a: Mapped[str] = mapped_column(String(200))
    system_b: Mapped[str] = mapped_column(String(200))
    policy: Mapped[str | None] = mapped_column(String(200), default=None)
    rule: Mapped[str] = mapped_column(String(32))
    coverage_aware: Mapped[bool] = mapped_column(Boolean)
    delta: Mapped[float] = mapped_column(Float)
    a: Mapped[float] = mapped_column(Float)
    floor: Mapped[str] = mapped_column(String(32))
    bootstrap: Mapped[str] = mapped_column(String(16))
    budgets: Mapped[list[float]] = mapped_column(JSON)
    spending: Mapped[str | None] = mapped_column(String(32), default=None)
    """How a fixed-sample rule spends ``a`` over the checkpoints (SPEC §4.4); null for anytime."""
    trials: Mapped[int] = mapped_column(Integer)
    seed: Mapped[int] = mapped_column(BigInteger)
    universe: Mapped[dict[str, Any]] = mapped_column(JSON)
    """``{"task_ids": [...], "groups": [...]}`` (a dataset's universe is copied at creation)."""
    task_order: Mapped[list[str]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, index=True)
    owner: Mapped[str | None] = mapped_column(String(200), default=None, index=True)
    """The owner of the API key that declared it (null while auth is off); see service.auth."""


class LiveObservation(Base):
    __tablename__ = "live_observations"
    __table_args__ = (UniqueConstraint("session_id", "task_id", "system", "trial"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    session_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("live_sessions.id", ondelete="CASCADE"))
    task_id: Mapped[str] = mapped_column(String(500))
    system: Mapped[str] = mapped_column(String(1))
    """``A`` or ``B`` (the session stores the names)."""
    trial: Mapped[int] = mapped_column(Integer)
    outcome: Mapped[float] = mapped_column(Float)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
