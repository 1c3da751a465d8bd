"""Sums over observed tasks (engine/summers.py), and the packed 0/1 counts and closed forms that
read them (engine/chunk.py)."""

from __future__ import annotations

import numpy as np

from service.engine import chunk as C
from service.engine import summers as S


def _order(rng, reps: int, n: int) -> np.ndarray:
    return np.stack([rng.permutation(n) for _ in range(reps)])


def test_rep_sums_equal_the_per_order_sums_added_up():
    rng = np.random.default_rng(0)
    n, reps, ks = 60, 25, np.array([3, 10, 31, 60])
    summer = S.MatrixSummer(_order(rng, reps, n), ks)
    x = rng.random((7, n))
    want = summer(x).sum(axis=1)
    np.testing.assert_allclose(summer.rep_sums(x), want, rtol=1e-12, atol=0)
    # the direct count: order r observes its first k tasks
    order = _order(np.random.default_rng(0), reps, n)
    direct = np.array([[sum(x[p, order[r, :k]].sum() for r in range(reps)) for k in ks] for p in range(len(x))])
    np.testing.assert_allclose(summer.rep_sums(x), direct, rtol=1e-12, atol=0)


def test_packed_binary_counts_equal_separate_sums():
    """``n+ + 4096·n-`` in one float32 product is exact below 4,096 tasks: both counts, and so
    the sums of d and d², come back exactly."""
    rng = np.random.default_rng(1)
    n, reps, ks = C._PACK - 1, 3, np.array([1, 700, C._PACK - 1])
    summer = S.MatrixSummer(_order(rng, reps, n), ks)
    d = rng.choice([-1.0, 0.0, 1.0], size=(4, n))
    d[0] = -1.0  # every task lost: the largest packed sum
    packed = summer.sum32(np.where(d > 0, 1.0, np.where(d < 0, float(C._PACK), 0.0)).astype(np.float32))
    assert packed.dtype == np.float32  # as _replay_order splits it: in float32, exactly
    n_minus = np.floor(packed * np.float32(1.0 / C._PACK))
    n_plus = packed - np.float32(C._PACK) * n_minus
    np.testing.assert_array_equal(n_plus, summer((d > 0).astype(np.float32)))
    np.testing.assert_array_equal(n_minus, summer((d < 0).astype(np.float32)))


def test_a_shared_order_s_summer_is_kept_with_its_plan_across_chunks(monkeypatch):
    """Chunk after chunk of one plan reuses the observation matrix of the same order; another
    order (or plan) gets its own, and only the last few are kept."""
    import weakref

    monkeypatch.setattr(S, "_SUMMERS", weakref.WeakKeyDictionary())

    class FakePlan:  # any object that can be weakly referenced stands for a plan here
        pass

    rng = np.random.default_rng(2)
    ks = np.array([2, 5])
    plan, other = FakePlan(), FakePlan()
    orders = [_order(rng, 4, 8) for _ in range(S._SUMMERS_KEPT + 1)]
    first = S.shared_summer(plan, orders[0], ks)
    assert S.shared_summer(plan, orders[0], ks) is first
    assert S.shared_summer(plan, orders[0].copy(), ks) is not first  # an equal array is not the order
    assert S.shared_summer(other, orders[0], ks) is not first
    for o in orders[1:]:
        S.shared_summer(plan, o, ks)
    assert len(S._SUMMERS[plan]) == S._SUMMERS_KEPT
    assert S.shared_summer(plan, orders[0], ks) is not first  # the oldest went first
    x = rng.random((3, 8))
    np.testing.assert_array_equal(S.shared_summer(plan, orders[-1], ks)(x), S.MatrixSummer(orders[-1], ks)(x))
    del plan
    import gc

    gc.collect()
    assert len(S._SUMMERS) == 1  # a plan's summers go with it


