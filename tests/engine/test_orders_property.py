"""Task orders (SPEC §4.1): the stratified prefix guarantee on random group sizes, and the
statistical properties of the other orders. Floors are recomputed by the reference."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import stats

from service.engine.orders import (
    cost_ascending_orders,
    neyman_allocation,
    stratified_orders,
    uniform_orders,
)
from tests.engine.reference import coverage_feasible, floor_required, meets_coverage

FLOORS = ("proportional", "slack", "one_per_group", "none")


def _labels(sizes: list[int], rng: np.random.Generator) -> np.ndarray:
    labels = np.repeat(np.arange(len(sizes)), sizes)
    return rng.permutation(labels)  # group members scattered over T, as in real data


def _check_prefixes(order: np.ndarray, labels: np.ndarray, sizes: list[int], floor: str) -> None:
    big_n = len(labels)
    assert sorted(order.tolist()) == list(range(big_n)), "not a permutation of T"
    counts = [0] * len(sizes)
    for k in range(1, big_n + 1):
        counts[int(labels[order[k - 1]])] += 1
        if coverage_feasible(floor, k, sizes):
            assert meets_coverage(floor, k, sizes, counts), (
                f"prefix k={k} misses the {floor} floor: counts={counts} "
                f"required={floor_required(floor, k, sizes)} sizes={sizes}"
            )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.integers(min_value=1, max_value=40), min_size=1, max_size=15),
    floor=st.sampled_from(FLOORS),
    seed=st.integers(min_value=0, max_value=2**31 - 1),
)
def test_stratified_meets_floor_on_every_feasible_prefix(sizes, floor, seed):
    rng = np.random.default_rng(seed)
    labels = _labels(sizes, rng)
    orders = stratified_orders(labels, floor, 3, rng)
    assert orders.shape == (3, len(labels))
    for order in orders:
        _check_prefixes(order, labels, sizes, floor)


@pytest.mark.parametrize(
    "sizes",
    [
        [114, 73, 44, 23, 16, 9, 6, 5, 4, 3, 2, 1],  # SWE-bench Lite-like repo sizes
        [1] * 70 + [2] * 5,  # many singleton groups (terminal-bench-like)
        [40] * 15,
        [1, 40, 1, 40, 1, 40],
        [7, 7, 7, 3, 3, 3, 1, 1],
    ],
)
@pytest.mark.parametrize("floor", FLOORS)
def test_stratified_prefix_guarantee_on_hard_shapes(sizes, floor):
    rng = np.random.default_rng(11)
    labels = _labels(sizes, rng)
    for order in stratified_orders(labels, floor, 4, rng):
        _check_prefixes(order, labels, sizes, floor)


def test_stratified_shuffles_within_groups():
    """Within a group, which task comes first is uniform over the group's tasks."""
    labels = np.array([0] * 5 + [1] * 5)
    rng = np.random.default_rng(3)
    orders = stratified_orders(labels, "proportional", 4000, rng)
    first_of_group0 = np.array([next(int(x) for x in row if labels[x] == 0) for row in orders])
    freq = np.bincount(first_of_group0, minlength=5)[:5]
    assert stats.chisquare(freq).pvalue > 1e-6, freq


def test_uniform_orders_are_uniform_permutations():
    rng = np.random.default_rng(2024)
    n, reps = 10, 20_000
    orders = uniform_orders(n, reps, rng)
    assert orders.shape == (reps, n)
    assert np.all(np.sort(orders, axis=1) == np.arange(n))
    first = np.bincount(orders[:, 0], minlength=n)
    assert stats.chisquare(first).pvalue > 1e-6, first
    last = np.bincount(orders[:, -1], minlength=n)
    assert stats.chisquare(last).pvalue > 1e-6, last
    # the ordered pair in positions (0, 1) is uniform over the n(n-1) possibilities
    pair = np.bincount(orders[:, 0] * n + orders[:, 1], minlength=n * n).reshape(n, n)
    off = pair[~np.eye(n, dtype=bool)]
    assert pair.trace() == 0
    assert stats.chisquare(off).pvalue > 1e-6


