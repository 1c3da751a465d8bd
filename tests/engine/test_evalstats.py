"""Evaluation statistics (SPEC §8): worked values, brute force, simulations, real data."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from service.engine import evalstats as E
from service.engine import intervals, passk, samplesize, statbase
from service.engine.records import from_rows, load_records
from tests.conftest import shared_dataset

# --------------------------------------------------------------------------- SPEC §8 worked values


def test_spec_pass_at_k_and_pass_hat_k_worked_check():
    assert passk.pass_at_k(5, 2, 2) == pytest.approx(0.70, abs=1e-12)
    assert passk.pass_hat_k(5, 2, 2) == pytest.approx(0.10, abs=1e-12)


def test_spec_zero_failure_bounds_and_runs():
    assert round(100 * intervals.binomial_bounds(20, 20).failure_upper, 2) == 13.91
    assert round(100 * intervals.binomial_bounds(2, 2).success_lower, 2) == 22.36
    assert samplesize.runs_for_bound(0.05) == 59
    assert intervals.binomial_bounds(58, 58).failure_upper > 0.05 >= intervals.binomial_bounds(59, 59).failure_upper


def test_spec_margins_and_task_counts():
    assert round(100 * samplesize.margin_of_error(200.5), 2) == 6.92
    assert round(100 * samplesize.margin_of_error(914), 2) == 3.24
    assert [samplesize.tasks_for_margin(m) for m in (0.05, 0.03, 0.02, 0.01)] == [385, 1068, 2401, 9604]


def test_spec_minimum_significant_gaps():
    gap = samplesize.min_significant_gap(200)
    assert round(100 * gap.unpaired, 1) == 9.8 and gap.paired == gap.unpaired
    assert round(100 * samplesize.min_significant_gap(200, rho=0.5).paired, 1) == 6.9


# --------------------------------------------------------------------------- pass@k / pass^k


def test_pass_k_against_enumeration_of_trial_subsets():
    for n in range(1, 8):
        for c in range(n + 1):
            trials = [1] * c + [0] * (n - c)
            for k in range(1, n + 1):
                subsets = list(itertools.combinations(trials, k))
                any_pass = sum(max(s) for s in subsets) / len(subsets)
                all_pass = sum(min(s) for s in subsets) / len(subsets)
                assert passk.pass_at_k(n, c, k) == pytest.approx(any_pass, abs=1e-12)
                assert passk.pass_hat_k(n, c, k) == pytest.approx(all_pass, abs=1e-12)


def test_subset_max_min_fractional_against_enumeration():
    rng = np.random.default_rng(3)
    x = rng.random((4, 6)).round(2)
    x[0, :3] = 0.5  # ties
    emax, emin = passk.subset_max_min(x)
    for row in range(4):
        for k in range(1, 7):
            subs = list(itertools.combinations(x[row], k))
            assert emax[row, k - 1] == pytest.approx(np.mean([max(s) for s in subs]), abs=1e-12)
            assert emin[row, k - 1] == pytest.approx(np.mean([min(s) for s in subs]), abs=1e-12)


def test_subset_weights_equal_the_exact_integer_ratios():
    """``passk._max_weights`` (a running product from the largest statistic down, a block of
    statistics at a time) against ``C(i-1, k-1) / C(n, k)`` in exact integers, for every k
    and order statistic."""
    for n, cols in ((1, 1), (2, 1), (5, 5), (8, 3), (60, 7), (300, 300), (300, 41)):
        w = np.zeros((n, n))
        for lo, hi, block in passk._max_weights(n, n, cols):
            assert hi - lo <= cols
            w[:, lo:hi] = block
        for k in range(1, n + 1):
            total = math.comb(n, k)
            want = [math.comb(i - 1, k - 1) / total for i in range(1, n + 1)]
            assert w[k - 1] == pytest.approx(want, rel=n * 1.2e-16, abs=1e-300), (n, k)
            assert w[k - 1].sum() == pytest.approx(1.0, abs=1e-13)


def test_subset_max_min_in_column_blocks_and_up_to_kmax(monkeypatch):
    """Weights a block of order statistics at a time (``_WEIGHT_CELLS``) and only up to
    ``kmax``: the same estimates as all at once."""
    rng = np.random.default_rng(8)
    x = rng.random((5, 240)).round(1)
    emax, emin = passk.subset_max_min(x)
    monkeypatch.setattr(passk, "_WEIGHT_CELLS", 7 * 30)  # blocks of 7 statistics for k <= 30
    bmax, bmin = passk.subset_max_min(x, 30)
    assert bmax.shape == (5, 30)
    assert bmax == pytest.approx(emax[:, :30], rel=1e-13) and bmin == pytest.approx(emin[:, :30], rel=1e-13)
    assert emax[:, 0] == pytest.approx(x.mean(axis=1)) and emax[:, -1] == pytest.approx(x.max(axis=1))
    assert emin[:, -1] == pytest.approx(x.min(axis=1))


def test_pass_k_curve_of_many_trials_stops_at_pass_k_max():
    """A task of 3,000 trials: the curve stops at ``PASS_K_MAX`` (the exact weights of every
    k were 9 M Python integers and two 72 MB matrices), each value SPEC §8's formula."""
    rng = np.random.default_rng(9)
    outs = {"t1": (rng.random(3000) < 0.3).astype(int).tolist(), "t2": (rng.random(40) < 0.6).astype(int).tolist()}
    rec = from_rows(_rows({"A": outs, "B": {"t1": [1], "t2": [0]}}))
    curve = passk.pass_k_curve(rec, "A")
    assert [p.k for p in curve] == list(range(1, passk.PASS_K_MAX + 1))
    for p in curve[::9]:
        tasks = [t for t in outs.values() if len(t) >= p.k]
        assert p.pass_at_k == pytest.approx(np.mean([passk.pass_at_k(len(t), sum(t), p.k) for t in tasks]), rel=1e-11)
        assert p.pass_hat_k == pytest.approx(np.mean([passk.pass_hat_k(len(t), sum(t), p.k) for t in tasks]),
                                             rel=1e-9, abs=1e-300)
        assert p.n_tasks == len(tasks) and p.n_excluded == 2 - len(tasks)


