"""``/v1/decisions``: accept / reject / defer for a run in progress (stateless)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from service.decisions import service
from service.decisions.schemas import DecisionCreate, DecisionRead
from service.errors import NotFound, Unprocessable, responses

router = APIRouter(prefix="/v1/decisions", tags=["decisions"])


@router.post(
    "",
    response_model=DecisionRead,
    responses=responses(NotFound, Unprocessable),
    summary="Decide from what a harness has observed so far (SPEC §7)",
)
def create_decision(body: DecisionCreate, request: Request) -> Any:
    return service.decide(request.app.state.sessionmaker, body)