def test_uniform_orders_are_seeded():
    a = uniform_orders(30, 5, np.random.default_rng(7))
    b = uniform_orders(30, 5, np.random.default_rng(7))
    assert np.array_equal(a, b)


def test_cost_ascending_sorted_with_random_ties():
    rng = np.random.default_rng(5)
    cost = np.array([3.0, 1.0, 2.0, 1.0, 2.0, 1.0, 0.5, 9.0])
    orders = cost_ascending_orders(cost, 6000, rng)
    assert np.all(np.sort(orders, axis=1) == np.arange(len(cost)))
    assert np.all(np.diff(cost[orders], axis=1) >= 0), "not sorted by cost"
    assert np.all(orders[:, 0] == 6)  # the unique cheapest
    # the three tasks tied at 1.0 occupy positions 1..3, each first among them 1/3 of the time
    tied_first = np.bincount(orders[:, 1], minlength=len(cost))[[1, 3, 5]]
    assert tied_first.sum() == 6000
    assert stats.chisquare(tied_first).pvalue > 1e-6, tied_first
    # and all 3! arrangements of the tie occur
    arrangements = {tuple(row[1:4]) for row in orders}
    assert len(arrangements) == 6


def test_cost_ascending_needs_complete_costs():
    with pytest.raises(ValueError):
        cost_ascending_orders(np.array([1.0, np.nan]), 2, np.random.default_rng(0))


def _check_allocation(k, sizes, s_g, floor):
    sizes_a = np.array(sizes)
    alloc = np.asarray(neyman_allocation(k, sizes_a, np.array(s_g, dtype=float), floor))
    big_n = sum(sizes)
    assert alloc.sum() == min(k, big_n), (alloc, k)
    assert np.all(alloc >= 0) and np.all(alloc <= sizes_a), "cap n_g violated"
    if not coverage_feasible(floor, k, sizes):
        return alloc
    r = np.array(floor_required(floor, k, sizes))
    assert np.all(alloc >= r), "floor violated"
    extra = alloc - r
    w = sizes_a * np.array(s_g, dtype=float)
    if not np.any(w > 0):
        w = sizes_a.astype(float)
    rest = k - int(r.sum())
    quota = rest * w / w.sum()
    capped = alloc == sizes_a
    if not capped.any():
        # largest remainder: every group within one of its exact quota
        assert np.all(np.abs(extra - quota) < 1 + 1e-9), (extra, quota)
        assert np.all(extra >= np.floor(quota + 1e-12)), (extra, quota)
        # the groups rounded up have remainders at least those rounded down
        up = extra > np.floor(quota + 1e-12)
        frac = quota - np.floor(quota + 1e-12)
        if up.any() and (~up).any():
            assert frac[up].min() >= frac[~up].max() - 1e-9
    else:
        # groups below their cap only gain from capacity the capped ones could not use
        open_ = ~capped
        assert np.all(extra[open_] >= np.floor(quota[open_] + 1e-12) - 0), (extra, quota)
        # and no group with weight 0 gets extra tasks while a weighted group has room
        weighted_room = (w > 0) & open_
        if weighted_room.any():
            assert np.all(extra[(w == 0)] == 0) or not np.any(w > 0)
    return alloc


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(min_value=1, max_value=40), min_size=1, max_size=15),
    data=st.data(),
    floor=st.sampled_from(FLOORS),
)
def test_neyman_allocation_properties(sizes, data, floor):
    big_n = sum(sizes)
    k = data.draw(st.integers(min_value=1, max_value=big_n))
    s_g = data.draw(
        st.lists(
            st.one_of(st.just(0.0), st.floats(min_value=0.0, max_value=1.0, allow_nan=False)),
            min_size=len(sizes),
            max_size=len(sizes),
        )
    )
    _check_allocation(k, sizes, s_g, floor)