def test_pass_k_estimators_are_unbiased_exactly():
    # E over c ~ Bin(n, p) of the estimator equals the target 1-(1-p)^k / p^k.
    n, p = 7, 0.37
    weights = stats.binom.pmf(np.arange(n + 1), n, p)
    for k in range(1, n + 1):
        at = sum(w * passk.pass_at_k(n, c, k) for c, w in enumerate(weights))
        hat = sum(w * passk.pass_hat_k(n, c, k) for c, w in enumerate(weights))
        assert at == pytest.approx(1 - (1 - p) ** k, abs=1e-12)
        assert hat == pytest.approx(p**k, abs=1e-12)


@pytest.mark.parametrize(
    ("n", "c", "k", "field"),
    [(3, 1, 4, "k"), (3, 4, 1, "c"), (0, 0, 1, "n"), (3, -1, 1, "c"), (3, 1, 0, "k")],
)
def test_pass_k_rejects_bad_inputs_naming_the_field(n, c, k, field):
    with pytest.raises(statbase.StatsInputError) as exc:
        passk.pass_at_k(n, c, k)
    assert exc.value.field == field


def _rows(table):
    """``table``: {system: {task: [outcomes...]}} -> records rows (group = task's first letter)."""
    return [
        {"system": s, "task_id": t, "trial": i, "outcome": o, "group": t[0]}
        for s, tasks in table.items()
        for t, outs in tasks.items()
        for i, o in enumerate(outs)
    ]


def test_pass_k_curve_uneven_trials_excludes_short_tasks():
    table = {
        "A": {"a1": [1, 0, 1], "a2": [0, 0, 1, 1], "b1": [1], "b2": [0, 1, 0]},
        "B": {"a1": [0], "a2": [1], "b1": [1], "b2": [0]},
    }
    rec = from_rows(_rows(table))
    curve = passk.pass_k_curve(rec, "A")
    assert [p.k for p in curve] == [1, 2, 3, 4]
    tasks = list(table["A"].values())
    for p in curve:
        eligible = [t for t in tasks if len(t) >= p.k]
        exp_at = np.mean([np.mean([max(s) for s in itertools.combinations(t, p.k)]) for t in eligible])
        exp_hat = np.mean([np.mean([min(s) for s in itertools.combinations(t, p.k)]) for t in eligible])
        assert p.pass_at_k == pytest.approx(exp_at, abs=1e-12)
        assert p.pass_hat_k == pytest.approx(exp_hat, abs=1e-12)
        assert p.n_tasks == len(eligible) and p.n_excluded == 4 - len(eligible)
    assert curve[0].pass_at_k == pytest.approx(np.nanmean(rec.y[0]))


