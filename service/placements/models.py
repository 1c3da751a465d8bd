"""A placement (a new entry measured against a stored board) and the entry's observations."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import JSON, BigInteger, Boolean, Float, ForeignKey, Integer, String, UniqueConstraint, Uuid
from sqlalchemy.orm import Mapped, mapped_column

from service.db import Base, UTCDateTime, utcnow
from service.sessions.models import BigId


class Placement(Base):
    __tablename__ = "placements"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    dataset_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("datasets.id", ondelete="CASCADE"), index=True)
    """The board; a placement cannot outlive it (its outcomes are read on every answer)."""
    grouping: Mapped[str | None] = mapped_column(String(200), default=None)
    system: Mapped[str] = mapped_column(String(200))
    rule: Mapped[str] = mapped_column(String(32))
    correction: Mapped[str] = mapped_column(String(16))
    a: Mapped[float] = mapped_column(Float)
    width: Mapped[int] = mapped_column(Integer)
    floor: Mapped[str] = mapped_column(String(32))
    coverage_aware: Mapped[bool] = mapped_column(Boolean)
    trials: Mapped[int] = mapped_column(Integer)
    seed: Mapped[int] = mapped_column(BigInteger)
    task_order: Mapped[list[str]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, index=True)
    owner: Mapped[str | None] = mapped_column(String(200), default=None, index=True)
    """The owner of the API key that created it (null while auth is off); see service.auth."""


class PlacementObservation(Base):
    __tablename__ = "placement_observations"
    __table_args__ = (UniqueConstraint("placement_id", "task_id", "trial"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    placement_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("placements.id", ondelete="CASCADE"))
    task_id: Mapped[str] = mapped_column(String(500))
    trial: Mapped[int] = mapped_column(Integer)
    outcome: Mapped[float] = mapped_column(Float)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
