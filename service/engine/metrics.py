"""The report of a replay: chunk tallies merged in pair order into SPEC §5 metrics and §6
sufficiency, with gap classes, the operating characteristic and diagnostics."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from service import __version__
from service.engine import classes, diagnostics
from service.engine.chunk import ChunkResult
from service.engine.numbers import clean as _clean
from service.engine.pairs import pair_table
from service.engine.plan import Config, Plan
from service.engine.spec import ANYTIME_RULES, ReplaySpec


def _rate(num: float, den: float) -> float | None:
    return None if den == 0 else _clean(num / den)


METRICS = ("false_accept_rate", "false_reject_rate", "decision_error", "defer_rate", "coverage_failure",
           "cost_fraction", "task_fraction")


def build_report(plan: Plan, chunks: Sequence[ChunkResult], *, per_pair: bool = True) -> dict:
    """Merge chunk tallies in pair order and compute SPEC §5 metrics and §6 sufficiency.

    ``per_pair=False`` leaves out each configuration's ``per_pair`` rows (the service keeps
    them as ``pairs.PairTable`` and serves them by page); nothing else changes."""
    chunks = sorted(chunks, key=lambda ch: ch.start)
    pos = 0
    for ch in chunks:
        if ch.start != pos:
            raise ValueError(f"chunks do not cover the pairs: gap or overlap at pair {pos}")
        pos = ch.stop
    if pos != plan.n_pairs:
        raise ValueError(f"chunks cover pairs [0, {pos}) of {plan.n_pairs}")
    cat = {f: np.concatenate([getattr(ch, f) for ch in chunks], axis=0) for f in ChunkResult.FIELDS}
    spec = plan.spec
    reps, n_s = spec.orders, spec.seeds
    rec = plan.records
    names = rec.systems
    n_tasks = plan.pair_n
    ks = np.stack([ts.ks for ts in plan._tasksets]).astype(np.float64)[plan.pair_ts].reshape(plan.n_pairs, -1)
    dfull = plan.delta_full()
    gaps = classes.gap_pp(plan.full_sums, n_tasks, plan.lattice)  # signed Δ_full in pp
    configurations = []
    for c, cfg in enumerate(plan.configs):
        appl = plan.applicable[:, c]
        full_pos = plan.positive(cfg.delta)
        positive = full_pos & appl
        negative = ~full_pos & appl
        n_app = int(appl.sum())
        counts = _counts_by_budget(cat, c)
        rows_for = functools.partial(_budget_rows, plan, cat, counts, c, cfg, full_pos=full_pos, ks=ks,
                                     n_tasks=n_tasks)
        budgets = rows_for(appl)
        msb, ecb = classes.sufficient_budgets(budgets)
        gap_cls, outside = classes.gap_classes(spec.gap_classes, np.abs(gaps), appl, full_pos, rows_for)
        oc = _operating_characteristic(plan, cat, c, cfg, gaps, full_pos, appl, budgets)
        conf = cfg.describe()
        conf.update({
            "n_pairs": n_app,
            "n_positive": int(positive.sum()),
            "n_negative": int(negative.sum()),
            "cases_per_budget": n_app * reps * n_s,
            "pairs_excluded": int((~appl).sum()),
            "note": None if cfg.policy.order != "cost_ascending" or n_app == plan.n_pairs else (
                "cost_ascending applies only to pairs whose A has a cost for every task of T; "
                f"{int((~appl).sum())} of {plan.n_pairs} pairs are excluded"),
            "diagnostics": [],
            "budgets": budgets,
            "minimum_sufficient_budget": msb,
            "error_coverage_budget": ecb,
            "gap_classes": gap_cls,
            "pairs_outside_gap_classes": outside,
            "operating_characteristic": oc,
        })
        if per_pair:
            conf["per_pair"] = pair_table(plan, cat, c, dfull, positive, appl).rows()
        conf["diagnostics"] = diagnostics.configuration(plan, cfg, appl, conf)
        configurations.append(conf)
    return {
        "version": __version__,
        "spec": spec.to_dict(),
        "dataset": {
            "systems": len(names),
            "system_names": list(names),
            "dropped_systems": plan.dropped_systems,
            "tasks": rec.n_tasks,
            "binary": rec.binary,
            "single_trial": rec.single_trial,
            "lattice": plan.lattice,
            "group_columns": list(rec.group_columns),
            "cost_complete_systems": int(plan.cost_complete_system.sum()),
        },
        "pairs": {
            "orientation": spec.orientation,
            "ordered": plan.n_pairs,
            "unordered": plan.n_unordered,
            "without_common_tasks": plan.empty_pairs,
            "selection": spec.pairs,
            "not_selected": plan.pairs_before_selection - plan.n_pairs,
            "positive_by_delta": {f"{d:g}": int(plan.positive(d).sum()) for d in spec.deltas},
            "negative_by_delta": {f"{d:g}": int((~plan.positive(d)).sum()) for d in spec.deltas},
        },
        "targets": {
            "alpha": spec.alpha,
            "gamma": spec.gamma,
            "eta": spec.eta,
            "null_rule": "a rate whose denominator is empty is null and counts as meeting its target",
        },
        "diagnostics": diagnostics.report(plan, names),
        "configurations": configurations,
    }


_COUNTS = ("accept", "reject", "defer", "coverage_fail")


def _counts_by_budget(cat: dict, c: int) -> dict[str, np.ndarray]:
    """Configuration ``c``'s decision counts as contiguous ``[seed + 1, budget, pair]`` arrays (the
    last seed row: all seeds pooled). The metrics sum them over masks of pairs, budget by budget
    and once per gap class; read in place from the merged ``[pair, config, seed, budget]``
    tallies, each such sum gathered 17,822 strided values on a 134 x 500 board (``build_report``
    there: 103 ms before, 86-90 after). Integer sums: the same numbers in any order."""
    out = {}
    for f in _COUNTS:
        per_seed = np.moveaxis(cat[f][:, c], 0, -1)  # [S, J, P]
        pooled = per_seed.sum(axis=0, keepdims=True, dtype=per_seed.dtype)  # <= orders x seeds: 1e8 at most
        out[f] = np.ascontiguousarray(np.concatenate([per_seed, pooled]))
    return out


def _budget_rows(plan: Plan, cat: dict, counts: dict[str, np.ndarray], c: int, cfg: Config, mask: np.ndarray,
                 full_pos: np.ndarray, ks: np.ndarray, n_tasks: np.ndarray) -> list[dict]:
    """A configuration's rows per budget (SPEC §5, §6) over the pairs of ``mask``: the whole
    configuration, or one gap class of it."""
    spec = plan.spec
    reps, n_s = spec.orders, spec.seeds
    positive = full_pos & mask
    negative = ~full_pos & mask
    n_app = int(mask.sum())
    cost_known = bool(np.all(~np.isnan(cat["cost_sum"][mask, c]))) if n_app else False
    seed_sums = [_masked_sums(counts, s, positive, negative, mask) for s in range(n_s)] if n_s > 1 else []
    pooled_sums = _masked_sums(counts, -1, positive, negative, mask)
    budgets = []
    for j, b in enumerate(spec.budgets):
        task_frac = ks[:, j] / n_tasks
        per_seed = [_metrics(sums, j, cat, c, s, mask, reps, task_frac, cost_known) for s, sums in enumerate(seed_sums)]
        pooled = _metrics(pooled_sums, j, cat, c, slice(None), mask, reps * n_s, task_frac, cost_known)
        k_mean = _clean(float(ks[mask, j].mean())) if n_app else None
        entry: dict[str, object] = {"budget": b, "k_mean": k_mean}
        entry.update(pooled)
        if cfg.policy.rule in ANYTIME_RULES or cfg.policy.checkpoints is not None:
            entry["mean_tasks_used"] = _clean(
                float(cat["used_sum"][mask, c, :, j].sum()) / max(1, n_app * reps * n_s))
        misses = _misses(pooled, spec) if pooled["cases"] else ["no_cases"]
        entry["sufficient"] = not misses
        entry["misses"] = misses
        if n_s > 1:
            entry["seed_intervals"] = {
                m: _interval([ps[m] for ps in per_seed]) for m in METRICS if pooled[m] is not None
            }
        budgets.append(entry)
    return budgets


def _operating_characteristic(plan: Plan, cat: dict, c: int, cfg: Config, gaps: np.ndarray, full_pos: np.ndarray,
                              appl: np.ndarray, budgets: list[dict]) -> dict:
    """SPEC §5.1: rates against ``Δ_full − δ`` in signed gap classes; tasks used when sequential."""
    sequential = bool(budgets) and "mean_tasks_used" in budgets[0]
    tallies = [cat[f][:, c].sum(axis=1) for f in ("accept", "reject", "defer")]  # [P, J] over seeds
    used = cat["used_sum"][:, c].sum(axis=1) if sequential else None
    rows = classes.operating_characteristic(plan.spec.gap_classes, gaps - cfg.delta, full_pos, appl, *tallies, used,
                                            plan.spec.orders * plan.spec.seeds)
    return {"x": "delta_full - delta (pp)", "budgets": list(plan.spec.budgets), "classes": rows}


def _masked_sums(counts: dict[str, np.ndarray], row: int, positive: np.ndarray, negative: np.ndarray,
                 appl: np.ndarray) -> dict[str, Any]:
    """The decision counts ``_metrics`` sums over pairs, for seed row ``row`` of ``counts`` (-1:
    pooled), every budget at once: one masked reduction per count instead of one per budget
    (the board's report summed 17,822 pairs 800 times). Integer sums, exact in any order. With
    them the masks' pair counts, the same for every budget."""
    acc, rej, dfr, cvf = (counts[f][row] for f in _COUNTS)  # [budget, pair]

    def total(x: np.ndarray, m: np.ndarray) -> list[int]:
        return np.add.reduce(x[:, m], axis=1, dtype=np.int64).tolist()

    return {"false_accepts": total(acc, negative), "false_rejects": total(rej, positive), "accept": total(acc, appl),
            "reject": total(rej, appl), "defer": total(dfr, appl), "coverage_fail": total(cvf, appl),
            "pairs": int(appl.sum()), "positive_pairs": int(positive.sum()), "negative_pairs": int(negative.sum())}


def _metrics(sums: dict[str, Any], j: int, cat: dict, c: int, s, appl: np.ndarray, reps: int,
             task_frac: np.ndarray, cost_known: bool) -> dict[str, object]:
    """Budget ``j``'s metrics over seed ``s`` (an index, or ``slice(None)``: all seeds pooled),
    from that seed's ``_masked_sums``."""
    cases = sums["pairs"] * reps
    n_pos = sums["positive_pairs"] * reps
    n_neg = sums["negative_pairs"] * reps
    fa = sums["false_accepts"][j]
    fr = sums["false_rejects"][j]
    return {
        "cases": cases,
        "n_positive": n_pos,
        "n_negative": n_neg,
        "accept": sums["accept"][j],
        "reject": sums["reject"][j],
        "defer": sums["defer"][j],
        "false_accept_rate": _rate(fa, n_neg),
        "false_reject_rate": _rate(fr, n_pos),
        "decision_error": _rate(fa + fr, cases),
        "defer_rate": _rate(sums["defer"][j], cases),
        "coverage_failure": _rate(sums["coverage_fail"][j], cases),
        "cost_fraction": _rate(_cost_sum(cat, c, s, j, appl), cases) if cost_known else None,
        "task_fraction": _rate(float((task_frac[appl] * reps).sum()), cases),
    }


def _cost_sum(cat: dict, c: int, s, j: int, appl: np.ndarray) -> float:
    """A float sum: read as it always was, so its rounding (and the report's bytes) stay."""
    cst = cat["cost_sum"][:, c, s, j]
    if cst.ndim > 1:
        cst = cst.sum(axis=1)
    return float(cst[appl].sum())


def _misses(m: dict[str, object], spec: ReplaySpec) -> list[str]:
    def over(key: str, target: float) -> bool:
        v = m[key]
        return v is not None and v > target + 1e-12  # type: ignore[operator]

    out = []
    if over("false_accept_rate", spec.alpha):
        out.append("false_accept_rate")
    if over("false_reject_rate", spec.alpha):
        out.append("false_reject_rate")
    if over("coverage_failure", spec.gamma):
        out.append("coverage_failure")
    if over("defer_rate", spec.eta):
        out.append("defer_rate")
    return out


def _interval(values: list[object]) -> dict[str, float | None]:
    v = np.array([x for x in values if x is not None], dtype=np.float64)
    if not len(v):
        return {"mean": None, "low": None, "high": None}
    return {
        "mean": _clean(float(v.mean())),
        "low": _clean(float(np.percentile(v, 2.5))),
        "high": _clean(float(np.percentile(v, 97.5))),
    }


# ------------------------------------------------------------------------ driver


def sufficiency_table(report: dict) -> list[dict[str, object]]:
    """One row per configuration: the budgets a reader looks for first."""
    return [
        {
            "policy": c["policy"]["name"],
            "group": c["group"],
            "floor": c["floor"],
            "a": c["a"],
            "bootstrap": c["bootstrap"],
            "delta": c["delta"],
            "minimum_sufficient_budget": c["minimum_sufficient_budget"],
            "error_coverage_budget": c["error_coverage_budget"],
        }
        for c in report["configurations"]
    ]