# --------------------------------------------------------------------------- bounds and intervals


@pytest.mark.parametrize(("x", "n"), [(0, 10), (3, 10), (9, 10), (10, 10), (47, 120)])
def test_one_sided_bounds_invert_the_binomial_tail(x, n):
    b = intervals.binomial_bounds(x, n, 0.9)
    if x > 0:  # P(X >= x | p = lower) = alpha
        assert stats.binom.sf(x - 1, n, b.success_lower) == pytest.approx(0.1, rel=1e-8)
    else:
        assert b.success_lower == 0
    if x < n:  # P(X <= x | p = upper) = alpha
        assert stats.binom.cdf(x, n, b.success_upper) == pytest.approx(0.1, rel=1e-8)
    else:
        assert b.success_upper == 1
    assert b.failure_upper == pytest.approx(1 - b.success_lower)


@pytest.mark.parametrize(("target", "failures", "level"), [(0.05, 1, 0.95), (0.1, 3, 0.9), (0.01, 0, 0.99)])
def test_runs_for_bound_is_the_fewest(target, failures, level):
    n = samplesize.runs_for_bound(target, level, failures)
    assert intervals.binomial_bounds(n - failures, n, level).failure_upper <= target
    assert n - 1 <= failures or intervals.binomial_bounds(n - 1 - failures, n - 1, level).failure_upper > target


def test_t_interval_equals_scipys_quantile_for_a_scalar_df_and_an_array():
    """A scalar ``df`` takes the quantile from a memo (a leaderboard asks for the same one at
    every pair); it is scipy's number, bit for bit, as is the vectorised path's."""
    dfs = [1, 2, 7, 29, 499, 10_000, 2.5]
    for level in (0.9, 0.95, 0.999):
        q = stats.t.ppf(0.5 + level / 2.0, np.array(dfs, dtype=float))
        for df, qq in zip(dfs, q, strict=True):
            assert intervals.t_interval(0.1, 0.02, df, level) == (0.1 - qq * 0.02, 0.1 + qq * 0.02)
        lo, hi = intervals.t_interval(np.full(len(dfs), 0.1), np.full(len(dfs), 0.02), np.array(dfs), level)
        assert list(lo) == list(0.1 - q * 0.02) and list(hi) == list(0.1 + q * 0.02)


def test_interval_coverage_on_seeded_simulation():
    rng = np.random.default_rng(20261130)
    reps, n, p = 4000, 250, 0.3
    x = rng.binomial(n, p, size=reps)
    mc = 3 * math.sqrt(0.95 * 0.05 / reps)
    m = x / n
    se = np.sqrt(m * (1 - m) / (n - 1))  # sd(ddof=1)/sqrt(n) for 0/1 data
    lo, hi = intervals.normal_interval(m, se)
    assert abs(np.mean((lo <= p) & (p <= hi)) - 0.95) < mc + 0.01
    lo, hi = intervals.wilson_interval(x, n)
    assert abs(np.mean((lo <= p) & (p <= hi)) - 0.95) < mc + 0.01
    lo, hi = intervals.clopper_pearson_interval(x, n)
    cover = np.mean((lo <= p) & (p <= hi))
    assert cover >= 0.95 - mc and cover < 0.99
    # a small sample where Wald is known to undercover: the check is able to fail
    x = rng.binomial(20, 0.1, size=reps)
    m = x / 20
    lo, hi = intervals.normal_interval(m, np.sqrt(m * (1 - m) / 19))
    assert np.mean((lo <= 0.1) & (0.1 <= hi)) < 0.95 - mc


# --------------------------------------------------------------------------- clustering