def test_neyman_allocation_hand_examples():
    # N = 100, k = 20, floor none: remaining 20 shared in proportion to n_g·S_g = 50·0.1 : 50·0.3
    assert neyman_allocation(20, np.array([50, 50]), np.array([0.1, 0.3]), "none").tolist() == [5, 15]
    # all S_g = 0: proportional to n_g
    assert neyman_allocation(20, np.array([30, 70]), np.array([0.0, 0.0]), "none").tolist() == [6, 14]
    # proportional floor first: r = (floor(20·30/100), floor(20·70/100)) = (6, 14), nothing left
    assert neyman_allocation(20, np.array([30, 70]), np.array([0.5, 0.0]), "proportional").tolist() == [6, 14]
    # one_per_group floor (1, 1) then 18 shared 10:30 (n_g·S_g = 10·1 : 90·(1/3)) = 4.5 : 13.5
    alloc = neyman_allocation(20, np.array([10, 90]), np.array([1.0, 1.0 / 3.0]), "one_per_group")
    assert alloc.sum() == 20 and sorted((alloc - 1).tolist()) in ([4, 14], [5, 13])
    # a cap: group 0 has 3 tasks but the biggest weight; the overflow goes to the others
    alloc = neyman_allocation(10, np.array([3, 10, 10]), np.array([1.0, 0.1, 0.1]), "none")
    assert alloc.tolist()[0] == 3 and alloc.sum() == 10 and abs(alloc[1] - alloc[2]) <= 1


@pytest.mark.parametrize("k", [1, 5, 17, 50, 99, 100])
def test_neyman_allocation_is_proportional_to_size_when_sd_zero(k):
    sizes = [10, 20, 30, 40]
    alloc = _check_allocation(k, sizes, [0.0] * 4, "none")
    quota = np.array(sizes) * k / 100
    assert np.all(np.abs(alloc - quota) < 1), (alloc, quota)
    assert math.isclose(alloc.sum(), k)


def test_one_group_is_its_own_shuffle_drawn_as_with_many():
    """With one group every step serves it, so the order is the group's shuffle, taken without
    the step loop: the same orders and the same draws from the generator as the loop's."""
    labels = np.zeros(37, dtype=np.intp)
    for floor in ("proportional", "slack", "one_per_group", "none"):
        got_rng, want_rng = np.random.default_rng(4), np.random.default_rng(4)
        got = stratified_orders(labels, floor, 5, got_rng)
        want = np.argsort(want_rng.random((5, 37)), axis=1, kind="stable")
        want_rng.random((5, 1))  # the per-order group priorities
        assert np.array_equal(got, want) and got.dtype == np.intp
        assert got_rng.random() == want_rng.random()


def test_the_compiled_step_loop_gives_the_numpy_loops_orders(monkeypatch):
    """``orders_kernel.edf_orders`` (taken past ``COMPILED_STEPS_FROM`` where numba is loaded)
    against the numpy loop, on random group sizes (tied deadlines and deficits included: equal
    sizes) and every floor: the same orders, index for index, and a prefix guarantee kept."""
    from service.engine import (
        orders,
        orders_kernel,  # noqa: F401  (loads numba, as a worker has)
    )

    rng = np.random.default_rng(8)
    for trial in range(120):
        n_groups = int(rng.integers(2, 14))
        sizes = [int(s) for s in rng.integers(1, 30, n_groups)] if trial % 3 else [7] * n_groups
        labels = _labels(sizes, rng)
        floor = FLOORS[trial % 4]
        reps = int(rng.integers(1, 40))
        got = {}
        for path, threshold in (("numpy", 10**18), ("compiled", 0)):
            monkeypatch.setattr(orders, "COMPILED_STEPS_FROM", threshold)
            got[path] = stratified_orders(labels, floor, reps, np.random.default_rng(trial))
        assert np.array_equal(got["numpy"], got["compiled"]) and got["compiled"].dtype == np.intp, trial
        _check_prefixes(got["compiled"][0], labels, sizes, floor)
