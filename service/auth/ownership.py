"""Replays, live sessions and placements belong to the owner of the key that created them.

The middleware puts the request's principal in a context variable; a sessionmaker bound
with :func:`bind_owner_scope` then (a) stamps new owned rows with that owner and (b) adds
``owner = <owner>`` to every ORM query of an owned entity, so another owner's id is simply
not found (404) and lists show only one's own rows. Work outside a request (jobs, sweeps,
the CLI) has no principal and sees everything. With auth off the owner is null.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

from sqlalchemy import event
from sqlalchemy.orm import ORMExecuteState, Session, sessionmaker, with_loader_criteria

from service.auth.keys import Principal
from service.placements.models import Placement
from service.replays.models import Replay
from service.sessions.models import LiveSession

current_principal: ContextVar[Principal | None] = ContextVar("sufficiency_principal", default=None)


OWNED: tuple[type[Any], ...] = (Replay, LiveSession, Placement)


def current_owner() -> str | None:
    principal = current_principal.get()
    return principal.owner if principal is not None else None


def bind_owner_scope(factory: sessionmaker[Session]) -> None:
    models = OWNED

    @event.listens_for(factory, "do_orm_execute")
    def _only_own_rows(state: ORMExecuteState) -> None:
        owner = current_owner()
        if owner is None or not state.is_select or state.is_column_load or state.is_relationship_load:
            return
        state.statement = state.statement.options(
            *(with_loader_criteria(m, m.owner == owner, include_aliases=True) for m in models)
        )

    @event.listens_for(factory, "before_flush")
    def _stamp_owner(session: Session, _context: Any, _instances: Any) -> None:
        owner = current_owner()
        if owner is None:
            return
        for obj in session.new:
            if isinstance(obj, models) and obj.owner is None:
                obj.owner = owner