def test_clustered_se_matches_a_direct_sandwich():
    rng = np.random.default_rng(5)
    g = rng.integers(0, 9, size=60)
    v = rng.random(60) + 0.3 * g
    res = E.clustered_se(v, g)
    # OLS of v on an intercept: V = c (X'X)^-1 X' u u' ... summed by cluster, via indicators
    x = np.ones((60, 1))
    u = v - x @ np.linalg.lstsq(x, v, rcond=None)[0]
    labels = np.unique(g)
    ind = (g[:, None] == labels[None, :]).astype(float)  # N x G
    score = ind.T @ (x * u[:, None])  # G x 1 cluster scores
    bread = np.linalg.inv(x.T @ x)
    G = len(labels)
    V = G / (G - 1) * bread @ (score.T @ score) @ bread
    assert res.se == pytest.approx(math.sqrt(V[0, 0]), rel=1e-12)
    assert res.se_iid == pytest.approx(np.std(v, ddof=1) / math.sqrt(60), rel=1e-12)
    assert res.design_effect == pytest.approx((res.se / res.se_iid) ** 2)
    assert res.effective_tasks == pytest.approx(min(60, 60 / res.design_effect))
    single = E.clustered_se(v, np.arange(60))
    assert single.se == pytest.approx(single.se_iid, rel=1e-12) and single.design_effect == pytest.approx(1)


def test_clustered_interval_covers_when_the_iid_one_does_not():
    rng = np.random.default_rng(11)
    reps, G, m = 1500, 40, 8
    groups = np.repeat(np.arange(G), m)
    cover_cl = cover_iid = 0
    for _ in range(reps):
        effect = rng.normal(0, 1, size=G)
        v = effect[groups] + rng.normal(0, 1, size=G * m)  # ICC 0.5, true mean 0
        res = E.clustered_se(v, groups)
        lo, hi = intervals.t_interval(res.mean, res.se, G - 1)
        cover_cl += lo <= 0 <= hi
        lo, hi = intervals.normal_interval(res.mean, res.se_iid)
        cover_iid += lo <= 0 <= hi
    mc = 3 * math.sqrt(0.95 * 0.05 / reps)
    assert abs(cover_cl / reps - 0.95) < mc + 0.01
    assert cover_iid / reps < 0.8  # design effect ~ 1 + (m - 1) * 0.5 = 4.5


# --------------------------------------------------------------------------- pairs


def test_mcnemar_matches_two_sided_binomial_test():
    for a, b in [(0, 0), (5, 0), (7, 3), (12, 20), (40, 41)]:
        expected = 1.0 if a + b == 0 else stats.binomtest(a, a + b, 0.5).pvalue
        assert E.mcnemar_exact(a, b) == pytest.approx(expected, rel=1e-12)


def _two_system_records(ya, yb, groups=None):
    rows = []
    for t, (a, b) in enumerate(zip(ya, yb, strict=True)):
        g = {} if groups is None else {"group": str(groups[t])}
        rows.append({"system": "A", "task_id": f"t{t:03d}", "outcome": float(a), **g})
        rows.append({"system": "B", "task_id": f"t{t:03d}", "outcome": float(b), **g})
    return from_rows(rows)


def test_pair_stats_single_trial_binary():
    rng = np.random.default_rng(2)
    ya = rng.integers(0, 2, 150)
    yb = np.where(rng.random(150) < 0.7, ya, 1 - ya)
    rec = _two_system_records(ya, yb)
    ps = E.pair_stats(rec, "A", "B")
    d = ya - yb
    assert ps.diff == pytest.approx(d.mean())
    assert ps.se_paired == pytest.approx(np.std(d, ddof=1) / math.sqrt(150))
    assert ps.correlation == pytest.approx(stats.pearsonr(ya, yb)[0])
    assert (ps.n_plus, ps.n_minus) == (int((d == 1).sum()), int((d == -1).sum()))
    assert ps.test == "mcnemar_exact" and ps.p_value == ps.mcnemar_p
    assert ps.min_gap_paired < ps.min_gap_unpaired  # positively correlated scores
    assert ps.bootstrap is None


def test_paired_bootstrap_is_seeded_and_resamples_tasks_not_trials():
    rng = np.random.default_rng(8)
    rows = []
    for t in range(60):
        p = rng.random()
        for s, shift in (("A", 0.05), ("B", 0.0)):
            for i in range(5):
                passed = int(rng.random() < min(1, p + shift))
                rows.append({"system": s, "task_id": f"t{t}", "trial": i, "outcome": passed})
    rec = from_rows(rows)
    one = E.pair_stats(rec, "A", "B", rng=np.random.default_rng(1), n_boot=1000)
    two = E.pair_stats(rec, "A", "B", rng=np.random.default_rng(1), n_boot=1000)
    assert one.bootstrap == two.bootstrap and one.mcnemar_p is None and one.test == "paired_t"
    width = one.bootstrap.high - one.bootstrap.low
    assert width == pytest.approx(2 * 1.96 * one.se_paired, rel=0.15)


