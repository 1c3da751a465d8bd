"""The anytime-valid rule along one path, vectorised over steps.

``rules.anytime_paths`` walks the steps in Python and vectorises over paths: right for a
replay (thousands of paths), slow for a live decision (one path of a few hundred steps,
each step a few dozen numpy calls on one element: 5-20 ms per decision on the event loop).
Every running quantity of the rule is a prefix sum, so for one path the same values come
out of ``cumsum`` over the steps (a sequential sum in the loop's order, hence the same
floating-point values); the answer is the first step that concludes. A test checks the two
agree exactly, decision and stopping step, on random paths with and without a lattice.
"""

from __future__ import annotations

import math
from threading import Lock

import numpy as np

from service.engine.rules import ACCEPT, DEFER, REJECT, TOL, log_inv

_LOG_STEPS = np.zeros(0)
_LOG_LOCK = Lock()


def _log_steps(kmax: int) -> np.ndarray:
    """``math.log(1 + i)`` for ``i = 1..kmax`` (libm's values, as the loop computes them)."""
    global _LOG_STEPS
    table = _LOG_STEPS
    if len(table) < kmax:
        with _LOG_LOCK:
            grown = max(kmax, 2 * len(_LOG_STEPS), 1024)
            table = np.array([math.log(1.0 + i) for i in range(1, grown + 1)])
            _LOG_STEPS = table
    return table[:kmax]


def anytime_path(
    v: np.ndarray, lattice: int | None, n: int, theta: float, a: float, kmax: int, cov_ok: np.ndarray | None = None
) -> tuple[int, int]:
    """``(decision, stop)`` of ``rules.anytime_paths`` for the single path ``v`` (``[>= kmax]``
    lattice values, or differences when ``lattice`` is None) and one threshold; ``cov_ok``:
    ``[kmax]`` coverage met at step t. ``stop = kmax + 1`` when no step concludes."""
    if kmax <= 0:
        return DEFER, kmax + 1
    log_inv_a = log_inv(a)
    theta = float(theta)
    theta_x = (theta + 1.0) / 2.0
    scale = lattice or 1
    vv = np.asarray(v[:kmax], dtype=np.float64)
    x = (vv / scale + 1.0) / 2.0
    i = np.arange(1, kmax + 1, dtype=np.float64)
    s = np.cumsum(x)  # after step i
    s_before = np.empty(kmax)
    s_before[0] = 0.0
    s_before[1:] = s[:-1]
    mu_before = (0.5 + s_before) / i  # the loop's running mean before step i (0.5 at i = 1)
    var_run = np.empty(kmax + 1)
    var_run[0] = 0.25
    var_run[1:] = (x - mu_before) ** 2
    var_before = np.cumsum(var_run)[:-1]
    lam = np.minimum(0.5, np.sqrt(2.0 * log_inv_a / (var_before / i * i * _log_steps(kmax))))
    psi = -np.log1p(-lam) - lam
    rem = n - i + 1
    ai = x + s_before / rem
    bi = n / rem
    l1 = np.cumsum(lam * ai)
    l2 = np.cumsum(lam * bi)
    q0 = np.cumsum(psi * ai * ai)
    q1 = np.cumsum(psi * ai * bi)
    q2 = np.cumsum(psi * bi * bi)
    vsum = np.cumsum(vv)
    lo = s / n
    hi = (s + n - i) / n
    pos = vsum > theta * i * lattice + TOL if lattice is not None else vsum / i > theta + TOL

    def wealth(sign: int, mu: np.ndarray | float) -> np.ndarray:
        return sign * (l1 - l2 * mu) - (q0 - 2.0 * q1 * mu + q2 * mu * mu)

    acc = pos & ((lo > theta_x + TOL) | ((wealth(1, lo) >= log_inv_a) & (wealth(1, theta_x) >= log_inv_a)))
    rej = ~pos & ((hi <= theta_x + TOL) | ((wealth(-1, theta_x) >= log_inv_a) & (wealth(-1, hi) >= log_inv_a)))
    hit = acc | rej
    if cov_ok is not None:
        hit &= np.asarray(cov_ok[:kmax], dtype=bool)
    first = int(np.argmax(hit))
    if not hit[first]:
        return DEFER, kmax + 1
    return (ACCEPT if acc[first] else REJECT), first + 1


__all__ = ["anytime_path"]
