"""The ``anytime`` rule's confidence sequence compiled (numba): each end of
``betting.confidence_sequence`` found by Brent's method, every candidate mean's wealth summed
in one loop over the steps.

Why: a live ``anytime`` decision reports the sequence, and the numpy search it replaces tested
four means per end and step of the search, each step some thirty array operations over
``8 × t`` values whose fixed cost was most of the time: about 400 µs at ``t = 250``, half of
such a request. Brent's method tests one mean per step (secant or inverse quadratic
interpolation, bisection when those stall, and a last step of the tolerance towards the other
side so the bracket itself closes), about ten per end.

The wealth is the decision's arithmetic (``betting._prefix`` and ``_centre``, the bets, the
running sums in ``np.cumsum``'s order); only ``log1p`` may differ from numpy's in its last
bit, so each end is the numpy search's to within ``XTOL``. Each end is a mean the test keeps
within ``XTOL`` of one it rejects; tests/engine/test_betting_hull.py checks that against a
literal reference.

Loaded by a process's first ``anytime`` interval, or at an API worker's start
(``service.main``), from numba's cache beside this file (compiled there once: 2.5 s with the
orders' kernel, on the first start of a fresh clone).
"""

from __future__ import annotations

import math

import numpy as np

from service.engine.betting import RHO, XTOL
from service.engine.lattice_short import compiled

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


def warm() -> None:
    """Load (or compile) every kernel now: the import is what a process pays, not its first
    interval. Both ends searched, and the grid scanned."""
    confidence_sequence(np.array([1.0, 0.0, 0.5, 1.0]), 40, 2.5, math.log(20.0), True)


warm()