def test_paired_cluster_bootstrap_coverage_with_repeated_trials():
    rng = np.random.default_rng(99)
    reps, n_tasks, trials = 300, 80, 4
    hits = 0
    for _ in range(reps):
        p = rng.beta(2, 2, n_tasks)
        a = rng.binomial(trials, np.clip(p + 0.05, 0, 1)) / trials
        b = rng.binomial(trials, p) / trials
        truth = np.mean(np.clip(p + 0.05, 0, 1) - p)  # conditional on these tasks; plus sampling of tasks below
        d = a - b
        iv = E.paired_cluster_bootstrap(d, 0.95, rng, n_boot=600)
        hits += iv.low <= truth <= iv.high
    # conditional truth is a bit easier to cover than the population one: require >= nominal - MC error
    assert hits / reps >= 0.95 - 3 * math.sqrt(0.95 * 0.05 / reps) - 0.02


def test_paired_bootstrap_by_cluster_is_wider_with_correlated_clusters():
    rng = np.random.default_rng(4)
    groups = np.repeat(np.arange(10), 20)
    d = rng.normal(0, 1, 10)[groups] + rng.normal(0, 0.3, 200)
    by_task = E.paired_cluster_bootstrap(d, 0.95, np.random.default_rng(0), 2000)
    by_group = E.paired_cluster_bootstrap(d, 0.95, np.random.default_rng(0), 2000, clusters=groups)
    assert (by_group.high - by_group.low) > 2.5 * (by_task.high - by_task.low)
    # uneven clusters: the interval sits around the task mean, as wide as the CR standard error says
    groups = np.repeat(np.arange(30), np.arange(1, 31))
    d = rng.normal(0, 1, 30)[groups] + rng.normal(0.2, 0.3, groups.size)
    iv = E.paired_cluster_bootstrap(d, 0.95, np.random.default_rng(1), 4000, clusters=groups)
    se = E.clustered_se(d, groups).se
    assert (iv.low + iv.high) / 2 == pytest.approx(d.mean(), abs=0.3 * se)
    assert iv.high - iv.low == pytest.approx(2 * 1.96 * se, rel=0.2)


# --------------------------------------------------------------------------- power


def test_tasks_for_paired_difference_is_minimal_and_has_its_power():
    delta, rho, power = 0.05, 0.5, 0.8
    n = samplesize.tasks_for_paired_difference(delta, power, rho)
    sd = math.sqrt(2 * 0.25 * (1 - rho))

    def approx_power(m):
        return stats.norm.sf(1.959963984540054 - delta / (sd / math.sqrt(m)))

    assert approx_power(n) >= power > approx_power(n - 1)
    # simulate correlated 0/1 pairs with marginals 0.5 + delta/2, 0.5 - delta/2 and correlation ~rho
    rng = np.random.default_rng(7)
    reps = 2000
    pa, pb = 0.5 + delta / 2, 0.5 - delta / 2
    p11 = pa * pb + rho * math.sqrt(pa * (1 - pa) * pb * (1 - pb))
    probs = [p11, pa - p11, pb - p11, 1 - pa - pb + p11]  # (1,1) (1,0) (0,1) (0,0)
    counts = rng.multinomial(n, probs, size=reps)
    n10, n01 = counts[:, 1], counts[:, 2]
    mean = (n10 - n01) / n
    var = ((n10 + n01) / n - mean**2) * n / (n - 1)
    z = mean / np.sqrt(var / n)
    rejected = np.mean(z > 1.959963984540054)
    assert abs(rejected - power) < 3 * math.sqrt(0.16 / reps) + 0.02


