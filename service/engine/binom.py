"""The binomial's pmf, cdf and sf as ``scipy.stats.binom`` computes them, without importing
``scipy.stats``.

Importing ``scipy.stats`` costs a process about a second (scipy 1.17 on the two-core
development machine: 0.9-1.3 s, against 0.3 s for ``scipy.special``), which every CLI command
paid before its first line of work, though a replay needs only these three functions.
``scipy.stats.binom`` evaluates them with Boost's ufuncs in ``scipy.special`` (``_binom_pmf``,
``_binom_cdf``, ``_binom_sf``) after checking its arguments; this module calls the same ufuncs
after the same checks, so the numbers are the same bits (``tests/engine/test_binom.py``
compares them over a grid with every edge). A scipy without those ufuncs gets
``scipy.stats.binom`` itself, imported on first use.
"""

from __future__ import annotations

import numpy as np

try:  # private to scipy: a release may move it, and then scipy.stats answers
    from scipy.special import _ufuncs
except ImportError:  # pragma: no cover - depends on the installed scipy
    _ufuncs = None

_PMF = getattr(_ufuncs, "_binom_pmf", None)
_CDF = getattr(_ufuncs, "_binom_cdf", None)
_SF = getattr(_ufuncs, "_binom_sf", None)


def _stats_binom():
    from scipy import stats

    return stats.binom


def _prepare(k, n, p) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Arrays broadcast to one shape, and where ``(n, p)`` are valid (n a whole number >= 0,
    0 <= p <= 1): elsewhere scipy answers NaN."""
    k, n, p = np.broadcast_arrays(*(np.asarray(x, dtype=np.float64) for x in (k, n, p)))
    valid = (n >= 0) & (np.floor(n) == n) & (p >= 0) & (p <= 1)
    return k, n, p, valid


def _result(out: np.ndarray):
    return out[()] if out.ndim == 0 else out


def pmf(x, n, p):
    """``P(X = x)``, ``X ~ Binomial(n, p)``: 0 off the whole numbers of ``[0, n]``."""
    if _PMF is None:
        return _stats_binom().pmf(x, n, p)
    x, n, p, valid = _prepare(x, n, p)
    out = np.zeros(x.shape)
    at = valid & (x >= 0) & (x <= n) & (np.floor(x) == x)
    out[at] = np.clip(_PMF(x[at], n[at], p[at]), 0.0, 1.0)
    out[~valid | np.isnan(x)] = np.nan
    return _result(out)


def cdf(k, n, p):
    """``P(X <= k)``: 0 below 0, 1 from ``n`` on."""
    return _cumulative(_CDF, "cdf", k, n, p, below=0.0, beyond=1.0)


def sf(k, n, p):
    """``P(X > k)``: 1 below 0, 0 from ``n`` on."""
    return _cumulative(_SF, "sf", k, n, p, below=1.0, beyond=0.0)


def _cumulative(ufunc, name: str, k, n, p, below: float, beyond: float):
    """``cdf`` or ``sf`` by ``ufunc`` at ``floor(k)`` within ``[0, n)``; ``below`` under 0,
    ``beyond`` from ``n`` on, as ``scipy.stats`` answers there."""
    if ufunc is None:
        return getattr(_stats_binom(), name)(k, n, p)
    k, n, p, valid = _prepare(k, n, p)
    out = np.where(k < 0, below, beyond)
    at = valid & (k >= 0) & (k < n) & np.isfinite(k)
    out[at] = np.clip(ufunc(np.floor(k[at]), n[at], p[at]), 0.0, 1.0)
    out[~valid | np.isnan(k)] = np.nan
    return _result(out)


__all__ = ["cdf", "pmf", "sf"]
