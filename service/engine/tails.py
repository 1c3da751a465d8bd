"""Exact resampling tails of a lattice bootstrap (SPEC §4.2): ``P(Σ_{i<=k} V_i <= c)`` for ``k``
draws from a case's observed histogram.

* ``tail_trinomial``: the closed form for 0/1 differences (a sum of binomials), the
  reference the fast paths are tested against;
* ``tail_lattice``: any small lattice, through the k-th power of a discrete Fourier
  transform summed over a window (the whole support, or a shorter one that holds the law
  but for a bounded mass);
* ``tail_binary``: 0/1 tails through ``tail_lattice`` and a per-process memo
  (``memo_binary``): a replay meets the same few thousand samples millions of times.

Tails within ``FAR_TAIL`` of 0 or 1 by Bernstein's inequality are taken as 0 or 1: they
move no decision.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Callable

import numpy as np

from service.engine import binom, tail_tables
from service.engine.arraycache import bounded_cache

FAR_TAIL = 1e-13


def tail_trinomial(k, n_plus, n_minus, c):
    """Exact ``P(X - Y <= c)`` for ``(X, Y, ·) ~ Multinomial(k; n+/k, n-/k, ·)``.

    Condition on ``M = X + Y ~ Bin(k, (n+ + n-)/k)``; then ``X | M ~ Bin(M, n+/(n+ + n-))``
    and ``X - Y <= c`` iff ``X <= floor((c + M)/2)``. Vectorised over cases.
    """
    k = np.asarray(k, dtype=np.int64)
    n_plus = np.asarray(n_plus, dtype=np.int64)
    n_minus = np.asarray(n_minus, dtype=np.int64)
    c = np.asarray(c, dtype=np.int64)
    k, n_plus, n_minus, c = np.broadcast_arrays(k, n_plus, n_minus, c)
    out = np.empty(k.shape, dtype=np.float64)
    out[...] = tail_trinomial_screen(k, n_plus, n_minus, c)
    todo = np.flatnonzero(np.isnan(out.ravel()))
    flat = [x.ravel()[todo] for x in (k, n_plus, n_minus, c)]
    res = np.empty(len(todo))
    kmax = int(flat[0].max()) if flat[0].size else 0
    step = max(1, 2_000_000 // (kmax + 1))
    m_axis = np.arange(kmax + 1)
    for i in range(0, len(res), step):
        kk, npl, nmi, cc = (x[i : i + step, None] for x in flat)
        disc = npl + nmi
        p_m = binom.pmf(m_axis[None, :], kk, disc / np.maximum(kk, 1))
        with np.errstate(invalid="ignore", divide="ignore"):
            q = np.where(disc > 0, npl / np.maximum(disc, 1), 0.0)
        x_max = np.floor_divide(cc + m_axis[None, :], 2)
        cond = binom.cdf(x_max, m_axis[None, :], q)
        cond = np.where(x_max < 0, 0.0, cond)
        cond = np.where(m_axis[None, :] > kk, 0.0, cond)
        res[i : i + step] = np.clip(np.sum(p_m * cond, axis=1), 0.0, 1.0)
    out.ravel()[todo] = res
    return out


def tail_trinomial_screen(k, n_plus, n_minus, c) -> np.ndarray:
    """0 or 1 where Bernstein's inequality puts the tail within ``FAR_TAIL`` of it, else NaN.

    Such tails move no decision (every level ``a`` and resample count ``B`` in use is far
    above ``FAR_TAIL``), and a replay is mostly made of them.
    """
    k, n_plus, n_minus, c = np.broadcast_arrays(*(np.asarray(x, dtype=np.int64) for x in (k, n_plus, n_minus, c)))
    kf = np.maximum(k, 1).astype(np.float64)
    m = (n_plus - n_minus) / kf
    var = np.maximum((n_plus + n_minus) / kf - m * m, 0.0)
    t_low = m - c / kf  # > 0: c lies below the mean, p_low is a lower tail
    t_high = (c + 1) / kf - m  # > 0: c+1 lies above the mean, 1 - p_low is an upper tail
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        b_low = np.where(t_low > 0, np.exp(-kf * t_low**2 / (2 * var + 4 * t_low / 3)), 1.0)
        b_high = np.where(t_high > 0, np.exp(-kf * t_high**2 / (2 * var + 4 * t_high / 3)), 1.0)
    return np.where(b_low < FAR_TAIL, 0.0, np.where(b_high < FAR_TAIL, 1.0, np.nan))


_DENSE_MAX_K = 1447
"""Largest ``k`` whose tails are kept in a dense ``[k+1, k+1]`` table (2**21 entries, 16 MB)."""
_DENSE_BYTES = 192 << 20
"""Memory of the dense tables a process keeps; the least recently used go first."""
_dense: OrderedDict[tuple, tail_tables.Table] = OrderedDict()
_dense_lock = threading.Lock()
_TAIL_MEMO: dict[tuple, float] = {}
"""Memoized values for ``k`` past ``_DENSE_MAX_K``, by ``(k, n+, n-, c, *tag)``."""
_MEMO_ENTRIES = 250_000
"""Most entries of ``_TAIL_MEMO`` (about 240 bytes each: 60 MB). With 4,000,000 a replay of 20
systems x 3,000 tasks at B = 200 peaked at 1.14-1.17 GB of RSS in 9.7-10.9 s; with 250,000, at
0.65 GB in 8.3-9.0 s (the fuller memo saved no time)."""


def _dense_table(key: tuple) -> tail_tables.Table:
    """The values of every ``(n+, n-)`` at ``key = (k, c, ...)`` met so far (``Table.get``:
    NaN where not yet), shared by the threads of a process and, where ``tail_tables.share`` is
    on, by the processes of the host (a value written twice is the same number)."""
    with _dense_lock:
        table = _dense.get(key)
        if table is not None:
            _dense.move_to_end(key)
            return table
        table = tail_tables.new_table(key, key[0])
        _dense[key] = table
        total = sum(t.nbytes for t in _dense.values())
        while total > _DENSE_BYTES and len(_dense) > 1:
            total -= _dense.popitem(last=False)[1].nbytes
        return table


def chernoff_binary(k, n_plus, n_minus, c) -> np.ndarray:
    """A rigorous upper bound on the smaller resampling tail of a 0/1 sample: ``P(S <= c)``
    where ``n+ - n- > c`` (the mean is above ``c``), else ``P(S >= c + 1)``; ``S`` the sum of
    ``k`` draws from ``-1, 0, 1`` in proportions ``n-, k - n+ - n-, n+``.

    Chernoff's bound at its best exponent: ``P(S <= c) <= M(t)^k·e^{tc}`` for every ``t >= 0``,
    ``M(t) = E e^{-tX} = p0 + p+/x + p-·x`` with ``x = e^t``; the best ``x`` is the positive
    root of ``(k + c)p-·x² + c·p0·x - (k - c)p+ = 0``. Any ``x >= 1`` gives a valid bound, so
    the root's rounding only loosens it; the factor ``1 + 1e-9`` covers the rounding of the
    logarithms. Far sharper than Bernstein's bound (``tail_trinomial_screen``) where the law is
    skewed: on a 134 x 500 board, 42 % of the tails that Bernstein leaves to the FFT are below
    1e-13 by it, 68 % below the point where 200 resamples conclude for every uniform."""
    k, n_plus, n_minus, c = np.broadcast_arrays(*(np.asarray(x, dtype=np.int64) for x in (k, n_plus, n_minus, c)))
    pos = n_plus - n_minus > c
    # the wrong side as a lower tail: P(S >= c + 1) = P(-S <= -c - 1), -S with + and - swapped
    up = np.where(pos, n_plus, n_minus).astype(np.float64)
    dn = np.where(pos, n_minus, n_plus).astype(np.float64)
    cc = np.where(pos, c, -c - 1).astype(np.float64)
    kf = np.maximum(k, 1).astype(np.float64)
    pp, pm = up / kf, dn / kf
    p0 = np.maximum(kf - up - dn, 0.0) / kf
    a2, b1, c0 = (kf + cc) * pm, cc * p0, (kf - cc) * pp
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        disc = np.sqrt(b1 * b1 + 4.0 * a2 * c0)
        x = np.where(b1 >= 0, 2.0 * c0 / (b1 + disc), (disc - b1) / (2.0 * a2))  # each without cancellation
        x = np.clip(np.nan_to_num(x, nan=1.0, posinf=1e300), 1.0, 1e300)  # inf: no -1 draws, t -> inf
        log_b = kf * np.log(p0 + pp / x + pm * x) + cc * np.log(x)
        bound = np.exp(log_b) * (1.0 + 1e-9)
    return np.where(k > 0, np.minimum(np.nan_to_num(bound, nan=1.0), 1.0), 1.0)


def _tails_now(k: np.ndarray, n_plus: np.ndarray, n_minus: np.ndarray, c: np.ndarray) -> np.ndarray:
    """The tails, computed: Bernstein's screen first (cheap), the FFT only for the rest. (The
    replay's rules ask only for tails that Chernoff's bound cannot place: ``chernoff_binary``.)"""
    vals = tail_trinomial_screen(k, n_plus, n_minus, c)
    todo = np.flatnonzero(np.isnan(vals))
    if len(todo):
        hist = np.stack([n_minus[todo], k[todo] - n_plus[todo] - n_minus[todo], n_plus[todo]], axis=1)
        vals[todo] = tail_lattice(hist, np.array([-1, 0, 1]), c[todo])
    return vals


def memo_binary(tag: tuple, compute: Callable[..., np.ndarray], k, n_plus, n_minus, c) -> np.ndarray:
    """``compute(k, n+, n-, c)`` per 0/1 sample through a per-process memo: chunks of one
    replay meet the same samples again.

    The memo is a dense table per ``(k, c, *tag)`` indexed by ``(n+, n-)``, so a block's
    thousands of samples are looked up and stored with array indexing; keys of a ``k`` too
    large for a table go through a dict."""
    k, n_plus, n_minus, c = (np.asarray(x, dtype=np.int64).ravel() for x in (k, n_plus, n_minus, c))
    out = np.empty(len(k))
    dense = k <= _DENSE_MAX_K
    if dense.any():
        idx = np.flatnonzero(dense)
        key = (k[idx] << 32) + (c[idx] + (1 << 31))  # one integer per (k, c): |c| <= k < 2**31
        kc, which = np.unique(key, return_inverse=True)
        by_kc = np.argsort(which, kind="stable")
        edges = np.r_[0, np.cumsum(np.bincount(which, minlength=len(kc)))]
        for code, lo, hi in zip(kc.tolist(), edges[:-1], edges[1:], strict=True):
            kk, cc = code >> 32, (code & 0xFFFFFFFF) - (1 << 31)
            rows = idx[by_kc[lo:hi]]
            table = _dense_table((kk, cc, *tag))
            got = table.get(n_plus[rows], n_minus[rows])
            miss = np.flatnonzero(np.isnan(got))
            if len(miss):
                r = rows[miss]
                got[miss] = compute(k[r], n_plus[r], n_minus[r], c[r])
                table.put(n_plus[r], n_minus[r], got[miss])
            out[rows] = got
    rest = np.flatnonzero(~dense)
    if len(rest):
        keys = list(zip(k[rest].tolist(), n_plus[rest].tolist(), n_minus[rest].tolist(), c[rest].tolist(),
                        strict=True))
        if tag:
            keys = [(*key, *tag) for key in keys]
        found = [_TAIL_MEMO.get(key) for key in keys]  # read once: another thread may clear it
        missing = [i for i, v in enumerate(found) if v is None]
        if missing:
            r = rest[np.array(missing)]
            if len(_TAIL_MEMO) + len(missing) > _MEMO_ENTRIES:
                _TAIL_MEMO.clear()
            for i, v in zip(missing, compute(k[r], n_plus[r], n_minus[r], c[r]).tolist(), strict=True):
                found[i] = v
                if len(_TAIL_MEMO) < _MEMO_ENTRIES:  # (checked per entry: the threads share the memo)
                    _TAIL_MEMO[keys[i]] = v
        out[rest] = found
    return out


def tail_binary(k, n_plus, n_minus, c) -> np.ndarray:
    """``P(X - Y <= c)`` as ``tail_trinomial``, through the FFT convolution (about 3× faster)
    and a per-process memo (``memo_binary``)."""
    return memo_binary((), _tails_now, k, n_plus, n_minus, c)


def _int_power(z: np.ndarray, n: int) -> np.ndarray:
    """``z**n`` by repeated squaring: a dozen multiplications instead of complex exp/log. In
    place (``z`` is overwritten): the same products, without a fresh array for each (they are
    large enough that every new one is fresh pages from the kernel)."""
    result = None
    base = z
    while n:
        if n & 1:
            result = base.copy() if result is None else np.multiply(result, base, out=result)
        n >>= 1
        if n:
            np.multiply(base, base, out=base)
    return result if result is not None else np.ones_like(z)


def lattice_screen(hist: np.ndarray, values: np.ndarray, c: np.ndarray) -> np.ndarray:
    """0 or 1 where Bernstein's inequality puts ``P(Σ V_i <= c)`` within ``FAR_TAIL`` of
    it (as ``tail_trinomial_screen``, for any lattice histogram), else NaN."""
    hist = np.asarray(hist, dtype=np.float64)
    vals = np.asarray(values, dtype=np.float64)
    k = hist.sum(axis=1)
    kf = np.maximum(k, 1.0)
    m = hist @ vals / kf
    var = np.maximum(hist @ (vals * vals) / kf - m * m, 0.0)
    b = float(vals.max() - vals.min())
    t_low = m - c / kf
    t_high = (c + 1) / kf - m
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        b_low = np.where(t_low > 0, np.exp(-kf * t_low**2 / (2 * var + 2 * b * t_low / 3)), 1.0)
        b_high = np.where(t_high > 0, np.exp(-kf * t_high**2 / (2 * var + 2 * b * t_high / 3)), 1.0)
    out = np.where(b_low < FAR_TAIL, 0.0, np.where(b_high < FAR_TAIL, 1.0, np.nan))
    return np.where(k == 0, 1.0, out)


def lattice_args(hist, values, c) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int, int]:
    """A lattice tail's arguments as its kernels take them: ``(hist`` float64, ``values`` and
    ``c`` int64, ``k`` the draws per row, the least value, the values' span``)``."""
    hist = np.asarray(hist, dtype=np.float64)
    values = np.asarray(values, dtype=np.int64)
    vmin = int(values.min())
    k = hist.sum(axis=1).astype(np.int64)
    return hist, values, np.asarray(c, dtype=np.int64), k, vmin, int(values.max()) - vmin