def test_calculator_validation_names_fields():
    cases = [
        (lambda: samplesize.margin_of_error(10, level=1.0), "level"),
        (lambda: samplesize.margin_of_error(-1), "n"),
        (lambda: samplesize.tasks_for_margin(0), "margin"),
        (lambda: intervals.binomial_bounds(-1, 5), "successes"),
        (lambda: intervals.binomial_bounds(6, 5), "successes"),
        (lambda: samplesize.runs_for_bound(0.05, failures=-2), "failures"),
        (lambda: samplesize.min_significant_gap(100, rho=1.5), "rho"),
        (lambda: samplesize.tasks_for_paired_difference(0.05, power=1.0), "power"),
    ]
    for call, field in cases:
        with pytest.raises(statbase.StatsInputError) as exc:
            call()
        assert exc.value.field == field


def test_terminal_bench_pass_hat_k_from_real_trials():
    rec = load_records(str(shared_dataset("terminal_bench_core_0.1.1")))
    assert int(rec.trials.max()) == 5
    for s, name in enumerate(rec.systems):
        curve = passk.pass_k_curve(rec, name)
        assert [p.k for p in curve] == [1, 2, 3, 4, 5] and all(p.n_excluded == 0 for p in curve)
        sel = rec.raw_system == s
        per_task = [rec.raw_outcome[sel & (rec.raw_task == t)] for t in range(rec.n_tasks)]
        assert curve[-1].pass_hat_k == pytest.approx(np.mean([o.min() for o in per_task]))
        assert curve[-1].pass_at_k == pytest.approx(np.mean([o.max() for o in per_task]))
        k = 3
        brute = np.mean([np.mean([min(c) for c in itertools.combinations(o, k)]) for o in per_task])
        assert curve[k - 1].pass_hat_k == pytest.approx(brute, abs=1e-12)
        hats = [p.pass_hat_k for p in curve]
        ats = [p.pass_at_k for p in curve]
        assert all(x >= y - 1e-12 for x, y in itertools.pairwise(hats))
        assert all(x <= y + 1e-12 for x, y in itertools.pairwise(ats))
        assert curve[0].pass_at_k == pytest.approx(np.nanmean(rec.y[s]))


def test_effective_tasks_are_capped_at_the_tasks_with_a_note_when_the_design_effect_is_below_one():
    """12 clusters of 25 tasks of independent values: the CR1 design effect scatters around 1
    (11 degrees of freedom), so about half the seeds give deff < 1, which must not report more
    effective tasks than tasks."""
    clusters = np.arange(300) // 25
    below = above = 0
    for seed in range(40):
        v = np.random.default_rng(seed).integers(0, 2, 300).astype(float)
        res = E.clustered_se(v, clusters)
        assert res.design_effect == pytest.approx((res.se / res.se_iid) ** 2)  # reported as computed
        assert res.effective_tasks == pytest.approx(min(300, 300 / res.design_effect))
        if res.design_effect < 1:
            below += 1
            assert res.effective_tasks == 300 and "design effect" in res.effective_tasks_note
        else:
            above += 1
            assert res.effective_tasks_note is None
    assert below and above  # both branches exercised


# --------------------------------------------------------------------------- bootstrap batches


def _old_bootstrap_means(d, rng, n_boot, clusters=None):
    """The resample means of the implementation before batches were sized by cells: 256
    resamples per batch, whatever the number of units."""
    if clusters is None:
        sums, sizes = d, np.ones(d.size)
    else:
        _, g = np.unique(clusters, return_inverse=True)
        sums, sizes = np.bincount(g, weights=d), np.bincount(g).astype(np.float64)
    means = np.empty(n_boot)
    for start in range(0, n_boot, 256):
        stop = min(n_boot, start + 256)
        idx = rng.integers(0, sums.size, size=(stop - start, sums.size))
        means[start:stop] = sums[idx].sum(axis=1) / sizes[idx].sum(axis=1)
    return means


