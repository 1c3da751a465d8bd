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

The confidence sequence ``{μ : K⁺_t(μ) < 1/a and K⁻_t(μ) < 1/a}``, each ``μ`` tested with bets
aimed at it as the decision's are at ``θ_X``: each bound holds at level ``a`` at every ``t`` at
once (valid after optional stopping), and it excludes ``θ_X`` exactly when the rule concludes on
its wealth. ``K⁺`` rejects a lower ray of means and ``K⁻`` an upper one, so it is an interval
whose two ends are found by root-finding (``confidence_sequence``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from service.engine.rules import ACCEPT, DEFER, REJECT, TOL, above, log_inv

RHO = 0.75
"""Largest share of the worst-case loss a bet may risk (``λ⁺ <= ρ/c``, ``λ⁻ <= ρ/(1 − c)``)."""
_BLOCK = 1 << 20
"""Cases × steps evaluated at once (bounds the working memory of a replay chunk)."""


def _prefix(x: np.ndarray, n: int) -> tuple[np.ndarray, ...]:
    """The parts of each step that do not depend on the threshold (``x``: ``[cases, k]``):
    ``S_t``, ``S_{t−1}``, ``N − t + 1``, the running mean ``μ̂_{t−1}`` and variance ``σ̂²_{t−1}``."""
    xx = x * x
    return _prefix_of(x, xx, np.cumsum(x, axis=1), np.cumsum(xx, axis=1), n, 1)


def _prefix_of(x: np.ndarray, xx: np.ndarray, s: np.ndarray, q: np.ndarray, n: int,
               first: int) -> tuple[np.ndarray, ...]:
    """``_prefix`` from the running sums ``s`` of ``x`` and ``q`` of ``xx = x²``, the first
    column being step ``first`` (a replay's segment, ``_advance``, carries the sums over)."""
    i = np.arange(first, first + x.shape[1], dtype=np.float64)
    s_prev = s - x
    q_prev = q - xx
    mu = (0.5 + s_prev) / i
    ss = np.maximum(q_prev - s_prev * s_prev / np.maximum(i - 1.0, 1.0), 0.0)
    var = (0.25 + ss) / i
    return s, s_prev, n - i + 1.0, mu, var


def _centre(prefix: tuple[np.ndarray, ...], n: int, theta_x: float | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``c_t(θ_X)`` and the bet ``g_t`` aimed at ``θ_X`` (a scalar, or a column of candidates)."""
    _, s_prev, rem, mu, var = prefix
    c = (n * theta_x - s_prev) / rem
    edge = mu - c
    g = edge / (var + edge * edge)
    return c, g


def _steps(x: np.ndarray, n: int, theta_x: float) -> tuple[np.ndarray, ...]:
    """Per step: ``S_t``, ``c_t(θ_X)`` and the bet ``g_t`` (``x``: ``[cases, k]``)."""
    prefix = _prefix(x, n)
    return (prefix[0], *_centre(prefix, n, theta_x))


def _bet_up(g: np.ndarray, c: np.ndarray) -> np.ndarray:
    return np.minimum(np.maximum(g, 0.0), RHO / np.maximum(c, 1e-9))


def _bet_down(g: np.ndarray, c: np.ndarray) -> np.ndarray:
    return np.minimum(np.maximum(-g, 0.0), RHO / np.maximum(1.0 - c, 1e-9))


def _bets(g: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return _bet_up(g, c), _bet_down(g, c)


def _gains(x: np.ndarray, c: np.ndarray, lam_up: np.ndarray, lam_dn: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per step ``ln(1 + λ⁺(X − c))`` and ``ln(1 − λ⁻(X − c))``: what ``ln K±`` add up."""
    xi = x - c
    return np.log1p(lam_up * xi), np.log1p(-lam_dn * xi)


def _log_wealth(x: np.ndarray, c: np.ndarray, lam_up: np.ndarray, lam_dn: np.ndarray) -> tuple[np.ndarray, ...]:
    up, dn = _gains(x, c, lam_up, lam_dn)
    return np.cumsum(up, axis=1), np.cumsum(dn, axis=1)


SEGMENT = 16
"""Steps a replay's paths are advanced by at a time; paths that have concluded for every
threshold leave the working set between segments."""


_COLUMN_SUMS_FROM = 512
"""Rows from which ``_carried`` adds column by column: over 16 steps, 256 rows took 21.5 µs by
``cumsum`` and 23.5 µs by columns, 1,024 rows 71 and 33 µs."""


def _carried(start: np.ndarray, x: np.ndarray, scratch: bool = False) -> np.ndarray:
    """Running sums of ``x`` along axis 1 continuing from ``start`` per row: ``start + x_0``
    first, then one addition per step, as one ``cumsum`` over the whole path adds them, so the
    same values to the bit. ``scratch``: ``x`` is a temporary, summed in place.

    With many rows, one addition of columns per step: ``cumsum`` along rows of 16 steps
    costs about 4 ns per value, the additions 1.6 (the same sums in the same order)."""
    y = x if scratch else x.copy()
    y[:, 0] += start
    if len(y) < _COLUMN_SUMS_FROM:
        return np.cumsum(y, axis=1, out=y)
    for j in range(1, y.shape[1]):
        np.add(y[:, j - 1], y[:, j], out=y[:, j])
    return y


COMPILED_WALK_FROM = 50_000_000
"""Path-steps (pairs x orders x seeds x the longest path) from which a replay walks its
``anytime`` paths compiled (``compiled_walk``). Loading numba and the kernel costs a fresh
process about 0.5 s (0.52-0.57 s from numba's cache). Measured in fresh processes, 500 orders,
``anytime_coverage`` at δ = 0: ``swebench_lite`` (245 M path-steps) 2.1 s against 3.3 s with
numpy's walk (3.5 against 5.7 s of CPU); ``terminal_bench_1_fractional`` (23 M) 0.54-0.60 s
against 0.38-0.48 s: there loading costs more than the walk saves."""


def compiled_walk(path_steps: int) -> bool:
    """Whether a replay of ``path_steps`` walks its ``anytime`` paths compiled: decided from
    the replay's size alone, never from what a process has loaded."""
    return path_steps >= COMPILED_WALK_FROM


def betting_paths(
    v: np.ndarray,
    lattice: int | None,
    n: int,
    theta: float | Sequence[float],
    a: float,
    kmax: int,
    cov_ok: np.ndarray | None = None,
    compiled: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """First conclusion of the ``anytime`` rule along each path (the signature of
    ``rules.anytime_paths``): ``v`` ``[cases, >= kmax]`` lattice values in observation order
    (the differences themselves when ``lattice`` is None), ``n`` = ``N``, ``cov_ok``
    ``[cases or 1, kmax]`` coverage met at step t. Returns ``(decision, stop)``, ``stop = kmax + 1``
    when no step concludes; a sequence of thresholds adds a leading axis to both.

    ``compiled`` (``betting_kernel.first_conclusions``): each path walked step by step and left
    at its first conclusion for every threshold (``swebench_lite``'s paths, 500 orders, one
    threshold: 2.9 s against numpy's 5.1 s), the same arithmetic but for ``log1p``'s last bit
    (module doc there). A live answer's forecast takes
    it (its process has loaded the kernel for the interval); a replay takes it when its walk is
    large enough to repay loading numba (``compiled_walk``), decided once per replay so that
    its report does not depend on how its pairs are chunked or what a process has loaded.

    numpy's walk: paths advance ``SEGMENT`` steps at a time, every running sum carried over from
    the last segment (``_carried``: the values of one pass over the whole path), and a path
    leaves the working set once it has concluded for every threshold: nothing after a path's
    first conclusion matters, and on ``swebench_lite`` 57 % of all steps came after it."""
    thetas = np.atleast_1d(np.asarray(theta, dtype=np.float64))
    v = np.asarray(v)
    cases = v.shape[0]
    n_th = len(thetas)
    dec = np.zeros((n_th, cases), dtype=np.int8)
    stop = np.full((n_th, cases), kmax + 1, dtype=np.int64)
    if kmax > 0 and cases and compiled:
        cov = np.ones((1, kmax), dtype=bool) if cov_ok is None else np.asarray(cov_ok, dtype=bool)[:, :kmax]
        if len(cov) not in (1, cases):
            raise ValueError(f"cov_ok has {len(cov)} rows for {cases} paths")
        _walk(v[:, :kmax], np.arange(kmax)[None, :], lattice, n, thetas, a, cov, dec, stop)
    elif kmax > 0 and cases:
        log_inv_a = log_inv(a)
        cov_all = None if cov_ok is None else np.asarray(cov_ok, dtype=bool)
        step = max(1, _BLOCK // SEGMENT)
        for lo_c in range(0, cases, step):
            rows = np.arange(lo_c, min(cases, lo_c + step))
            cov = None
            if cov_all is not None:
                cov = cov_all[:, :kmax] if len(cov_all) == 1 else cov_all[rows, :kmax]
            _advance(v, rows, lattice, n, thetas, log_inv_a, kmax, cov, dec, stop)
    if np.ndim(theta) == 0:
        return dec[0], stop[0]
    return dec, stop


def betting_walks(values: np.ndarray, order: np.ndarray, lattice: int | None, n: int, theta: Sequence[float],
                  a: float, cov: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``betting_paths`` compiled, for every pair (row of ``values [P, N]``, per-task values)
    observed in every order (row of ``order [R, kmax]``, task indices): path ``i·R + r`` is pair
    ``i`` in order ``r``, read in place (a replay's paths, gathered first, were ``P·R·kmax`` values
    written and read again). ``cov`` ``[1 or R, kmax]``: coverage met at step t in each order.
    Returns ``(decision, stop)``, ``[thresholds, P·R]`` each."""
    thetas = np.atleast_1d(np.asarray(theta, dtype=np.float64))
    reps, kmax = order.shape
    cases = len(values) * reps
    dec = np.zeros((len(thetas), cases), dtype=np.int8)
    stop = np.full((len(thetas), cases), kmax + 1, dtype=np.int64)
    if kmax > 0 and cases:
        cov = np.ones((1, kmax), dtype=bool) if cov is None else np.asarray(cov, dtype=bool)
        if len(cov) not in (1, reps) or cov.shape[1] < kmax:
            raise ValueError(f"cov has shape {cov.shape}, not [1 or {reps}, {kmax}]")
        _walk(values, order, lattice, n, thetas, a, cov[:, :kmax], dec, stop)
    return dec, stop


def _walk(src: np.ndarray, order: np.ndarray, lattice: int | None, n: int, thetas: np.ndarray, a: float,
          cov: np.ndarray, dec: np.ndarray, stop: np.ndarray) -> None:
    """``betting_kernel.first_conclusions`` on arrays of the types it is compiled for."""
    from service.engine.betting_kernel import first_conclusions  # numba: on first use

    first_conclusions(np.ascontiguousarray(src, dtype=np.float64), np.ascontiguousarray(order, dtype=np.int64),
                      float(lattice or 1), int(lattice or 0), n, thetas, log_inv(a), order.shape[1],
                      np.ascontiguousarray(cov, dtype=bool), dec, stop)


def _advance(v: np.ndarray, rows: np.ndarray, lattice: int | None, n: int, thetas: np.ndarray, log_inv_a: float,
             kmax: int, cov: np.ndarray | None, dec: np.ndarray, stop: np.ndarray) -> None:
    """``betting_paths`` for the paths ``rows``, segment by segment (``cov``: ``[1 or rows,
    kmax]``), writing each path's first conclusion into ``dec`` and ``stop``."""
    scale = lattice or 1
    n_th = len(thetas)
    sums = np.zeros((3, len(rows)))  # S_t, Σx², Σv after the last segment
    wealth = np.zeros((n_th, 2, len(rows)))  # ln K± after the last segment, per threshold
    open_ = np.ones((n_th, len(rows)), dtype=bool)  # not concluded yet, per threshold
    active = np.arange(len(rows))  # paths open for some threshold
    for t0 in range(0, kmax, SEGMENT):
        if not len(active):
            break
        t1 = min(kmax, t0 + SEGMENT)
        vv = np.asarray(v[rows[active], t0:t1], dtype=np.float64)
        x = (vv / scale + 1.0) / 2.0
        xx = x * x
        s = _carried(sums[0, active], x)
        q = _carried(sums[1, active], xx)
        vsum = _carried(sums[2, active], vv, scratch=True)  # (vv is not needed after)
        prefix = _prefix_of(x, xx, s, q, n, t0 + 1)
        i = np.arange(t0 + 1, t1 + 1, dtype=np.float64)
        seg_cov = None
        if cov is not None:
            seg_cov = cov[:, t0:t1] if len(cov) == 1 else cov[active, t0:t1]
        for j, th in enumerate(thetas.tolist()):
            theta_x = (th + 1.0) / 2.0
            c, g = _centre(prefix, n, theta_x)
            gain_up, gain_dn = _gains(x, c, *_bets(g, c))
            up = _carried(wealth[j, 0, active], gain_up, scratch=True)
            dn = _carried(wealth[j, 1, active], gain_dn, scratch=True)
            acc, rej = _conclusions(vsum, s, up, dn, i, n, th, lattice, log_inv_a)
            hit = acc | rej
            if seg_cov is not None:
                hit &= seg_cov
            hit &= open_[j, active][:, None]
            found = np.flatnonzero(hit.any(axis=1))
            if len(found):
                first = np.argmax(hit[found], axis=1)
                where = rows[active[found]]
                dec[j, where] = np.where(acc[found, first], ACCEPT, REJECT)
                stop[j, where] = t0 + first + 1
                open_[j, active[found]] = False
            wealth[j, 0, active], wealth[j, 1, active] = up[:, -1], dn[:, -1]
        sums[0, active], sums[1, active], sums[2, active] = s[:, -1], q[:, -1], vsum[:, -1]
        active = active[open_[:, active].any(axis=0)]


def _sides(vsum: np.ndarray, s: np.ndarray, i: np.ndarray, n: int, theta: float,
           lattice: int | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per step: whether the mean so far is above ``θ`` (the side a conclusion takes), and
    whether no completion of the task set can change the full decision upwards or downwards
    (a conclusion there needs no wealth)."""
    theta_x = (theta + 1.0) / 2.0
    pos = above(vsum, i[None, :], theta, lattice)
    return pos, s / n > theta_x + TOL, (s + n - i) / n <= theta_x + TOL


def _conclusions(vsum: np.ndarray, s: np.ndarray, up: np.ndarray, dn: np.ndarray, i: np.ndarray, n: int,
                 theta: float, lattice: int | None, log_inv_a: float) -> tuple[np.ndarray, np.ndarray]:
    """Accept and reject per step (coverage aside) from the sums of the differences and of
    ``x`` and ``ln K±_t(θ_X)`` at step numbers ``i``: the rule of SPEC §4.2 (module doc)."""
    pos, sure_up, sure_dn = _sides(vsum, s, i, n, theta, lattice)
    return pos & (sure_up | (up >= log_inv_a)), ~pos & (sure_dn | (dn >= log_inv_a))


def _verdicts(x: np.ndarray, vsum: np.ndarray, s: np.ndarray, c: np.ndarray, g: np.ndarray, n: int, theta: float,
              lattice: int | None, log_inv_a: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per step of each path: accept and reject (coverage aside) and ``ln K±_t(θ_X)``, from
    the values ``x`` in ``[0, 1]``, the sums of the differences ``vsum`` and of ``x`` (``s``),
    and the centres and bet bases ``c, g`` at ``θ``, for ``betting_path``; the replay's
    ``_advance`` computes the same per segment, and both decide by ``_conclusions``."""
    i = np.arange(1, x.shape[1] + 1, dtype=np.float64)
    up, dn = _log_wealth(x, c, *_bets(g, c))
    acc, rej = _conclusions(vsum, s, up, dn, i, n, theta, lattice, log_inv_a)
    return acc, rej, up, dn


@dataclass(frozen=True)
class PathVerdict:
    """The ``anytime`` rule along one observed sequence (``betting_path``): the first
    conclusion where coverage holds (``decision``, ``stop``; ``stop = k + 1`` when none) and the
    first conclusion regardless of coverage (``free_decision``), with ``ln K±_t(θ_X)`` after each step."""

    decision: int
    stop: int
    free_decision: int
    log_up: np.ndarray
    log_down: np.ndarray


def betting_path(v: np.ndarray, lattice: int | None, n: int, theta: float, a: float,
                 cov_ok: np.ndarray | None = None) -> PathVerdict:
    """``betting_paths`` for the one path ``v`` (all its steps, one threshold) with and without
    the coverage mask ``cov_ok`` in one pass: a live answer needs both (the second says whether
    the floors alone hold the rule back), and the wealth at the stop. The same arithmetic as
    ``betting_paths`` (a test checks they agree)."""
    k = len(v)
    vv = np.asarray(v, dtype=np.float64)[None, :]
    x = (vv / (lattice or 1) + 1.0) / 2.0
    theta_x = (theta + 1.0) / 2.0
    log_inv_a = log_inv(a)
    s, c, g = _steps(x, n, theta_x)
    acc, rej, up, dn = (r[0] for r in _verdicts(x, np.cumsum(vv, axis=1), s, c, g, n, theta, lattice, log_inv_a))

    def first(hit: np.ndarray) -> tuple[int, int]:
        j = int(np.argmax(hit)) if k else 0
        if not k or not hit[j]:
            return DEFER, k + 1
        return (ACCEPT if acc[j] else REJECT), j + 1

    hit = acc | rej
    free, free_stop = first(hit)
    dec, stop = (free, free_stop) if cov_ok is None else first(hit & np.asarray(cov_ok[:k], dtype=bool))
    return PathVerdict(dec, stop, free, up, dn)


def conclusion_strengths(v: np.ndarray, lattice: int | None, n: int, theta: float,
                         cov_ok: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """One path's conclusions at every level ``a`` at once: per step, whether a conclusion there
    accepts (the mean so far is above ``θ``) and its strength, the largest ``ln(1/a)`` at which
    the step concludes: ``ln K±_t(θ_X)`` of that side, ``+inf`` where no completion of the task
    set can change the full decision, ``-inf`` where ``cov_ok`` fails.

    The bets aim at ``θ`` only, so the wealth is the same at every level: the first step whose
    strength is ``>= ln(1/a)`` is ``betting_path``'s stop at level ``a``, the same comparisons
    on the same floats. A placement's Holm step-down tests every comparison at up to ``S``
    levels, and reads them all from one walk (``placement.holm_levels``)."""
    k = len(v)
    vv = np.asarray(v, dtype=np.float64)[None, :]
    x = (vv / (lattice or 1) + 1.0) / 2.0
    s, c, g = _steps(x, n, (theta + 1.0) / 2.0)
    up, dn = _log_wealth(x, c, *_bets(g, c))
    pos, sure_up, sure_dn = (r[0] for r in _sides(np.cumsum(vv, axis=1), s, np.arange(1, k + 1.0), n, theta, lattice))
    strength = np.where(pos, np.where(sure_up, np.inf, up[0]), np.where(sure_dn, np.inf, dn[0]))
    if cov_ok is not None:
        strength = np.where(np.asarray(cov_ok[:k], dtype=bool), strength, -np.inf)
    return pos, strength


def betting_statistic(d: np.ndarray, n: int, theta: float, a: float, t: int) -> dict[str, float]:
    """``ln K±_t(θ_X)`` at step ``t`` of the observed differences ``d`` (what the decision compares
    with ``ln(1/a)``)."""
    x = (np.asarray(d[:t], dtype=np.float64) + 1.0) / 2.0
    s, c, g = _steps(x[None, :], n, (theta + 1.0) / 2.0)
    up, dn = _log_wealth(x[None, :], c, *_bets(g, c))
    return {
        "log_wealth_up": float(up[0, -1]) if t else 0.0,
        "log_wealth_down": float(dn[0, -1]) if t else 0.0,
        "log_wealth_threshold": log_inv(a),
    }


XTOL = 1e-12
"""Width (in ``X``) of the bracket each end of the confidence sequence is narrowed to (``Δ = 2X − 1``:
2e-12 in the answer, which prints 12 significant digits)."""


def confidence_sequence(x: np.ndarray, n: int, a: float) -> tuple[float, float]:
    """The confidence sequence for ``μ`` (the mean of ``X``) after the observations ``x``: the
    candidate means that neither capital process has rejected, within the bounds any completion
    allows. Each ``μ`` is tested with bets aimed at it (the decision's construction at ``θ_X``),
    so ``θ_X`` is outside it exactly when the rule concludes on wealth. Valid at every ``t`` at once:
    ``P(∃t: μ ∉ CS_t) <= 2a`` (``a`` per side).

    ``K⁺`` rejects a lower ray of means and ``K⁻`` an upper one (each factor of ``K⁺`` falls as
    ``μ`` grows near the end, and tests/engine/test_betting_hull.py checks the rays on a dense
    grid with a literal reference), so the set is an interval whose ends are the two crossings
    of ``ln(1/a)``, found by root-finding from a kept mean to ``XTOL`` (``betting_kernel``:
    compiled, Brent's method). The kept mean is the sample mean, else the first kept point of
    a 256-point grid; when none is kept (an event of probability <= 2a) the sequence is the
    sample mean alone."""
    x = np.asarray(x, dtype=np.float64)
    t = len(x)
    if t == 0:
        return 0.0, 1.0
    s_t = float(x.sum())
    lo_any, hi_any = s_t / n, (s_t + n - t) / n
    if hi_any - lo_any <= 1e-12:
        return lo_any, hi_any
    from service.engine.betting_kernel import confidence_sequence as compiled  # numba: on first use

    return compiled(x, n, s_t, log_inv(a), False)
