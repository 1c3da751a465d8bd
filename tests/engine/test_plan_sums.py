"""``Plan.full_sums`` (Σ D over each pair's T, lattice units) against one pair at a time, when
pairs have different task sets (systems that did not run every task) and several trials."""

from __future__ import annotations

import numpy as np

from service.engine.records import from_rows
from service.engine.replay import plan_replay
from service.engine.spec import make_spec


def test_full_sums_equal_the_sum_of_each_pairs_differences():
    rng = np.random.default_rng(3)
    rows = []
    for s in range(6):
        for t in range(80):
            if s >= 3 and rng.random() < 0.04:  # a few missing tasks: several task sets
                continue
            for trial in range(3):
                rows.append({"system": f"s{s}", "task_id": f"t{t}", "trial": trial,
                             "outcome": float(rng.random() < 0.3 + 0.1 * s)})
    records = from_rows(rows)
    plan = plan_replay(records, make_spec(policies=["coverage_bootstrap"], deltas=[0], min_task_coverage=0.9))
    assert len(plan._tasksets) > 3 and plan.lattice == 3
    want = np.array([plan.pair_values(p).sum() for p in range(plan.n_pairs)], dtype=np.float64)
    np.testing.assert_array_equal(plan.full_sums, want)
    np.testing.assert_array_equal(plan.pair_n, [len(plan.pair_tasks(p)) for p in range(plan.n_pairs)])
