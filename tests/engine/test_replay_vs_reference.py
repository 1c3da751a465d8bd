"""The fast replay engine against the slow reference (tests/engine/reference.py).

Exact agreement wherever randomness is shared (the engine's task orders): forced, exact
bootstrap, paired_normal, mcnemar, serfling, anytime, coverage failure, cost and task
fractions, supports, per-pair shares and sufficiency. Finite-B bootstrap: the engine's
accept / reject counts against their exact expectation (sum over cases of
P(Bin(B, p_low) <= a·B)) within 5 standard deviations.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from service.engine.records import from_rows, load_records
from service.engine.replay import build_report, plan_replay, run_chunk
from service.engine.spec import NAMED_POLICIES, SpecError, make_spec
from tests.conftest import shared_dataset
from tests.engine import reference as ref

BUDGETS = (0.1, 0.25, 0.5, 0.75, 1.0)
CUSTOM = [
    {"order": "uniform", "rule": "anytime", "coverage": "no"},
    {"order": "stratified", "rule": "anytime_eb", "coverage": "yes"},
    {"order": "uniform", "rule": "serfling", "coverage": "yes"},
    {"order": "stratified", "rule": "paired_normal", "coverage": "no"},
    {"order": "neyman", "rule": "forced", "coverage": "no"},
    {"order": "cost_ascending", "rule": "bootstrap", "coverage": "yes"},
]


# --------------------------------------------------------------------------- synthetic data


def synth(seed: int, n_systems: int = 5, n_tasks: int = 40, n_groups: int = 4, trials=(1, 1), fraction_of: int = 0,
          missing: bool = False, costs: str = "all", twin: bool = True) -> list[dict]:
    """Small synthetic records. ``trials=(lo, hi)``: trials per (system, task) drawn in [lo, hi];
    ``fraction_of``: outcomes are passes out of that many attempts (fractional); ``missing``:
    two systems skip one task each (kept by the 0.95 filter at N=40), one skips 20 % (dropped);
    ``costs``: all / some (one system lacks some costs) / none; ``twin``: s1 copies s0 (a tie)."""
    rng = np.random.default_rng(seed)
    ability = np.sort(rng.normal(0, 1, n_systems))[::-1]
    difficulty = rng.normal(0, 1.2, n_tasks)
    sizes = np.maximum(1, rng.multinomial(n_tasks - n_groups, np.ones(n_groups) / n_groups) + 1)
    group = np.repeat(np.arange(n_groups), sizes)[:n_tasks]
    rng.shuffle(group)
    rows = []
    for s in range(n_systems):
        src = 0 if (twin and s == 1) else s
        skip: set[int] = set()
        if missing and s in (2, 3):
            skip = {int(rng.integers(0, n_tasks))}
        if missing and s == n_systems - 1:
            skip = set(rng.choice(n_tasks, size=n_tasks // 5, replace=False).tolist())
        srng = np.random.default_rng([seed, src])
        for t in range(n_tasks):
            p = 1 / (1 + math.exp(-(ability[src] - difficulty[t])))
            n_tr = int(srng.integers(trials[0], trials[1] + 1))
            for tr in range(n_tr):
                out = srng.binomial(fraction_of, p) / fraction_of if fraction_of else float(srng.random() < p)
                cost = float(np.round(srng.lognormal(0, 0.5), 3))
                if t in skip:
                    continue
                row = {"system": f"s{s}", "task_id": f"t{t:03d}", "trial": tr, "outcome": out,
                       "group": f"g{group[t]}", "difficulty": "hard" if difficulty[t] > 0 else "easy"}
                if costs == "all" or (costs == "some" and not (s == 2 and t % 7 == 0)):
                    row["cost"] = cost
                rows.append(row)
    return rows


# --------------------------------------------------------------------------- comparison


def _run(records, **opts):
    spec = make_spec(**opts)
    plan = plan_replay(records, spec)
    half = plan.n_pairs // 2
    chunks = [run_chunk(plan, 0, half), run_chunk(plan, half, plan.n_pairs)]
    return plan, build_report(plan, chunks)


def _applicable(plan, cfg) -> list[int]:
    out = []
    for p, (a, _b) in enumerate(plan.pairs):
        if cfg.policy.order == "cost_ascending":
            rp = ref.ref_pair(plan.records, a, _b)
            if any(math.isnan(c) for c in rp.cost_a):
                continue
        out.append(p)
    return out


def _close(x, y, rel=1e-9, abs_=1e-12) -> bool:
    if x is None or y is None:
        return x is None and y is None
    return math.isclose(float(x), float(y), rel_tol=rel, abs_tol=abs_)


def _check_setup(records, plan, report, orientation, min_cov=0.95):
    keep = ref.ref_filter(records, min_cov)
    assert list(plan.records.systems) == [records.systems[i] for i in keep]
    want = set(ref.ref_pairs(plan.records, orientation))
    want = {(a, b) for a, b in want if ref.ref_pair(plan.records, a, b).n > 0}
    assert set(plan.pairs) == want and len(plan.pairs) == len(want)
    assert report["pairs"]["ordered"] == len(want)
    assert report["pairs"]["unordered"] == len({frozenset(p) for p in want})
    for d in plan.spec.deltas:
        n_pos = sum(ref.ref_pair(plan.records, a, b).positive(d) for a, b in want)
        assert report["pairs"]["positive_by_delta"][f"{d:g}"] == n_pos
        assert report["pairs"]["negative_by_delta"][f"{d:g}"] == len(want) - n_pos


def _check_config(plan, report, c, seeds=1):
    cfg = plan.configs[c]
    conf = report["configurations"][c]
    assert conf["policy"]["name"] == cfg.policy.name and conf["delta"] == cfg.delta
    pairs = _applicable(plan, cfg)
    finite = cfg.policy.rule == "bootstrap" and cfg.bootstrap != "exact"
    per_seed = [ref.reference_config(plan, c, pair_indices=pairs, seed_index=s) for s in range(seeds)]
    reps = plan.spec.orders * seeds
    label = f"{cfg.policy.name} δ={cfg.delta} B={cfg.bootstrap} floor={cfg.floor} group={cfg.group}"
    rows = []
    for j, b in enumerate(plan.spec.budgets):
        got = conf["budgets"][j]
        res = ref.BudgetResult(b)
        for sr in per_seed:
            res.cases.extend(sr[j].cases)
            res.k_values.extend(sr[j].k_values)
        m = res.metrics()
        where = f"{label} budget={b}"
        assert got["cases"] == len(res.cases), where
        assert _close(got["k_mean"], sum(res.k_values) / len(res.k_values)), (where, got["k_mean"])
        assert got["n_positive"] == sum(x.positive for x in res.cases), where
        assert got["n_negative"] == sum(not x.positive for x in res.cases), where
        for key in ("task_fraction", "cost_fraction"):
            assert _close(got[key], m[key]), (where, key, got[key], m[key])
        if finite:
            e = res.expected()
            for key, name in (("accept", "accept"), ("reject", "reject")):
                tol = 5 * math.sqrt(e[f"{key}_var"]) + 1
                assert abs(got[name] - e[key]) <= tol, (where, key, got[name], e[key], tol)
            ncf = got["coverage_failure"] * got["cases"]
            assert abs(ncf - e["coverage_fail"]) <= 5 * math.sqrt(e["coverage_fail_var"]) + 1, (where, ncf, e)
            continue
        cnt = res.counts()
        assert (got["accept"], got["reject"], got["defer"]) == (cnt["accept"], cnt["reject"], cnt["defer"]), (
            where, got["accept"], got["reject"], got["defer"], cnt)
        for key in ref.METRICS:
            assert _close(got[key], m[key]), (where, key, got[key], m[key])
        if cfg.policy.rule in ("anytime", "anytime_eb"):
            assert _close(got["mean_tasks_used"], m["mean_tasks_used"]), (where, got["mean_tasks_used"], m)
        rows.append((b, m))
        if seeds > 1:
            for key, iv in got["seed_intervals"].items():
                vals = []
                for sr in per_seed:
                    vals.append(sr[j].metrics()[key])
                vals = [v for v in vals if v is not None]
                assert _close(iv["mean"], sum(vals) / len(vals)), (where, key, iv, vals)
                assert min(vals) - 1e-9 <= iv["low"] <= iv["high"] <= max(vals) + 1e-9
    if finite:
        return
    suff = ref.sufficiency(rows, plan.spec.alpha, plan.spec.gamma, plan.spec.eta)
    assert conf["minimum_sufficient_budget"] == suff["minimum_sufficient_budget"], label
    assert conf["error_coverage_budget"] == suff["error_coverage_budget"], label
    for got, want in zip(conf["budgets"], suff["budgets"], strict=True):
        assert got["sufficient"] == want["sufficient"], (label, got["budget"])
        assert sorted(got["misses"]) == sorted(want["misses"]), (label, got["budget"], got["misses"], want)
    # per-pair breakdown
    names = plan.records.systems
    assert len(conf["per_pair"]) == len(pairs), label
    for row, p in zip(conf["per_pair"], pairs, strict=True):
        a, b = plan.pairs[p]
        rp = ref.ref_pair(plan.records, a, b)
        assert (row["a"], row["b"], row["n_tasks"]) == (names[a], names[b], rp.n)
        assert _close(row["delta_full"], rp.delta_full, rel=1e-9, abs_=1e-12)
        assert row["full_decision"] == ("positive" if rp.positive(cfg.delta) else "negative")
        for j in range(len(plan.spec.budgets)):
            decs = [x for sr in per_seed for x in sr[j].per_pair[p]]
            for key in ("accept", "reject", "defer"):
                assert _close(row[key][j], decs.count(key) / reps), (label, names[a], names[b], j, key)


def _check_all(records, orientation="directed", seeds=1, **opts):
    plan, report = _run(records, orientation=orientation, seeds=seeds, **opts)
    _check_setup(records, plan, report, orientation, opts.get("min_task_coverage", 0.95))
    for c in range(len(plan.configs)):
        _check_config(plan, report, c, seeds=seeds)
    return plan, report


ALL_BUT_MCNEMAR = [n for n in NAMED_POLICIES if n != "coverage_mcnemar"]


@pytest.mark.parametrize("orientation", ["directed", "one_per_pair"])
def test_binary_single_trial_all_policies(orientation):
    records = from_rows(synth(1))
    assert records.binary_single_trial
    _check_all(records, orientation, policies=ALL_BUT_MCNEMAR + CUSTOM, deltas=[0, 5, 10, -5, 2.5], budgets=BUDGETS,
               orders=5, bootstrap=[200, "exact"], groups=["group"], seed=3)
    _check_all(records, orientation, policies=["coverage_mcnemar", "serfling_coverage"], deltas=[0],
               budgets=BUDGETS, orders=6, groups=["group"], a=[0.05, 0.2], seed=4)


def test_binary_other_floors_and_groupings():
    records = from_rows(synth(2, n_tasks=36, n_groups=6))
    _check_all(records, policies=["coverage_bootstrap", "stratified_forced", "anytime_coverage",
                                  "neyman_coverage_bootstrap", "coverage_paired_normal"],
               deltas=[0, 5], budgets=(0.05, 0.2, 0.45, 0.8), orders=4, bootstrap=["exact"],
               floors=["slack", "one_per_group", "none"], groups=["group", "group,difficulty", None], seed=5)


def test_multi_trial_missing_tasks_some_costs():
    records = from_rows(synth(3, trials=(1, 3), missing=True, costs="some"))
    assert not records.single_trial
    plan, _ = _check_all(records, policies=ALL_BUT_MCNEMAR + CUSTOM[:3], deltas=[0, 10], budgets=BUDGETS,
                         orders=4, bootstrap=[200, "exact"], groups=["group"], seed=6)
    assert len(plan.records.systems) == 4  # the system missing 20 % of tasks is filtered out
    assert len({len(plan.pair_tasks(p)) for p in range(plan.n_pairs)}) > 1  # task sets differ by pair
    with pytest.raises(SpecError):
        plan_replay(records, make_spec(policies=["coverage_mcnemar"], deltas=[0]))


@pytest.mark.parametrize("orientation", ["directed", "one_per_pair"])
def test_fractional_outcomes(orientation):
    records = from_rows(synth(4, fraction_of=5, costs="none"))
    assert not records.binary
    _check_all(records, orientation, policies=[n for n in ALL_BUT_MCNEMAR if n != "cost_forced"] + CUSTOM[:4],
               deltas=[0, 5], budgets=BUDGETS, orders=4, bootstrap=[200, "exact"], groups=["group"], seed=7)
    for bad in ("coverage_mcnemar", "cost_forced"):  # fractional outcomes; no costs at all
        with pytest.raises(SpecError):
            plan_replay(records, make_spec(policies=[bad], deltas=[0]))


def test_wide_lattice_fractions_of_seven_to_nine_trials():
    """Trials per case in {7, 8, 9}: differences on a lattice of step 1/504 (large integer sums)."""
    records = from_rows(synth(5, n_tasks=150, trials=(7, 9), costs="none"))
    _check_all(records, policies=["uniform_forced", "coverage_paired_normal", "serfling_coverage", "anytime_coverage",
                                  CUSTOM[2]], deltas=[0, 5], budgets=BUDGETS, orders=4, groups=["group"], seed=8)


def test_tiny_and_disjoint_task_sets():
    """Systems ran 1–5 of 8 tasks: pairs with N = 1, 2, ... and pairs with no common task."""
    rng = np.random.default_rng(3)
    rows = []
    for s in range(6):
        for t in sorted(rng.choice(8, size=int(rng.integers(1, 6)), replace=False).tolist()):
            rows.append({"system": f"s{s}", "task_id": f"t{t}", "outcome": int(rng.random() < 0.5),
                         "group": f"g{t % 3}", "cost": 1.0 + t})
    records = from_rows(rows)
    for orientation in ("directed", "one_per_pair"):
        plan, _ = _check_all(records, orientation, policies=list(NAMED_POLICIES), deltas=[0],
                             budgets=(0.05, 0.3, 0.5, 0.95, 1.0), orders=7, bootstrap=["exact", 50],
                             groups=["group"], seed=2, min_task_coverage=0.0)
        assert min(len(plan.pair_tasks(p)) for p in range(plan.n_pairs)) == 1


def test_seeds_pool_and_intervals():
    records = from_rows(synth(6, n_systems=4))
    _check_all(records, seeds=3, policies=["coverage_bootstrap", "anytime_coverage", "uniform_forced"],
               deltas=[0], budgets=(0.1, 0.5, 1.0), orders=3, bootstrap=["exact"], groups=["group"], seed=9)


def test_results_do_not_depend_on_chunking():
    records = from_rows(synth(7))
    spec = make_spec(policies=["coverage_bootstrap", "anytime_coverage", "neyman_coverage_bootstrap"], deltas=[0],
                     budgets=BUDGETS, orders=5, groups=["group"], seed=1)
    plan = plan_replay(records, spec)
    one = build_report(plan, [run_chunk(plan, 0, plan.n_pairs)])
    many = build_report(plan_replay(records, spec),
                        [run_chunk(plan, i, i + 1) for i in range(plan.n_pairs)][::-1])
    assert one == many


# --------------------------------------------------------------------------- real data


def _real(name: str, n_systems: int):
    records = load_records(str(shared_dataset(name)))
    idx = np.linspace(0, records.n_systems - 1, n_systems).round().astype(int)
    return records.subset_systems(sorted(set(idx.tolist())))


REAL_BUDGETS = (0.05, 0.25, 0.5, 0.95)


@pytest.mark.parametrize("orientation", ["directed", "one_per_pair"])
def test_real_swebench_lite_slice(orientation):
    records = _real("swebench_lite", 6)
    pols = [n for n in NAMED_POLICIES if n != "cost_forced"]
    _check_all(records, orientation, policies=pols, deltas=[0], budgets=REAL_BUDGETS, orders=3,
               bootstrap=["exact", 200], groups=["group"], seed=11)
    if orientation == "directed":
        _check_all(records, orientation, policies=["coverage_bootstrap", "anytime_coverage", "serfling_coverage"],
                   deltas=[5, 10], budgets=REAL_BUDGETS, orders=3, bootstrap=["exact"], groups=["group"], seed=12)


def test_real_terminal_bench_fractional_slice():
    records = _real("terminal_bench_1_fractional", 6)
    pols = [n for n in NAMED_POLICIES if n not in ("cost_forced", "coverage_mcnemar")]
    _check_all(records, policies=pols, deltas=[0, 5], budgets=REAL_BUDGETS, orders=3, bootstrap=["exact", 200],
               groups=["group"], seed=13)


def test_real_terminal_bench_per_trial_slice():
    records = _real("terminal_bench_core_0.1.1", 5)
    assert not records.single_trial
    pols = ["uniform_forced", "bootstrap", "coverage_bootstrap", "coverage_paired_normal", "serfling_coverage",
            "anytime_coverage", "neyman_coverage_bootstrap"]
    _check_all(records, policies=pols, deltas=[0, 10], budgets=REAL_BUDGETS, orders=3, bootstrap=["exact"],
               groups=["group"], seed=15)


def test_real_tau2_slice():
    """Systems cover different domains: pairs have different task sets T (some share none)."""
    records = _real("tau2_bench", 7)
    pols = [n for n in NAMED_POLICIES if n != "coverage_mcnemar" or records.binary_single_trial]
    for orientation in ("one_per_pair", "directed"):
        _check_all(records, orientation, policies=pols, deltas=[0], budgets=REAL_BUDGETS, orders=3,
                   bootstrap=["exact"], groups=["group"], seed=16, min_task_coverage=0.2)


def test_real_swebench_verified_with_costs():
    records = _real("swebench_verified_bash_only", 4)
    _check_all(records, policies=["cost_forced", "coverage_bootstrap", "anytime_coverage"], deltas=[0],
               budgets=REAL_BUDGETS, orders=2, bootstrap=["exact"], groups=["group"], seed=14)


# --------------------------------------------------------------------------- anytime under monitoring (issue item 9)


def _population(n_plus: int, n_minus: int, n: int):
    """Two systems on ``n`` tasks: A alone passes ``n_plus``, B alone ``n_minus``, the rest tie."""
    rows = []
    for t in range(n):
        a = int(t < n_plus)
        b = int(n_plus <= t < n_plus + n_minus)
        if t >= n_plus + n_minus and t % 2:
            a = b = 1
        rows.append({"system": "A", "task_id": f"t{t:03d}", "outcome": a, "group": f"g{t % 4}"})
        rows.append({"system": "B", "task_id": f"t{t:03d}", "outcome": b, "group": f"g{t % 4}"})
    return from_rows(rows)


def _monitored_fixed_sample(d_runs: np.ndarray, rule: str, a: float, rng: np.random.Generator, t0: int):
    """Check a fixed-sample rule after every task t >= t0 (θ = 0), stop at the first conclusion.
    Returns the decision per run (+1 accept, -1 reject, 0 none by t = N)."""
    runs, n = d_runs.shape
    out = np.zeros(runs, dtype=int)
    live = np.ones(runs, dtype=bool)
    s = np.cumsum(d_runs, axis=1)
    q = np.cumsum(d_runs * d_runs, axis=1)
    npl = np.cumsum(d_runs == 1, axis=1)
    nmi = np.cumsum(d_runs == -1, axis=1)
    for t in range(t0, n + 1):
        idx = np.flatnonzero(live)
        if not len(idx):
            break
        st, qt = s[idx, t - 1], q[idx, t - 1]
        up = st > 0
        if rule == "paired_normal":
            ss = qt - st * st / t
            with np.errstate(divide="ignore", invalid="ignore"):
                se = np.sqrt(np.maximum(ss, 0) / (t - 1)) / math.sqrt(t)
                p = 0.5 * np.array([math.erfc(x / math.sqrt(2)) for x in np.abs(st / t) / se])
            zero = ss <= 1e-12
            acc = np.where(zero, up, up & (p <= a))
            rej = np.where(zero, ~up, ~up & (p <= a))
        else:  # bootstrap(a, B=200), literal: the resample's counts of +1 / 0 / -1 are multinomial
            # a literal resample's counts: n+* ~ Bin(t, p+), then n-* ~ Bin(t - n+*, p- / (1 - p+))
            p_plus = (npl[idx, t - 1] / t)[:, None]
            p_minus = (nmi[idx, t - 1] / t)[:, None]
            c_plus = rng.binomial(t, np.broadcast_to(p_plus, (len(idx), 200)))
            p_cond = np.where(p_plus < 1, p_minus / np.where(p_plus < 1, 1 - p_plus, 1), 0.0)
            c_minus = rng.binomial(t - c_plus, np.broadcast_to(np.minimum(p_cond, 1.0), (len(idx), 200)))
            low = ((c_plus - c_minus) <= 0).sum(axis=1)
            acc = up & (low <= a * 200)
            rej = ~up & ((200 - low) <= a * 200)
        hit = acc | rej
        out[idx[hit]] = np.where(acc[hit], 1, -1)
        live[idx[hit]] = False
    return out


@pytest.mark.parametrize("n_plus,n_minus", [(40, 40), (41, 40)])
def test_anytime_error_stays_below_a_under_monitoring(n_plus, n_minus):
    """Checked after every task, stopping at the first conclusion (replay at budget 1.0 reports
    exactly that), with the true difference at / next to the threshold (the hardest case):
    anytime's wrong conclusions stay at or below a, while bootstrap(200) and paired_normal,
    monitored the same way (from the 10th task on), exceed a."""
    a = 0.05
    records = _population(n_plus, n_minus, 200)
    runs = 1500
    spec = make_spec(policies=[{"order": "uniform", "rule": "anytime", "coverage": "no"}, "anytime_coverage"],
                     deltas=[0], budgets=[1.0], orders=runs, groups=["group"], seed=21)
    plan = plan_replay(records, spec)
    report = build_report(plan, [run_chunk(plan, 0, plan.n_pairs)])
    cases = plan.n_pairs * runs
    bound = a + 4 * math.sqrt(a * (1 - a) / cases)
    for conf in report["configurations"]:
        b = conf["budgets"][0]
        assert b["defer_rate"] == 0.0  # at t = N the rule always concludes
        assert b["decision_error"] <= bound, (conf["policy"]["name"], b["decision_error"])
    # the same orders, monitored with the fixed-sample rules
    p = plan.pairs.index((0, 1))
    rp = ref.ref_pair(plan.records, 0, 1)
    orders = plan.case_order(p, 0, 0)
    d_runs = np.asarray(rp.diffs)[orders]
    truth = 1 if rp.positive(0) else -1
    rng = np.random.default_rng(22)
    fixed_runs = 400
    for rule in ("bootstrap", "paired_normal"):
        dec = _monitored_fixed_sample(d_runs[:fixed_runs], rule, a, rng, t0=10)
        err = float(np.mean(dec == -truth))
        assert err > a + 4 * math.sqrt(a * (1 - a) / fixed_runs), (rule, err)
    # the anytime reference, monitored from t = 1 on the same orders, agrees run by run
    any_dec = []
    for o in orders[:60]:
        path = ref.anytime_path([rp.diffs[i] for i in o], rp.cmp(0), a, rp.n)
        any_dec.append(next(x for x in path if x != "defer"))
    assert _engine_first_decisions(plan, p)[:60] == any_dec


def _engine_first_decisions(plan, p):
    """Per-run first conclusions of the engine's anytime kernel on the plan's own orders."""
    from service.engine import rules as R

    orders = plan.case_order(p, 0, 0)
    v = plan.pair_values(p)[orders].astype(np.int64)
    dec, _stop = R.anytime_paths(v, plan.lattice or 1, len(plan.pair_tasks(p)), 0.0, 0.05, v.shape[1])
    return ["accept" if x == R.ACCEPT else "reject" if x == R.REJECT else "defer" for x in dec]


@pytest.mark.parametrize("n_plus,n_minus", [(60, 20), (50, 30), (20, 60)])
def test_anytime_betting_is_tighter_than_stitched_serfling(n_plus, n_minus):
    """Same orders: the betting confidence sequence stops earlier on average than the
    union-bound baseline (Serfling at level a·6/(π² t²) at step t), and both stay correct."""
    a = 0.05
    records = _population(n_plus, n_minus, 200)
    runs = 400
    spec = make_spec(policies=[{"order": "uniform", "rule": "anytime", "coverage": "no"}], deltas=[0],
                     budgets=[1.0], orders=runs, seed=23)
    plan = plan_replay(records, spec)
    report = build_report(plan, [run_chunk(plan, 0, plan.n_pairs)])
    b = report["configurations"][0]["budgets"][0]
    anytime_mean = b["mean_tasks_used"]
    stops, errors = [], 0
    for p in range(plan.n_pairs):
        rp = ref.ref_pair(plan.records, *plan.pairs[p])
        truth = "accept" if rp.positive(0) else "reject"
        for o in plan.case_order(p, 0, 0):
            path = ref.serfling_stitched_path([rp.diffs[i] for i in o], rp.cmp(0), a, rp.n)
            t, x = next(((i + 1, x) for i, x in enumerate(path) if x != "defer"), (rp.n, "defer"))
            stops.append(t)
            errors += x not in ("defer", truth)
    baseline_mean = float(np.mean(stops))
    assert errors == 0 and b["decision_error"] == 0.0
    assert anytime_mean < 0.9 * baseline_mean, (anytime_mean, baseline_mean)


# --------------------------------------------------------------------------- fractional outcomes off a small lattice


def _off_lattice_rows(kind: str) -> list[dict]:
    """Partial-credit scores with 4 decimals, or binary trials whose count per case varies in
    1..10 (per-case means on a lattice of step 1/2520)."""
    rng = np.random.default_rng(31)
    rows = []
    for s in range(3):
        for t in range(30):
            p = float(rng.random())
            if kind == "four_decimals":
                rows.append({"system": f"s{s}", "task_id": f"t{t:02d}", "outcome": round(p, 4), "group": f"g{t % 3}"})
            else:
                for tr in range(1 + (3 * s + t) % 10):
                    rows.append({"system": f"s{s}", "task_id": f"t{t:02d}", "trial": tr,
                                 "outcome": float(rng.random() < p), "group": f"g{t % 3}"})
    return rows


@pytest.mark.parametrize("kind", ["four_decimals", "trials_1_to_10"])
def test_off_lattice_fractional_outcomes_work_everywhere(kind):
    """Issue item 7: fractional and multi-trial outcomes work everywhere; only mcnemar may
    refuse. anytime is defined on any X in [0, 1] (docs/engine-api.md), bootstrap(B) by
    literal resampling."""
    records = from_rows(_off_lattice_rows(kind))
    _check_all(records, policies=["anytime_coverage", CUSTOM[0], "uniform_forced", "coverage_paired_normal",
                                  "serfling_coverage"], deltas=[0, 5], budgets=BUDGETS, orders=4, groups=["group"],
               seed=32)
    reps = 20
    plan, report = _run(records, policies=["coverage_bootstrap", "bootstrap"], deltas=[0], budgets=BUDGETS,
                        orders=reps, bootstrap=[200], groups=["group"], seed=33)
    rng = np.random.default_rng(34)
    for c, conf in enumerate(report["configurations"]):
        lit = ref.reference_config(plan, c, rng=rng)
        for key in ("accept", "reject"):
            eng = sum(b[key] for b in conf["budgets"])
            want = sum(r.counts()[key] for r in lit)
            n = sum(b["cases"] for b in conf["budgets"])
            p = (eng + want) / (2 * n)
            assert abs(eng - want) <= 5 * math.sqrt(2 * n * p * (1 - p)) + 2, (conf["policy"]["name"], key, eng, want)


def test_fractional_results_do_not_depend_on_chunking():
    """The staged lattice bootstrap decides each case from that case alone."""
    records = from_rows(synth(8, fraction_of=5, costs="none"))
    spec = make_spec(policies=["coverage_bootstrap", "bootstrap"], deltas=[0, 5], budgets=BUDGETS, orders=6,
                     bootstrap=[200, "exact"], a=[0.05, 0.2], groups=["group"], seed=2)
    plan = plan_replay(records, spec)
    one = build_report(plan, [run_chunk(plan, 0, plan.n_pairs)])
    many = build_report(plan_replay(records, spec), [run_chunk(plan, i, i + 1) for i in range(plan.n_pairs)][::-1])
    assert one == many
