"""API key request and response bodies."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from service.names import ColumnText

Scope = Literal["read", "submit", "decide", "admin"]


class KeyCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: ColumnText = Field(min_length=1, max_length=200)
    owner: ColumnText | None = Field(default=None, min_length=1, max_length=200, description="Default: the name.")
    scopes: list[Scope] = Field(min_length=1)


class KeyRead(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: uuid.UUID
    prefix: str
    name: str
    owner: str
    scopes: list[str]
    created_at: datetime
    revoked_at: datetime | None


class KeyCreated(KeyRead):
    token: str = Field(description="The key. Shown once: only its hash is stored.")
