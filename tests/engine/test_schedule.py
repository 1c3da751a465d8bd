"""Schedules that spend a over their checkpoints (SPEC §4.4): spending functions against
their formulas, input checks, and the overall error on a tie population with many looks."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from service.engine import rules as R
from service.engine import schedule as S
from service.engine.coverage import budget_k, meets
from service.engine.errors import FieldError

A = 0.05
N = 1000
FRACTIONS = [round(0.02 * i, 2) for i in range(1, 26)] + [1.0]
KS = [budget_k(b, N) for b in FRACTIONS]


def test_spending_functions_match_their_formulas() -> None:
    t = np.array([0.1, 0.25, 0.5, 0.9, 1.0])
    z = stats.norm.ppf(1 - A / 2)
    of = [2 - 2 * stats.norm.cdf(z / math.sqrt(x)) for x in t]
    assert S.spent(t, A, "obrien_fleming") == pytest.approx(of, rel=1e-12)
    assert S.spent(t, A, "pocock") == pytest.approx([A * math.log(1 + (math.e - 1) * x) for x in t], rel=1e-12)
    for spending in ("obrien_fleming", "pocock"):
        lv = S.levels(KS, A, spending)
        assert lv.sum() == pytest.approx(A, abs=1e-15) and np.all(lv > 0)
        cum = np.cumsum(lv)
        assert cum[:-1] == pytest.approx(S.spent(np.array(KS[:-1]) / KS[-1], A, spending), rel=1e-9)
    assert S.levels(KS, A, "none").tolist() == [A] * len(KS)
    assert S.levels([7], A, "obrien_fleming").tolist() == [A]  # one checkpoint: the fixed-sample test


def test_bad_schedules_name_the_field() -> None:
    with pytest.raises(FieldError) as e:
        S.check_spending("bonferroni", "bootstrap")
    assert e.value.field == "spending" and "obrien_fleming" in e.value.message
    with pytest.raises(FieldError) as e:
        S.check_spending("pocock", "anytime")
    assert e.value.field == "spending"
    for bad, field in (
        ([0.5, 0.25], "checkpoints[1]"),
        ([0.5, 0.5], "checkpoints[1]"),
        ([0.0, 0.5], "checkpoints[0]"),
        ([0.5, 1.5], "checkpoints[1]"),
        ([float("nan")], "checkpoints[0]"),
        ([], "checkpoints"),
        ([0.2, True], "checkpoints[1]"),
    ):
        with pytest.raises(FieldError) as e:
            S.check_checkpoints(bad)
        assert e.value.field == field, bad
    assert S.check_checkpoints([0.1, 0.5, 1]) == (0.1, 0.5, 1.0)


def _population(wins: int, losses: int) -> np.ndarray:
    return np.r_[np.ones(wins), -np.ones(losses), np.zeros(N - wins - losses)].astype(np.int64)


def _orders(pop: np.ndarray, reps: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.stack([rng.permutation(pop) for _ in range(reps)])


@pytest.mark.parametrize("rule", ["bootstrap", "paired_normal"])
def test_spending_keeps_the_error_under_a_with_26_checkpoints_and_none_does_not(rule: str) -> None:
    """Tie population (Δ_full = 0 at δ = 0: every accept is false), 26 checkpoints, 2,000
    random orders: consulting the rule at a at each checkpoint accepts far more often than
    a; spending a (O'Brien-Fleming, Pocock) keeps it under a."""
    v = _orders(_population(100, 100), 2000, 1)
    rates = {}
    for spending in S.SPENDINGS:
        dec, stop = S.scheduled_paths(rule, v, 1, KS, S.levels(KS, A, spending), 0.0, N)
        rates[spending] = float(np.mean(dec == R.ACCEPT))
        assert set(np.unique(stop)) <= {*KS, KS[-1] + 1}
    assert rates["none"] > 1.5 * A, rates
    assert rates["obrien_fleming"] <= A and rates["pocock"] <= A, rates


def test_spending_keeps_the_error_under_a_when_accepting_is_wrong_by_a_margin() -> None:
    """Δ_full = -2 pp (90 wins, 110 losses), Pocock (which spends early): false accepts stay
    under a for both rules, and under the level-a-everywhere schedule's."""
    v = _orders(_population(90, 110), 2000, 2)
    for rule in ("bootstrap", "paired_normal"):
        spent = S.scheduled_paths(rule, v, 1, KS, S.levels(KS, A, "pocock"), 0.0, N)[0]
        plain = S.scheduled_paths(rule, v, 1, KS, S.levels(KS, A, "none"), 0.0, N)[0]
        assert np.mean(spent == R.ACCEPT) <= min(A, np.mean(plain == R.ACCEPT))


def _guarded_decide(rule: str, d: np.ndarray, level: float, n: int) -> int:
    """schedule.GUARD, independently: the rule on the observed tasks plus one task at the far
    end against the conclusion the observed mean points to."""
    if rule in ("serfling", "mcnemar"):
        return R.decide(rule, d, 0.0, level, n=n).decision
    if d.sum() > 0:
        return R.ACCEPT if R.decide(rule, np.r_[d, -1.0], 0.0, level, n=n).decision == R.ACCEPT else R.DEFER
    return R.REJECT if R.decide(rule, np.r_[d, 1.0], 0.0, level, n=n).decision == R.REJECT else R.DEFER


def test_scheduled_paths_equal_the_guarded_rule_at_each_checkpoint() -> None:
    """The vectorised schedule equals ``rules.decide`` called checkpoint by checkpoint on the
    observed tasks and the guard task (``schedule.GUARD``)."""
    rng = np.random.default_rng(3)
    ks, lv = [5, 12, 30, 60], S.levels([5, 12, 30, 60], A, "pocock")
    for rule in ("bootstrap", "paired_normal", "serfling", "mcnemar"):
        v = rng.integers(-1, 2, size=(60, 60))
        v[:, :8] = np.where(rng.random((60, 8)) < 0.5, 1, v[:, :8])  # some early conclusions
        dec, stop = S.scheduled_paths(rule, v, 1, ks, lv, 0.0, 60)
        concluded = 0
        for c in range(len(v)):
            want, at = R.DEFER, 61
            for k, level in zip(ks, lv, strict=True):
                got = _guarded_decide(rule, v[c, :k].astype(float), level, 60)
                if got != R.DEFER:
                    want, at = got, k
                    break
            assert (dec[c], stop[c]) == (want, at), (rule, c)
            concluded += want != R.DEFER
        assert concluded >= 5, rule


def test_the_guard_stops_degenerate_early_rejects() -> None:
    """A pair A wins by 2 pp with sparse discordance (30 wins, 10 losses in 1,000): without the
    guard the bootstrap at a tiny early level rejects whenever the first tasks hold no win
    (a tail of exactly 0); with it, wrong rejects stay under a for the whole schedule."""
    v = _orders(_population(30, 10), 1000, 6)
    dec, _ = S.scheduled_paths("bootstrap", v, 1, KS, S.levels(KS, A, "obrien_fleming"), 0.0, N)
    assert np.mean(dec == R.REJECT) <= A
    unguarded = 0
    for row in v[:200]:  # the plain rule at the first checkpoint's level (about 1e-43)
        unguarded += R.decide("bootstrap", row[: KS[0]].astype(float), 0.0, 1e-40).decision == R.REJECT
    assert unguarded / 200 > 4 * A


def test_replay_with_a_schedule_ends_each_case_at_its_first_conclusive_checkpoint() -> None:
    """Replay of scheduled policies against a direct loop over the plan's own case orders:
    accept / reject / defer counts and mean tasks used at every budget."""
    from service.engine.records import parse_records
    from service.engine.replay import plan_replay, run_replay
    from service.engine.spec import make_spec
    from service.engine.synth import generate, to_csv

    records = parse_records(to_csv(generate(n_systems=4, n_tasks=60, n_groups=3, seed=3)).encode(), "csv")
    spec = make_spec(
        policies=[
            {"order": "uniform", "rule": "serfling", "coverage": "no"},
            {"order": "stratified", "rule": "bootstrap", "coverage": "yes"},
            "anytime_coverage",
        ],
        orders=6,
        budgets=[0.2, 0.5, 1.0],
        bootstrap=["exact"],
        groups=["group"],
        deltas=[0.0],
        checkpoints=[0.1, 0.3, 0.6, 1.0],
        spending="pocock",
    )
    plan = plan_replay(records, spec)
    report = run_replay(records, spec)
    for c, cfg in enumerate(plan.configs):
        if cfg.policy.checkpoints is None:
            assert cfg.policy.rule == "anytime"
            continue
        conf = report["configurations"][c]
        for j, budget in enumerate(conf["budgets"]):
            counts = {R.ACCEPT: 0, R.REJECT: 0, R.DEFER: 0}
            used = 0
            for p in range(plan.n_pairs):
                n = len(plan.pair_tasks(p))
                lab = plan.labels(p, cfg.group)
                cks = sorted({max(1, budget_k(f, n)) for f in cfg.policy.checkpoints})
                lvls = S.levels(cks, cfg.a, "pocock")
                k = budget_k(spec.budgets[j], n)
                for r in range(spec.orders):
                    order = plan.case_order(p, 0, c)[r]
                    d = plan.pair_values(p)[order].astype(float) / plan.lattice
                    got, stop = R.DEFER, k
                    for kj, level in zip(cks, lvls, strict=True):
                        if kj > k:
                            break
                        sizes = np.bincount(lab, minlength=lab.max() + 1)
                        ok = meets(cfg.floor, kj, sizes, np.bincount(lab[order[:kj]], minlength=len(sizes)))
                        verdict = _guarded_decide(cfg.policy.rule, d[:kj], level, n)
                        if verdict != R.DEFER and (ok or not cfg.policy.coverage_aware):
                            got, stop = verdict, kj
                            break
                    counts[got] += 1
                    used += stop
            assert (budget["accept"], budget["reject"], budget["defer"]) == (
                counts[R.ACCEPT],
                counts[R.REJECT],
                counts[R.DEFER],
            ), (cfg.policy.name, j)
            assert budget["mean_tasks_used"] == pytest.approx(used / (plan.n_pairs * spec.orders), rel=1e-9)


@pytest.mark.parametrize("hist_bytes", [S._HIST_BYTES, 0])
def test_scheduled_paths_on_a_lattice_equal_the_guarded_rule_at_each_checkpoint(hist_bytes, monkeypatch) -> None:
    """Several trials per task (values on a lattice of step 1/2 and 1/5; the guard task is a
    whole ±1): every checkpoint's sums and histograms, advanced along the paths
    (``schedule._Running``; with no room for the histograms, counted at each checkpoint), give
    what ``rules.decide`` gives on the observed tasks and the guard, for every rule that takes
    such records (McNemar's is for 0/1 records alone)."""
    monkeypatch.setattr(S, "_HIST_BYTES", hist_bytes)
    rng = np.random.default_rng(11)
    ks, lv = [4, 10, 25, 50], S.levels([4, 10, 25, 50], A, "obrien_fleming")
    for lattice in (2, 5):
        for rule in ("bootstrap", "paired_normal", "serfling"):
            v = rng.integers(-lattice, lattice + 1, size=(50, 50))
            v[:, :10] = np.where(rng.random((50, 10)) < 0.5, lattice, v[:, :10])  # some early conclusions
            dec, stop = S.scheduled_paths(rule, v, lattice, ks, lv, 0.0, 50)
            concluded = 0
            for c in range(len(v)):
                want, at = R.DEFER, 51
                for k, level in zip(ks, lv, strict=True):
                    got = _guarded_decide(rule, v[c, :k] / lattice, level, 50)
                    if got != R.DEFER:
                        want, at = got, k
                        break
                assert (dec[c], stop[c]) == (want, at), (lattice, rule, c)
                concluded += want != R.DEFER
            assert concluded >= 5, (lattice, rule)


@pytest.mark.parametrize("resamples", ["exact", 200])
def test_staged_lattice_verdicts_equal_the_exact_tail(resamples) -> None:
    """A scheduled bootstrap on a lattice brackets each row's tail in stages and computes it
    exactly only where the bracket straddles the level (``schedule._staged``): the verdicts
    equal those of every row's exact tail (``rules.tail_lattice``), for the exact rule and a
    finite B drawn from the same uniforms; from ``part`` or from histograms kept along the
    paths (``_Running``), the same."""
    rng = np.random.default_rng(21)
    decided = 0
    for trial in range(12):
        lattice = (2, 3, 5)[trial % 3]
        k = int(rng.integers(3, 60))
        p = rng.dirichlet(np.ones(2 * lattice + 1) * 0.6)
        part = rng.choice(np.arange(-lattice, lattice + 1), size=(400, k), p=p).astype(np.float64)
        theta, level = float(rng.choice([0.0, 0.05, -0.05])), float(rng.choice([0.05, 0.01, 0.2]))
        u = rng.random(400)
        s = part.sum(axis=1)
        got = S._bootstrap_exact(part, s, k, theta, level, lattice, resamples, u)
        full = np.stack([np.bincount((row + lattice).astype(int), minlength=2 * lattice + 1) for row in part])
        assert np.array_equal(got, S._bootstrap_exact(None, s, k, theta, level, lattice, resamples, u, None, full))
        kk = np.full(400, k)
        pos = R.above(s, kk, theta, lattice)
        vals = np.union1d(np.unique(part).astype(np.int64), [-lattice, lattice])
        hist = (part[:, :, None] == vals[None, None, :]).sum(axis=1)
        hist[:, 0] += pos
        hist[:, -1] += ~pos
        tail = R.tail_lattice(hist, vals, R.bootstrap_threshold(theta, kk + 1, lattice))
        want = R.bootstrap_from_tail(tail, pos, level, resamples, u)
        assert np.array_equal(got, want), (trial, np.flatnonzero(got != want)[:5])
        decided += int((want != R.DEFER).sum())
    assert decided > 500


def test_row_laws_are_each_rows_own() -> None:
    """``schedule._RowLaws`` (the rows' laws for the staged brackets): each row's count, sum,
    sum of squares and least and largest present value, exactly."""
    rng = np.random.default_rng(5)
    vals = np.array([-5, -3, -1, 0, 2, 5])
    hist = rng.integers(0, 4, size=(300, len(vals))) * (rng.random((300, len(vals))) < 0.6)
    hist[:, 3] += 1  # no empty row
    laws = S._RowLaws(hist, vals)
    for r in range(300):
        seen = np.repeat(vals, hist[r])
        assert (laws.k[r], laws.s[r], laws.q[r]) == (len(seen), seen.sum(), (seen * seen).sum())
        assert (laws.vlo[r], laws.vhi[r]) == (seen.min(), seen.max())
    assert np.array_equal(laws.law, np.arange(300)) and np.all(laws.mirror == -1) and not laws.flip.any()


@pytest.mark.parametrize("lattice", [1, 5])
@pytest.mark.parametrize("rule", ["bootstrap", "paired_normal", "serfling"])
def test_paths_decided_a_slice_at_a_time_decide_as_in_one_piece(rule: str, lattice: int, monkeypatch) -> None:
    """``scheduled_paths`` decides many paths a slice at a time (``slice_rows``): each slice
    reads its own rows' coverage and uniforms, so the verdicts and stops are those of one piece."""
    rng = np.random.default_rng(31)
    ks = [5, 12, 30, 60]
    lv = S.levels(ks, A, "pocock")
    v = rng.integers(-lattice, lattice + 1, size=(700, 60))
    v[:, :12] = np.where(rng.random((700, 12)) < 0.4, lattice, v[:, :12])  # some early conclusions
    cov_ok = rng.random((700, len(ks))) < 0.8
    u = rng.random((700, len(ks)))
    resamples = 200 if rule == "bootstrap" else "exact"
    whole = S.scheduled_paths(rule, v, lattice, ks, lv, 0.0, 60, cov_ok, resamples, u)
    monkeypatch.setattr(S, "SLICE_ELEMENTS", 60 * 64)  # slices of 64 paths, the last of 60
    assert S.slice_rows(60, rule, lattice) == 64
    sliced = S.scheduled_paths(rule, v, lattice, ks, lv, 0.0, 60, cov_ok, resamples, u)
    assert np.array_equal(whole[0], sliced[0]) and np.array_equal(whole[1], sliced[1])
    assert 50 < int((whole[0] != R.DEFER).sum()) < 650 and len(np.unique(whole[1])) >= 3


def test_a_fine_lattice_keeps_its_histograms_within_bounds() -> None:
    """A bootstrap on a lattice of step 1/100 keeps each path's histogram over 201 values. On
    60,000 paths that was 96 MB, too much to keep: each checkpoint then compared every value of
    every prefix with every value (948 MB on this case, and 8.0 s against 4.5). Slices of ``_HIST_BYTES`` keep
    the peak near the paths' float64 copy, a few times ``_HIST_BYTES`` and what the exact
    tails' memos may keep (``arraycache``)."""
    import tracemalloc

    from service.engine.arraycache import bound_total

    rng = np.random.default_rng(41)
    lattice, ks = 100, [15, 30, 45, 60]
    v = rng.integers(-lattice, lattice + 1, size=(60_000, 60))
    assert S.slice_rows(60, "bootstrap", lattice) < 60_000
    tracemalloc.start()
    try:
        dec, _ = S.scheduled_paths("bootstrap", v, lattice, ks, S.levels(ks, A, "obrien_fleming"), 0.0, 60)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak <= 8 * v.size + 6 * S._HIST_BYTES + bound_total(), peak / 1e6
    assert (dec != R.DEFER).any()


def test_coverage_counts_at_checkpoints_equal_a_running_one_hot(monkeypatch) -> None:
    """``chunk._counts_at`` counts each order's tasks per group segment by segment, a few
    orders at a time: the same counts as a one-hot of every step summed along the order."""
    from service.engine import chunk

    rng = np.random.default_rng(51)
    lab = rng.integers(0, 4, size=90)
    order = np.stack([rng.permutation(90) for _ in range(37)])
    cks = [1, 7, 30, 31, 90]
    want = np.cumsum(np.eye(4, dtype=np.int64)[lab[order]], axis=1)[:, np.array(cks) - 1]
    assert np.array_equal(chunk._counts_at(lab, order, cks, 4), want)
    monkeypatch.setattr(chunk, "_COUNT_ELEMENTS", 200)  # two orders at a time, the last alone
    assert np.array_equal(chunk._counts_at(lab, order, cks, 4), want)
    assert np.array_equal(chunk._counts_at(lab, order, [90], 5)[:, 0, :4], np.tile(np.bincount(lab), (37, 1)))


@pytest.mark.parametrize("checkpoints", ["0.0000001:1:0.0000001", "0.5:1:1e-300", "0.1,0.2:1:0.001",
                                         [i / 1000 for i in range(1, 1001)]])
def test_a_schedule_s_checkpoints_are_counted_before_a_range_is_made(checkpoints) -> None:
    """A range is refused from its arithmetic (``0.5:1:1e-300`` would be 5e299 floats), at the
    top level and in a policy of its own, and so is a list of more than the limit."""
    from service.engine.spec import MAX_SCHEDULE_CHECKPOINTS, SpecError, make_spec

    for options in ({"policies": ["bootstrap"], "checkpoints": checkpoints},
                    {"policies": [{"name": "mine", "order": "uniform", "rule": "bootstrap",
                                   "checkpoints": checkpoints}]}):
        with pytest.raises(SpecError) as exc:  # (before: 48 s and 830 MB, or all the memory)
            make_spec(**options)
        assert exc.value.field in ("checkpoints", "policies")  # the policy's own field, in its own form
        assert exc.value.message.endswith(f"checkpoints; the limit is {MAX_SCHEDULE_CHECKPOINTS}")
    assert len(make_spec(policies=["bootstrap"], checkpoints="0.005:1:0.005").policies[0].checkpoints) == 200
