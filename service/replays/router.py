"""``/v1/replays``: submit, follow, cancel or delete, and fetch reports and metric rows."""

from __future__ import annotations

import uuid
from typing import Annotated, Literal

from fastapi import APIRouter, FastAPI, Header, Query, Request, Response, status
from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool

from service.auth.ownership import current_owner
from service.datasets import repository as datasets_repo
from service.db import transaction
from service.deps import OffsetQuery, SessionDep, SettingsDep
from service.errors import Conflict, NotFound, Unprocessable, responses
from service.json_body import StrictJSONRoute
from service.replays import pairs, repository, service
from service.replays.filters import check_metric_filters, check_systems
from service.replays.models import QUEUED, RUNNING
from service.replays.report_cache import CACHE, not_modified
from service.replays.schemas import (
    MetricPage,
    MetricRowRead,
    PairPage,
    PairRowRead,
    ReplayCreate,
    ReplayPage,
    ReplayRead,
    Status,
)
from service.replays.waiting import MAX_WAIT_S, TICK_S, FinishWatch

router = APIRouter(prefix="/v1/replays", tags=["replays"], route_class=StrictJSONRoute)


@router.post(
    "",
    response_model=ReplayRead,
    status_code=status.HTTP_202_ACCEPTED,
    responses=responses(Unprocessable),
    summary="Submit a replay; it runs in the background",
)
def create_replay(body: ReplayCreate, session: SessionDep, settings: SettingsDep, response: Response) -> ReplayRead:
    replay = service.create(session, body, settings)
    response.headers["Location"] = f"/v1/replays/{replay.id}"
    return service.to_read(replay, (0, 0))


@router.get("", response_model=ReplayPage, responses=responses(Unprocessable),
            summary="List replays, newest first")
def list_replays(
    session: SessionDep,
    dataset_id: uuid.UUID | None = None,
    status: Status | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: OffsetQuery = 0,
) -> ReplayPage:
    if dataset_id is not None and datasets_repo.get(session, dataset_id) is None:  # a filter that cannot match
        raise Unprocessable([{"field": "dataset_id", "message": f"dataset_id={dataset_id} matches no dataset"}])
    items, total = repository.page(session, limit=limit, offset=offset, dataset_id=dataset_id, status=status)
    done = service.done_counts(session, items)
    return ReplayPage(
        items=[service.to_read(r, done[r.id]) for r in items], total=total, limit=limit, offset=offset
    )


@router.get("/{replay_id}", response_model=ReplayRead, responses=responses(NotFound))
async def get_replay(
    replay_id: uuid.UUID,
    request: Request,
    wait: Annotated[float, Query(
        ge=0, le=MAX_WAIT_S,
        description="Seconds to hold the answer while the replay is queued or running: it comes as soon as the "
        f"replay finishes (within {TICK_S * 1000:g} ms), else when they have passed, with the state then. "
        "0 (the default) answers at once. Instead of polling: ask again while it is not finished.",
    )] = 0.0,
) -> ReplayRead:
    factory = request.app.state.sessionmaker
    read = await run_in_threadpool(_read_replay, factory, replay_id)
    if wait > 0 and read.status in (QUEUED, RUNNING):
        await _finish_watch(request.app).wait(replay_id, wait)
        read = await run_in_threadpool(_read_replay, factory, replay_id)
    return read


def _read_replay(factory: sessionmaker[Session], replay_id: uuid.UUID) -> ReplayRead:
    with transaction(factory, write=False) as session:
        return service.read(session, service.get(session, replay_id))


def _finish_watch(app: FastAPI) -> FinishWatch:
    """The app's watcher of waited-on replays, made on first use (on the event loop)."""
    watch = getattr(app.state, "finish_watch", None)
    if watch is None:
        watch = app.state.finish_watch = FinishWatch(app.state.engine)
    return watch


@router.delete(
    "/{replay_id}",
    response_model=ReplayRead,
    responses={
        204: {"description": "Deleted: the replay had finished (succeeded, failed or cancelled); it and everything "
                             "stored for it (report, metric rows, per-pair tables, chunk results) are gone"},
        **responses(NotFound),
    },
    summary="Cancel a queued or running replay (200); delete a finished one (204)",
)
def delete_replay(replay_id: uuid.UUID, session: SessionDep) -> Response | ReplayRead:
    """A queued or running replay is cancelled: 200 with the replay, now ``cancelled`` (its
    workers stop at their next heartbeat; it stays stored so its end can be read). A finished
    one (succeeded, failed or cancelled) is deleted with its report, metric rows, per-pair
    tables and chunk results: 204, and its routes answer 404 from then on. So a running replay
    is removed by two DELETEs. The dataset and other replays are untouched. 404 for an unknown
    id, or a replay of another owner (the ``submit`` scope, as for submitting)."""
    replay = service.cancel_or_delete(session, replay_id)
    if replay is None:
        return Response(status_code=status.HTTP_204_NO_CONTENT)
    return service.read(session, replay)


_REPORT_RESPONSES = {
    304: {"description": "Not modified (If-None-Match matched the ETag)"},
    **responses(NotFound, Conflict),
}


