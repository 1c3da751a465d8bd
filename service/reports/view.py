"""What the report pages and figures show, computed from a report document (pure, no I/O).

The report document is the one ``build_report`` returns (``docs/engine-api.md``); nothing
here recomputes a metric, it only selects, labels and orders what the engine reported.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from service.engine.pairs import PairTable

# The dimensions a configuration is swept over (besides the policy); a page or figure names
# a dimension only when the report has more than one value of it.
DIMENSIONS = ("group", "floor", "a", "bootstrap", "delta")

MISS_LABELS = {
    "false_accept_rate": "false accept > α",
    "false_reject_rate": "false reject > α",
    "coverage_failure": "coverage failure > γ",
    "defer_rate": "unresolved > η",
    "no_cases": "no cases",
}

PAIR_SORTS = {
    "abs_delta": "|Δ_full|",
    "delta": "Δ_full",
    "defer": "unresolved at the largest budget",
    "a": "system A",
    "b": "system B",
}
PAIRS_PER_PAGE = 40


def fmt_rate(v: float | None, digits: int = 3) -> str:
    """A rate in [0, 1] as a short decimal; ``null`` stays visible as such."""
    if v is None:
        return "null"
    return f"{v:.{digits}f}"


def fmt_budget(b: float | None) -> str:
    """A budget fraction as a percentage of tasks ("none" when no budget qualifies)."""
    if b is None:
        return "none"
    return f"{b * 100:.4g} %"


def fmt_pp(x: float | None) -> str:
    """A score difference (fraction) in signed percentage points."""
    if x is None:
        return "–"
    return f"{x * 100:+.2f} pp"


def signed(x: float | None, digits: int = 3) -> str:
    """A signed difference rounded to ``digits``; a value that rounds to zero shows as
    ``0.000``, never ``-0.000`` (a float mean of ties can be ``-1e-17``)."""
    if x is None or x != x:
        return "–"
    v = round(x, digits) + 0.0  # + 0.0 turns -0.0 into 0.0
    return f"{v:.{digits}f}" if v == 0 else f"{v:+.{digits}f}"


def policy_name(conf: dict[str, Any]) -> str:
    return str(conf["policy"]["name"])


def varying_dimensions(report: dict[str, Any]) -> list[str]:
    """The sweep dimensions with more than one value among the configurations."""
    confs = report["configurations"]
    return [d for d in DIMENSIONS if len({_key(c.get(d)) for c in confs}) > 1]


def _key(v: Any) -> str:
    return "none" if v is None else f"{v:g}" if isinstance(v, float) else str(v)


def dim_value(conf: dict[str, Any], dim: str) -> str:
    v = conf.get(dim)
    if dim == "delta":
        return f"δ={v:g} pp"
    if dim == "bootstrap":
        return f"B={v}"
    if dim == "group":
        return "one group" if v is None else f"group={v}"
    return f"{dim}={_key(v)}"


def series_label(conf: dict[str, Any], dims: list[str], *, with_delta: bool = False) -> str:
    """Policy name plus the other varying dimensions (δ only when asked: panels split by δ)."""
    parts = [policy_name(conf)]
    parts += [dim_value(conf, d) for d in dims if d != "delta" or with_delta]
    return ", ".join(parts)


def deltas(report: dict[str, Any]) -> list[float]:
    seen: list[float] = []
    for c in report["configurations"]:
        if c["delta"] not in seen:
            seen.append(c["delta"])
    return seen


@dataclass(frozen=True)
class Blocked:
    """Consecutive tested budgets ``first..last`` below the minimum sufficient budget that
    miss the same targets."""

    first: float
    last: float
    misses: tuple[str, ...]

    @property
    def budgets(self) -> str:
        if self.first == self.last:
            return fmt_budget(self.first)
        return f"{fmt_budget(self.first)} – {fmt_budget(self.last)}"

    @property
    def reasons(self) -> str:
        return ", ".join(MISS_LABELS.get(m, m) for m in self.misses)


def blocked_runs(conf: dict[str, Any]) -> list[Blocked]:
    """Which targets block each budget smaller than the minimum sufficient one (all budgets
    when none is sufficient), as runs of budgets with the same misses (SPEC §6)."""
    msb = conf["minimum_sufficient_budget"]
    runs: list[Blocked] = []
    for b in conf["budgets"]:
        if msb is not None and b["budget"] >= msb:
            break
        misses = tuple(b["misses"])
        if runs and runs[-1].misses == misses:
            runs[-1] = Blocked(runs[-1].first, b["budget"], misses)
        else:
            runs.append(Blocked(b["budget"], b["budget"], misses))
    return runs


def insufficient_after(conf: dict[str, Any]) -> list[float]:
    """Budgets above the minimum sufficient one that are not sufficient (non-monotone curves)."""
    msb = conf["minimum_sufficient_budget"]
    if msb is None:
        return []
    return [b["budget"] for b in conf["budgets"] if b["budget"] > msb and not b["sufficient"]]


def budget_at(conf: dict[str, Any], budget: float | None) -> dict[str, Any] | None:
    if budget is None:
        return None
    return next((b for b in conf["budgets"] if math.isclose(b["budget"], budget, abs_tol=1e-12)), None)


@dataclass(frozen=True)
class PairPage:
    rows: list[dict[str, Any]]
    total: int
    matched: int
    page: int
    pages: int
    sort: str
    order: str


def pair_page(
    table: PairTable, *, sort: str = "abs_delta", order: str = "asc", query: str = "", page: int = 1,
    per_page: int = PAIRS_PER_PAGE,
) -> PairPage:
    """The configuration's per-pair rows filtered by a system-name substring, sorted, one page
    (the rows come from the replay's stored pair table, as ``/v1/replays/{id}/pairs`` serves them).

    Each row gets ``cells``: per budget ``(accept, reject, defer)`` shares."""
    sort = sort if sort in PAIR_SORTS else "abs_delta"
    order = "desc" if order == "desc" else "asc"
    lead, partner = unordered(table)
    idx = table.select(query=query, sort=sort, descending=order == "desc")
    idx = idx[lead[idx]]
    pages = max(1, math.ceil(len(idx) / per_page))
    page = min(max(1, page), pages)
    shown = idx[(page - 1) * per_page : page * per_page]
    back = partner[shown]
    back_rows = iter(table.rows(back[back >= 0]))
    out = []
    for p, q in zip(table.rows(shown), back.tolist(), strict=True):
        cells = list(zip(p["accept"], p["reject"], p["defer"], strict=True))
        rev = next(back_rows) if q >= 0 else None
        rcells = list(zip(rev["accept"], rev["reject"], rev["defer"], strict=True)) if rev else None
        out.append({**p, "cells": cells, "rcells": rcells})
    return PairPage(rows=out, total=int(lead.sum()), matched=len(idx), page=page, pages=pages, sort=sort, order=order)


def unordered(table: PairTable) -> tuple[np.ndarray, np.ndarray]:
    """Each unordered pair once: ``lead[i]`` is true for the orientation shown (A has the higher
    full mean; on a tie the smaller name, as SPEC §2's one_per_pair), ``partner[i]`` the index
    of the other orientation (``-1`` when the table has only one)."""
    where = {(int(a), int(b)): i for i, (a, b) in enumerate(zip(table.a.tolist(), table.b.tolist(), strict=True))}
    partner = np.array([where.get((b, a), -1) for a, b in zip(table.a.tolist(), table.b.tolist(), strict=True)],
                       dtype=np.intp)
    names = table.systems
    first = np.array([d > 0 or (d == 0 and names[a] < names[b])
                      for a, b, d in zip(table.a.tolist(), table.b.tolist(), table.delta_full.tolist(), strict=True)],
                     dtype=bool)
    lead = (partner < 0) | first
    return lead, partner


def gap_cells(conf: dict[str, Any]) -> list[dict[str, Any]]:
    """Per gap class of a configuration: its label, pairs, minimum sufficient budget and the
    tasks that budget means (SPEC §5.1): the "tasks needed by gap size" table."""
    out = []
    for c in conf.get("gap_classes", []):
        point = budget_at(c, c["minimum_sufficient_budget"])
        out.append({
            "label": f"[{c['low']:g}, {c['high']:g})",
            "pairs": c["pairs"],
            "msb": c["minimum_sufficient_budget"],
            "k": point["k_mean"] if point else None,
            "ecb": c["error_coverage_budget"],
        })
    return out


def diagnostic_items(report: dict[str, Any], labels: list[str]) -> list[dict[str, Any]]:
    """Every diagnostic of the report, the configuration-level ones labelled with their series."""
    items = [{"where": "whole report", "index": None, **d} for d in report.get("diagnostics", [])]
    for i, c in enumerate(report["configurations"]):
        items += [{"where": labels[i], "index": i, **d} for d in c.get("diagnostics", [])]
    return items


def spec_items(spec: dict[str, Any]) -> list[tuple[str, str]]:
    """The spec as (label, value) lines for a definition list."""

    def join(xs: Any) -> str:
        return ", ".join(_key(x) for x in xs)

    pols = []
    for p in spec["policies"]:
        cov = "coverage-aware" if p["coverage_aware"] else "no coverage check"
        pols.append(f"{p['name']} ({p['order']} order, {p['rule']} rule, {cov})")
    budgets = spec["budgets"]
    return [
        ("policies", "; ".join(pols)),
        ("δ (pp)", join(spec["deltas"])),
        ("budgets", f"{len(budgets)} from {fmt_budget(budgets[0])} to {fmt_budget(budgets[-1])}" if budgets else "–"),
        ("orders per pair", str(spec["orders"])),
        ("seeds", f"{spec['seeds']} (seed {spec['seed']})"),
        ("bootstrap B", join(spec["bootstrap"])),
        ("rule level a", join(spec["a"])),
        ("coverage floors", join(spec["floors"])),
        ("groups", join("one group" if g is None else g for g in spec["groups"])),
        ("orientation", str(spec["orientation"])),
        ("min task coverage", _key(spec["min_task_coverage"])),
        ("targets", f"α = {spec['alpha']:g}, γ = {spec['gamma']:g}, η = {spec['eta']:g}"),
        ("pairs", str(spec.get("pairs", "all"))),
        ("gap classes (pp)", join(spec.get("gap_classes", []))),
    ]


MAX_COMPARED = 8


def comparison(reports: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """Replays of one dataset side by side: one column per (replay, configuration), one row
    per tested budget (the union of the replays' grids; "–" where a replay did not test it)."""
    columns = []
    for rid, rep in reports:
        dims = varying_dimensions(rep)
        for c in rep["configurations"]:
            columns.append({"replay": rid, "label": series_label(c, dims, with_delta=True), "conf": c,
                            "selection": rep["spec"].get("pairs", "all"),
                            "by_budget": {round(b["budget"], 10): b for b in c["budgets"]}})
    grid = sorted({b for col in columns for b in col["by_budget"]})
    same = len({tuple(rep["spec"]["budgets"]) for _, rep in reports}) == 1
    rows = [{"budget": b, "cells": [col["by_budget"].get(b) for col in columns]} for b in grid]
    labels: list[str] = []
    for col in columns:
        for g in col["conf"].get("gap_classes", []):
            lab = f"[{g['low']:g}, {g['high']:g})"
            if lab not in labels:
                labels.append(lab)
    gaps = []
    for lab in labels:
        cells = []
        for col in columns:
            g = next((g for g in col["conf"].get("gap_classes", []) if f"[{g['low']:g}, {g['high']:g})" == lab), None)
            cells.append(None if g is None else {"msb": g["minimum_sufficient_budget"], "pairs": g["pairs"]})
        gaps.append({"label": lab, "cells": cells})
    return {"columns": columns, "rows": rows, "same_budgets": same, "gaps": gaps}
