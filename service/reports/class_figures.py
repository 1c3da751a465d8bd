"""Figures of one configuration's gap classes and operating characteristic (SPEC §5.1).

- ``classes``: the unresolved share (defer rate) against the task budget, one line per
  ``|Δ_full|`` class, the η band shaded and each class's minimum sufficient budget marked:
  "how many tasks separate gaps of this size".
- ``oc``: the operating characteristic: ``P(accept)`` (solid) and ``P(defer)`` (dashed)
  against ``Δ_full − δ`` (the signed classes, drawn at their midpoints; the unbounded outer
  classes at their inner edge plus the width of the next class), one colour per budget
  (at most six budgets, spread over the grid).

Same determinism rules as ``figures``: the same report gives the same bytes.
"""

from __future__ import annotations

from typing import Any

from service.reports import figures, view

NAMES = ("classes", "oc")
TITLES = {
    "classes": "Tasks needed by gap size",
    "oc": "Operating characteristic",
}
CAPTIONS = {
    "classes": "Unresolved share by task budget for each class of |Δ_full| (pp); the shaded band is the target η; "
    "a filled circle marks each class's minimum sufficient budget.",
    "oc": "Share of orders that accept (solid) or defer (dashed) against Δ_full − δ, per budget; left of 0 the "
    "full decision is negative (an accept there is a false accept).",
}
MAX_OC_BUDGETS = 6


def render(report: dict[str, Any], name: str, fmt: figures.Format, config: int = 0) -> bytes:
    """Figure ``name`` of configuration ``config`` (clamped to the report's range)."""
    if name not in NAMES:
        raise KeyError(name)
    import matplotlib

    confs = report["configurations"]
    conf = confs[min(max(config, 0), len(confs) - 1)]
    label = view.series_label(conf, view.varying_dimensions(report), with_delta=True)
    with figures._LOCK, matplotlib.rc_context(figures._RC):
        fig = _classes(report, conf, label) if name == "classes" else _oc(report, conf, label)
        return figures.encode(fig, fmt)


def class_label(c: dict[str, Any]) -> str:
    return f"[{c['low']:g}, {c['high']:g}) pp"


def _classes(report: dict[str, Any], conf: dict[str, Any], label: str) -> Any:
    from matplotlib.figure import Figure

    eta = float(report["targets"]["eta"])
    fig = Figure(figsize=(7.4, 4.4), layout="constrained")
    ax = fig.subplots()
    ax.axhspan(0, eta, color=figures._BAND, alpha=0.12, linewidth=0)
    ax.axhline(eta, color=figures._BAND, linewidth=0.9, linestyle=":")
    for i, c in enumerate(conf.get("gap_classes", [])):
        color = figures._PALETTE[i % len(figures._PALETTE)]
        xs = [b["budget"] * 100 for b in c["budgets"]]
        ys = [figures._nan(b["defer_rate"]) for b in c["budgets"]]
        ax.plot(
            xs, ys, color=color, linewidth=1.6, marker=".", markersize=4, label=f"{class_label(c)}: {c['pairs']} pairs"
        )
        point = view.budget_at(c, c["minimum_sufficient_budget"])
        if point is not None:
            ax.plot(
                [point["budget"] * 100],
                [figures._nan(point["defer_rate"])],
                marker="o",
                markersize=7,
                color=color,
                markeredgecolor="black",
                markeredgewidth=0.8,
                linestyle="none",
                zorder=5,
            )
    ax.set_xlim(0, 100)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("task budget (% of the pair's tasks)")
    ax.set_ylabel("defer rate")
    ax.set_title(label, fontsize=9)
    fig.legend(loc="outside right upper", fontsize=8.5)
    fig.suptitle(TITLES["classes"], fontsize=11)
    return fig


def _x(c: dict[str, Any], width: float) -> float:
    lo, hi = c["low"], c["high"]
    if lo is None:
        return hi - width
    if hi is None:
        return lo + width
    return (lo + hi) / 2


def oc_budget_indices(n: int) -> list[int]:
    """At most ``MAX_OC_BUDGETS`` budget indices, spread over ``0..n-1``, the last included."""
    if n <= MAX_OC_BUDGETS:
        return list(range(n))
    return sorted({round(i * (n - 1) / (MAX_OC_BUDGETS - 1)) for i in range(MAX_OC_BUDGETS)})


def _oc(report: dict[str, Any], conf: dict[str, Any], label: str) -> Any:
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    oc = conf.get("operating_characteristic") or {"budgets": [], "classes": []}
    cls = [c for c in oc["classes"] if c["pairs"]]
    inner = [c for c in oc["classes"] if c["low"] is not None and c["high"] is not None]
    width = max((c["high"] - c["low"] for c in inner), default=1.0)
    xs = [_x(c, width) for c in cls]
    fig = Figure(figsize=(7.4, 4.4), layout="constrained")
    ax = fig.subplots()
    ax.axvline(0, color="#444444", linewidth=0.8)
    alpha = float(report["targets"]["alpha"])
    ax.axhspan(0, alpha, color=figures._BAND, alpha=0.12, linewidth=0)
    handles, names = [], []
    for n, j in enumerate(oc_budget_indices(len(oc["budgets"]))):
        color = figures._PALETTE[n % len(figures._PALETTE)]
        ax.plot(xs, [figures._nan(c["accept"][j]) for c in cls], color=color, linewidth=1.6, marker=".", markersize=5)
        ax.plot(xs, [figures._nan(c["defer"][j]) for c in cls], color=color, linewidth=1.2, linestyle="--")
        handles.append(Line2D([], [], color=color, linewidth=1.6))
        names.append(f"budget {oc['budgets'][j] * 100:g} %")
    for style, what in (("-", "P(accept)"), ("--", "P(defer)")):
        handles.append(Line2D([], [], color="#444444", linestyle=style, linewidth=1.4))
        names.append(what)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("Δ_full − δ (pp), class midpoints")
    ax.set_ylabel("share of orders")
    ax.set_title(label, fontsize=9)
    fig.legend(handles, names, loc="outside right upper", fontsize=8.5)
    fig.suptitle(TITLES["oc"], fontsize=11)
    return fig
