"""``Plan.with_orders``: the same plan with another number of orders must replay exactly as a
plan built anew with that number, and leave the plan it came from as it was."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from service.engine.records import parse_records
from service.engine.replay import plan_replay, run_chunk
from service.engine.spec import make_spec
from service.engine.synth import generate, to_csv


def _equal(a, b) -> bool:
    return all(np.array_equal(getattr(a, f), getattr(b, f), equal_nan=True) for f in a.FIELDS)


def test_a_plan_with_fewer_orders_replays_as_one_built_with_them():
    records = parse_records(to_csv(generate(n_systems=5, n_tasks=60, n_groups=3, seed=3)).encode(), fmt="csv")
    spec = make_spec(policies=["coverage_bootstrap", "neyman_coverage_bootstrap", "anytime_coverage", "uniform_forced"],
                     deltas=[0, 5], groups=["group"], orders=40, budgets=[0.2, 0.5, 0.8])
    plan = plan_replay(records, spec)
    before = run_chunk(plan, 0, plan.n_pairs)
    small = plan.with_orders(8)
    assert small.spec == replace(spec, orders=8) and plan.spec.orders == 40
    fresh = plan_replay(records, replace(spec, orders=8))
    got, want = run_chunk(small, 0, small.n_pairs), run_chunk(fresh, 0, fresh.n_pairs)
    assert got.accept.shape[0] == plan.n_pairs and _equal(got, want)
    assert not _equal(got, before) or before.accept.max() <= 8  # the orders did change
    assert _equal(run_chunk(plan, 0, plan.n_pairs), before)  # the original kept its own orders
