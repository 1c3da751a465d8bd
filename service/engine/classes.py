"""Gap classes and the operating characteristic of a configuration (SPEC §5.1).

Both are sums over pairs of tallies the engine already keeps per (pair, budget): a class is
a mask over pairs, so nothing here replays a case.

* **Gap classes** split pairs by ``|Δ_full|`` in percentage points at the edges (default
  0, 1, 2, 5, 10, 100). A class is ``[lo, hi)``; the last one also holds ``hi`` so that the
  default edges hold every pair (a 100 pp gap is possible). Each class gets the budget rows
  of its configuration (same metrics, same supports), computed by the caller's row builder,
  and its own minimum sufficient and error-and-coverage budgets.
* The **operating characteristic** splits pairs by ``Δ_full − δ`` (signed, the same edges
  mirrored): negative classes hold the pairs whose full decision is negative (``Δ_full <= δ``),
  positive ones the others, and the outermost class on each side is unbounded (``high`` or
  ``low`` is null). Per class and budget: ``P(accept)``, ``P(reject)``, ``P(defer)`` and, for
  sequential policies, the mean tasks used.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from service.engine.errors import FieldError
from service.engine.numbers import clean as _clean

DEFAULT_EDGES = (0.0, 1.0, 2.0, 5.0, 10.0, 100.0)
MAX_EDGES = 41
TOL = 1e-9
"""pp: a gap within this of an edge is on the edge (gaps are ratios of integers)."""

RowBuilder = Callable[[np.ndarray], list[dict]]
"""Budget rows (as in a configuration's ``budgets``) for the pairs of a boolean mask."""


def validate_edges(edges: Sequence[object]) -> None:
    """Edges in pp: at least two, finite, increasing, in [0, 200]."""
    if len(edges) < 2:
        raise FieldError("gap_classes", "at least two edges are needed, e.g. 0,1,2,5,10,100")
    if len(edges) > MAX_EDGES:
        raise FieldError("gap_classes", f"at most {MAX_EDGES} edges")
    for e in edges:
        if isinstance(e, bool) or not isinstance(e, int | float) or not math.isfinite(float(e)):
            raise FieldError("gap_classes", f"edges must be finite numbers of percentage points, got {e!r}")
        if not 0.0 <= float(e) <= 200.0:
            raise FieldError("gap_classes", f"edges are |Δ_full| in percentage points, in [0, 200]; got {e}")
    if any(float(b) <= float(a) for a, b in zip(edges, edges[1:], strict=False)):
        raise FieldError("gap_classes", "edges must be increasing and distinct")


def parse_edges(text: str) -> tuple[float, ...]:
    """``"0,1,2,5,10,100"`` into edges (checked by ``validate_edges``)."""
    try:
        return tuple(float(x) for x in text.replace(";", ",").split(",") if x.strip())
    except ValueError:
        raise FieldError("gap_classes", f"cannot read '{text[:200]}': use a comma list like 0,1,2,5,10,100") from None


def gap_pp(sums: np.ndarray, n_tasks: np.ndarray, lattice: int | None) -> np.ndarray:
    """``Δ_full`` in percentage points from lattice-unit sums ``Σ D`` and task counts."""
    return np.asarray(sums, dtype=np.float64) * 100.0 / (np.asarray(n_tasks, dtype=np.float64) * (lattice or 1))


def class_index(
    gaps: np.ndarray, edges: Sequence[float], *, close_last: bool = True, open_last: bool = False
) -> np.ndarray:
    """Index of each gap's class ``[e_i, e_{i+1})`` (``-1`` outside every class).

    ``close_last``: the last class also holds its upper edge; ``open_last``: it holds
    everything at or above its lower edge."""
    e = np.asarray(edges, dtype=np.float64)
    g = np.asarray(gaps, dtype=np.float64)
    idx = np.searchsorted(e - TOL, g, side="right") - 1  # largest i with e_i - TOL <= g
    last = len(e) - 2
    top = e[-1]
    out = np.where((idx >= 0) & (idx <= last), idx, -1)
    if open_last:
        out = np.where(idx > last, last, out)
    elif close_last:
        out = np.where((idx == last + 1) & (g <= top + TOL), last, out)
    return out


def sufficient_budgets(budgets: Sequence[dict]) -> tuple[float | None, float | None]:
    """(minimum sufficient budget, smallest budget meeting error and coverage) (SPEC §6)."""
    msb = next((e["budget"] for e in budgets if e["sufficient"]), None)
    ecb = next((e["budget"] for e in budgets if not (set(e["misses"]) - {"defer_rate"})), None)
    return msb, ecb


def gap_classes(
    edges: Sequence[float], gaps_abs: np.ndarray, appl: np.ndarray, positive: np.ndarray, rows_for: RowBuilder
) -> tuple[list[dict], int]:
    """The configuration's classes by ``|Δ_full|``, and how many applicable pairs fall outside them."""
    idx = class_index(gaps_abs, edges)
    out = []
    for i in range(len(edges) - 1):
        mask = appl & (idx == i)
        rows = rows_for(mask)
        msb, ecb = sufficient_budgets(rows)
        out.append(
            {
                "low": float(edges[i]),
                "high": float(edges[i + 1]),
                "pairs": int(mask.sum()),
                "positive_pairs": int((mask & positive).sum()),
                "negative_pairs": int((mask & ~positive).sum()),
                "budgets": rows,
                "minimum_sufficient_budget": msb,
                "error_coverage_budget": ecb,
            }
        )
    return out, int((appl & (idx < 0)).sum())


def operating_characteristic(
    edges: Sequence[float],
    gaps_signed: np.ndarray,
    positive: np.ndarray,
    appl: np.ndarray,
    accept: np.ndarray,
    reject: np.ndarray,
    defer: np.ndarray,
    used: np.ndarray | None,
    orders_per_pair: int,
) -> list[dict]:
    """P(accept / reject / defer) per signed class of ``Δ_full − δ`` and budget.

    ``accept`` etc. are per-pair tallies over orders and seeds ``[P, J]``; ``used`` the
    per-pair sums of tasks used (sequential policies only, else ``None``)."""
    idx = class_index(np.abs(gaps_signed), edges, open_last=True)
    n_cls = len(edges) - 1
    classes = []
    for sign in ("negative", "positive"):
        order = range(n_cls - 1, -1, -1) if sign == "negative" else range(n_cls)
        side = appl & (~positive if sign == "negative" else positive)
        for i in order:
            mask = side & (idx == i)
            lo, hi = float(edges[i]), (None if i == n_cls - 1 else float(edges[i + 1]))
            low, high = ((None if hi is None else -hi), 0.0 - lo) if sign == "negative" else (lo, hi)
            n_pairs = int(mask.sum())
            cases = n_pairs * orders_per_pair
            entry: dict[str, object] = {
                "low": low,
                "high": high,
                "full_decision": sign,
                "pairs": n_pairs,
                "cases": cases,
            }
            for name, tally in (("accept", accept), ("reject", reject), ("defer", defer)):
                tot = tally[mask].sum(axis=0)
                entry[name] = [None if not cases else _clean(float(x) / cases) for x in tot.tolist()]
            if used is not None:
                tot = used[mask].sum(axis=0)
                entry["mean_tasks_used"] = [None if not cases else _clean(float(x) / cases) for x in tot.tolist()]
            classes.append(entry)
    return classes


__all__ = [
    "DEFAULT_EDGES",
    "parse_edges",
    "validate_edges",
    "gap_pp",
    "class_index",
    "sufficient_budgets",
    "gap_classes",
    "operating_characteristic",
]
