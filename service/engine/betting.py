"""The ``anytime`` rule: betting against the threshold, sampling without replacement (SPEC §4.2).

Map ``X_i = (d_i + 1)/2 ∈ [0, 1]``, ``θ_X = (θ + 1)/2``, ``μ`` the mean of ``X`` over the ``N``
tasks. After ``i − 1`` observations with sum ``S_{i−1}``, the mean of the tasks not yet seen is
``c_i(μ) = (N·μ − S_{i−1})/(N − i + 1)`` (the without-replacement centring of Waudby-Smith &
Ramdas, 2020). The two capital processes at ``μ``

    K⁺_t(μ) = Π_{i<=t} (1 + λ⁺_i·(X_i − c_i(μ))),    K⁻_t(μ) = Π_{i<=t} (1 − λ⁻_i·(X_i − c_i(μ)))

with predictable bets ``λ±_i >= 0`` are nonnegative martingales at the true ``μ``, ``K⁺(θ_X)`` a
supermartingale whenever ``μ <= θ_X`` and ``K⁻(θ_X)`` whenever ``μ > θ_X`` (``c_i`` grows with
``μ``). By Ville's inequality ``P(∃t: K⁺_t(θ_X) >= 1/a) <= a`` when accepting is wrong and
likewise for ``K⁻`` when rejecting is wrong; only one of the two can be wrong for a given task
set, so each side may use the whole ``a``, and the error stays ``<= a`` however often the rule
is consulted and wherever the run stops.

* accept at ``t`` iff ``m_t > θ`` and (``S_t/N > θ_X`` or ``ln K⁺_t(θ_X) >= ln(1/a)``);
* reject at ``t`` iff ``m_t <= θ`` and (``(S_t + N − t)/N <= θ_X`` or ``ln K⁻_t(θ_X) >= ln(1/a)``);

(the first alternatives: no completion of the task set can change the full decision).

Bets (aGRAPA, an approximation of the growth-optimal bet against ``θ_X``): with the running
mean ``μ̂_{i−1} = (1/2 + S_{i−1})/i`` and variance ``σ̂²_{i−1} = (1/4 + Σ_{j<i}(X_j − X̄_{i−1})²)/i``,
``g_i = (μ̂_{i−1} − c_i(θ_X)) / (σ̂²_{i−1} + (μ̂_{i−1} − c_i(θ_X))²)``, ``λ⁺_i = min(max(g_i, 0), ρ/c_i)``
and ``λ⁻_i = min(max(−g_i, 0), ρ/(1 − c_i))`` with ``ρ = 3/4`` (so every factor stays positive).
Everything is a prefix sum over the steps, so paths are evaluated as cumulative sums:
many cases at once in replay, one path per live decision, the same arithmetic for both.

The confidence sequence: keeping the same ``g_i`` (fixed by ``θ_X``) and truncating at each
``μ``, every factor of ``K⁺_t(μ)`` falls as ``μ`` grows and every factor of ``K⁻_t(μ)`` rises, so
``{μ : K⁺_t(μ) < 1/a and K⁻_t(μ) < 1/a}`` is an interval; each bound holds at level ``a`` at
every ``t`` at once (valid after optional stopping), and it excludes ``θ_X`` exactly when the
rule concludes on its wealth.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from service.engine.rules import ACCEPT, DEFER, REJECT, TOL, above

RHO = 0.75
"""Largest share of the worst-case loss a bet may risk (``λ⁺ <= ρ/c``, ``λ⁻ <= ρ/(1 − c)``)."""
_BLOCK = 1 << 20
"""Cases × steps evaluated at once (bounds the working memory of a replay chunk)."""


def _steps(x: np.ndarray, n: int, theta_x: float) -> tuple[np.ndarray, ...]:
    """Per step: ``S_t``, ``c_t(θ_X)`` and the bet ``g_t`` (``x``: ``[cases, k]``)."""
    k = x.shape[1]
    i = np.arange(1, k + 1, dtype=np.float64)
    s = np.cumsum(x, axis=1)
    s_prev = s - x
    q_prev = np.cumsum(x * x, axis=1) - x * x
    c = (n * theta_x - s_prev) / (n - i + 1.0)
    mu = (0.5 + s_prev) / i
    ss = np.maximum(q_prev - s_prev * s_prev / np.maximum(i - 1.0, 1.0), 0.0)
    var = (0.25 + ss) / i
    edge = mu - c
    g = edge / (var + edge * edge)
    return s, c, g


def _bets(g: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    lam_up = np.minimum(np.maximum(g, 0.0), RHO / np.maximum(c, 1e-9))
    lam_dn = np.minimum(np.maximum(-g, 0.0), RHO / np.maximum(1.0 - c, 1e-9))
    return lam_up, lam_dn


def _log_wealth(x: np.ndarray, c: np.ndarray, lam_up: np.ndarray, lam_dn: np.ndarray) -> tuple[np.ndarray, ...]:
    xi = x - c
    return np.cumsum(np.log1p(lam_up * xi), axis=1), np.cumsum(np.log1p(-lam_dn * xi), axis=1)


def betting_paths(
    v: np.ndarray,
    lattice: int | None,
    n: int,
    theta: float | Sequence[float],
    a: float,
    kmax: int,
    cov_ok: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """First conclusion of the ``anytime`` rule along each path (the signature of
    ``rules.anytime_paths``): ``v`` ``[cases, >= kmax]`` lattice values in observation order
    (the differences themselves when ``lattice`` is None), ``n`` = ``N``, ``cov_ok``
    ``[cases or 1, kmax]`` coverage met at step t. Returns ``(decision, stop)``, ``stop = kmax + 1``
    when no step concludes; a sequence of thresholds adds a leading axis to both."""
    thetas = np.atleast_1d(np.asarray(theta, dtype=np.float64))
    v = np.asarray(v)
    cases = v.shape[0]
    dec = np.zeros((len(thetas), cases), dtype=np.int8)
    stop = np.full((len(thetas), cases), kmax + 1, dtype=np.int64)
    if kmax > 0 and cases:
        log_inv_a = math.log(1.0 / a)
        scale = lattice or 1
        step = max(1, _BLOCK // kmax)
        i = np.arange(1, kmax + 1, dtype=np.float64)
        for lo_c in range(0, cases, step):
            rows = slice(lo_c, min(cases, lo_c + step))
            vv = np.asarray(v[rows, :kmax], dtype=np.float64)
            x = (vv / scale + 1.0) / 2.0
            vsum = np.cumsum(vv, axis=1)
            cov = None
            if cov_ok is not None:
                cov_all = np.asarray(cov_ok, dtype=bool)
                cov = np.broadcast_to(cov_all[:, :kmax] if len(cov_all) == 1 else cov_all[rows, :kmax], vv.shape)
            for j, th in enumerate(thetas.tolist()):
                theta_x = (th + 1.0) / 2.0
                s, c, g = _steps(x, n, theta_x)
                up, dn = _log_wealth(x, c, *_bets(g, c))
                pos = above(vsum, i[None, :], th, lattice)
                acc = pos & ((s / n > theta_x + TOL) | (up >= log_inv_a))
                rej = ~pos & (((s + n - i) / n <= theta_x + TOL) | (dn >= log_inv_a))
                hit = acc | rej
                if cov is not None:
                    hit &= cov
                first = np.argmax(hit, axis=1)
                rr = np.arange(hit.shape[0])
                found = hit[rr, first]
                dec[j, rows] = np.where(found, np.where(acc[rr, first], ACCEPT, REJECT), DEFER)
                stop[j, rows] = np.where(found, first + 1, kmax + 1)
    if np.ndim(theta) == 0:
        return dec[0], stop[0]
    return dec, stop


def betting_statistic(d: np.ndarray, n: int, theta: float, a: float, t: int) -> dict[str, float]:
    """``ln K±_t(θ_X)`` at step ``t`` of the observed differences ``d`` (what the decision compares
    with ``ln(1/a)``)."""
    x = (np.asarray(d[:t], dtype=np.float64) + 1.0) / 2.0
    s, c, g = _steps(x[None, :], n, (theta + 1.0) / 2.0)
    up, dn = _log_wealth(x[None, :], c, *_bets(g, c))
    return {
        "log_wealth_up": float(up[0, -1]) if t else 0.0,
        "log_wealth_down": float(dn[0, -1]) if t else 0.0,
        "log_wealth_threshold": math.log(1.0 / a),
    }


def _excluded(x: np.ndarray, n: int, mu: np.ndarray, a: float) -> np.ndarray:
    """Whether each candidate mean ``μ`` is outside the confidence sequence at the last step of
    ``x``: its own test (bets aimed at ``μ``, as the decision's are at ``θ_X``) has reached ``1/a``
    on either side at that step."""
    mu = np.asarray(mu, dtype=np.float64)[:, None]
    # ``_steps`` on ``x`` repeated once per candidate, with the parts that do not depend on μ
    # (running sums, mean, variance) computed once: the same values, a third of the work.
    k = len(x)
    i = np.arange(1, k + 1, dtype=np.float64)
    s_prev = np.cumsum(x) - x
    q_prev = np.cumsum(x * x) - x * x
    c = (n * mu - s_prev) / (n - i + 1.0)
    var = (0.25 + np.maximum(q_prev - s_prev * s_prev / np.maximum(i - 1.0, 1.0), 0.0)) / i
    edge = (0.5 + s_prev) / i - c
    g = edge / (var + edge * edge)
    up, dn = _log_wealth(x[None, :], c, *_bets(g, c))
    log_inv_a = math.log(1.0 / a)
    return (up[:, -1] >= log_inv_a) | (dn[:, -1] >= log_inv_a)


def _first_last_included(x: np.ndarray, n: int, mus: np.ndarray, a: float, block: int = 32) -> np.ndarray:
    """``[first, last]``: the first and the last index of ``mus`` that ``_excluded`` keeps (empty
    when it keeps none), as testing them all would give (each candidate is tested on its own),
    testing blocks inwards from both ends: the candidates far from the sample mean, most of the
    grid on a short run, are rejected without testing the middle."""
    m = len(mus)
    for lo in range(0, m, block):
        kept = np.flatnonzero(~_excluded(x, n, mus[lo : lo + block], a))
        if len(kept):
            first, last, tested = lo + int(kept[0]), lo + int(kept[-1]), min(lo + block, m)
            break
    else:
        return np.zeros(0, dtype=np.intp)
    for hi in range(m, tested, -block):
        start = max(hi - block, tested)
        kept = np.flatnonzero(~_excluded(x, n, mus[start:hi], a))
        if len(kept):
            last = start + int(kept[-1])
            break
    return np.array([first, last], dtype=np.intp)


def confidence_sequence(x: np.ndarray, n: int, a: float, grid: int = 256) -> tuple[float, float]:
    """The confidence sequence for ``μ`` (the mean of ``X``) after the observations ``x``: the
    hull of the candidate means that no capital process has rejected, within the bounds any
    completion allows. Each ``μ`` is tested with bets aimed at it (the construction of the
    decision, at ``θ_X``), so ``θ_X`` is outside it exactly when the rule concludes on wealth;
    the hull is found on a grid, then each end refined on finer grids. Valid at every ``t`` at
    once: ``P(∃t: μ ∉ CS_t) <= 2a`` (``a`` per side)."""
    x = np.asarray(x, dtype=np.float64)
    t = len(x)
    if t == 0:
        return 0.0, 1.0
    s_t = float(x.sum())
    lo_any, hi_any = s_t / n, (s_t + n - t) / n
    if hi_any - lo_any <= 1e-12:
        return lo_any, hi_any
    mus = np.linspace(lo_any, hi_any, grid)
    inside = _first_last_included(x, n, mus, a)
    if not len(inside):  # every mean rejected (an event of probability <= 2a): the sample mean
        m = min(max(s_t / t, lo_any), hi_any)
        return m, m

    def refine(good: float, bad: float) -> float:
        # Three rounds of a 64-point grid between the last included and first excluded mean:
        # the end to 1/(256·64³) of the range, in three vectorised evaluations.
        for _ in range(3):
            pts = np.linspace(good, bad, 66)[1:-1]
            out = _excluded(x, n, pts, a)
            j = int(np.argmax(out)) if out.any() else len(pts)
            good, bad = (pts[j - 1] if j else good), (pts[j] if j < len(pts) else bad)
        return float(good)

    first, last = int(inside[0]), int(inside[-1])
    lower = lo_any if first == 0 else refine(float(mus[first]), float(mus[first - 1]))
    upper = hi_any if last == grid - 1 else refine(float(mus[last]), float(mus[last + 1]))
    return lower, upper
