"""Replays, their chunks (one job each) and the metric rows of finished reports."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
    Uuid,
)
from sqlalchemy.orm import Mapped, deferred, mapped_column

from service.db import Base, UTCDateTime, utcnow

BigId = BigInteger().with_variant(Integer, "sqlite")  # SQLite autoincrements INTEGER keys only

QUEUED, RUNNING, SUCCEEDED, FAILED, CANCELLED = "queued", "running", "succeeded", "failed", "cancelled"
FINISHED = (SUCCEEDED, FAILED, CANCELLED)
CHUNK_PENDING, CHUNK_RUNNING, CHUNK_DONE = "pending", "running", "done"


class Replay(Base):
    __tablename__ = "replays"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    dataset_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("datasets.id", ondelete="RESTRICT"), index=True)
    status: Mapped[str] = mapped_column(String(16), default=QUEUED, index=True)
    options: Mapped[dict[str, Any]] = mapped_column(JSON)
    """The validated options given to ``make_spec`` (workers rebuild the spec from them)."""
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    """``ReplaySpec.to_dict()``: the canonical form, echoed by the API."""
    n_pairs: Mapped[int] = mapped_column(Integer)
    n_chunks: Mapped[int] = mapped_column(Integer)
    n_cases: Mapped[int | None] = mapped_column(BigInteger, default=None)
    estimated_seconds: Mapped[float | None] = mapped_column(Float, default=None)
    cost_kind: Mapped[str | None] = mapped_column(String(120), default=None)
    """What the per-case cost depends on (lattice, rules): finished replays of a kind time the next."""
    """Run time on one worker predicted at submission (``service.replays.estimate``)."""
    error: Mapped[str | None] = mapped_column(Text, default=None)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, index=True)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    dispatched_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    """When ``replays.run`` was last sent; a queued replay sent long ago is sent again."""
    owner: Mapped[str | None] = mapped_column(String(200), default=None, index=True)
    """The owner of the API key that submitted it (null while auth is off); see service.auth."""
    report_etag: Mapped[str | None] = mapped_column(String(80), default=None)
    report_json: Mapped[bytes | None] = deferred(mapped_column(LargeBinary, default=None))
    report_csv: Mapped[bytes | None] = deferred(mapped_column(LargeBinary, default=None))


class ReplayChunk(Base):
    __tablename__ = "replay_chunks"
    __table_args__ = (UniqueConstraint("replay_id", "chunk_index"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    replay_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("replays.id", ondelete="CASCADE"))
    chunk_index: Mapped[int] = mapped_column(Integer)
    start: Mapped[int] = mapped_column(Integer)
    stop: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16), default=CHUNK_PENDING)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    progress: Mapped[float] = mapped_column(Float, default=0.0)
    """Share of the chunk's cases done, refreshed with the heartbeat (1 once stored)."""
    heartbeat_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    dispatched_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    """When the chunk's job was last sent; a pending chunk sent long ago is sent again."""
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    result: Mapped[bytes | None] = deferred(mapped_column(LargeBinary, default=None))


class MetricRow(Base):
    __tablename__ = "metric_rows"
    __table_args__ = (Index("ix_metric_rows_replay_metric", "replay_id", "metric", "policy"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    replay_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("replays.id", ondelete="CASCADE"))
    policy: Mapped[str] = mapped_column(String(200))
    grouping: Mapped[str | None] = mapped_column(String(200))
    floor: Mapped[str] = mapped_column(String(32))
    a: Mapped[float] = mapped_column(Float)
    bootstrap: Mapped[str] = mapped_column(String(32))
    delta: Mapped[float] = mapped_column(Float)
    budget: Mapped[float | None] = mapped_column(Float)
    """Null for per-configuration rows (minimum_sufficient_budget, error_coverage_budget)."""
    metric: Mapped[str] = mapped_column(String(64))
    value: Mapped[float | None] = mapped_column(Float)


class ReplayPairTable(Base):
    """One configuration's per-pair breakdown (``engine.pairs.PairTable.to_bytes``), written
    with the report: the report itself leaves the rows out and ``/pairs`` serves them by page."""

    __tablename__ = "replay_pair_tables"

    replay_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("replays.id", ondelete="CASCADE"), primary_key=True)
    config_index: Mapped[int] = mapped_column(Integer, primary_key=True)
    n_pairs: Mapped[int] = mapped_column(Integer)
    data: Mapped[bytes] = mapped_column(LargeBinary)
