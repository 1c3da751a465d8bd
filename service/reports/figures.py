"""Report figures drawn with matplotlib (object API, no pyplot) from a stored report.

Every figure has one panel per δ and one line per configuration (policy, plus any other
swept dimension), against the task budget as a share of the pair's tasks:

- ``unresolved``: the share of unresolved comparisons (``defer_rate``, SPEC §5), the η band
  shaded, each line's minimum sufficient budget marked (SPEC §6).
- ``errors``: false accept (solid) and false reject (dashed) rates, the α band shaded.
- ``coverage``: coverage failure, the γ band shaded.

Rates that are ``null`` (empty denominator) are gaps in the line. With several seeds the
2.5–97.5 % seed interval is shaded around each line. Output is deterministic: the same
report gives the same bytes (fixed SVG hash salt, no dates, fixed software tag).
"""

from __future__ import annotations

import io
import math
import threading
from dataclasses import dataclass
from typing import Any, Literal

from service.reports import view

Format = Literal["svg", "png"]
FORMATS: tuple[Format, ...] = ("svg", "png")
MEDIA_TYPES = {"svg": "image/svg+xml", "png": "image/png"}
RENDERER_VERSION = "3"
"""Part of every figure ETag: bump when the drawing changes so caches refetch."""


@dataclass(frozen=True)
class FigureSpec:
    title: str
    caption: str
    metrics: tuple[tuple[str, str], ...]  # (metric, linestyle)
    target: str  # key of report["targets"] drawn as the shaded band
    target_label: str


FIGURES: dict[str, FigureSpec] = {
    "unresolved": FigureSpec(
        "Unresolved comparisons by task budget",
        "Share of cases left unresolved (defer rate) at each budget; the shaded band is the target η; "
        "a filled circle marks each line's minimum sufficient budget.",
        (("defer_rate", "-"),),
        "eta",
        "η (unresolved target)",
    ),
    "errors": FigureSpec(
        "False accept and false reject by task budget",
        "Conditional false accept rate (solid) and false reject rate (dashed); the shaded band is the target α.",
        (("false_accept_rate", "-"), ("false_reject_rate", "--")),
        "alpha",
        "α (error target)",
    ),
    "coverage": FigureSpec(
        "Coverage failure by task budget",
        "Share of cases concluded on an observed subset that does not meet the coverage floor; "
        "the shaded band is the target γ.",
        (("coverage_failure", "-"),),
        "gamma",
        "γ (coverage target)",
    ),
}
NAMES = tuple(FIGURES)

_RC = {
    "svg.hashsalt": "sufficiency-report",
    "svg.fonttype": "path",  # text as outlines: no fonts needed where the SVG is shown
    "text.parse_math": False,  # names with '$' are text, not mathtext
    "font.family": "DejaVu Sans",
    "font.size": 9.0,
    "axes.titlesize": 10.0,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "legend.frameon": False,
    "path.simplify": False,
}
_PALETTE = (
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
)
_DASHES = ("-", (0, (5, 2)), (0, (1, 1.5)), (0, (6, 2, 1, 2)))
_BAND = "#2ca02c"
# rc_context changes process-wide settings: draw one figure at a time.
_LOCK = threading.Lock()


MAX_PANELS = 9
"""δ panels a figure draws (a 3 x 3 grid). matplotlib's layout grows faster than the panels and
holds the GIL: 30 panels took 5.6 s, 1,000 took 342 s and 1.4 GB. Without ``?delta=`` a figure
shows the first ones and says so; asking for more is refused."""
MAX_SERIES = 40
"""Lines (configurations) per panel: past this a legend is unreadable and the drawing slow."""


