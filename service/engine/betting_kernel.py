"""The ``anytime`` rule compiled (numba): the confidence sequence a live answer quotes, and
the walk of many paths to their first conclusions (``first_conclusions``, ``betting_paths``'s
compiled walk, for a live answer's forecast and large replays).

The confidence sequence: each end of ``betting.confidence_sequence`` found by Brent's method,
every candidate mean's wealth summed in one loop over the steps. Why: a live ``anytime``
decision reports the sequence, and the numpy search it replaces tested four means per end and
step of the search, each step some thirty array operations over ``8 × t`` values whose fixed
cost was most of the time: about 400 µs at ``t = 250``, half of such a request. Brent's method
tests one mean per step (secant or inverse quadratic interpolation, bisection when those
stall, and a last step of the tolerance towards the other side so the bracket itself closes),
about ten per end.

The wealth is the decision's arithmetic (``betting._prefix`` and ``_centre``, the bets, the
running sums in ``np.cumsum``'s order); only ``log1p`` may differ from numpy's in its last
bit (numpy's own SIMD ``log1p`` on a CPU with AVX-512 differed from the C library's on 8.5 %
of 2 M random arguments, by one unit in the last place), so each end is the numpy search's
to within ``XTOL``, and a walk concludes where numpy's does unless a wealth lands within
rounding of ``ln(1/a)``. Each end is a mean the test keeps within ``XTOL`` of one it rejects;
tests/engine/test_betting_hull.py checks that against a literal reference.

Loaded by a process's first ``anytime`` interval or large replay, at an API worker's start
(``service.main``) and at a Celery worker's (``replays.tasks``), from numba's cache beside
this file (compiled there once, on the first start of a fresh clone: 2.4 s for this module
with the walk, measured without its cache; 0.6 s to load from the cache).
"""

from __future__ import annotations

import math

import numpy as np

from service.engine.betting import RHO, XTOL
from service.engine.lattice_short import compiled
from service.engine.rules import ACCEPT, REJECT, TOL

GRID = 256
"""Means scanned for a kept start when the sample mean is rejected (an event of probability
``<= 2a``), nearest the lower completion bound first."""


@compiled
def _prefix(x, n):  # pragma: no cover - compiled
    """``betting._prefix`` for one path: ``S_{t−1}``, ``N − t + 1``, ``μ̂_{t−1}``, ``σ̂²_{t−1}``,
    from running sums taken in ``np.cumsum``'s order."""
    t = len(x)
    s_prev = np.empty(t)
    rem = np.empty(t)
    mu = np.empty(t)
    var = np.empty(t)
    s = 0.0
    q = 0.0
    for j in range(t):
        xj = x[j]
        xx = xj * xj
        s += xj
        q += xx
        i = j + 1.0
        sp = s - xj
        qp = q - xx
        s_prev[j] = sp
        rem[j] = n - i + 1.0
        mu[j] = (0.5 + sp) / i
        var[j] = (0.25 + max(qp - sp * sp / max(i - 1.0, 1.0), 0.0)) / i
    return s_prev, rem, mu, var


@compiled
def log_wealth(x, pre, n, m, up):  # pragma: no cover - compiled
    """``ln K⁺_t(m)`` (``up``) or ``ln K⁻_t(m)`` after all of ``x``, the bets aimed at ``m``."""
    s_prev, rem, mu, var = pre
    total = 0.0
    for j in range(len(x)):
        c = (n * m - s_prev[j]) / rem[j]
        edge = mu[j] - c
        g = edge / (var[j] + edge * edge)
        if up:
            lam = min(max(g, 0.0), RHO / max(c, 1e-9))
            total += math.log1p(lam * (x[j] - c))
        else:
            lam = min(max(-g, 0.0), RHO / max(1.0 - c, 1e-9))
            total += math.log1p(-lam * (x[j] - c))
    return total


