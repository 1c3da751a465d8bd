"""``GET /v1/replays/{id}/report`` (and ``report.csv``) answered before FastAPI's routing when
this process holds the finished report (``report_cache``): its bytes and ETag, as a static
file is served. A finished report never changes, so the only work is the owner check and
``If-None-Match``; the route, its path and header validation, the dependency solver and the
response class were most of the CPU of such a fetch. Anything else (a report not cached, a
query string, another spelling of the id, another method) goes on to the route.

Installed inside the trust middleware, so authentication, scopes, the rate limit and
``nosniff`` apply as to every route. A test checks the answers equal the route's.
"""

from __future__ import annotations

import uuid

from starlette.types import ASGIApp, Receive, Scope, Send

from service.auth.ownership import current_owner
from service.replays.report_cache import CACHE, not_modified

PREFIX = "/v1/replays/"
KINDS = {"/report": ("json", b"application/json"), "/report.csv": ("csv", b"text/csv; charset=utf-8")}


def _target(path: str) -> tuple[uuid.UUID, str, bytes] | None:
    """``(replay id, kind, content type)`` for a report path with the id spelled canonically."""
    if not path.startswith(PREFIX):
        return None
    rest = path[len(PREFIX) :]
    head, sep, tail = rest.partition("/")
    kind = KINDS.get(sep + tail)
    if kind is None or len(head) != 36:
        return None
    try:
        replay_id = uuid.UUID(head)
    except ValueError:
        return None
    if str(replay_id) != head:  # e.g. upper case: the route decides what it means
        return None
    return replay_id, *kind


class ReportFastPath:
    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        target = None
        if scope["type"] == "http" and scope["method"] == "GET" and not scope.get("query_string") \
                and not scope.get("root_path"):
            target = _target(scope["path"])
        hit = None if target is None else CACHE.get(target[0], target[1], current_owner())
        if hit is None:
            await self.app(scope, receive, send)
            return
        if_none_match = None
        for name, value in scope.get("headers", []):
            if name.lower() == b"if-none-match":
                if_none_match = value.decode("latin-1")
        etag = hit.etag.encode("latin-1")
        if not_modified(if_none_match, hit.etag):
            await send({"type": "http.response.start", "status": 304, "headers": [(b"etag", etag)]})
            await send({"type": "http.response.body", "body": b""})
            return
        headers = [(b"etag", etag), (b"content-length", str(len(hit.body)).encode("latin-1")),
                   (b"content-type", target[2])]  # type: ignore[index]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": hit.body})


__all__ = ["ReportFastPath"]
