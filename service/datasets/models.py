"""Uploaded datasets. The raw bytes are kept so any worker can rebuild the ``Records``."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Integer, LargeBinary, String, Uuid
from sqlalchemy.orm import Mapped, deferred, mapped_column

from service.db import Base, UTCDateTime, utcnow


class Dataset(Base):
    __tablename__ = "datasets"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    name: Mapped[str] = mapped_column(String(200))
    content_hash: Mapped[str] = mapped_column(String(64), unique=True)
    format: Mapped[str] = mapped_column(String(8))
    size_bytes: Mapped[int] = mapped_column(Integer)
    n_records: Mapped[int] = mapped_column(Integer)
    n_systems: Mapped[int] = mapped_column(Integer)
    n_tasks: Mapped[int] = mapped_column(Integer)
    summary: Mapped[dict[str, Any]] = mapped_column(JSON)
    content: Mapped[bytes] = deferred(mapped_column(LargeBinary, nullable=False))
    parsed: Mapped[bytes | None] = deferred(mapped_column(LargeBinary, nullable=True, default=None))
    """The parsed records (``engine.records_blob``), read instead of parsing ``content`` again;
    null for datasets stored before it (they are parsed)."""
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, index=True)
