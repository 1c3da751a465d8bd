"""Live decisions (SPEC §7): the same rules as replay, determinism, coverage and `next`,
validation, and optional stopping."""

from __future__ import annotations

import json

import numpy as np
import pytest

from service.engine import rules as R
from service.engine.live import (
    LiveError,
    aggregate,
    aggregate_columns,
    aggregate_single,
    live_decision,
    live_from_arrays,
    make_live_spec,
    make_universe,
    recommended_order,
)
from service.engine.records import from_rows, group_labels
from service.engine.replay import plan_replay, run_replay
from service.engine.spec import make_spec


def _records(seed: int, n_tasks: int, trials: int) -> tuple:
    rng = np.random.default_rng(seed)
    n_groups = int(rng.integers(2, 5))
    groups = [f"g{int(g)}" for g in rng.integers(0, n_groups, n_tasks)]
    p = {"S1": 0.55, "S2": 0.45, "S3": 0.5}
    rows = []
    for s, ps in p.items():
        for t in range(n_tasks):
            for tr in range(trials):
                rows.append({"system": s, "task_id": f"t{t:03d}", "trial": tr, "outcome": float(rng.random() < ps),
                             "group": groups[t]})
    return from_rows(rows)


RULES_BINARY = ["bootstrap", "paired_normal", "serfling", "anytime", "mcnemar", "forced"]


@pytest.mark.parametrize(("seed", "trials"), [(1, 1), (2, 1), (3, 2)])
def test_live_decisions_agree_with_replay(seed: int, trials: int) -> None:
    """Every (pair, rule, order, budget) case of a replay with one sampled order ends as the
    live decision on the same observed tasks, in the same order."""
    records = _records(seed, 36 + 7 * seed, trials)
    checked = 0
    for delta in (0, 5):
        rules = [r for r in RULES_BINARY if (trials == 1 and delta == 0) or r != "mcnemar"]
        policies = [{"order": o, "rule": r, "coverage_aware": cov}
                    for r in rules for o, cov in (("stratified", True), ("uniform", False))]
        spec = make_spec(policies=policies, deltas=[delta], orders=1, bootstrap=["exact"], groups=["group"],
                         seed=seed, budgets=[0.1, 0.25, 0.4, 0.55, 0.7, 0.85, 1.0])
        checked += _check_against_replay(records, spec, trials)
    assert checked >= 2 * 6 * 10 * 7


def _check_against_replay(records, spec, trials: int) -> int:  # noqa: ANN001
    report = run_replay(records, spec)
    plan = plan_replay(records, spec)
    labels_all, names = group_labels(records, "group")
    word = ("accept", "reject", "defer")
    checked = 0
    for c, cfg in enumerate(plan.configs):
        conf = report["configurations"][c]
        assert conf["policy"]["rule"] == cfg.policy.rule and conf["delta"] == cfg.delta
        for p, (ia, ib) in enumerate(plan.pairs):
            tasks = plan.pair_tasks(p)
            universe = make_universe([records.tasks[t] for t in tasks], [names[labels_all[t]] for t in tasks])
            live_spec = make_live_spec(rule=cfg.policy.rule, delta=cfg.delta, a=cfg.a, floor=cfg.floor,
                                       coverage_aware=cfg.policy.coverage_aware)
            pair = conf["per_pair"][p]
            assert (pair["a"], pair["b"]) == (records.systems[ia], records.systems[ib])
            for j in range(len(spec.budgets)):
                observed_pos = plan.case_observed(p, 0, c, j)[0]
                rows = []
                for pos in observed_pos.tolist():
                    t = tasks[pos]
                    for tr in range(trials):
                        rows.append(("A", records.tasks[t], tr, _trial_outcome(records, ia, t, tr)))
                        rows.append(("B", records.tasks[t], tr, _trial_outcome(records, ib, t, tr)))
                out = live_decision(universe, aggregate(universe, rows, ("A", "B"), trials_needed=trials), live_spec)
                replayed = next(w for w in word if pair[w][j] == 1.0)
                assert out["decision"] == replayed, (cfg, p, j, out["reason"], out["statistic"])
                checked += 1
    assert checked == len(plan.configs) * len(plan.pairs) * len(spec.budgets)
    return checked


