"""``/v1/placements``: where does a new entry rank on a stored board? Declare it, append its
outcomes, read the rank interval and the comparisons (SPEC §8.1).

As for sessions, each endpoint opens its transaction inside its own worker thread.
"""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter, Request, Response, status

from service.db import transaction
from service.errors import Conflict, NotFound, Unprocessable, responses
from service.json_body import StrictJSONRoute
from service.placements import service
from service.placements.schemas import (
    PlacementCreate,
    PlacementObservationsCreate,
    PlacementObservationsResult,
    PlacementRead,
)

router = APIRouter(prefix="/v1/placements", tags=["placements"], route_class=StrictJSONRoute)


@router.post(
    "",
    response_model=PlacementRead,
    status_code=status.HTTP_201_CREATED,
    responses=responses(Unprocessable),
    summary="Declare a new entry against a stored board; get the placement order",
)
def create_placement(body: PlacementCreate, request: Request, response: Response) -> Any:
    with transaction(request.app.state.sessionmaker) as session:
        row = service.create(session, body, request.app.state.settings)
        out = service.read(session, row)
    response.headers["Location"] = f"/v1/placements/{row.id}"
    return out


@router.get(
    "/{placement_id}",
    response_model=PlacementRead,
    responses=responses(NotFound),
    summary="The entry's rank interval, its comparison with every board system, and the next tasks",
)
def get_placement(placement_id: uuid.UUID, request: Request) -> Any:
    with transaction(request.app.state.sessionmaker, write=False) as session:
        return service.read(session, service.get(session, placement_id))


@router.post(
    "/{placement_id}/observations",
    response_model=PlacementObservationsResult,
    responses=responses(NotFound, Conflict, Unprocessable),
    summary="Append the entry's outcomes (idempotent per task and trial) and get the placement",
)
def add_observations(placement_id: uuid.UUID, body: PlacementObservationsCreate, request: Request) -> Any:
    with transaction(request.app.state.sessionmaker) as session:
        return service.append(session, placement_id, body)
