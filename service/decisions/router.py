"""``/v1/decisions``: accept / reject / defer for a run in progress (stateless)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from service import limits
from service.decisions import service
from service.decisions.offload import DecisionPool
from service.decisions.schemas import DecisionCreate, DecisionRead
from service.errors import NotFound, Unprocessable, responses
from service.json_body import StrictJSONRoute

router = APIRouter(prefix="/v1/decisions", tags=["decisions"], route_class=StrictJSONRoute)


def _body_schema() -> dict:
    """``DecisionCreate`` inline; its nested models are components (sessions use them too)."""
    schema = DecisionCreate.model_json_schema(ref_template="#/components/schemas/{model}")
    schema.pop("$defs", None)
    return schema


async def decision_body(request: Request) -> DecisionCreate:
    """The body parsed straight from bytes by pydantic: a harness calls this endpoint after
    every task, and FastAPI's path (``json.loads`` then validation of the Python objects)
    costs about twice as much for a few hundred outcomes."""
    raw = await request.body()
    if len(raw) > request.app.state.settings.decision_inline_bytes:  # 0.5 s for 4 MB: not on the loop
        return await run_in_threadpool(parse_decision, raw)
    return parse_decision(raw)


def decision_pool(request: Request) -> DecisionPool:
    state = request.app.state
    pool = getattr(state, "decision_pool", None)
    if pool is None:
        pool = state.decision_pool = DecisionPool(state.settings)
    return pool


def parse_decision(raw: bytes) -> DecisionCreate:
    try:
        return DecisionCreate.model_validate_json(raw)
    except ValidationError as exc:
        raise RequestValidationError([{**e, "loc": ("body", *e["loc"])} for e in exc.errors()]) from None


@router.post(
    "",
    response_model=DecisionRead,
    responses=responses(NotFound, Unprocessable),
    summary="Decide from what a harness has observed so far (SPEC §7)",
    openapi_extra={"requestBody": {"required": True, "content": {"application/json": {"schema": _body_schema()}}}},
)
async def create_decision(request: Request) -> Response:
    # A harness calls this after every task: without a dataset the answer is pure CPU work
    # (no I/O), so it runs on the event loop; a thread hop and a second validation of the
    # response (the engine builds exactly the DecisionRead shape; a test checks it) cost
    # more than the decision itself. The database look-ups of a dataset run in a thread.
    # The body is parsed here rather than by a dependency: FastAPI's dependency solving is
    # a measurable share of a request this small. (Most such requests never get here:
    # service.decisions.fastpath answers them before routing.)
    # A body past ``decision_inline_bytes`` or a decision past ``decision_inline_work`` cells
    # (limits.check_decision: universe, observations, the rule's own term) is parsed and
    # decided in another process (decisions.offload): a 100,000-task anytime decision once
    # held the loop, and every other request of the process, for seconds (and in a thread it
    # still held the GIL).
    settings = request.app.state.settings
    raw = await request.body()
    parsed: DecisionCreate | None = None
    if len(raw) > settings.decision_inline_bytes:
        status, out = await decision_pool(request).decide(raw)
        if status:
            return Response(content=out, status_code=status, media_type="application/json")
        parsed = out  # it names a dataset: parsed there, decided in a thread below
    body = parsed if parsed is not None else await decision_body(request)
    work = limits.check_decision(body, settings)
    if body.dataset_id is None and work > settings.decision_inline_work:
        status, out = await decision_pool(request).decide(raw)
        return Response(content=out, status_code=status, media_type="application/json")
    if body.dataset_id is None and not body.forecast:
        out = service.decision_json(None, body, settings=settings)  # a forecast simulates continuations: in a thread
    else:
        ttl = settings.calibration_cache_seconds
        out = await run_in_threadpool(
            lambda: service.decision_json(request.app.state.sessionmaker, body, calibration_ttl=ttl, settings=settings)
        )
    return Response(content=out, media_type="application/json")