@compiled
def _end(x, pre, n, inn, f_in, out, f_out, up, log_inv_a):  # pragma: no cover - compiled
    """A mean the ``up`` (or down) process keeps within ``XTOL`` of one it rejects, from a kept
    ``inn`` and a rejected ``out`` (``f``: ``ln K − ln(1/a)`` there, ``>= 0`` rejected).

    Brent's method: ``b`` the latest mean and ``c`` a tested mean on the other side of the
    crossing, ``a`` the mean before ``b``. Each step interpolates (secant, or inverse quadratic
    through ``a, b, c``) and falls back to the midpoint of ``b, c`` when the interpolated step
    would leave the bracket's inner three quarters or shrinks slower than the steps before it;
    a step never moves less than the tolerance, so the bracket closes from both sides."""
    if f_out < 0.0:  # the process keeps the bound after all (only rounding could say so)
        return out
    b, fb = inn, f_in
    c, fc = out, f_out
    a, fa = c, fc
    d = e = b - a
    for _ in range(400):
        if (fb < 0.0) == (fc < 0.0):  # b crossed: a (on the other side) bounds it again
            c, fc = a, fa
            d = e = b - a
        if abs(fc) < abs(fb):  # keep b the mean nearer the crossing
            a, fa = b, fb
            b, fb = c, fc
            c, fc = a, fa
        tol = 2.0 * 2.220446049250313e-16 * abs(b) + 0.25 * XTOL
        half = 0.5 * (c - b)
        if abs(half) <= tol:
            break
        if abs(e) >= tol and abs(fa) > abs(fb):
            s = fb / fa
            if a == c:
                p = 2.0 * half * s
                q = 1.0 - s
            else:
                qa = fa / fc
                r = fb / fc
                p = s * (2.0 * half * qa * (qa - r) - (b - a) * (r - 1.0))
                q = (qa - 1.0) * (r - 1.0) * (s - 1.0)
            if p > 0.0:
                q = -q
            else:
                p = -p
            if 2.0 * p < min(3.0 * half * q - abs(tol * q), abs(e * q)):
                e = d
                d = p / q
            else:
                d = e = half
        else:
            d = e = half
        a, fa = b, fb
        if abs(d) > tol:
            b += d
        else:
            b += tol if half > 0.0 else -tol
        fb = log_wealth(x, pre, n, b, up) - log_inv_a
    return b if fb < 0.0 else c


@compiled
def confidence_sequence(x, n, s_t, log_inv_a, from_grid):  # pragma: no cover - compiled
    """``betting.confidence_sequence`` past its trivial cases (``t >= 1``, the completion bounds
    more than 1e-12 apart; ``s_t`` the sum of ``x`` as numpy takes it). ``from_grid``: start
    from the grid even when the sample mean is kept (a test's way to reach that path)."""
    t = len(x)
    pre = _prefix(x, n)
    lo_any = s_t / n
    hi_any = (s_t + n - t) / n
    m = min(max(s_t / t, lo_any), hi_any)
    f_up = np.empty(3)
    f_dn = np.empty(3)
    for r, mm in enumerate((lo_any, m, hi_any)):
        f_up[r] = log_wealth(x, pre, n, mm, True) - log_inv_a
        f_dn[r] = log_wealth(x, pre, n, mm, False) - log_inv_a
    start = m
    if from_grid or not (f_up[1] < 0.0 and f_dn[1] < 0.0):
        step = (hi_any - lo_any) / (GRID - 1)  # np.linspace's points
        found = False
        for r in range(GRID):
            mm = hi_any if r == GRID - 1 else r * step + lo_any
            u = log_wealth(x, pre, n, mm, True) - log_inv_a
            d = log_wealth(x, pre, n, mm, False) - log_inv_a
            if u < 0.0 and d < 0.0:
                start, f_up[1], f_dn[1], found = mm, u, d, True
                break
        if not found:
            return m, m
    lower = lo_any
    if not (f_up[0] < 0.0 and f_dn[0] < 0.0):
        lower = _end(x, pre, n, start, f_up[1], lo_any, f_up[0], True, log_inv_a)
    upper = hi_any
    if not (f_up[2] < 0.0 and f_dn[2] < 0.0):
        upper = _end(x, pre, n, start, f_dn[1], hi_any, f_dn[2], False, log_inv_a)
    return lower, upper