def _bootstrap_means(monkeypatch, d, seed, n_boot, clusters=None):
    """(interval, resample means) of ``paired_cluster_bootstrap``: the means are caught on
    their way into ``np.quantile``."""
    seen = []
    quantile = np.quantile

    def spy(a, *args, **kwargs):
        seen.append(np.array(a, copy=True))
        return quantile(a, *args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(np, "quantile", spy)
        iv = E.paired_cluster_bootstrap(d, 0.9, np.random.default_rng(seed), n_boot, clusters)
    return iv, seen[-1]


def test_bootstrap_rng_stream_does_not_depend_on_how_draws_are_split():
    """What bit-identical batches rest on: one (B, n) draw of ``integers`` is the same stream
    as (b1, n), (b2, n), ... draws, odd cell counts included (the bit generator keeps the
    unused half of a 64-bit word between calls), for every numpy bit generator."""
    for bit_generator in (np.random.PCG64, np.random.PCG64DXSM, np.random.MT19937, np.random.Philox,
                          np.random.SFC64):
        for units in (1, 3, 7, 1000, 2**31 - 1, 2**40):
            whole = np.random.Generator(bit_generator(5))
            parts = np.random.Generator(bit_generator(5))
            a = whole.integers(0, units, size=(37, 7))
            b = np.concatenate([parts.integers(0, units, size=(rows, 7)) for rows in (1, 5, 2, 13, 1, 15)])
            assert np.array_equal(a, b) and whole.random() == parts.random(), (bit_generator, units)


@pytest.mark.parametrize("clustered", [False, True])
@pytest.mark.parametrize("n_tasks", [1, 7, 600, 5001])
def test_paired_bootstrap_is_bit_identical_whatever_the_cell_bound(monkeypatch, clustered, n_tasks):
    """Tiny cell bounds (one resample per batch, uneven batches) give the very same resample
    means, hence intervals, as the default bound and as the former 256-resample batches."""
    rng = np.random.default_rng(n_tasks)
    d = rng.integers(-1, 2, n_tasks) + rng.normal(0, 0.1, n_tasks)
    clusters = rng.integers(0, max(1, n_tasks // 4), n_tasks) if clustered else None
    n_boot = 613
    if (n_tasks if clusters is None else np.unique(clusters).size) < 2:  # one unit: nothing to resample
        iv = E.paired_cluster_bootstrap(d, 0.9, np.random.default_rng(3), n_boot, clusters)
        assert math.isnan(iv.low) and math.isnan(iv.high)
        return
    iv, means = _bootstrap_means(monkeypatch, d, 3, n_boot, clusters)
    old = _old_bootstrap_means(d, np.random.default_rng(3), n_boot, clusters)
    assert means.tobytes() == old.tobytes()
    assert (iv.low, iv.high) == tuple(np.quantile(old, [0.05, 0.95]))
    for cells in (1, 7, 3 * n_tasks + 1, 10_000):
        monkeypatch.setattr(E, "BOOTSTRAP_CELLS", cells)
        small_iv, small_means = _bootstrap_means(monkeypatch, d, 3, n_boot, clusters)
        assert small_means.tobytes() == means.tobytes() and small_iv == iv, cells


def test_pair_stats_bootstrap_is_identical_with_tiny_batches(monkeypatch):
    rows = []
    rng = np.random.default_rng(21)
    for t in range(120):
        for s in ("A", "B"):
            for i in range(2):
                rows.append({"system": s, "task_id": f"t{t}", "trial": i, "outcome": int(rng.random() < 0.6),
                             "group": f"g{t % 9}"})
    rec = from_rows(rows)
    for cluster in (None, "group"):
        default = E.pair_stats(rec, "A", "B", cluster=cluster, rng=np.random.default_rng(5), n_boot=700)
        with monkeypatch.context() as m:
            m.setattr(E, "BOOTSTRAP_CELLS", 5)
            tiny = E.pair_stats(rec, "A", "B", cluster=cluster, rng=np.random.default_rng(5), n_boot=700)
        assert tiny == default and default.bootstrap is not None


@pytest.mark.parametrize("clustered", [False, True])
def test_paired_bootstrap_memory_is_bounded_by_cells_not_tasks(clustered):
    """200,000 tasks, 400 resamples: the former 256-resample batches held 256 x 200,000 int64
    indices plus their float64 gather, a tracemalloc peak of 782.8 MiB without clusters
    (250.3 MiB with ~67,000 clusters); batches of at most ``BOOTSTRAP_CELLS`` cells (2**21)
    peak at 30.5 MiB (34.9 MiB with clusters)."""
    import tracemalloc

    n_tasks = 200_000
    rng = np.random.default_rng(2)
    d = rng.integers(-1, 2, n_tasks).astype(np.float64)
    clusters = rng.integers(0, n_tasks // 3, n_tasks) if clustered else None
    tracemalloc.start()
    try:
        iv = E.paired_cluster_bootstrap(d, 0.95, np.random.default_rng(7), 400, clusters)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert iv.low < iv.high
    assert peak < 48 * 2**20, f"peak {peak / 2**20:.1f} MiB"


def test_failure_bounds_and_runs_keep_their_digits_for_small_rates():
    """Failure bounds are computed as themselves, not as 1 - a success bound: for 10^15 clean
    runs ``1 - alpha**(1/n)`` kept three digits (2.9976e-15 for 2.99573e-15), and the runs for
    a 1e-12 target came out 10^8 too few. Checked against 60-digit decimal arithmetic."""
    from decimal import Decimal, getcontext

    from service.engine.intervals import binomial_bounds
    from service.engine.samplesize import runs_for_bound

    getcontext().prec = 60
    alpha = Decimal("0.05")
    n = 10**15
    exact = 1 - (alpha.ln() / n).exp()
    assert binomial_bounds(n, n).failure_upper == pytest.approx(float(exact), rel=1e-12)
    assert binomial_bounds(0, n).success_upper == pytest.approx(float(exact), rel=1e-12)
    for target in (1e-9, 1e-12, 1e-14):
        t = Decimal(target)  # the float's exact value
        closed = alpha.ln() / (1 - t).ln()
        assert runs_for_bound(target) == int(closed) + (closed != int(closed))

    def at_most_one(runs: int, p: Decimal) -> Decimal:  # P(X <= 1) for X ~ Binomial(runs, p)
        return (1 - p) ** runs + runs * p * (1 - p) ** (runs - 1)

    for target in (1e-6, 1e-12):
        runs = runs_for_bound(target, failures=1)
        t = Decimal(target)
        assert at_most_one(runs, t) <= alpha < at_most_one(runs - 1, t)  # the fewest such runs


def test_a_key_of_commas_is_refused_and_one_unit_gives_no_bootstrap_interval():
    """``cluster=","`` named no column and made one cluster of every task: every interval null,
    every system tied. A bootstrap over one unit (one cluster, or one task) resampled it alone
    and gave a zero-width interval; its bounds are now NaN, as the clustered t's are."""
    from service.engine.evalstats import paired_cluster_bootstrap
    from service.engine.leaderboard import leaderboard
    from service.engine.statbase import StatsInputError
    from service.engine.synth import generate

    records = from_rows(generate(n_systems=3, n_tasks=40, n_groups=4, seed=2))
    for key in (",", " , ", ",,"):
        with pytest.raises(StatsInputError) as exc:
            leaderboard(records, cluster=key)
        assert exc.value.field == "cluster" and "names no column" in exc.value.message
    assert leaderboard(records, cluster="").cluster is None  # an empty key is no key, as before
    d = np.array([1.0, -1.0, 0.0, 1.0])
    rng = np.random.default_rng(0)
    one = paired_cluster_bootstrap(d, 0.95, rng, 200, clusters=np.zeros(4, dtype=int))
    assert np.isnan(one.low) and np.isnan(one.high)
    assert np.isnan(paired_cluster_bootstrap(d[:1], 0.95, rng, 200).low)
    two = paired_cluster_bootstrap(d, 0.95, rng, 200, clusters=np.array([0, 0, 1, 1]))
    assert two.low < two.high


def test_power_refuses_where_its_formula_has_no_meaning():
    """No variance of the difference answered 2 tasks for any δ; a power at or below α/2 made
    z_{1-α/2} + z_power non-positive, and its square grew again as the power fell."""
    with pytest.raises(statbase.StatsInputError) as exc:
        samplesize.tasks_for_paired_difference(0.05, rho=1.0)
    assert exc.value.field == "rho"
    for kwargs, field in (({"p": 0.0}, "p"), ({"p": 1.0}, "p"), ({"sd_diff": 0.0}, "sd_diff"),
                          ({"power": 0.025}, "power"), ({"power": 1e-300}, "power")):
        with pytest.raises(statbase.StatsInputError) as exc:
            samplesize.tasks_for_paired_difference(0.05, **kwargs)
        assert exc.value.field == field
    powers = [0.03, 0.1, 0.5, 0.8, 0.99]  # just above α/2 and up: more power, never fewer tasks
    tasks = [samplesize.tasks_for_paired_difference(0.05, power=pw) for pw in powers]
    assert tasks == sorted(tasks) and tasks[0] >= 2
