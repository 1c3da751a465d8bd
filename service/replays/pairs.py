"""Per-pair rows of finished replays, one page at a time (``GET /v1/replays/{id}/pairs``).

A finished replay stores one ``PairTable`` per configuration beside its report (the report
leaves the rows out: on a 134-system board they are 7 MB of JSON per configuration). Tables
never change once stored, so the decoded ones are kept in a small per-process cache; a
page is a filter, a sort and a slice of in-memory arrays. Replays stored before the tables
existed still carry the rows in their report: their table is rebuilt from those.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from sqlalchemy.orm import Session

from service.engine.pairs import PairTable
from service.errors import Unprocessable
from service.lru import LRU
from service.replays import repository
from service.replays import service as replays
from service.replays.models import Replay

_TABLES: LRU[tuple[uuid.UUID, str | None, int], PairTable] = LRU(8)
"""About 2.4 MB each in memory for 17,822 pairs and 19 budgets."""


def table(session: Session, replay: Replay, config: int) -> PairTable:
    """Configuration ``config``'s table of a succeeded replay (422 for an index out of range)."""
    key = (replay.id, replay.report_etag, config)
    hit = _TABLES.get(key)
    if hit is not None:
        return hit
    data = repository.pair_table_bytes(session, replay.id, config)
    if data is not None:
        out = PairTable.from_bytes(data)
    else:
        out = _from_report(session, replay, config)
    _TABLES.put(key, out)
    return out


def _from_report(session: Session, replay: Replay, config: int) -> PairTable:
    report = json.loads(replays.finished_report(session, replay.id).report_json or b"null")
    confs = report["configurations"]
    if not 0 <= config < len(confs):
        raise Unprocessable(
            [
                {
                    "field": "config",
                    "message": f"config is an index in [0, {len(confs)}): the "
                    f"replay has {len(confs)} configuration(s), in report order",
                }
            ]
        )
    spec = report["spec"]
    return PairTable.from_rows(
        report["dataset"]["system_names"],
        confs[config].get("per_pair", []),
        spec["orders"] * spec["seeds"],
        len(spec["budgets"]),
    )


def page(
    session: Session,
    replay: Replay,
    config: int,
    *,
    systems: list[str] | None = None,
    query: str = "",
    sort: str = "pair",
    descending: bool = False,
    limit: int = 100,
    offset: int = 0,
) -> tuple[list[dict[str, Any]], int, int]:
    """``(rows, matched, total)``: one page of the configuration's pairs after the filters."""
    t = table(session, replay, config)
    idx = t.select(systems=systems, query=query, sort=sort, descending=descending)
    return t.rows(idx[offset : offset + limit]), len(idx), len(t)


__all__ = ["table", "page"]
