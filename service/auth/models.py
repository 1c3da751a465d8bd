"""API keys. Only a SHA-256 of the token is stored; the token is shown once at creation."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import JSON, String, Uuid
from sqlalchemy.orm import Mapped, mapped_column

from service.db import Base, UTCDateTime, utcnow


class ApiKey(Base):
    __tablename__ = "api_keys"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    prefix: Mapped[str] = mapped_column(String(16), unique=True)
    """Public part of the token (``suf_<prefix>_<secret>``): finds the row without the secret."""
    key_hash: Mapped[str] = mapped_column(String(64))
    name: Mapped[str] = mapped_column(String(200))
    owner: Mapped[str] = mapped_column(String(200), index=True)
    """Replays and sessions created with this key belong to this owner (several keys may share one)."""
    scopes: Mapped[list[str]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
