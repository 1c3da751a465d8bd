"""``literal_draws``: the task draws a replay's literal resampling makes (outcomes off a small
lattice), counted here by watching the draws themselves, on task sets of two sizes, two
values of B, two thresholds, two seeds and a neyman order; and none on lattice outcomes."""

from __future__ import annotations

import numpy as np
import pytest

from service.engine import chunk
from service.engine.plan import Plan
from service.engine.records import parse_records
from service.engine.replay import literal_draws, plan_replay, run_replay
from service.engine.spec import make_spec


def _records(off_lattice: bool) -> str:
    rng = np.random.default_rng(3)
    rows = ["system,task_id,group,trial,outcome"]
    for s in ("a", "b", "c"):
        for t in range(14):
            if s == "c" and t == 13:  # c lacks a task: its pairs observe another task set
                continue
            y = rng.random() if off_lattice else float(rng.random() < 0.5)
            rows.append(f"{s},t{t},g{t % 3},0,{y!r}")
    return "\n".join(rows) + "\n"


SPEC = {"policies": ["coverage_bootstrap", "neyman_coverage_bootstrap", "uniform_forced"], "deltas": [0, 3],
        "budgets": [0.3, 0.6, 1.0], "orders": 6, "seeds": 2, "bootstrap": [7, 4], "groups": ["group"],
        "min_task_coverage": 0.9}


def test_literal_draws_are_the_draws_a_replay_makes(monkeypatch: pytest.MonkeyPatch) -> None:
    records = parse_records(_records(off_lattice=True), fmt="csv")
    spec = make_spec(**SPEC)
    plan = plan_replay(records, spec)
    assert not plan.fft_bootstrap and len({len(ts.tasks) for ts in plan._tasksets}) == 2
    inside: list[int] = []  # the sizes of the draws made within the literal bootstrap
    active = [False]
    make_rng, literal = Plan._rng, chunk._bootstrap_literal

    class Counting:
        def __init__(self, rng: np.random.Generator):
            self.rng = rng

        def integers(self, *args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            out = self.rng.integers(*args, **kwargs)
            inside.append(np.size(out))
            return out

        def __getattr__(self, name: str):  # noqa: ANN204
            return getattr(self.rng, name)

    def rng(self, *key):  # noqa: ANN001, ANN002, ANN202
        return Counting(make_rng(self, *key)) if active[0] else make_rng(self, *key)

    def watched(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        active[0] = True
        try:
            return literal(*args, **kwargs)
        finally:
            active[0] = False

    monkeypatch.setattr(Plan, "_rng", rng)
    monkeypatch.setattr(chunk, "_bootstrap_literal", watched)
    run_replay(records, spec, jobs=1, threads=1)
    assert sum(inside) == literal_draws(plan) > 0
    # by hand: per pair, its k at each budget, summed; x 2 bootstrap policies x (7 + 4) resamples
    # x 2 thresholds x 6 orders x 2 seeds
    ks = [k for p in range(plan.n_pairs) for k in plan.ks(p)]
    assert literal_draws(plan) == sum(ks) * 2 * (7 + 4) * 2 * 6 * 2


def test_lattice_outcomes_draw_nothing() -> None:
    plan = plan_replay(parse_records(_records(off_lattice=False), fmt="csv"), make_spec(**SPEC))
    assert plan.fft_bootstrap and literal_draws(plan) == 0