def test_counts_over_the_orders_equal_numpy_sums():
    hit = np.random.default_rng(3).random((5, 300, 4)) < 0.4
    np.testing.assert_array_equal(C._count(hit), hit.sum(axis=1))
    assert C._count(np.ones((1, 70_000, 1), dtype=bool))[0, 0] == 70_000  # past uint8 and int16


def test_closed_forms_per_distinct_sample_equal_them_per_case():
    """On 0/1 counts the closed-form rules decide once per distinct (budget, n+, n-) and the
    block gathers (``_binary_samples``): the same decisions as per case, for every rule."""
    rng = np.random.default_rng(4)
    ks = np.array([3, 20, 61, 120])
    n_plus = rng.binomial(ks[None, None, :], 0.3, size=(6, 40, len(ks))).astype(np.float32)
    n_minus = rng.binomial((ks - n_plus).astype(np.int64), 0.4).astype(np.float32)
    uj, up, um, inv = C._binary_samples({"binary": (n_plus, n_minus)}, ks)
    assert len(up) < n_plus.size / 2  # samples repeat: there is something to share
    np.testing.assert_array_equal(up[inv], n_plus)
    np.testing.assert_array_equal(um[inv], n_minus)
    np.testing.assert_array_equal(ks[uj][inv], np.broadcast_to(ks, n_plus.shape))
    s, q = (n_plus - n_minus).astype(np.float64), (n_plus + n_minus).astype(np.float64)
    k = np.broadcast_to(ks.astype(np.float64), s.shape)
    s_u, q_u = (up - um).astype(np.float64), (up + um).astype(np.float64)
    for rule in C._CLOSED_FORMS:
        for theta in (0.0, 0.05):
            if rule == "mcnemar" and theta:
                continue
            per_case = C._closed_form(rule, s, q, k, 120, theta, 0.05, 1)
            assert len(set(per_case.ravel().tolist())) > 1  # decisions of more than one kind
            np.testing.assert_array_equal(
                C._closed_form(rule, s_u, q_u, ks[uj].astype(np.float64), 120, theta, 0.05, 1)[inv], per_case
            )


def test_coverage_of_one_group_equals_the_counted_observations():
    """With one group (no grouping) ``_coverage_met`` reads each case's count off its budget
    instead of a product with the observation matrix: the same answer, for every floor, as
    counting the observed tasks of each order and budget and comparing with the floor."""
    from service.engine.coverage import required
    from service.engine.records import from_rows
    from service.engine.replay import plan_replay
    from service.engine.spec import make_spec

    rng = np.random.default_rng(5)
    rows = [{"system": s, "task_id": f"t{t:02d}", "outcome": int(rng.random() < 0.5), "group": f"g{t % 3}"}
            for s in "ABC" for t in range(30)]
    records = from_rows(rows)
    for floor in ("proportional", "slack", "one_per_group", "none"):
        spec = make_spec(policies=["coverage_bootstrap"], deltas=[0], budgets=(0.03, 0.1, 0.5, 1.0), orders=6,
                         floors=[floor], groups=[None, "group"], seed=1)
        plan = plan_replay(records, spec)
        for cfg in plan.configs:
            ts = plan._tasksets[0]
            order = plan._orders(0, 0, cfg.policy, cfg.group, cfg.floor, -1)
            got = C._coverage_met(plan, 0, cfg, S.MatrixSummer(order, ts.ks), spec.orders, None)
            lab, n_groups = plan._labels(0, cfg.group)
            n_g = np.bincount(lab, minlength=n_groups)
            req = required(floor, ts.ks, n_g)
            want = np.array([[bool(np.all(np.bincount(lab[order[r, :k]], minlength=n_groups) >= req[j]))
                              and req[j].sum() <= k for j, k in enumerate(ts.ks)] for r in range(spec.orders)])
            assert got.shape == (1, spec.orders, len(ts.ks))
            np.testing.assert_array_equal(got[0], want, err_msg=f"{floor} {cfg.group}")
