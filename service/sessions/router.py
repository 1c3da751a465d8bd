"""``/v1/sessions``: declare a live comparison, append observations, read the decision.

Each endpoint opens its transaction inside the endpoint's own worker thread (commit on
success, rollback on error), not in a separate dependency step: under many concurrent
appends a dependency could hold a pooled connection while waiting for a worker thread that
is itself waiting for a connection.
"""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter, Request, Response, status

from service.db import transaction
from service.errors import Conflict, NotFound, Unprocessable, responses
from service.json_body import StrictJSONRoute
from service.sessions import service
from service.sessions.schemas import ObservationsCreate, ObservationsResult, SessionCreate, SessionRead

router = APIRouter(prefix="/v1/sessions", tags=["sessions"], route_class=StrictJSONRoute)


@router.post(
    "",
    response_model=SessionRead,
    status_code=status.HTTP_201_CREATED,
    responses=responses(NotFound, Unprocessable),
    summary="Declare A, B, the universe, the rule and the checkpoints; get the recommended task order",
)
def create_session(body: SessionCreate, request: Request, response: Response) -> Any:
    with transaction(request.app.state.sessionmaker) as session:
        row = service.create(session, body, request.app.state.settings)
        out = service.read(session, row)
    response.headers["Location"] = f"/v1/sessions/{row.id}"
    return out


@router.get("/{session_id}", response_model=SessionRead, responses=responses(NotFound),
            summary="The current decision and the decisions at each checkpoint")
def get_session(session_id: uuid.UUID, request: Request) -> Any:
    with transaction(request.app.state.sessionmaker, write=False) as session:
        return service.read(session, service.get(session, session_id))


@router.post(
    "/{session_id}/observations",
    response_model=ObservationsResult,
    responses=responses(NotFound, Conflict, Unprocessable),
    summary="Append outcomes (idempotent per task, system and trial) and get the decision",
)
def add_observations(session_id: uuid.UUID, body: ObservationsCreate, request: Request) -> Any:
    with transaction(request.app.state.sessionmaker) as session:
        return service.append(session, session_id, body)
