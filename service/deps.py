"""FastAPI dependencies (the request's session, which owns the transaction, and the app state) and shared parameters."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Query, Request
from sqlalchemy.orm import Session

from service.config import Settings
from service.db import transaction
from service.jobs import JobRunner


def get_session(request: Request) -> Iterator[Session]:
    """One transaction per request: committed after the endpoint returns (before the
    response is sent, so a client never sees a 201 for a row that is not there), rolled
    back on any error. Jobs enqueued during the request go out only after the commit."""
    write = request.method not in ("GET", "HEAD", "OPTIONS")
    with transaction(request.app.state.sessionmaker, write=write) as session:
        yield session


def get_settings(request: Request) -> Settings:
    return request.app.state.settings


def get_runner(request: Request) -> JobRunner:
    return request.app.state.runner


SessionDep = Annotated[Session, Depends(get_session, scope="function")]
SettingsDep = Annotated[Settings, Depends(get_settings)]
RunnerDep = Annotated[JobRunner, Depends(get_runner)]
OffsetQuery = Annotated[int, Query(ge=0, le=2**63 - 1)]
"""A listing's offset: the database takes a bigint, and past one its error would name no field."""
