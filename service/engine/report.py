"""Serialising a replay report: canonical JSON bytes, CSV, and metric rows.

The CLI and the API serve exactly the bytes of ``report_json``; the same spec and seed give
the same bytes whatever the chunking or the number of workers.
"""

from __future__ import annotations

import io
import json

from service.engine import csvsafe
from service.engine.metrics import METRICS

BUDGET_FIELDS = ("budget", "k_mean", "cases", "n_positive", "n_negative", "accept", "reject", "defer",
                 *METRICS, "mean_tasks_used", "sufficient", "misses")
CONFIG_FIELDS = ("policy", "order", "rule", "coverage_aware", "group", "floor", "a", "bootstrap", "delta")


def report_json(report: dict) -> bytes:
    """Canonical bytes: key order as built, no whitespace, UTF-8, no NaN."""
    return json.dumps(report, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")


def _config_cells(conf: dict) -> list[object]:
    pol = conf["policy"]
    return [pol["name"], pol["order"], pol["rule"], pol["coverage_aware"], conf["group"], conf["floor"], conf["a"],
            conf["bootstrap"], conf["delta"]]


def report_csv(report: dict) -> str:
    """One row per (configuration, budget) with every metric; empty cell = null."""
    buf = io.StringIO()
    w = csvsafe.writer(buf, lineterminator="\n")  # policy and group names are the user's text
    w.writerow([*CONFIG_FIELDS, *BUDGET_FIELDS, "minimum_sufficient_budget", "error_coverage_budget"])
    for conf in report["configurations"]:
        for b in conf["budgets"]:
            cells = []
            for f in BUDGET_FIELDS:
                v = b.get(f)
                cells.append(";".join(v) if isinstance(v, list) else ("" if v is None else v))
            w.writerow([*_config_cells(conf), *cells, _blank(conf["minimum_sufficient_budget"]),
                        _blank(conf["error_coverage_budget"])])
    return buf.getvalue()


def _blank(v: object) -> object:
    return "" if v is None else v


def metric_rows(report: dict) -> list[dict[str, object]]:
    """Long format: one row per (configuration, budget, metric) for querying from a database."""
    rows = []
    for conf in report["configurations"]:
        key = {
            "policy": conf["policy"]["name"],
            "group": conf["group"],
            "floor": conf["floor"],
            "a": conf["a"],
            "bootstrap": str(conf["bootstrap"]),
            "delta": conf["delta"],
        }
        for b in conf["budgets"]:
            for m in (*METRICS, "mean_tasks_used"):
                if m in b:
                    rows.append({**key, "budget": b["budget"], "metric": m, "value": b[m]})
        for m in ("minimum_sufficient_budget", "error_coverage_budget"):
            rows.append({**key, "budget": None, "metric": m, "value": conf[m]})
    return rows


def summary_table(report: dict) -> str:
    """The readable default output: sufficiency per configuration, then what blocks each budget."""
    lines = []
    ds, pairs = report["dataset"], report["pairs"]
    lines.append(
        f"{ds['systems']} systems, {ds['tasks']} tasks, {pairs['ordered']} pairs ({pairs['orientation']}), "
        f"{report['spec']['orders']} orders x {report['spec']['seeds']} seed(s)"
    )
    if pairs.get("selection", "all") != "all":
        lines.append(f"pairs selected by '{pairs['selection']}' ({pairs['not_selected']} others left out)")
    if ds["dropped_systems"]:
        lines.append(f"dropped by min_task_coverage: {', '.join(ds['dropped_systems'])}")
    t = report["targets"]
    lines.append(f"targets: alpha={t['alpha']} gamma={t['gamma']} eta={t['eta']} ({t['null_rule']})")
    lines.append("")
    head = f"{'policy':28} {'group':10} {'floor':13} {'a':>5} {'B':>6} {'delta':>6}  {'min sufficient':>14}  " \
           f"{'error+coverage':>14}"
    lines.append(head)
    lines.append("-" * len(head))
    for c in report["configurations"]:
        msb = c["minimum_sufficient_budget"]
        ecb = c["error_coverage_budget"]
        lines.append(
            f"{c['policy']['name'][:28]:28} {str(c['group'] or '-')[:10]:10} {c['floor'][:13]:13} {c['a']:>5g} "
            f"{str(c['bootstrap']):>6} {c['delta']:>6g}  {'none' if msb is None else f'{msb:g}':>14}  "
            f"{'none' if ecb is None else f'{ecb:g}':>14}"
        )
    for d in report.get("diagnostics", []):
        lines.append(f"! {d['code']}: {d['message']}")
    lines.append("")
    for c in report["configurations"]:
        lines.append(f"{c['policy']['name']} delta={c['delta']:g} group={c['group'] or '-'} floor={c['floor']}:"
                     + (f"  ({c['note']})" if c.get("note") else ""))
        for d in c.get("diagnostics", []):
            lines.append(f"  ! {d['code']}: {d['message']}")
        lines.extend(_gap_class_lines(c))
        lines.append(f"  {'budget':>6} {'FAR':>8} {'FRR':>8} {'error':>8} {'defer':>8} {'covfail':>8} "
                     f"{'cost':>7}  misses")
        for b in c["budgets"]:
            lines.append(
                f"  {b['budget']:>6g} {_fmt(b['false_accept_rate'])} {_fmt(b['false_reject_rate'])} "
                f"{_fmt(b['decision_error'])} {_fmt(b['defer_rate'])} {_fmt(b['coverage_failure'])} "
                f"{_fmt(b['cost_fraction'], 7)}  {', '.join(b['misses']) or 'sufficient'}"
            )
    return "\n".join(lines) + "\n"


def _gap_class_lines(c: dict) -> list[str]:
    """Tasks needed by gap size: each |Δ_full| class's pairs and budgets (SPEC §5.1)."""
    classes = c.get("gap_classes") or []
    if not classes:
        return []
    out = [f"  {'|delta_full| (pp)':>18} {'pairs':>6} {'min sufficient':>14} {'tasks':>7} {'error+coverage':>14}"]
    for g in classes:
        msb = g["minimum_sufficient_budget"]
        row = next((b for b in g["budgets"] if b["budget"] == msb), None)
        k = "" if row is None or row["k_mean"] is None else f"{row['k_mean']:g}"
        ecb = g["error_coverage_budget"]
        out.append(f"  {'[' + format(g['low'], 'g') + ', ' + format(g['high'], 'g') + ')':>18} {g['pairs']:>6} "
                   f"{'none' if msb is None else f'{msb:g}':>14} {k:>7} {'none' if ecb is None else f'{ecb:g}':>14}")
    return out


def _fmt(v: object, width: int = 8) -> str:
    return f"{'null':>{width}}" if v is None else f"{v:>{width}.4f}"