def _trial_outcome(records, s: int, t: int, trial: int) -> float:  # noqa: ANN001
    sel = (records.raw_system == s) & (records.raw_task == t) & (records.raw_trial == trial)
    return float(records.raw_outcome[sel][0])


def _random_case(seed: int, n: int = 200, k: int = 90, fractional: bool = False) -> tuple:
    rng = np.random.default_rng(seed)
    ids = [f"task-{i}" for i in range(n)]
    groups = [f"g{int(x)}" for x in rng.integers(0, 6, n)]
    obs = rng.permutation(n)[:k]
    if fractional:
        ya, yb = rng.integers(0, 5, k) / 4, rng.integers(0, 5, k) / 4
    else:
        ya, yb = (rng.random(k) < 0.6).astype(float), (rng.random(k) < 0.45).astype(float)
    return ids, groups, ya, yb, [ids[i] for i in obs]


@pytest.mark.parametrize("rule", ["bootstrap", "paired_normal", "serfling", "anytime", "mcnemar"])
def test_same_input_same_bytes(rule: str) -> None:
    ids, groups, ya, yb, observed = _random_case(11)
    first = json.dumps(live_from_arrays(ids, groups, ya, yb, observed, rule=rule, floor="slack"), sort_keys=True)
    for _ in range(3):
        again = json.dumps(live_from_arrays(ids, groups, ya, yb, observed, rule=rule, floor="slack"), sort_keys=True)
        assert again == first


def test_finite_bootstrap_is_seeded_by_the_input() -> None:
    ids, groups, ya, yb, observed = _random_case(5, fractional=True)
    runs = {json.dumps(live_from_arrays(ids, groups, ya, yb, observed, bootstrap=200)) for _ in range(3)}
    assert len(runs) == 1


def test_rule_statistics_match_the_rule_kernels() -> None:
    ids, groups, ya, yb, observed = _random_case(3, k=120)
    d = ya - yb
    boot = live_from_arrays(ids, groups, ya, yb, observed, rule="bootstrap", floor="none")
    assert boot["statistic"]["p_low"] == pytest.approx(R.decide("bootstrap", d, 0.0).statistic["p_low"], abs=1e-12)
    assert boot["mean_difference"] == pytest.approx(d.mean())
    mc = live_from_arrays(ids, groups, ya, yb, observed, rule="mcnemar", floor="none")
    assert mc["statistic"]["n_plus"] == int((d > 0).sum()) == mc["counts"]["a_wins"]
    assert mc["statistic"]["n_minus"] == int((d < 0).sum()) == mc["counts"]["b_wins"]
    ser = live_from_arrays(ids, groups, ya, yb, observed, rule="serfling", floor="none")
    eps = float(R.serfling_radius(120, 200, 0.05))
    assert ser["statistic"]["lower"] == pytest.approx(d.mean() - eps)
    assert boot["warning"] and "anytime" in boot["warning"] and "optional stopping" in boot["warning"]
    assert live_from_arrays(ids, groups, ya, yb, observed, rule="anytime")["warning"] is None


# ----------------------------------------------------------------------------- coverage and next

UNIVERSE = (["a1", "a2", "a3", "a4", "a5", "a6", "b1", "b2", "b3", "c1"], ["a"] * 6 + ["b"] * 3 + ["c"])


def _hand(observed: list[str], a: list[float], b: list[float], **spec: object) -> dict:
    return live_from_arrays(*UNIVERSE, a, b, observed, **spec)


def test_coverage_unmet_names_short_groups_and_next_tasks() -> None:
    out = _hand(["a1", "a2", "a3"], [1, 1, 1], [0, 0, 0], rule="forced")
    # k = 3: r = (max(1, ⌊1.8⌋), max(1, ⌊0.9⌋), max(1, ⌊0.3⌋)) = (1, 1, 1): feasible, b and c short
    assert out["decision"] == "defer" and out["reason"] == "coverage_unmet" and out["rule_decision"] == "accept"
    cov = {g["group"]: (g["n"], g["required"], g["observed"], g["missing"]) for g in out["coverage"]["groups"]}
    assert cov == {"a": (6, 1, 3, 0), "b": (3, 1, 0, 1), "c": (1, 1, 0, 1)}
    nxt = out["next"]
    # next grid point above 3 is k' = 4 (0.35·10 → 4): r = (2, 1, 1); b and c lack one each, 2 > 4 - 3
    assert nxt["k"] == 4 and nxt["feasible"] and not nxt["reachable"]
    assert [(g["group"], g["missing"], g["run"]) for g in nxt["groups"]] == [("b", 1, 1), ("c", 1, 1)]
    assert sorted(t[0] for t in nxt["task_ids"]) == ["b", "c"] and "c1" in nxt["task_ids"]


