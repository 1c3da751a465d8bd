"""Query filters of a replay's metrics and figures: a value the replay does not have is a 422
naming it and listing the values it has, never an empty answer or an unfiltered one (the usual
cause is a typo or the wrong replay, and a silent empty list hides both)."""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.errors import Unprocessable
from service.replays.models import MetricRow

# query parameter -> MetricRow column; floats compare with the tolerance the query uses
METRIC_FILTERS = {
    "policy": "policy",
    "metric": "metric",
    "floor": "floor",
    "bootstrap": "bootstrap",
    "group": "grouping",
    "delta": "delta",
    "budget": "budget",
    "a": "a",
}
FLOAT_FILTERS = ("delta", "budget", "a")
TOLERANCE = 1e-9


def _show(values: Iterable[Any]) -> str:
    shown = [f"{v:g}" if isinstance(v, float) else str(v) for v in values]
    return ", ".join(shown[:30]) + (f" (and {len(shown) - 30} more)" if len(shown) > 30 else "")


def _has(value: Any, known: Sequence[Any], is_float: bool) -> bool:
    if is_float:
        return any(k is not None and abs(float(k) - float(value)) <= TOLERANCE for k in known)
    return value in known


def check_metric_filters(session: Session, replay_id: uuid.UUID, filters: dict[str, Any]) -> None:
    """Each given filter must match at least one of the replay's metric rows (422 otherwise).

    Filters are checked one by one: a combination that selects nothing although every value
    exists (``budget=0.5&metric=minimum_sufficient_budget``, a per-configuration metric) is an
    honest empty page."""
    problems = []
    for name, value in filters.items():
        if value is None:
            continue
        column = getattr(MetricRow, METRIC_FILTERS[name])
        known = sorted(
            (
                v
                for v in session.scalars(select(column).where(MetricRow.replay_id == replay_id).distinct())
                if v is not None
            ),
            key=lambda v: (isinstance(v, str), v),
        )
        if not _has(value, known, name in FLOAT_FILTERS):
            shown = f"{value:g}" if isinstance(value, float) else repr(value)
            problems.append(
                {
                    "field": name,
                    "message": (
                        f"{name}={shown} matches nothing in replay {replay_id}; its values: {_show(known) or 'none'}"
                    ),
                }
            )
    if problems:
        raise Unprocessable(problems)


def check_systems(systems: Sequence[str] | None, known: Sequence[str], replay_id: uuid.UUID) -> None:
    """Every ``system`` filter of the per-pair rows must name a system of the replay (422 otherwise)."""
    missing = [s for s in systems or () if s not in set(known)]
    if missing:
        raise Unprocessable([{"field": "system", "message": (
            f"system={', '.join(repr(m) for m in missing)} matches nothing in replay {replay_id}; its systems: "
            f"{_show(sorted(known))}"
        )}])


def check_deltas(spec: dict[str, Any], deltas: Sequence[float] | None, replay_id: uuid.UUID) -> None:
    """Every requested δ panel must be one of the replay's thresholds (422 otherwise)."""
    known = [float(d) for d in spec.get("deltas", [])]
    missing = [d for d in deltas or () if not any(math.isclose(d, k, abs_tol=TOLERANCE) for k in known)]
    if missing:
        raise Unprocessable(
            [
                {
                    "field": "delta",
                    "message": (
                        f"delta={_show(missing)} matches nothing in replay {replay_id}; "
                        f"its thresholds δ (pp): {_show(known)}"
                    ),
                }
            ]
        )
