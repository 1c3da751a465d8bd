"""``betting.confidence_sequence`` finds the two ends of the sequence by root-finding. Checked
here against a literal reference written from the module's docstring alone: both capital
processes as a loop over the steps in Python floats, bets aimed at each candidate mean, the
kept means scanned on a dense grid and each end of their hull bisected to 1e-13. The engine's
ends must agree to 1e-10 (in ``X``), and the rejected means must form a lower ray (``K⁺``)
and an upper ray (``K⁻``), which is what makes the root-finding valid."""

from __future__ import annotations

import math

import numpy as np

from service.engine import betting, betting_kernel
from tests.engine.reference import agrapa_bets

RHO = 0.75


def literal_log_wealth(x: list[float], n: int, mu: float) -> tuple[float, float]:
    """``ln K⁺_t(μ)``, ``ln K⁻_t(μ)`` after all of ``x``, with aGRAPA bets aimed at ``μ``."""
    s_prev = q_prev = 0.0
    up = dn = 0.0
    for i, xi in enumerate(x, start=1):
        c, lam_up, lam_dn = agrapa_bets(s_prev, q_prev, i, n, mu, RHO)
        up += math.log(1.0 + lam_up * (xi - c))
        dn += math.log(1.0 - lam_dn * (xi - c))
        s_prev += xi
        q_prev += xi * xi
    return up, dn


def literal_sequence(x: list[float], n: int, a: float, grid: int = 241) -> tuple[float, float, bool]:
    """``(lower, upper, rays)``: the hull of the kept means (dense scan, then each end bisected
    between its outermost kept grid point and the rejected neighbour), and whether the means
    ``K⁺`` rejects on the grid form a lower ray and those ``K⁻`` rejects an upper ray."""
    t, s_t = len(x), sum(x)
    lo, hi = s_t / n, (s_t + n - t) / n
    target = math.log(1.0 / a)
    mus = [lo + (hi - lo) * j / (grid - 1) for j in range(grid)]
    wealth = [literal_log_wealth(x, n, mu) for mu in mus]
    up_out = [w[0] >= target for w in wealth]
    dn_out = [w[1] >= target for w in wealth]
    rays = up_out == sorted(up_out, reverse=True) and dn_out == sorted(dn_out)
    kept = [j for j in range(grid) if not (up_out[j] or dn_out[j])]
    assert kept, "every mean rejected: pick another case"

    def bisect(good: float, bad: float) -> float:
        while abs(good - bad) > 1e-13:
            mid = 0.5 * (good + bad)
            u, d = literal_log_wealth(x, n, mid)
            good, bad = (mid, bad) if u < target and d < target else (good, mid)
        return good

    first, last = kept[0], kept[-1]
    lower = lo if first == 0 else bisect(mus[first], mus[first - 1])
    upper = hi if last == grid - 1 else bisect(mus[last], mus[last + 1])
    return lower, upper, rays


def _case(rng: np.random.Generator, trial: int) -> tuple[np.ndarray, int, float]:
    k = int(rng.integers(2, 160))
    n = k + int(rng.integers(1, 300))
    a = (0.05, 0.01, 0.1, 0.3)[trial % 4]
    kind = trial % 3
    if kind == 0:  # 0/1 outcomes
        d = (rng.random(k) < rng.uniform(0.2, 0.9)).astype(float) - (rng.random(k) < 0.5)
    elif kind == 1:  # a lattice of step 1/4
        d = rng.integers(-4, 5, k) / 4
    else:  # continuous
        d = np.round(rng.uniform(-1, 1, k), 5)
    return (d + 1.0) / 2.0, n, a


def test_ends_match_the_literal_hull() -> None:
    rng = np.random.default_rng(7)
    at_bound = 0
    for trial in range(36):
        x, n, a = _case(rng, trial)
        lower, upper = betting.confidence_sequence(x, n, a)
        want_lo, want_hi, rays = literal_sequence(x.tolist(), n, a)
        assert rays, trial
        assert abs(lower - want_lo) <= 1e-10 and abs(upper - want_hi) <= 1e-10, (trial, (lower, upper),
                                                                               (want_lo, want_hi))
        # each end is a mean the literal test keeps
        for end in (lower, upper):
            u, d = literal_log_wealth(x.tolist(), n, end)
            assert u < math.log(1 / a) and d < math.log(1 / a), trial
        at_bound += lower == x.sum() / n or upper == (x.sum() + n - len(x)) / n
    assert at_bound > 0  # ends at the completion bounds were exercised too