def test_next_fills_remaining_slots_by_share_and_prefers_half_done_tasks() -> None:
    u = make_universe(*UNIVERSE)
    rows = [("A", "a1", 0, 1.0), ("B", "a1", 0, 0.0), ("A", "b1", 0, 0.0), ("B", "b1", 0, 1.0),
            ("A", "c1", 0, 1.0), ("B", "c1", 0, 1.0), ("A", "a5", 0, 1.0)]
    spec = make_live_spec(rule="forced", budgets=[0.3, 0.8])
    out = live_decision(u, aggregate(u, rows, ("A", "B")), spec)
    assert out["k"] == 3 and out["counts"]["a_only"] == 1 and out["counts"]["pending"] == 1
    assert out["decision"] == "reject" and out["next"] is None  # forced: m = 0 <= θ; decided, nothing to run
    spec = make_live_spec(rule="bootstrap", budgets=[0.3, 0.8])
    out = live_decision(u, aggregate(u, rows, ("A", "B")), spec)
    nxt = out["next"]
    # k' = 8: r = (4, 2, 1); have (1, 1, 1): a needs 3, b needs 1, and 1 slot more goes to a (share 4.8)
    assert nxt["k"] == 8 and nxt["reachable"]
    runs = {g["group"]: (g["missing"], g["run"], g["task_ids"]) for g in nxt["groups"]}
    assert runs["a"][:2] == (3, 4) and runs["b"][:2] == (1, 1) and "c" not in runs
    assert runs["a"][2][0] == "a5"  # half done (A ran it) comes first
    assert len(nxt["task_ids"]) == 5 and set(nxt["task_ids"]) == set(runs["a"][2]) | set(runs["b"][2])


def test_coverage_infeasible_and_budget_cap() -> None:
    out = _hand(["a1"], [1], [0], rule="forced")
    assert out["reason"] == "coverage_infeasible" and not out["coverage"]["feasible"]
    assert out["next"]["k"] == 3  # the first grid point where 3 groups fit
    capped = _hand(["a1", "b1", "c1"], [1, 0, 1], [0, 1, 1], rule="bootstrap", budget=0.3)
    assert capped["decision"] == "defer" and capped["budget_exhausted"] and capped["next"] is None
    none_floor = _hand(["a1"], [1], [0], rule="forced", floor="none")
    assert none_floor["decision"] == "accept" and none_floor["coverage"]["met"]


def test_stratified_recommended_order_meets_coverage_at_every_prefix() -> None:
    rng = np.random.default_rng(0)
    ids = [f"t{i}" for i in range(97)]
    groups = [f"g{int(g)}" for g in rng.integers(0, 9, 97)]
    u = make_universe(ids, groups)
    order = recommended_order(u, "proportional", seed=3)
    assert order == recommended_order(u, "proportional", seed=3) and sorted(order) == sorted(ids)
    for k in range(1, 98):
        out = live_from_arrays(ids, groups, [1.0] * k, [1.0] * k, order[:k], rule="forced")
        assert out["coverage"]["met"] == out["coverage"]["feasible"]


# ----------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"rule": "majority"}, "rule"),
        ({"rule": "mcnemar", "delta": 5}, "delta"),
        ({"floor": "most"}, "floor"),
        ({"a": 1.5}, "a"),
        ({"bootstrap": 0}, "bootstrap"),
        ({"bootstrap": 1_000_001}, "bootstrap"),  # past MAX_RESAMPLES, as in replays
        ({"budgets": [0.5, 1.5]}, "budgets[1]"),
    ],
)
def test_spec_errors_name_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(LiveError) as err:
        make_live_spec(**kwargs)
    assert err.value.field == field


