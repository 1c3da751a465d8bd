"""``/v1/replays/{id}/figures/{name}.{svg,png}``: report figures for embedding."""

from __future__ import annotations

import uuid
from typing import Annotated, Literal

from fastapi import APIRouter, Header, Query, Response

from service.deps import SessionDep
from service.errors import Conflict, NotFound, Unprocessable, responses
from service.json_body import StrictJSONRoute
from service.replays import service as replays
from service.replays.filters import check_deltas
from service.replays.models import SUCCEEDED
from service.replays.report_cache import not_modified
from service.reports import figures
from service.reports import service as reports

router = APIRouter(prefix="/v1/replays", tags=["reports"], route_class=StrictJSONRoute)

FigureName = Literal["unresolved", "errors", "coverage", "classes", "oc"]

# An SVG opened on its own is a document: no scripts, no remote loads, styles inline only.
FIGURE_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'self'",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "public, max-age=300",
}


@router.get(
    "/{replay_id}/figures/{name}.{fmt}",
    response_class=Response,
    responses={
        200: {
            "content": {"image/svg+xml": {}, "image/png": {}},
            "description": "The figure; the same report always gives the same bytes",
        },
        304: {"description": "Not modified (If-None-Match matched the ETag)"},
        **responses(NotFound, Conflict, Unprocessable),
    },
    summary="A report figure (unresolved, errors, coverage, classes, oc) as SVG or PNG",
    description=(
        "Drawn with matplotlib from the stored report: one panel per δ, one line per configuration, "
        "against the task budget. `unresolved`: defer rate with the η band and each minimum sufficient "
        "budget marked; `errors`: false accept (solid) and false reject (dashed) with the α band; "
        "`coverage`: coverage failure with the γ band. `delta` (repeatable) limits the panels; "
        "a δ the replay does not have is a 422 listing its thresholds. Of one configuration (`config`): "
        "`classes`: defer rate per |Δ_full| gap class with each class's minimum sufficient budget; `oc`: the "
        "operating characteristic, P(accept) and P(defer) against Δ_full − δ at up to six budgets."
    ),
)
def get_figure(
    replay_id: uuid.UUID,
    name: FigureName,
    fmt: Literal["svg", "png"],
    session: SessionDep,
    delta: Annotated[list[float] | None, Query(description="Only these δ panels (pp)")] = None,
    config: Annotated[
        int, Query(ge=0, le=1_000_000, description="Configuration index (classes, oc), in report order.")
    ] = 0,
    if_none_match: Annotated[str | None, Header()] = None,
) -> Response:
    replay = replays.get(session, replay_id)
    check_deltas(replay.spec, delta, replay_id)
    if replay.status == SUCCEEDED and replay.report_etag:
        etag = reports.figure_etag(replay, name, fmt, delta, config)
        if not_modified(if_none_match, etag):
            return Response(status_code=304, headers={"ETag": etag, **FIGURE_HEADERS})
    body, etag = reports.figure_bytes(session, replay_id, name, fmt, delta, config)
    return Response(body, media_type=figures.MEDIA_TYPES[fmt], headers={"ETag": etag, **FIGURE_HEADERS})
