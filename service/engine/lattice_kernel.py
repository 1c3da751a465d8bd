"""The short sum of ``lattice.approx_runs`` as one compiled loop per row (numba).

Why compiled: in numpy the short sum is some sixty array operations per group of rows of one
``(k, c, n)``, and a replay of multi-trial records meets about 150 such groups per block of
cases, most of a few hundred rows. The interpreter's share of that work held the GIL for
roughly half of a replay of ``terminal_bench_1_fractional`` (py-spy ``--gil`` at 200 Hz: 1,023
samples of a chunk thread holding it, against an estimated 1,900 of replay time), and the
threads of a one-process replay ran side by side only 1.1-1.4x faster than one. Here each row is one pass: its
characteristic function at every frequency, the last frequency whose term matters, its
``k``-th power by the same repeated squaring as ``lattice._power`` and the projections on
its windows, with the GIL released.

It computes what ``lattice._fourier_cdf`` computes (that function stays, for the exact tails
and as the reference of the tests), with one difference: a row's sum stops at its own last
term above ``eps``, where numpy's block of rows stops at a column shared by the block. Both
leave out only terms of ``|φ_j|^k <= eps``, within ``lattice.truncation_error``, which the
brackets already add.

Importing this module costs a process about 0.45 s: numba (0.4 s), then the kernel, compiled
(about 0.6 s) or loaded from numba's cache beside this file, or in the user's cache when the
package is read-only (about 0.2 s). The import does both, so that a process that has the
module (``lattice.kernel_loaded``) has the kernel: a Celery worker imports it at start, any
other process on its first replay past ``lattice.COMPILED_FROM``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from service.engine.lattice import EPS_TERM, _tables, cdf_start, windows


def _compiled(fn):
    """``fn`` compiled without the GIL, cached on disk where numba finds a writable place (beside
    this file, else the user's cache); elsewhere compiled anew in each process."""
    try:
        return njit(cache=True, nogil=True)(fn)
    except RuntimeError:  # "cannot cache function": a read-only install and no writable home
        return njit(nogil=True)(fn)


@_compiled
def _rows(pmf, cos, nsin, k, which, gmat, thr, scale, out):  # pragma: no cover - compiled
    """``out[t, r] += scale·Σ_{j<top_r} Re(φ_rj^k·G_{t,which_r,j})`` per row ``r`` of ``pmf``."""
    n_rows, n_values = pmf.shape
    m = cos.shape[1]
    n_t = gmat.shape[0]
    re = np.empty(m)
    im = np.empty(m)
    pr = np.empty(m)
    pi = np.empty(m)
    for r in range(n_rows):
        re[:] = 0.0
        im[:] = 0.0
        for v in range(n_values):
            p = pmf[r, v]
            if p != 0.0:
                for j in range(m):
                    re[j] += p * cos[v, j]
                    im[j] += p * nsin[v, j]
        top = 0  # one past the last frequency whose term may exceed eps
        for j in range(m):
            if re[j] * re[j] + im[j] * im[j] > thr:
                top = j + 1
        # φ^k into pr, pi by repeated squaring of re, im in place, every frequency of the row at
        # each step (a loop that vectorises): the products of ``lattice._power``
        e = k
        started = False
        while True:
            if e & 1:
                if started:
                    for j in range(top):
                        x, y = pr[j] * re[j] - pi[j] * im[j], pr[j] * im[j] + pi[j] * re[j]
                        pr[j], pi[j] = x, y
                else:
                    for j in range(top):
                        pr[j], pi[j] = re[j], im[j]
                    started = True
            e >>= 1
            if e == 0:
                break
            for j in range(top):
                x, y = re[j] * re[j] - im[j] * im[j], re[j] * im[j] + im[j] * re[j]
                re[j], im[j] = x, y
        w = which[r]
        for t in range(n_t):
            acc = 0.0
            for j in range(top):
                acc += pr[j] * gmat[t, w, 2 * j] + pi[j] * gmat[t, w, 2 * j + 1]
            out[t, r] += scale * acc


def fourier_cdf(
    pmf: np.ndarray, values: tuple[int, ...], k: int, lo, cs: tuple[int, ...], n: int, eps: float = EPS_TERM
) -> np.ndarray:
    """``lattice._fourier_cdf``'s ``Σ_{s=lo}^{c} P(S ≡ s mod n)`` per row and threshold,
    ``[len(cs), rows]``, computed row by row (``lo`` one integer or one per row, rows with
    equal ``lo`` adjacent)."""
    m = (n - 1) // 2
    lo = np.asarray(lo, dtype=np.int64) if np.ndim(lo) > 0 else int(lo)
    lows, which, out = cdf_start(lo, cs, n, len(pmf))
    if which is None:
        which = np.zeros(len(pmf), dtype=np.int64)
    if m == 0 or not len(pmf):
        return out
    cos, nsin = _tables(values, n)
    gmat = windows(n, tuple(lows.tolist()), tuple(cs))  # [c, windows, 2m]
    # the slack of ``_fourier_cdf`` for the rounding of |φ|² (V products of magnitude <= 1)
    thr = eps ** (2.0 / k) - 4e-16 * (len(values) + 2)
    _rows(
        np.ascontiguousarray(pmf, dtype=np.float64), cos, nsin, int(k), which.astype(np.int64), gmat, thr, 2.0 / n, out
    )
    return out


def warm() -> None:
    """Compile the kernel (or load it from the cache): done on import."""
    fourier_cdf(np.full((2, 3), 1.0 / 3.0), (-1, 0, 1), 4, np.array([-4, -3]), (0, -1), 9)


warm()

__all__ = ["fourier_cdf", "warm"]