def test_input_errors_name_the_field() -> None:
    with pytest.raises(LiveError) as err:
        make_universe([], None)
    assert err.value.field == "universe"
    with pytest.raises(LiveError) as err:
        make_universe(["x", "y", "x"], None)
    assert err.value.field == "universe.task_ids[2]"
    u = make_universe(["x", "y"], ["g", "h"])
    for rows, field in [
        ([("A", "x", 0, 1.0), ("B", "z", 0, 1.0)], "observations[1].task_id"),
        ([("A", "x", 0, 1.5)], "observations[0].outcome"),
        ([("A", "x", 0, float("nan"))], "observations[0].outcome"),
        ([("A", "x", 0, 1.0), ("A", "x", 0, 1.0)], "observations[1]"),
        ([("C", "x", 0, 1.0)], "observations[0].system"),
        ([("A", "x", 0, 1.0), ("B", "x", 2**31, 1.0)], "observations[1].trial"),  # past MAX_TRIAL
        ([("A", "x", 0, 1.0), ("B", "x", 2**70, 1.0)], "observations[1].trial"),  # past int64: no crash
        ([("A", "x", -1, 1.0)], "observations[0].trial"),
    ]:
        with pytest.raises(LiveError) as err:
            aggregate(u, rows, ("A", "B"))
        assert err.value.field == field
    both = [("A", "x", 0, 1.0), ("B", "x", 0, 1.0), ("A", "y", 0, 1.0), ("B", "y", 0, 0.0)]
    assert aggregate(u, both, ("A", "B"), order=["y", "x"]).sequence.tolist() == [1, 0]
    assert aggregate(u, both, ("A", "B"), order=["y"]).sequence.tolist() == [1, 0]
    for order, field in ((["q"], "order[0]"), (["x", "x"], "order[1]")):
        with pytest.raises(LiveError) as err:
            aggregate(u, both, ("A", "B"), order=order)
        assert err.value.field == field
    fractional = aggregate(u, [("A", "x", 0, 0.5), ("B", "x", 0, 1.0)], ("A", "B"))
    with pytest.raises(LiveError) as err:
        live_decision(u, fractional, make_live_spec(rule="mcnemar"))
    assert err.value.field == "observations"
    repeated = aggregate(u, [("A", "x", 0, 1.0), ("B", "x", 0, 1.0), ("A", "x", 1, 0.0)], ("A", "B"))
    with pytest.raises(LiveError):
        live_decision(u, repeated, make_live_spec(rule="mcnemar"))