@router.get(
    "/{replay_id}/report",
    responses={200: {"content": {"application/json": {}}, "description": "The report document"}, **_REPORT_RESPONSES},
    response_class=Response,
    summary="The report: the same bytes `sufficiency replay --format json --no-per-pair` prints",
    description="Per-pair rows are not in it: `GET /v1/replays/{id}/pairs` serves them by page.",
)
async def get_report(
    replay_id: uuid.UUID, request: Request, if_none_match: Annotated[str | None, Header()] = None
) -> Response:
    return await _report_response(request, replay_id, "json", if_none_match)


@router.get(
    "/{replay_id}/report.csv",
    responses={200: {"content": {"text/csv": {}}, "description": "The report as CSV"}, **_REPORT_RESPONSES},
    response_class=Response,
)
async def get_report_csv(
    replay_id: uuid.UUID, request: Request, if_none_match: Annotated[str | None, Header()] = None
) -> Response:
    return await _report_response(request, replay_id, "csv", if_none_match)


_MEDIA = {"json": "application/json", "csv": "text/csv; charset=utf-8"}


async def _report_response(request: Request, replay_id: uuid.UUID, kind: str, if_none_match: str | None) -> Response:
    """Served from this process's cache of finished reports on the event loop when it has
    them (``report_cache``), else read in a thread (and kept)."""
    CACHE.max_bytes = request.app.state.settings.report_cache_bytes
    hit = CACHE.get(replay_id, kind, current_owner())
    if hit is not None:
        etag, body = hit.etag, hit.body
    else:
        etag, body = await run_in_threadpool(_load_report, request.app.state.sessionmaker, replay_id, kind,
                                             if_none_match)
    if body is None or not_modified(if_none_match, etag):
        return Response(status_code=304, headers={"ETag": etag})
    return Response(body, media_type=_MEDIA[kind], headers={"ETag": etag})


def _load_report(factory: sessionmaker[Session], replay_id: uuid.UUID, kind: str,
                 if_none_match: str | None) -> tuple[str, bytes | None]:
    """``(etag, bytes)`` from the database (``bytes`` None: a 304 known from the ETag alone)."""
    with transaction(factory, write=False) as session:
        if kind == "json":
            replay = service.get(session, replay_id)
            if replay.status == "succeeded" and replay.report_etag and not_modified(if_none_match, replay.report_etag):
                return replay.report_etag, None
        replay = service.finished_report(session, replay_id)
        body = (replay.report_json if kind == "json" else replay.report_csv) or b""
        etag = (replay.report_etag or "") if kind == "json" else service.etag_of(body)
        CACHE.put(replay.id, kind, replay.owner, etag, body)
        return etag, body


@router.get(
    "/{replay_id}/metrics",
    response_model=MetricPage,
    responses=responses(NotFound, Conflict, Unprocessable),
    summary="Query the report's metric rows",
    description="Each filter must match at least one row of the replay: a value it does not have is a 422 "
    "naming it and listing the values it has.",
)
def get_metrics(
    replay_id: uuid.UUID,
    session: SessionDep,
    policy: str | None = None,
    metric: str | None = None,
    delta: float | None = None,
    budget: float | None = None,
    floor: str | None = None,
    group: str | None = None,
    a: float | None = None,
    bootstrap: str | None = None,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
    offset: OffsetQuery = 0,
) -> MetricPage:
    replay = service.get(session, replay_id)
    if replay.status != "succeeded":
        raise Conflict(f"replay {replay_id} is {replay.status}; metrics exist once it has succeeded")
    filters = {
        "policy": policy, "metric": metric, "delta": delta, "budget": budget,
        "floor": floor, "group": group, "a": a, "bootstrap": bootstrap,
    }
    check_metric_filters(session, replay_id, filters)
    rows, total = repository.metric_page(session, replay_id, filters, limit=limit, offset=offset)
    items = [
        MetricRowRead(
            policy=r.policy, group=r.grouping, floor=r.floor, a=r.a, bootstrap=r.bootstrap,
            delta=r.delta, budget=r.budget, metric=r.metric, value=r.value,
        )
        for r in rows
    ]
    return MetricPage(items=items, total=total, limit=limit, offset=offset)


@router.get(
    "/{replay_id}/pairs",
    response_model=PairPage,
    responses=responses(NotFound, Conflict, Unprocessable),
    summary="A configuration's per-pair rows, by page, optionally only those of some systems",
)
def get_pairs(
    replay_id: uuid.UUID,
    session: SessionDep,
    config: Annotated[int, Query(ge=0, le=1_000_000, description="Configuration index, in report order.")] = 0,
    system: Annotated[list[str] | None, Query(description="Only pairs with one of these systems as A or B.")] = None,
    sort: Annotated[
        Literal["pair", "abs_delta", "delta", "defer", "a", "b"],
        Query(description="`pair`: report order; `defer`: unresolved share at the largest budget; ties by A, B."),
    ] = "pair",
    order: Literal["asc", "desc"] = "asc",
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=1_000_000_000)] = 0,
) -> PairPage:
    replay = service.get(session, replay_id)
    if replay.status != "succeeded":
        raise Conflict(f"replay {replay_id} is {replay.status}; per-pair rows exist once it has succeeded")
    if system:
        check_systems(system, pairs.table(session, replay, config).systems, replay_id)
    rows, matched, total = pairs.page(
        session, replay, config, systems=system, sort=sort, descending=order == "desc", limit=limit, offset=offset
    )
    return PairPage(
        config=config, budgets=replay.spec["budgets"], items=[PairRowRead(**r) for r in rows], matched=matched,
        total=total, limit=limit, offset=offset,
    )
