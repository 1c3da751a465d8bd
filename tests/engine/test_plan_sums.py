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


def test_each_pair_gets_the_task_set_of_the_tasks_both_its_systems_observed():
    """Task sets are built once per pair of observed-task patterns: systems 0-2 share a
    pattern (all tasks), 3 and 4 share another, 5 and 6 have their own, 7 has no task in
    common with 6. Every pair's set must still be exactly its own intersection, the same
    set must be one id, and a pair with nothing in common must be dropped."""
    rng = np.random.default_rng(4)
    missing = {3: {1, 2}, 4: {1, 2}, 5: {7}, 6: set(range(0, 30)), 7: set(range(30, 40))}
    rows = [{"system": f"s{s}", "task_id": f"t{t}", "outcome": float(rng.random() < 0.5)}
            for s in range(8) for t in range(40) if t not in missing.get(s, set())]
    plan = plan_replay(from_rows(rows), make_spec(policies=["coverage_bootstrap"], deltas=[0], min_task_coverage=0))
    obs = plan.records.observed
    assert plan.empty_pairs == 2  # (6, 7) both ways
    assert all({a, b} != {6, 7} for a, b in plan.pairs)
    for p, (a, b) in enumerate(plan.pairs):
        np.testing.assert_array_equal(plan.pair_tasks(p), np.flatnonzero(obs[a] & obs[b]))
    keys = [plan.pair_tasks(p).tobytes() for p in range(plan.n_pairs)]
    assert len(plan._tasksets) == len(set(keys))
    assert all((plan.pair_ts[p] == plan.pair_ts[q]) == (keys[p] == keys[q])
               for p in range(plan.n_pairs) for q in range(plan.n_pairs))
