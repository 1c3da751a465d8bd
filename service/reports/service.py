"""Loading what the pages and figures show: replays, their parsed reports, rendered figures.

Reports never change once a replay has succeeded, so parsed reports and rendered figures are
kept in small per-process caches keyed by the report's ETag.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections import OrderedDict
from threading import Lock
from typing import Any

from sqlalchemy.orm import Session

from service.errors import Conflict
from service.replays import service as replays
from service.replays.models import SUCCEEDED, Replay
from service.reports import figures


class _LRU:
    def __init__(self, size: int):
        self.size = size
        self.items: OrderedDict[Any, Any] = OrderedDict()
        self.lock = Lock()

    def get(self, key: Any) -> Any:
        with self.lock:
            value = self.items.get(key)
            if value is not None:
                self.items.move_to_end(key)
            return value

    def put(self, key: Any, value: Any) -> None:
        with self.lock:
            self.items[key] = value
            self.items.move_to_end(key)
            while len(self.items) > self.size:
                self.items.popitem(last=False)


_REPORTS = _LRU(4)
_FIGURES = _LRU(48)


def replay_with_report(session: Session, replay_id: uuid.UUID) -> tuple[Replay, dict[str, Any] | None]:
    """The replay row and, once it has succeeded, its parsed report document."""
    replay = replays.get(session, replay_id)
    if replay.status != SUCCEEDED:
        return replay, None
    key = (replay.id, replay.report_etag)
    report = _REPORTS.get(key)
    if report is None:
        full = replays.finished_report(session, replay_id)
        report = json.loads(full.report_json or b"null")
        _REPORTS.put(key, report)
    return replay, report


def figure_etag(replay: Replay, name: str, fmt: str, deltas: list[float] | None) -> str:
    """Derived from the report's ETag and the drawing code, so a 304 needs no rendering."""
    import matplotlib

    sel = "all" if not deltas else ",".join(f"{d:g}" for d in sorted(deltas))
    raw = f"{replay.report_etag}|{name}|{fmt}|{sel}|{figures.RENDERER_VERSION}|{matplotlib.__version__}"
    return f'"fig-{hashlib.sha256(raw.encode()).hexdigest()[:32]}"'


def figure_bytes(
    session: Session, replay_id: uuid.UUID, name: str, fmt: figures.Format, deltas: list[float] | None
) -> tuple[bytes, str]:
    """Figure ``name`` of a finished replay as ``(bytes, etag)``."""
    replay, report = replay_with_report(session, replay_id)
    if report is None:
        raise Conflict(f"replay {replay_id} is {replay.status}; figures exist once it has succeeded")
    etag = figure_etag(replay, name, fmt, deltas)
    body = _FIGURES.get(etag)
    if body is None:
        body = figures.render(report, name, fmt, deltas)
        _FIGURES.put(etag, body)
    return body, etag
