"""The memory estimate of a replay chunk (``footprint``) against the chunk's measured peak
(numpy reports its allocations to ``tracemalloc``): never below it, and within a small factor,
for each order kind and rule. A change of the engine's array shapes fails here first."""

from __future__ import annotations

import tracemalloc

import pytest

from service.engine.footprint import chunk_footprint
from service.engine.records import parse_records
from service.engine.replay import plan_replay, run_chunk
from service.engine.spec import make_spec
from tests.service.conftest import synth_csv

CASES = {
    "uniform forced": dict(policies=["uniform_forced"], orders=1500, budgets=[0.1, 0.3, 0.5, 0.7, 0.9]),
    "stratified bootstrap": dict(policies=["coverage_bootstrap"], orders=600, groups=["group"]),
    "anytime": dict(policies=["anytime_coverage"], orders=400, groups=["group"], deltas=[0, 5]),
    "anytime_eb": dict(
        policies=[{"order": "stratified", "rule": "anytime_eb", "coverage": "yes"}], orders=400, groups=["group"]
    ),
    "neyman": dict(policies=["neyman_coverage_bootstrap"], orders=400, groups=["group"]),
    "cost": dict(policies=["cost_forced"], orders=400),
    "several orders": dict(
        policies=["coverage_bootstrap", "uniform_forced", "coverage_paired_normal", "serfling_coverage"],
        orders=200,
        groups=["group", None],
        deltas=[0, 5],
    ),
}


@pytest.fixture(scope="module")
def records():  # noqa: ANN201
    return parse_records(synth_csv(seed=1, n_systems=3, n_tasks=300), fmt="csv")


@pytest.mark.parametrize("name", list(CASES))
def test_estimate_bounds_the_measured_peak(records, name: str) -> None:  # noqa: ANN001
    spec = make_spec(**CASES[name])
    estimate = chunk_footprint(plan_replay(records, spec), 4).total
    plan = plan_replay(records, spec)  # a fresh plan: its order cache starts empty, as in a worker
    tracemalloc.start()
    try:
        run_chunk(plan, 0, min(4, plan.n_pairs))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak > 5e6, "the case is too small to say anything"
    assert estimate >= peak, (name, estimate, peak)
    assert estimate <= 3 * peak, (name, estimate, peak)


def test_the_issue_case_is_gigabytes(records) -> None:  # noqa: ANN001
    """2 systems x 1,000 tasks and 100,000 orders: 3.8 M cases, under the case ceiling, but a
    chunk's observation matrix alone is tasks x orders x budgets."""
    content = synth_csv(seed=2, n_systems=2, n_tasks=1000)
    plan = plan_replay(parse_records(content, fmt="csv"), make_spec(orders=100_000))
    fp = chunk_footprint(plan, 200)
    assert fp.observation_matrix >= 1000 * 100_000 * 19 * 4
    assert fp.total > 20 * 2**30 and "observation matrix" in fp.largest()


def _scheduled(rule: str, checkpoints: list[float], orders: int, bootstrap: object = "exact") -> dict:
    return dict(policies=[{"order": "stratified", "rule": rule, "coverage": "yes"}], checkpoints=checkpoints,
                spending="obrien_fleming", orders=orders, budgets=[1.0], bootstrap=[bootstrap], groups=["group"])


TENTHS = [round(0.1 * i, 1) for i in range(1, 11)]
SCHEDULED = {
    "0/1, bootstrap, ten checkpoints": (dict(), _scheduled("bootstrap", TENTHS, 6000)),
    "0/1, paired normal, one checkpoint": (dict(), _scheduled("paired_normal", [1.0], 6000)),
    "five trials, B = 200": (dict(trials=5), _scheduled("bootstrap", [0.25, 0.5, 0.75, 1.0], 6000, 200)),
    "step 1/100, bootstrap": (dict(n_tasks=60, fractional=True, fraction_of=100),
                              _scheduled("bootstrap", [0.25, 0.5, 0.75, 1.0], 20000)),
}


@pytest.mark.parametrize("name", list(SCHEDULED))
def test_a_schedules_estimate_bounds_its_measured_peak(name: str) -> None:
    """Policies with checkpoints decide every order's path in ``chunk._scheduled`` (blocks of
    pairs in observation order, decided a slice at a time): many orders at one budget, so that
    the schedule's arrays are the largest term. The memos of the exact tails (``arraycache``,
    bounded per process, not per chunk) are left out of the comparison."""
    from service.engine import arraycache, lattice, tails

    shape, options = SCHEDULED[name]
    shape = {"n_tasks": 300, **shape}
    records = parse_records(synth_csv(seed=1, n_systems=3, **shape), fmt="csv")
    spec = make_spec(**options)
    fp = chunk_footprint(plan_replay(records, spec), 4)
    assert fp.largest().startswith("orders x checkpoint tasks"), fp
    memos = (lattice._tables, lattice._window, lattice.windows, tails._cdf_weights)
    for memo in memos:
        memo.cache_clear()
    plan = plan_replay(records, spec)
    tracemalloc.start()
    try:
        run_chunk(plan, 0, min(4, plan.n_pairs))
        peak = tracemalloc.get_traced_memory()[1] - sum(memo.cache_bytes() for memo in memos)
    finally:
        tracemalloc.stop()
    assert len(arraycache.BOUNDS) >= len(memos)
    assert peak > 5e7, "the case is too small to say anything"
    assert fp.total >= peak, (name, fp.total, peak)
    assert fp.total <= 3 * peak, (name, fp.total, peak)
