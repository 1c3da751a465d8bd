"""The betting ``anytime`` rule (engine/betting.py): a literal reference, validity when checked
after every task, tightness against the empirical-Bernstein baseline, and the confidence
sequence and intervals a live answer quotes (engine/answers.py)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from service.engine import answers
from service.engine import rules as R
from service.engine.betting import betting_paths, confidence_sequence
from service.engine.records import filter_systems, load_records
from tests.conftest import shared_dataset
from tests.engine import reference as ref

A = 0.05


def _first(path: list[str]) -> tuple[int, int]:
    for t, x in enumerate(path, start=1):
        if x != ref.DEFER:
            return {ref.ACCEPT: R.ACCEPT, ref.REJECT: R.REJECT}[x], t
    return R.DEFER, len(path) + 1


@pytest.mark.parametrize("compiled", [True, False])
def test_engine_equals_the_literal_reference(compiled: bool) -> None:
    rng = np.random.default_rng(8)
    for i in range(60):
        n = int(rng.integers(5, 120))
        lat = (1, 1, 2, 3)[i % 4]
        v = rng.integers(-lat, lat + 1, n) + (rng.random(n) < 0.3) * lat
        v = np.clip(v, -lat, lat)
        theta = float(rng.choice([0.0, 0.05, -0.1, 0.2]))
        dec, stop = betting_paths(v[None, :], lat, n, theta, A, n, compiled=compiled)
        want = _first(ref.betting_path(list(v / lat), ref.Cmp(theta * 100, lat == 1), A, n))
        assert (int(dec[0]), int(stop[0])) == want, i
        multi, mstop = betting_paths(v[None, :], lat, n, [theta, theta + 0.05], A, n, compiled=compiled)
        assert (multi[0, 0], mstop[0, 0]) == (dec[0], stop[0])


def _lite_pairs() -> tuple[list[np.ndarray], np.ndarray]:
    rec, _ = filter_systems(load_records(str(shared_dataset("swebench_lite"))), 0.95)
    diffs = []
    for a in range(rec.n_systems):
        for b in range(rec.n_systems):
            if a != b:
                t = rec.observed[a] & rec.observed[b]
                diffs.append(np.round(rec.y[a, t] - rec.y[b, t]).astype(np.int64))
    return diffs, np.array([d.sum() for d in diffs])


def test_every_close_pair_keeps_its_error_under_a_checked_after_every_task() -> None:
    """The 24 closest ordered pairs of SWE-bench Lite (Δ_full within 1.3 pp of δ = 0 but not
    0), 400 uniform orders each, decided after every task to the first conclusion: every
    pair's error is at most a (the bootstrap checked the same way is far above it, see
    test_live.py)."""
    diffs, sums = _lite_pairs()
    close = [i for i in np.argsort(np.abs(sums), kind="stable") if sums[i] != 0][:24]
    assert max(abs(sums[i]) for i in close) <= 4
    rng = np.random.default_rng(0)
    worst = 0.0
    for i in close:
        v = np.stack([diffs[i][rng.permutation(len(diffs[i]))] for _ in range(400)])
        dec, _ = betting_paths(v, 1, v.shape[1], 0.0, A, v.shape[1])
        wrong = R.REJECT if sums[i] > 0 else R.ACCEPT
        worst = max(worst, float(np.mean(dec == wrong)))
    assert worst <= A


@pytest.mark.parametrize("compiled", [True, False])
def test_tie_population_checked_after_every_task(compiled: bool) -> None:
    """Δ_full = 0 (1,000 tasks, 100 wins, 100 losses): false accepts <= a, checked after every
    task, by either walk."""
    pop = np.r_[np.ones(100), -np.ones(100), np.zeros(800)].astype(np.int64)
    rng = np.random.default_rng(3)
    v = np.stack([rng.permutation(pop) for _ in range(1000)])
    dec, stop = betting_paths(v, 1, 1000, 0.0, A, 1000, compiled=compiled)
    assert np.mean(dec == R.ACCEPT) <= A and np.all(stop <= 1000)  # the full task set always decides


def test_tighter_than_the_empirical_bernstein_baseline_on_lite() -> None:
    """Same orders, uniform, no coverage gating, budget 100 %: mean tasks used <= 0.85x the
    baseline's on a sample of Lite pairs, at δ = 0 and 5 (benchmarks/anytime_tightness.py
    has every pair)."""
    diffs, _ = _lite_pairs()
    rng = np.random.default_rng(1)
    pick = rng.choice(len(diffs), 40, replace=False)
    for theta in (0.0, 0.05):
        new = old = 0.0
        for i in pick:
            v = np.stack([diffs[i][rng.permutation(len(diffs[i]))] for _ in range(5)])
            n = v.shape[1]
            new += np.minimum(betting_paths(v, 1, n, theta, A, n)[1], n).mean()
            old += np.minimum(R.anytime_paths(v, 1, n, theta, A, n)[1], n).mean()
        assert new <= 0.85 * old, (theta, new / old)


def test_confidence_sequence_covers_at_the_stop_and_matches_the_decision() -> None:
    """At the stop (or at the end) the sequence holds the population's Δ in >= 1 - 2a of the
    runs, and it excludes θ = 0 exactly when the rule concluded before the end."""
    pop = np.r_[np.ones(40), -np.ones(25), np.zeros(135)].astype(np.int64)  # Δ = 0.075
    rng = np.random.default_rng(5)
    misses = 0
    runs = 150
    for _ in range(runs):
        v = rng.permutation(pop)
        dec, stop = betting_paths(v[None, :], 1, 200, 0.0, A, 200)
        t = int(min(stop[0], 200))
        lo, hi = confidence_sequence((v[:t] + 1.0) / 2.0, 200, A)
        lo, hi = 2 * lo - 1, 2 * hi - 1
        misses += not lo - 1e-9 <= 0.075 <= hi + 1e-9
        if dec[0] == R.ACCEPT and stop[0] < 200 and v[:t].sum() / 200 <= 0:  # decided on wealth, not certainty
            assert lo >= -1e-6
        if dec[0] == R.REJECT and stop[0] < 200:
            assert hi <= 1e-6
    assert misses / runs <= 2 * A


def test_fixed_sample_intervals_match_independent_formulas_and_the_decision() -> None:
    rng = np.random.default_rng(2)
    for _ in range(40):
        k = int(rng.integers(8, 150))
        d = (rng.integers(0, 2, k) - (rng.random(k) < 0.35)).astype(float)
        pn = answers.interval("paired_normal", d, 300, A, 1)
        se = d.std(ddof=1) / np.sqrt(k)
        assert pn["lower"] == pytest.approx(d.mean() - stats.norm.ppf(0.95) * se, abs=1e-9)
        decided = R.decide("paired_normal", d, 0.0, A).decision
        if abs(pn["lower"]) > 1e-6 and abs(pn["upper"]) > 1e-6:
            assert (decided == R.ACCEPT) == (pn["lower"] > 0) and (decided == R.REJECT) == (pn["upper"] < 0)
        mc = answers.interval("mcnemar", d, 300, A, 1)
        n_plus, n_minus = int((d > 0).sum()), int((d < 0).sum())
        if n_plus and n_minus:
            ci = stats.binomtest(n_plus, n_plus + n_minus).proportion_ci(1 - 2 * A, method="exact")
            disc = (n_plus + n_minus) / k
            assert mc["lower"] == pytest.approx((2 * ci.low - 1) * disc, abs=1e-9)
            assert mc["upper"] == pytest.approx((2 * ci.high - 1) * disc, abs=1e-9)
            assert (R.decide("mcnemar", d, 0.0, A).decision == R.ACCEPT) == (mc["lower"] > 0)
        boot = answers.interval("bootstrap", d, 300, A, 1)
        p_low = R.decide("bootstrap", d, 0.0, A).statistic["p_low"]
        if boot["lower"] > 0:
            assert p_low <= A + 1e-12
        if p_low < A - 1e-9 and d.mean() > 0:
            assert boot["lower"] >= 0


def test_forecast_is_seeded_and_tracks_the_effect() -> None:
    rng = np.random.default_rng(0)
    strong = np.r_[np.ones(12), np.zeros(4), -np.ones(2)]
    weak = np.r_[np.ones(6), np.zeros(8), -np.ones(4)]
    f = [answers.forecast("anytime", x, 400, 0.0, A, 1, 400, np.random.default_rng(7)) for x in (strong, weak)]
    assert f[0] == answers.forecast("anytime", strong, 400, 0.0, A, 1, 400, np.random.default_rng(7))
    assert f[0]["expected_more_tasks"] < f[1]["expected_more_tasks"] and f[0]["p10"] <= f[0]["median"] <= f[0]["p90"]
    fixed = answers.forecast("bootstrap", weak, 400, 0.0, A, 1, 400, rng, [(100, 0.01), (400, 0.04)])
    assert {fixed["p10"], fixed["median"], fixed["p90"]} <= {100 - 18, 400 - 18}


def test_coverage_gating_per_case_across_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Per-case coverage masks stay with their cases when the cases are split into blocks."""
    from service.engine import betting

    rng = np.random.default_rng(4)
    v = rng.integers(-1, 2, size=(30, 50)) + (rng.random((30, 50)) < 0.4)
    v = np.clip(v, -1, 1)
    cov = rng.random((30, 50)) < 0.7
    whole = betting_paths(v, 1, 50, 0.0, A, 50, cov, compiled=False)
    monkeypatch.setattr(betting, "_BLOCK", 50 * 7)  # blocks of 7 cases
    assert all(np.array_equal(x, y) for x, y in
               zip(whole, betting_paths(v, 1, 50, 0.0, A, 50, cov, compiled=False), strict=True))
    assert all(np.array_equal(x, y) for x, y in zip(whole, betting_paths(v, 1, 50, 0.0, A, 50, cov), strict=True))
    for c in range(30):
        one = betting_paths(v[c : c + 1], 1, 50, 0.0, A, 50, cov[c : c + 1])
        assert (one[0][0], one[1][0]) == (whole[0][c], whole[1][c])