def test_a_short_run_keeps_the_completion_bounds_and_a_full_one_is_exact() -> None:
    x = np.array([1.0, 0.5])
    assert betting.confidence_sequence(x, 400, 0.05) == (1.5 / 400, (1.5 + 398) / 400)
    full = np.array([1.0, 0.0, 0.5, 1.0])
    assert betting.confidence_sequence(full, 4, 0.05) == (0.625, 0.625)
    assert betting.confidence_sequence(np.zeros(0), 10, 0.05) == (0.0, 1.0)


def test_each_end_is_a_kept_mean_within_xtol_of_a_rejected_one() -> None:
    """The root-finding's resolution: the lower end is kept and the mean ``XTOL`` below it is
    rejected by ``K⁺`` (the upper end, ``K⁻``, above it). Judged by the kernel's own wealth,
    which the next test ties to the literal loop: an end sits within a rounding of the
    crossing, where two summations may disagree on its side. The 1e-10 of the hull test above
    would let a search stop 100 times too early."""
    rng = np.random.default_rng(21)
    inner = 0
    for trial in range(60):
        x, n, a = _case(rng, trial)
        target = math.log(1 / a)
        pre = betting_kernel._prefix(x, n)

        def wealth(mu: float, pre=pre, x=x, n=n) -> tuple[float, float]:
            return (betting_kernel.log_wealth(x, pre, n, mu, True), betting_kernel.log_wealth(x, pre, n, mu, False))

        lower, upper = betting.confidence_sequence(x, n, a)
        s_t = x.sum()
        if lower > s_t / n:
            assert max(wealth(lower)) < target, trial
            assert wealth(lower - betting.XTOL)[0] >= target, trial
            inner += 1
        if upper < (s_t + n - len(x)) / n:
            assert max(wealth(upper)) < target, trial
            assert wealth(upper + betting.XTOL)[1] >= target, trial
            inner += 1
    assert inner > 60


def test_start_from_the_grid_when_the_sample_mean_is_rejected() -> None:
    """The search starts from the sample mean; were it rejected, from the first kept point
    of a 256-point grid: forcing that path gives the same ends, to the search's resolution."""
    rng = np.random.default_rng(3)
    for trial in range(12):
        x, n, a = _case(rng, trial)
        s_t = float(x.sum())
        if (s_t + n - len(x)) / n - s_t / n <= 1e-12:
            continue
        want = betting_kernel.confidence_sequence(x, n, s_t, math.log(1 / a), False)
        got = betting_kernel.confidence_sequence(x, n, s_t, math.log(1 / a), True)
        assert want == betting.confidence_sequence(x, n, a)
        assert abs(got[0] - want[0]) <= betting.XTOL and abs(got[1] - want[1]) <= betting.XTOL, trial


def test_the_kernels_wealth_is_the_decisions() -> None:
    """The compiled wealth at ``θ_X`` is what the decision compares with ``ln(1/a)``
    (``betting_statistic``, numpy) and what the literal loop computes, up to the rounding of a
    logarithm: the sequence excludes ``θ_X`` exactly when the rule concludes on wealth."""
    rng = np.random.default_rng(12)
    for trial in range(20):
        x, n, a = _case(rng, trial)
        d = 2.0 * x - 1.0
        pre = betting_kernel._prefix(x, n)
        for theta in (-0.2, 0.0, 0.1):
            theta_x = (theta + 1.0) / 2.0
            up = betting_kernel.log_wealth(x, pre, n, theta_x, True)
            dn = betting_kernel.log_wealth(x, pre, n, theta_x, False)
            stat = betting.betting_statistic(d, n, theta, a, len(x))
            lit = literal_log_wealth(x.tolist(), n, theta_x)
            for got, want in ((up, stat["log_wealth_up"]), (dn, stat["log_wealth_down"]), (up, lit[0]), (dn, lit[1])):
                assert abs(got - want) <= 1e-12 * max(1.0, abs(want)), (trial, theta, got, want)