class FigureTooLarge(ValueError):
    """What was asked would draw more than ``MAX_PANELS`` panels or ``MAX_SERIES`` lines."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


def _panels(report: dict[str, Any], only: list[float] | None) -> tuple[list[float], int]:
    """The δ panels to draw (at most ``MAX_PANELS``) and how many the selection holds."""
    chosen = [d for d in view.deltas(report) if only is None or any(math.isclose(d, o) for o in only)]
    if not chosen:
        chosen = view.deltas(report)
    return chosen[:MAX_PANELS], len(chosen)


def check_size(report: dict[str, Any], deltas: list[float] | None) -> None:
    """Refuse before drawing: more δ panels asked for by ``delta`` than ``MAX_PANELS``, or more
    lines per panel than ``MAX_SERIES`` (``FigureTooLarge`` names the field)."""
    _, asked = _panels(report, deltas)
    if deltas is not None and asked > MAX_PANELS:
        raise FigureTooLarge("delta", f"{asked} δ panels asked for; a figure draws at most {MAX_PANELS}")
    dims = view.varying_dimensions(report)
    series = len({view.series_label(c, dims) for c in report["configurations"]})
    if series > MAX_SERIES:
        raise FigureTooLarge("name", f"the replay has {series} configurations per δ; a figure draws at most "
                                     f"{MAX_SERIES} lines (the report and /metrics hold every one)")


def _nan(v: float | None) -> float:
    return math.nan if v is None else float(v)


def render(report: dict[str, Any], name: str, fmt: Format, deltas: list[float] | None = None) -> bytes:
    """Draw figure ``name`` of ``report`` as SVG or PNG bytes (``deltas`` limits the panels)."""
    if name not in FIGURES:
        raise KeyError(name)
    check_size(report, deltas)
    import matplotlib

    with _LOCK, matplotlib.rc_context(_RC):
        return encode(_draw(report, FIGURES[name], deltas), fmt)


def encode(fig: Any, fmt: Format) -> bytes:
    """A drawn figure as bytes without a timestamp, so the same report gives the same bytes
    (call under ``_LOCK`` and ``_RC``, like the drawing)."""
    buf = io.BytesIO()
    if fmt == "svg":
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": "sufficiency"})
    else:
        fig.savefig(buf, format="png", dpi=110, metadata={"Software": "sufficiency"})
    return buf.getvalue()


def _draw(report: dict[str, Any], spec: FigureSpec, only: list[float] | None) -> Any:
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    confs = report["configurations"]
    dims = view.varying_dimensions(report)
    labels: list[str] = []
    for c in confs:  # one colour per series, the same in every figure and panel
        lab = view.series_label(c, dims)
        if lab not in labels:
            labels.append(lab)
    style = {lab: (_PALETTE[i % len(_PALETTE)], _DASHES[(i // len(_PALETTE)) % len(_DASHES)])
             for i, lab in enumerate(labels)}
    panel_deltas, selected = _panels(report, only)
    ncols = min(len(panel_deltas), 3)
    nrows = math.ceil(len(panel_deltas) / ncols)
    legend_rows = math.ceil((len(labels) + 2) / 3)
    fig = Figure(figsize=(4.2 * ncols + 0.6, 3.3 * nrows + 0.35 * legend_rows + 0.5), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    target = float(report["targets"][spec.target])
    for i, delta in enumerate(panel_deltas):
        ax = axes[i // ncols][i % ncols]
        top = target * 1.6
        ax.axhspan(0, target, color=_BAND, alpha=0.12, linewidth=0)
        ax.axhline(target, color=_BAND, linewidth=0.9, linestyle=":")
        for c in (c for c in confs if c["delta"] == delta):
            lab = view.series_label(c, dims)
            color, dash = style[lab]
            xs = [b["budget"] * 100 for b in c["budgets"]]
            for j, (metric, ls) in enumerate(spec.metrics):
                ys = [_nan(b.get(metric)) for b in c["budgets"]]
                finite = [y for y in ys if not math.isnan(y)]
                if finite:
                    top = max(top, max(finite) * 1.08)
                linestyle = ls if len(spec.metrics) > 1 else dash
                ax.plot(xs, ys, color=color, linestyle=linestyle, linewidth=1.6, marker="." if j == 0 else None,
                        markersize=4)
                lows = [_interval(b, metric, "low") for b in c["budgets"]]
                if any(not math.isnan(v) for v in lows):
                    highs = [_interval(b, metric, "high") for b in c["budgets"]]
                    ax.fill_between(xs, lows, highs, color=color, alpha=0.15, linewidth=0)
                point = view.budget_at(c, c["minimum_sufficient_budget"])
                if point is not None and j == 0:
                    y = _nan(point.get(metric))
                    x = point["budget"] * 100
                    ax.axvline(x, color=color, linewidth=0.8, linestyle=(0, (2, 2)), alpha=0.8)
                    if not math.isnan(y):  # later series smaller and on top: coinciding marks stay visible
                        rank = labels.index(lab)
                        ax.plot([x], [y], marker="o", markersize=max(4.0, 8.5 - 1.5 * (rank % 4)), color=color,
                                markeredgecolor="black", markeredgewidth=0.8, linestyle="none", zorder=5 + rank)
        ax.set_xlim(0, 100)
        ax.set_ylim(0, min(1.02, top) if top <= 1.0 else top)
        ax.set_title(f"δ = {delta:g} pp")
        ax.set_xlabel("task budget (% of the pair's tasks)")
        if i % ncols == 0:
            ax.set_ylabel(spec.metrics[0][0].replace("_", " ") if len(spec.metrics) == 1 else "rate")
    for k in range(len(panel_deltas), nrows * ncols):
        axes[k // ncols][k % ncols].set_visible(False)
    handles = [Line2D([], [], color=style[lab][0], linestyle=style[lab][1], linewidth=1.6) for lab in labels]
    names = list(labels)
    if len(spec.metrics) > 1:
        for metric, ls in spec.metrics:
            handles.append(Line2D([], [], color="#444444", linestyle=ls, linewidth=1.4))
            names.append(metric.replace("_", " "))
    handles.append(Patch(facecolor=_BAND, alpha=0.25, edgecolor=_BAND))
    names.append(f"{spec.target_label} = {target:g}")
    handles.append(Line2D([], [], marker="o", color="#777777", markeredgecolor="black", linestyle="none"))
    names.append("minimum sufficient budget")
    fig.legend(handles, names, loc="outside lower center", ncols=min(3, len(names)), fontsize=8.5)
    title = spec.title
    if selected > len(panel_deltas):
        title += f" (δ panels 1-{len(panel_deltas)} of {selected}: choose others with ?delta=)"
    fig.suptitle(title, fontsize=11)
    return fig


def _interval(b: dict[str, Any], metric: str, end: str) -> float:
    si = b.get("seed_intervals") or {}
    m = si.get(metric)
    return math.nan if not m else _nan(m.get(end))
