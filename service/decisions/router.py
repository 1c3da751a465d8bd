"""``/v1/decisions``: accept / reject / defer for a run in progress (stateless)."""

from __future__ import annotations

import json

from fastapi import APIRouter, Request, Response
from starlette.concurrency import run_in_threadpool

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
async def create_decision(body: DecisionCreate, request: Request) -> Response:
    # A harness calls this after every task: without a dataset the answer is pure CPU work
    # (no I/O), so it runs on the event loop; a thread hop and a second validation of the
    # response (the engine builds exactly the DecisionRead shape; a test checks it) cost
    # more than the decision itself. The database look-ups of a dataset run in a thread.
    if body.dataset_id is None:
        out = service.decide(None, body)
    else:
        out = await run_in_threadpool(service.decide, request.app.state.sessionmaker, body)
    content = json.dumps(out, ensure_ascii=False, allow_nan=False, separators=(",", ":"), default=str)
    return Response(content=content, media_type="application/json")
