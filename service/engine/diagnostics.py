"""Diagnostics: where a report's numbers alone mislead, a code and a sentence (SPEC §6).

Report level: ``unequal_task_sets``. Configuration level: ``coverage_infeasible_below``,
``error_budget_vacuous``, ``single_group``, ``few_cases``. Each is a pure function of the plan
and of the rows already built, so diagnostics never change a number.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from service.engine.coverage import required

if TYPE_CHECKING:  # the plan's type only; metrics imports this module
    from service.engine.plan import Config, Plan

FEW_CASES = 30
"""A rate whose support (cases in its denominator) is under this is flagged ``few_cases``."""


def diagnostic(code: str, message: str) -> dict[str, str]:
    return {"code": code, "message": message}


def first_feasible_k(floor: str, n_g: np.ndarray) -> int | None:
    """Smallest ``k`` in ``1..N`` at which the floors fit (``Σ r_g(k) <= k``), or ``None``.

    Feasibility is not monotone in ``k`` (several floors can rise at once), so every ``k`` is
    checked; groups of equal size need the same floor, so the work is over distinct sizes."""
    n_g = np.asarray(n_g, dtype=np.int64)
    n_g = n_g[n_g > 0]
    big_n = int(n_g.sum())
    if big_n == 0:
        return None
    if floor == "none":
        return 1
    if floor == "one_per_group":
        return len(n_g)
    sizes, counts = np.unique(n_g, return_counts=True)
    step = max(1, 4_000_000 // len(sizes))
    for lo in range(1, big_n + 1, step):
        ks = np.arange(lo, min(big_n, lo + step - 1) + 1, dtype=np.int64)
        share = (ks[:, None] * sizes[None, :]) // big_n - (1 if floor == "slack" else 0)
        need = np.maximum(1, np.minimum(sizes[None, :], share)) @ counts
        ok = np.flatnonzero(need <= ks)
        if len(ok):
            return int(ks[ok[0]])
    return None


def _pct(b: float) -> str:
    return f"{b * 100:.4g} %"


def _group_words(cfg: Config) -> str:
    return "one group" if not cfg.group else f"'{cfg.group}'"


def coverage_infeasible_below(plan: Plan, cfg: Config, appl: np.ndarray) -> dict[str, str] | None:
    """The first tested budget at which the floors fit, when it is not the smallest one."""
    if cfg.floor == "none" or not appl.any():
        return None
    worst: tuple[int, int] | None = None  # (first feasible budget index or J, task set)
    n_j = len(plan.spec.budgets)
    for ts_id in np.unique(plan.pair_ts[appl]):
        ts = plan._tasksets[int(ts_id)]
        lab, n_groups = plan._labels(int(ts_id), cfg.group)
        n_g = np.bincount(lab, minlength=n_groups)
        feas = required(cfg.floor, ts.ks, n_g).sum(axis=1) <= ts.ks
        first = int(np.argmax(feas)) if feas.any() else n_j
        if worst is None or first > worst[0]:
            worst = (first, int(ts_id))
    if worst is None or worst[0] == 0:
        return None
    first, ts_id = worst
    ts = plan._tasksets[ts_id]
    lab, n_groups = plan._labels(ts_id, cfg.group)
    n_g = np.bincount(lab, minlength=n_groups)
    n = len(ts.tasks)
    singles = int((n_g == 1).sum())
    k_fit = first_feasible_k(cfg.floor, n_g)
    groups = f"{n_groups} groups for {n} tasks" + (f", {singles} of them with a single task" if singles else "")
    fits = "never fit" if k_fit is None else f"first fit at k = {k_fit} of {n} tasks ({_pct(k_fit / n)})"
    effect = (
        "every smaller budget defers all its cases"
        if cfg.policy.coverage_aware
        else "every conclusion at a smaller budget is a coverage failure"
    )
    if first >= n_j:
        where = "at every tested budget"
        effect = (
            "every budget defers all its cases"
            if cfg.policy.coverage_aware
            else "every conclusion is a coverage failure"
        )
    else:
        where = f"below the budget of {_pct(plan.spec.budgets[first])}"
    return diagnostic(
        "coverage_infeasible_below",
        f"Coverage under the {cfg.floor} floor by {_group_words(cfg)} is infeasible {where}: {groups}, and the "
        f"floors {fits}; {effect}. A coarser grouping (or the one_per_group or none floor) lets smaller "
        "budgets count.",
    )


def error_budget_vacuous(conf: dict) -> dict[str, str] | None:
    """The error-and-coverage budget is met only because every case deferred there."""
    ecb = conf["error_coverage_budget"]
    if ecb is None:
        return None
    row = next(b for b in conf["budgets"] if b["budget"] == ecb)
    if not row["cases"] or row["accept"] + row["reject"] > 0:
        return None
    real = next(
        (
            b["budget"]
            for b in conf["budgets"]
            if b["accept"] + b["reject"] > 0 and not (set(b["misses"]) - {"defer_rate"})
        ),
        None,
    )
    then = (
        "no budget meets error and coverage with any conclusion"
        if real is None
        else f"the smallest budget that meets them with conclusions is {_pct(real)}"
    )
    return diagnostic(
        "error_budget_vacuous",
        f"The error-and-coverage budget {_pct(ecb)} is met only because every case deferred there (no accept or "
        f"reject, so both error rates are 0); {then}.",
    )


def single_group(plan: Plan, cfg: Config, appl: np.ndarray) -> dict[str, str] | None:
    """A coverage-aware policy whose grouping has one group: coverage is trivially met."""
    if not cfg.policy.coverage_aware or not appl.any():
        return None
    if any(plan._labels(int(t), cfg.group)[1] > 1 for t in np.unique(plan.pair_ts[appl])):
        return None
    what = "no grouping is set" if not cfg.group else f"'{cfg.group}' has a single value on these tasks"
    return diagnostic(
        "single_group",
        f"Policy {cfg.policy.name} checks coverage, but {what}: coverage is trivially met, so the coverage "
        "failure rate is 0 by construction.",
    )


def few_cases(conf: dict) -> dict[str, str] | None:
    """Rates whose support is under ``FEW_CASES`` cases, in the configuration or its gap classes."""
    places: list[str] = []

    def check(where: str, row: dict) -> None:
        for name, support in (
            ("false accept rate", "n_negative"),
            ("false reject rate", "n_positive"),
            ("defer rate", "cases"),
        ):
            n = row[support]
            if 0 < n < FEW_CASES:
                places.append(f"{name} {where}({n} cases)")

    if conf["budgets"]:
        check("", conf["budgets"][0])  # supports are the same at every budget
    for cls in conf.get("gap_classes", []):
        if cls["budgets"]:
            check(f"in gap class [{cls['low']:g}, {cls['high']:g}) pp ", cls["budgets"][0])
    if not places:
        return None
    shown = "; ".join(places[:6]) + (f"; and {len(places) - 6} more" if len(places) > 6 else "")
    return diagnostic(
        "few_cases",
        f"Some rates rest on fewer than {FEW_CASES} cases and are noisy: {shown}. Cases are pairs × orders; "
        "more orders or a wider selection of pairs gives them more support.",
    )


def configuration(plan: Plan, cfg: Config, appl: np.ndarray, conf: dict) -> list[dict[str, str]]:
    found = [
        coverage_infeasible_below(plan, cfg, appl),
        error_budget_vacuous(conf),
        single_group(plan, cfg, appl),
        few_cases(conf),
    ]
    return [d for d in found if d is not None]


def report(plan: Plan, names: Sequence[str]) -> list[dict[str, str]]:
    """Report-level diagnostics: pairs compared on different task sets."""
    out = []
    if len(plan._tasksets) > 1:
        sizes = plan.pair_n
        p = int(np.argmin(sizes))
        a, b = plan.pairs[p]
        out.append(
            diagnostic(
                "unequal_task_sets",
                f"Pairs are compared on {len(plan._tasksets)} different task sets (some systems miss tasks): from "
                f"{int(sizes.min())} to {int(sizes.max())} common tasks; the smallest overlap is {names[a]} vs "
                f"{names[b]}. Budgets are shares of each pair's own tasks.",
            )
        )
    return out


__all__ = ["FEW_CASES", "diagnostic", "first_feasible_k", "configuration", "report"]
