"""Loading what the pages and figures show: replays, their parsed reports, rendered figures.

Reports never change once a replay has succeeded, so parsed reports and rendered figures are
kept in small per-process caches keyed by the report's ETag.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from typing import Any

from sqlalchemy.orm import Session

from service.errors import Conflict, Unprocessable
from service.lru import LRU
from service.replays import service as replays
from service.replays.models import SUCCEEDED, Replay
from service.reports import class_figures, figures

_REPORTS: LRU[tuple[uuid.UUID, str | None], Any] = LRU(4)
_FIGURES: LRU[str, Any] = LRU(48)


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


def figure_etag(replay: Replay, name: str, fmt: str, deltas: list[float] | None, config: int = 0) -> str:
    """Derived from the report's ETag and the drawing code, so a 304 needs no rendering."""
    import matplotlib

    sel = "all" if not deltas else ",".join(f"{d:g}" for d in sorted(deltas))
    if name in class_figures.NAMES:  # one configuration's figure
        sel = f"config={config}"
    raw = f"{replay.report_etag}|{name}|{fmt}|{sel}|{figures.RENDERER_VERSION}|{matplotlib.__version__}"
    return f'"fig-{hashlib.sha256(raw.encode()).hexdigest()[:32]}"'


def figure_bytes(
    session: Session, replay_id: uuid.UUID, name: str, fmt: figures.Format, deltas: list[float] | None,
    config: int = 0,
) -> tuple[bytes, str]:
    """Figure ``name`` of a finished replay as ``(bytes, etag)``; ``config`` picks the
    configuration of the gap-class figures (``classes``, ``oc``)."""
    replay, report = replay_with_report(session, replay_id)
    if report is None:
        raise Conflict(f"replay {replay_id} is {replay.status}; figures exist once it has succeeded")
    n_conf = len(report["configurations"])
    if name in class_figures.NAMES and not 0 <= config < n_conf:
        raise Unprocessable([{"field": "config", "message": f"config is an index in [0, {n_conf}): the replay has "
                              f"{n_conf} configuration(s), in report order"}])
    etag = figure_etag(replay, name, fmt, deltas, config)
    body = _FIGURES.get(etag)
    if body is None:
        if name in class_figures.NAMES:
            body = class_figures.render(report, name, fmt, config)
        else:
            try:
                body = figures.render(report, name, fmt, deltas)
            except figures.FigureTooLarge as exc:
                raise Unprocessable([{"field": exc.field, "message": str(exc)}]) from None
        _FIGURES.put(etag, body)
    return body, etag