def tail_lattice(hist: np.ndarray, values: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Exact ``P(Σ_{i<=k} V_i <= c)`` for ``k = Σ hist`` iid draws from the empirical
    distribution ``hist/k`` over integer ``values`` (sorted ascending), per row.

    The k-th power of the shifted support's discrete Fourier transform is summed over a
    window ending at ``c`` against the transform of a run of ones (``_cdf_weights``), rows
    grouped by ``k`` and transform length: the whole support (no aliasing) or, where the law
    is narrower, a window that holds it but for ``2·EPS_WINDOW`` (``_window_sizes``).
    """
    hist, values, c, k, vmin, span = lattice_args(hist, values, c)
    out = lattice_screen(hist, values, c)
    idx = c - vmin * k  # the sum of k draws, shifted to start at 0
    sure = np.isnan(out) & ((idx < 0) | (idx >= span * k))
    out[sure] = np.where(idx[sure] < 0, 0.0, 1.0)
    for kk in np.unique(k):
        rows = np.flatnonzero((k == kk) & np.isnan(out))
        if not len(rows):
            continue
        full = 1 << max(1, int(span * kk).bit_length())  # > span·k: the sum's support fits
        sizes = _window_sizes(hist[rows], values - vmin, int(kk), idx[rows], full)
        for nfft in np.unique(sizes).tolist():
            of_size = rows[sizes == nfft]
            # rows a block at a time, so that the spectra being raised to the k-th power stay
            # in cache (every row is computed on its own: the blocks do not change its numbers)
            per = max(1, _FFT_BLOCK // nfft)
            for i in range(0, len(of_size), per):
                r = of_size[i : i + per]
                pmf = np.zeros((len(r), span + 1))
                pmf[:, values - vmin] = hist[r] / kk
                f = _int_power(np.fft.rfft(pmf, nfft, axis=1), int(kk))
                spec = np.ascontiguousarray(f).view(np.float64)  # [re, im] pairs per frequency
                for m in np.unique(idx[r]).tolist():
                    at = np.flatnonzero(idx[r] == m)
                    total = spec[at, 0]  # the spectrum at 0: the law's total mass
                    lo = 0 if nfft == full else m - nfft // 2
                    out[r[at]] = (spec[at] * _cdf_weights(lo, m, nfft)).sum(axis=1) / total
    return np.clip(out, 0.0, 1.0)


EPS_WINDOW = 1e-18
"""Bernstein's bound on the law's mass left outside a short transform's window, each side."""


def _window_sizes(hist: np.ndarray, y: np.ndarray, k: int, m: np.ndarray, full: int) -> np.ndarray:
    """Per row, the transform length for ``P(S <= m)`` (``S`` the sum of ``k`` draws over the
    shifted support ``y``, from 0 to its span): ``full``, or a shorter power of two ``n``
    whose window ``[m - n/2, m + n/2 - 1]`` holds the law but for at most ``EPS_WINDOW`` on
    each side. By Bernstein's inequality (draws within ``[0, span]`` of their mean ``μ``),
    ``P(S - kμ >= t) <= exp(-t²/(2kσ² + 2bt/3))``; the window reaches ``t`` past the mean on
    each side. The sum over the window of the wrapped law then differs from ``P(S <= m)``
    by at most ``2·EPS_WINDOW``: the mass it misses below and what wraps into it. A short
    transform serves the narrow laws of most 0/1 tails (2.4x less work on a 134 x 500 board)."""
    yf = y.astype(np.float64)
    p = hist / k
    ey = p @ yf
    var = k * np.maximum(p @ (yf * yf) - ey * ey, 0.0)
    log_inv = math.log(1.0 / EPS_WINDOW)

    def reach(b: np.ndarray) -> np.ndarray:  # the t whose Bernstein bound is EPS_WINDOW
        lin = 2.0 * b * log_inv / 3.0
        return (lin + np.sqrt(lin * lin + 8.0 * var * log_inv)) / 2.0

    mean = k * ey
    span = float(yf.max())
    half = np.maximum(m - (mean - reach(ey)), (mean + reach(span - ey)) - m + 1.0) * (1.0 + 1e-9) + 1.0
    n = np.exp2(np.ceil(np.log2(np.maximum(2.0 * half, 2.0 * (span + 1.0)))))
    return np.where(n >= full, full, n).astype(np.int64)


@bounded_cache(16 << 20)
def _cdf_weights(lo: int, hi: int, nfft: int) -> np.ndarray:
    """Weights ``w`` on an ``rfft`` spectrum ``F`` (as [re, im] pairs) with ``Σ F·w`` equal to
    ``Σ_{lo<=s<=hi}`` of its (periodic) inverse: ``(1/N)(F_0 n + 2 Re Σ_j F_j S_j + F_{N/2} T)``
    for ``n = hi - lo + 1`` terms, with ``S_j = Σ_s e^{2πi js/N} = e^{iθ(lo+hi)/2} sin(θn/2) /
    sin(θ/2)`` (``θ = 2πj/N``) and ``T = Σ_s (-1)^s``. One pass over the spectrum instead of
    an inverse transform and a running sum of it."""
    j = np.arange(1, nfft // 2)
    theta = 2 * np.pi * j / nfft
    count = hi - lo + 1
    s = np.exp(0.5j * theta * (lo + hi)) * (np.sin(theta * count / 2) / np.sin(theta / 2))
    g = np.empty(nfft // 2 + 1, dtype=np.complex128)
    g[0] = count
    g[1:-1] = 2 * s
    g[-1] = 0.0 if count % 2 == 0 else (1.0 if lo % 2 == 0 else -1.0)
    g /= nfft
    w = np.empty(2 * len(g))
    w[0::2], w[1::2] = g.real, -g.imag  # Re(F·g) = F.re·g.re - F.im·g.im
    w.setflags(write=False)
    return w


_FFT_BLOCK = 1 << 15
"""Spectrum points per block of ``tail_lattice`` (a few hundred kB of complex numbers)."""


__all__ = [
    "FAR_TAIL", "chernoff_binary", "lattice_screen", "tail_binary", "tail_lattice", "tail_trinomial",
    "tail_trinomial_screen",
]