@pytest.mark.parametrize("seed", range(40))
def test_compact_fast_path_equals_the_general_aggregation(seed: int) -> None:
    """``aggregate_single`` (one outcome per task, in the order of A's keys) gives exactly
    what ``aggregate_columns`` gives for the same rows, or ``None`` whenever the general path
    would raise, so that the general path can name the offending entry."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 40))
    ids = [f"t{i}" for i in range(n)]
    u = make_universe(ids, [f"g{int(g)}" for g in rng.integers(0, 3, n)])
    values = [0.0, 1.0] if seed % 2 else [0.0, 0.25, 0.5, 1.0]

    def outcomes() -> dict[str, float]:
        picked = rng.permutation(n)[: int(rng.integers(0, n + 1))]
        return {ids[i]: float(rng.choice(values)) for i in picked}

    a, b = outcomes(), outcomes()
    if seed % 5 == 0 and a:  # something the general path rejects
        bad = rng.choice(["unknown", "above", "nan"])
        key = next(iter(a))
        if bad == "unknown":
            a["nope"] = 1.0
        else:
            a[key] = 1.5 if bad == "above" else float("nan")
    cols = [(s, t, 0, y) for s, per in (("A", a), ("B", b)) for t, y in per.items()]
    fast = aggregate_single(u, a, b)
    try:
        general = aggregate_columns(u, *([list(c) for c in zip(*cols, strict=True)] if cols else [[]] * 4),
                                    ("A", "B"), order=list(a))
    except LiveError:
        assert fast is None
        return
    assert fast is not None
    for name in ("y_a", "y_b", "trials_a", "trials_b", "sequence"):
        got, want = getattr(fast, name), getattr(general, name)
        assert got.dtype == want.dtype and np.array_equal(got, want, equal_nan=True), name
    assert fast.binary_single_trial == general.binary_single_trial


def test_trials_are_averaged_and_a_task_counts_once_complete() -> None:
    u = make_universe(["x", "y"], None)
    rows = [("A", "x", 0, 1.0), ("B", "x", 0, 0.0), ("A", "x", 1, 0.0), ("B", "x", 1, 0.0), ("A", "y", 0, 1.0)]
    obs = aggregate(u, rows, ("A", "B"), trials_needed=2)
    assert obs.k == 1 and obs.y_a[0] == 0.5 and obs.trials_a.tolist() == [2, 1]
    assert aggregate(u, rows[:3], ("A", "B"), trials_needed=2).k == 0


# ----------------------------------------------------------------------------- optional stopping


def test_anytime_survives_monitoring_and_fixed_sample_bootstrap_does_not() -> None:
    """Null population (Δ_full = 0, δ = 0: any accept is false). Checking after every task
    and stopping at the first accept: anytime keeps the false-accept rate under a; the
    bootstrap checked the same way does not (the warning is there for a reason)."""
    n, paths, a = 40, 120, 0.05
    d_pop = np.array([1.0] * 14 + [-1.0] * 14 + [0.0] * 12)
    ids = [f"t{i}" for i in range(n)]
    rng = np.random.default_rng(2024)
    false_anytime = false_boot = 0
    for _ in range(paths):
        order = rng.permutation(n)
        ya = np.where(d_pop[order] > 0, 1.0, np.where(d_pop[order] < 0, 0.0, 1.0))
        yb = ya - d_pop[order]
        seq = [ids[i] for i in order]
        out = live_from_arrays(ids, None, ya, yb, seq, rule="anytime", a=a, floor="none")
        false_anytime += out["decision"] == "accept"
        for k in range(5, n + 1):  # the kernel live decisions call for a fixed-sample rule
            step = R.decide("bootstrap", ya[:k] - yb[:k], 0.0, a)
            if step.decision != R.DEFER:
                false_boot += step.decision == R.ACCEPT
                break
    assert false_anytime / paths <= a
    assert false_boot / paths > 2 * a


@pytest.mark.parametrize("resamples", ["exact", 200])
def test_bootstrap_verdict_equals_rules_decide(resamples: int | str) -> None:
    """Live composes the bootstrap kernels itself (the lattice is known); ``rules.decide``
    reaches the same verdict and tail on the same vector with the same generator."""
    from service.engine.live import _bootstrap_on_lattice

    rng = np.random.default_rng(9)
    for i in range(40):
        k = int(rng.integers(1, 120))
        lat = (1, 2, 3, 4)[i % 4]
        d = (rng.integers(0, lat + 1, k) - rng.integers(0, lat + 1, k)) / lat
        spec = make_live_spec(rule="bootstrap", delta=float(rng.choice([0, 5, -5])), bootstrap=resamples)
        got, stat = _bootstrap_on_lattice(spec, d, lat, np.random.default_rng([i, 1]))
        ref = R.decide("bootstrap", d, spec.theta, spec.a, resamples, n=200, rng=np.random.default_rng([i, 1]))
        assert got == ref.decision and stat["p_low"] == pytest.approx(ref.statistic["p_low"], abs=1e-11)


def test_memoised_pieces_equal_a_fresh_computation_and_are_not_shared_mutably() -> None:
    """The per-universe floor memo and the exact 0/1 verdict memo give what the kernels give
    on a first call, on every later call too, and hand out nothing a caller can corrupt."""
    from service.engine.coverage import FLOORS, required
    from service.engine.live import _bootstrap_on_lattice, _exact_binary_verdict

    rng = np.random.default_rng(4)
    groups = [f"g{int(g)}" for g in rng.integers(0, 5, 80)]
    u = make_universe([f"t{i}" for i in range(80)], groups)
    for floor in FLOORS:
        for k in (0, 1, 7, 40, 80, 7):
            got = u.required(floor, k)
            assert np.array_equal(got, required(floor, k, u.n_g)) and not got.flags.writeable
    _exact_binary_verdict.cache_clear()
    spec = make_live_spec(rule="bootstrap", delta=0)
    d = rng.integers(0, 2, 60) - rng.integers(0, 2, 60).astype(float)
    first = _bootstrap_on_lattice(spec, d, 1, None)
    first[1]["p_low"] = -1.0  # a caller changing its copy
    again = _bootstrap_on_lattice(spec, d, 1, None)
    assert _exact_binary_verdict.cache_info().hits == 1
    ref = R.decide("bootstrap", d, spec.theta, spec.a, "exact", n=200)
    assert again[0] == ref.decision and again[1]["p_low"] == pytest.approx(ref.statistic["p_low"], abs=1e-11)
