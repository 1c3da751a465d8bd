"""``/v1/sessions``: declare a live comparison, append observations, read the decision."""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter, Response, status

from service.deps import SessionDep
from service.errors import Conflict, NotFound, Unprocessable, responses
from service.sessions import service
from service.sessions.schemas import ObservationsCreate, ObservationsResult, SessionCreate, SessionRead

router = APIRouter(prefix="/v1/sessions", tags=["sessions"])


@router.post(
    "",
    response_model=SessionRead,
    status_code=status.HTTP_201_CREATED,
    responses=responses(NotFound, Unprocessable),
    summary="Declare A, B, the universe, the rule and the checkpoints; get the recommended task order",
)
def create_session(body: SessionCreate, session: SessionDep, response: Response) -> Any:
    row = service.create(session, body)
    response.headers["Location"] = f"/v1/sessions/{row.id}"
    return service.read(session, row)


@router.get("/{session_id}", response_model=SessionRead, responses=responses(NotFound),
            summary="The current decision and the decisions at each checkpoint")
def get_session(session_id: uuid.UUID, session: SessionDep) -> Any:
    return service.read(session, service.get(session, session_id))


@router.post(
    "/{session_id}/observations",
    response_model=ObservationsResult,
    responses=responses(NotFound, Conflict, Unprocessable),
    summary="Append outcomes (idempotent per task, system and trial) and get the decision",
)
def add_observations(session_id: uuid.UUID, body: ObservationsCreate, session: SessionDep) -> Any:
    return service.append(session, session_id, body)