@compiled
def first_conclusions(src, order, scale, lattice, n, thetas, log_inv_a, kmax, cov, dec, stop):  # pragma: no cover
    """``betting.betting_paths`` for every path, walked step by step until it has concluded for
    every threshold; its first conclusion per threshold goes into ``dec`` and ``stop`` (left as
    they are where none). Path ``p = i·R + r`` reads the values ``src[i, order[r, t]]`` (``R`` the
    rows of ``order``: a replay's pairs in its orders, without gathering them into paths first);
    ``cov`` row ``p mod`` its rows (one shared row, one per order or one per path).
    ``lattice`` 0: the values are the differences themselves.

    The arithmetic of the numpy rule (``betting._prefix_of``, ``_centre``, ``_bets``,
    ``_gains``, ``_conclusions``) expression for expression, the running sums added in
    observation order as ``np.cumsum`` adds them; ``log1p`` is the C library's (module doc). Of
    the two bets at a step one is 0, and its ``log1p(±0)`` adds nothing, so it is not taken:
    that halves the logarithms, which are most of a step's time."""
    n_th = len(thetas)
    up = np.empty(n_th)
    dn = np.empty(n_th)
    open_ = np.empty(n_th, dtype=np.bool_)
    theta_x = np.empty(n_th)
    for j in range(n_th):
        theta_x[j] = (thetas[j] + 1.0) / 2.0
    n_orders = order.shape[0]
    for p in range(src.shape[0] * n_orders):
        i_src = p // n_orders
        r = p - i_src * n_orders
        s = 0.0  # S_t: the sum of x
        q = 0.0  # the sum of x²
        vsum = 0.0  # the sum of the values themselves
        for j in range(n_th):
            up[j] = 0.0
            dn[j] = 0.0
            open_[j] = True
        n_open = n_th
        row = p % cov.shape[0]
        for t in range(kmax):
            vv = src[i_src, order[r, t]]
            x = (vv / scale + 1.0) / 2.0
            xx = x * x
            s += x
            q += xx
            vsum += vv
            i = t + 1.0
            s_prev = s - x
            q_prev = q - xx
            mu = (0.5 + s_prev) / i
            var = (0.25 + max(q_prev - s_prev * s_prev / max(i - 1.0, 1.0), 0.0)) / i
            rem = n - i + 1.0
            for j in range(n_th):
                if not open_[j]:
                    continue
                c = (n * theta_x[j] - s_prev) / rem
                edge = mu - c
                g = edge / (var + edge * edge)
                lam_up = min(max(g, 0.0), RHO / max(c, 1e-9))
                lam_dn = min(max(-g, 0.0), RHO / max(1.0 - c, 1e-9))
                xi = x - c
                if lam_up != 0.0:
                    up[j] += math.log1p(lam_up * xi)
                if lam_dn != 0.0:
                    dn[j] += math.log1p(-lam_dn * xi)
                if lattice > 0:
                    pos = vsum > thetas[j] * i * lattice + TOL
                else:
                    pos = vsum / max(i, 1.0) > thetas[j] + TOL
                if pos:
                    hit = s / n > theta_x[j] + TOL or up[j] >= log_inv_a
                else:
                    hit = (s + n - i) / n <= theta_x[j] + TOL or dn[j] >= log_inv_a
                if hit and cov[row, t]:
                    dec[j, p] = ACCEPT if pos else REJECT
                    stop[j, p] = t + 1
                    open_[j] = False
                    n_open -= 1
            if n_open == 0:  # nothing after a path's first conclusions matters
                break


def warm() -> None:
    """Load (or compile) every kernel now: the import is what a process pays, not its first
    interval or replay. Both ends searched, the grid scanned, and a path walked."""
    confidence_sequence(np.array([1.0, 0.0, 0.5, 1.0]), 40, 2.5, math.log(20.0), True)
    stop = np.zeros((1, 1), dtype=np.int64)
    first_conclusions(np.zeros((1, 1)), np.zeros((1, 1), dtype=np.int64), 1.0, 1, 2, np.zeros(1), math.log(20.0), 1,
                      np.ones((1, 1), dtype=np.bool_), np.zeros((1, 1), dtype=np.int8), stop)


warm()
