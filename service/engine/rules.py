"""Decision rules (SPEC §4.2) on observed paired differences.

Decisions are coded ``ACCEPT = 1``, ``REJECT = -1``, ``DEFER = 0``. The kernels work on
sufficient statistics so that replay can evaluate millions of cases at once:

* differences live on a lattice ``d = v / L`` with integer ``v`` (``L = 1`` for binary
  single-trial data, ``L = 5`` for fractions of five trials, ...); ``s = Σ v`` and
  ``q = Σ v²`` over the ``k`` observed tasks; comparisons with ``θ`` are then exact;
* the bootstrap needs the histogram of ``v`` (for binary data: ``n+`` and ``n-``).

``decide`` wraps the kernels for one observed vector (live decisions, tests).
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import special, stats

ACCEPT, REJECT, DEFER = 1, -1, 0
MAX_LATTICE = 10_000
MAX_FFT = 1 << 18
"""Largest support (lattice units) of a resample sum whose exact law is convolved by FFT."""
TOL = 1e-9
FAR_TAIL = 1e-13


def find_lattice(values: np.ndarray, max_l: int = MAX_LATTICE) -> int | None:
    """Smallest ``L <= max_l`` with every value an integer multiple of ``1/L`` (within 1e-9).

    Candidates come from a sample of the distinct values (a lattice of all values is one of
    the sample's), then each is checked on all of them.
    """
    arr = np.asarray(values, dtype=np.float64)
    if arr.size and np.all(arr == np.round(arr)):  # 0/1 data, the common case: skip the search
        return 1
    v = np.unique(arr)
    v = v[np.isfinite(v)]
    sample = v[:: max(1, len(v) // 64)]
    lats = np.arange(1, max_l + 1, dtype=np.float64)
    scaled = lats[:, None] * sample[None, :]
    ok = np.all(np.abs(scaled - np.round(scaled)) <= 1e-9 * lats[:, None], axis=1)
    for lat in np.flatnonzero(ok) + 1:
        full = v * lat
        if np.all(np.abs(full - np.round(full)) <= 1e-9 * lat):
            return int(lat)
    return None


def above(s: np.ndarray, k: np.ndarray, theta: float, lattice: int | None) -> np.ndarray:
    """``m > θ`` where ``m = s/(k·L)``: on a lattice ``s`` is an integer and ``θ·k·L`` is
    compared with 1e-9 slack, so ``δ·N/100`` that is an integer in exact arithmetic (e.g.
    0.29·100 = 28.999999999999996 in floats) is not crossed by ``s = 29``."""
    if lattice is not None:
        return s > theta * k * lattice + TOL
    return s / np.maximum(k, 1) > theta + TOL


# ----------------------------------------------------------------------------- kernels


def forced(s, k, theta, lattice):
    return np.where(above(s, k, theta, lattice), ACCEPT, REJECT).astype(np.int8)


def paired_normal(s, q, k, theta, a, lattice):
    """``se = sd(d, ddof=1)/sqrt(k)``; ``k < 2`` defers; ``se == 0`` decides as forced."""
    s = np.asarray(s, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    lat = lattice or 1
    pos = above(s, k, theta, lattice)
    ss = q * k - s * s  # k·Σv² - (Σv)² = k(k-1)·var·L²; exact in integers on a lattice
    if lattice is None:
        ss = np.where(ss <= 1e-12 * np.maximum(q * k, 1.0), 0.0, ss)
    zero = ss <= 0
    with np.errstate(divide="ignore", invalid="ignore"):
        se = np.sqrt(np.maximum(ss, 0) / (k * (k - 1))) / lat / np.sqrt(k)
        m = s / (k * lat)
        p_low = special.ndtr(-(m - theta) / se)  # Φ(-(m-θ)/se)
        p_high = special.ndtr(-(theta - m) / se)
    dec = np.where(pos, np.where(p_low <= a, ACCEPT, DEFER), np.where(p_high <= a, REJECT, DEFER))
    dec = np.where(zero, np.where(pos, ACCEPT, REJECT), dec)
    return np.where(k < 2, DEFER, dec).astype(np.int8)


def mcnemar(n_plus, n_minus, a):
    """Exact binomial test on discordant pairs (binary single-trial data, δ = 0)."""
    n_plus = np.rint(np.asarray(n_plus)).astype(np.int64)
    n_minus = np.rint(np.asarray(n_minus)).astype(np.int64)
    # Decide each distinct (n+, n-) once: replays repeat a few thousand of them millions of times.
    width = int(max(n_plus.max(initial=0), n_minus.max(initial=0))) + 1
    code = n_plus * width + n_minus
    uniq, inv = np.unique(code.ravel(), return_inverse=True)
    up, um = np.divmod(uniq, width)
    n = up + um
    p_acc = special.bdtrc(up - 1, n, 0.5)  # P(Bin(n,½) >= n+)
    p_rej = special.bdtr(up, n, 0.5)  # P(Bin(n,½) <= n+)
    p_acc = np.where(up <= 0, 1.0, p_acc)
    acc = (up > um) & (p_acc <= a)
    rej = (up <= um) & (p_rej <= a)
    dec = np.where(acc, ACCEPT, np.where(rej, REJECT, DEFER)).astype(np.int8)
    return dec[inv].reshape(code.shape)


def serfling_radius(k, n, a):
    """``ε = 2·sqrt((1 - (k-1)/N)·ln(1/a)/(2k))`` for values of range 2."""
    k = np.asarray(k, dtype=np.float64)
    return 2.0 * np.sqrt(np.maximum(1.0 - (k - 1.0) / n, 0.0) * math.log(1.0 / a) / (2.0 * k))


def serfling(s, k, n, theta, a, lattice):
    k = np.asarray(k, dtype=np.float64)
    m = np.asarray(s, dtype=np.float64) / (k * (lattice or 1))
    eps = serfling_radius(k, n, a)
    return np.where(m - eps > theta, ACCEPT, np.where(m + eps <= theta, REJECT, DEFER)).astype(np.int8)


def bootstrap_threshold(theta: float, k: np.ndarray, lattice: int) -> np.ndarray:
    """Largest resample sum (in lattice units) with ``m* <= θ``."""
    return np.floor(theta * np.asarray(k, dtype=np.float64) * lattice + TOL).astype(np.int64)


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
        p_m = stats.binom.pmf(m_axis[None, :], kk, disc / np.maximum(kk, 1))
        with np.errstate(invalid="ignore", divide="ignore"):
            q = np.where(disc > 0, npl / np.maximum(disc, 1), 0.0)
        x_max = np.floor_divide(cc + m_axis[None, :], 2)
        cond = stats.binom.cdf(x_max, m_axis[None, :], q)
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
_dense: OrderedDict[tuple, np.ndarray] = OrderedDict()
_dense_lock = threading.Lock()
_TAIL_MEMO: dict[tuple, float] = {}
"""Memoized values for ``k`` past ``_DENSE_MAX_K``, by ``(k, n+, n-, c, *tag)``."""


def _dense_table(key: tuple) -> np.ndarray:
    """The values of every ``(n+, n-)`` at ``key = (k, c, ...)`` met so far (NaN: not yet),
    shared by the threads of a process (a value written twice is the same number)."""
    with _dense_lock:
        table = _dense.get(key)
        if table is not None:
            _dense.move_to_end(key)
            return table
        k = key[0]
        table = np.full((k + 1, k + 1), np.nan)
        _dense[key] = table
        total = sum(t.nbytes for t in _dense.values())
        while total > _DENSE_BYTES and len(_dense) > 1:
            total -= _dense.popitem(last=False)[1].nbytes
        return table


def _tails_now(k: np.ndarray, n_plus: np.ndarray, n_minus: np.ndarray, c: np.ndarray) -> np.ndarray:
    """The tails, computed: Bernstein's screen first (cheap), the FFT only for the rest."""
    vals = tail_trinomial_screen(k, n_plus, n_minus, c)
    todo = np.flatnonzero(np.isnan(vals))
    if len(todo):
        hist = np.stack([n_minus[todo], k[todo] - n_plus[todo] - n_minus[todo], n_plus[todo]], axis=1)
        vals[todo] = tail_lattice(hist, np.array([-1, 0, 1]), c[todo])
    return vals


def _memo_binary(tag: tuple, compute: Callable[..., np.ndarray], k, n_plus, n_minus, c) -> np.ndarray:
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
            got = table[n_plus[rows], n_minus[rows]]
            miss = np.flatnonzero(np.isnan(got))
            if len(miss):
                r = rows[miss]
                got[miss] = compute(k[r], n_plus[r], n_minus[r], c[r])
                table[n_plus[r], n_minus[r]] = got[miss]
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
            if len(_TAIL_MEMO) > 4_000_000:
                _TAIL_MEMO.clear()
            for i, v in zip(missing, compute(k[r], n_plus[r], n_minus[r], c[r]).tolist(), strict=True):
                found[i] = _TAIL_MEMO[keys[i]] = v
        out[rest] = found
    return out


def tail_binary(k, n_plus, n_minus, c) -> np.ndarray:
    """``P(X - Y <= c)`` as ``tail_trinomial``, through the FFT convolution (about 3× faster)
    and a per-process memo (``_memo_binary``)."""
    return _memo_binary((), _tails_now, k, n_plus, n_minus, c)


def conclude_binary(k, n_plus, n_minus, c, a, resamples: int) -> np.ndarray:
    """``bootstrap_conclude_prob`` of 0/1 samples (``m > θ`` iff ``n+ - n- > c``), memoized
    as their tails are: a replay's blocks ask for the same tens of thousands of them again,
    and the binomial is as costly as looking the tail up."""
    big_b = int(resamples)
    c_max = math.floor(a * big_b + 1e-9)  # all that the rule takes of a

    def compute(k, n_plus, n_minus, c):
        return bootstrap_conclude_prob(tail_binary(k, n_plus, n_minus, c), n_plus - n_minus > c, a, big_b)

    return _memo_binary(("conclude", big_b, c_max), compute, k, n_plus, n_minus, c)


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


def tail_lattice(hist: np.ndarray, values: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Exact ``P(Σ_{i<=k} V_i <= c)`` for ``k = Σ hist`` iid draws from the empirical
    distribution ``hist/k`` over integer ``values`` (sorted ascending), per row.

    The k-th power of the shifted support's discrete Fourier transform (the sum's law, with
    no aliasing: the transform is longer than the sum's support) is summed up to ``c``
    against the transform of a run of ones (``_cdf_weights``), rows grouped by ``k``.
    """
    hist = np.asarray(hist, dtype=np.float64)
    values = np.asarray(values, dtype=np.int64)
    c = np.asarray(c, dtype=np.int64)
    k = hist.sum(axis=1).astype(np.int64)
    vmin = int(values.min())
    span = int(values.max()) - vmin
    out = lattice_screen(hist, values, c)
    idx = c - vmin * k  # the sum of k draws, shifted to start at 0
    sure = np.isnan(out) & ((idx < 0) | (idx >= span * k))
    out[sure] = np.where(idx[sure] < 0, 0.0, 1.0)
    for kk in np.unique(k):
        rows = np.flatnonzero((k == kk) & np.isnan(out))
        if not len(rows):
            continue
        nfft = 1 << max(1, int(span * kk).bit_length())  # > span·k: the sum's support fits
        # rows a block at a time, so that the spectra being raised to the k-th power stay in
        # cache (every row is computed on its own: the blocks do not change its numbers)
        per = max(1, _FFT_BLOCK // nfft)
        for i in range(0, len(rows), per):
            r = rows[i : i + per]
            pmf = np.zeros((len(r), span + 1))
            pmf[:, values - vmin] = hist[r] / kk
            f = _int_power(np.fft.rfft(pmf, nfft, axis=1), int(kk))
            spec = np.ascontiguousarray(f).view(np.float64)  # [re, im] pairs per frequency
            for m in np.unique(idx[r]).tolist():
                at = np.flatnonzero(idx[r] == m)
                total = spec[at, 0]  # the spectrum at 0: the law's total mass
                out[r[at]] = (spec[at] * _cdf_weights(m, nfft)).sum(axis=1) / total
    return np.clip(out, 0.0, 1.0)


@lru_cache(maxsize=256)
def _cdf_weights(m: int, nfft: int) -> np.ndarray:
    """Weights ``w`` on an ``rfft`` spectrum ``F`` (as [re, im] pairs) with ``Σ F·w`` equal to
    ``Σ_{s<=m}`` of its inverse: ``(1/N)(F_0 (m+1) + 2 Re Σ_j F_j S_j + F_{N/2} T)`` with
    ``S_j = Σ_{s<=m} e^{2πi js/N} = e^{iθm/2} sin(θ(m+1)/2) / sin(θ/2)`` (``θ = 2πj/N``) and
    ``T = Σ_{s<=m} (-1)^s``. One pass over the spectrum instead of an inverse transform and
    a running sum of it."""
    j = np.arange(1, nfft // 2)
    theta = 2 * np.pi * j / nfft
    s = np.exp(0.5j * theta * m) * (np.sin(theta * (m + 1) / 2) / np.sin(theta / 2))
    g = np.empty(nfft // 2 + 1, dtype=np.complex128)
    g[0] = m + 1
    g[1:-1] = 2 * s
    g[-1] = 1.0 if m % 2 == 0 else 0.0
    g /= nfft
    w = np.empty(2 * len(g))
    w[0::2], w[1::2] = g.real, -g.imag  # Re(F·g) = F.re·g.re - F.im·g.im
    w.setflags(write=False)
    return w


_FFT_BLOCK = 1 << 15
"""Spectrum points per block of ``tail_lattice`` (a few hundred kB of complex numbers)."""


def bootstrap_conclude_prob(p_low, pos, a, resamples: int):
    """Probability that ``B`` resamples conclude: the count of ``m* <= θ`` is exactly
    ``Binomial(B, p_low)``; accept needs it ``<= floor(a·B)`` (when ``m > θ``), reject needs
    the count of ``m* > θ`` ``<= floor(a·B)`` (when ``m <= θ``)."""
    big_b = int(resamples)
    c = math.floor(a * big_b + 1e-9)
    # a replay's tails are mostly 0 or 1 and repeat: the binomial once per distinct value
    vals, inv = np.unique(np.asarray(p_low, dtype=np.float64), return_inverse=True)
    return np.where(pos, stats.binom.cdf(c, big_b, vals)[inv], stats.binom.sf(big_b - c - 1, big_b, vals)[inv])


def bootstrap_from_tail(p_low, pos, a, resamples, u=None):
    """Decision from the exact resampling tail ``p_low = P(m* <= θ)``.

    ``resamples == "exact"``: accept iff ``m > θ`` and ``p_low <= a``; reject iff ``m <= θ``
    and ``1 - p_low <= a``. With ``B`` resamples the count of ``m* <= θ`` is exactly
    ``Binomial(B, p_low)``; ``u`` (uniforms, one per case) draws the decision from the
    resulting accept / reject probabilities, so one uniform replaces ``B·k`` draws.
    """
    p_low = np.asarray(p_low, dtype=np.float64)
    if resamples == "exact":
        acc = pos & (p_low <= a + 1e-12)
        rej = ~pos & (1.0 - p_low <= a + 1e-12)
    else:
        q = bootstrap_conclude_prob(p_low, pos, a, resamples)
        acc = pos & (u < q)
        rej = ~pos & (u < q)
    return np.where(acc, ACCEPT, np.where(rej, REJECT, DEFER)).astype(np.int8)


# ------------------------------------------------------------------------ anytime rule


def _log_wealth(quad: tuple, sign: int, mu) -> np.ndarray:
    """``ln M±_t(μ) = ±(L1 - L2·μ) - (Q0 - 2·Q1·μ + Q2·μ²)`` from the running sums."""
    l1, l2, q0, q1, q2 = quad
    return sign * (l1 - l2 * mu) - (q0 - 2.0 * q1 * mu + q2 * mu * mu)


def anytime_paths(v: np.ndarray, lattice: int, n: int, theta: float | Sequence[float], a: float, kmax: int,
                  cov_ok: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """First conclusion of the anytime-valid rule along each path (docs/engine-api.md).

    ``v``: ``[cases, >= kmax]`` integer lattice values in observation order (``d = v/L``);
    ``n``: population size ``N``; ``cov_ok``: ``[cases or 1, kmax]`` coverage met at step t.
    Returns ``(decision, stop)``: decision at the first step ``t <= kmax`` that concludes,
    ``stop = t`` (``kmax + 1`` when none). With a sequence of thresholds both gain a leading
    axis: the wealth sums do not depend on θ, so several thresholds cost little more than one.
    Paths that have concluded for every θ are dropped from the working set as they go.
    """
    thetas = np.atleast_1d(np.asarray(theta, dtype=np.float64))
    n_th = len(thetas)
    cases = v.shape[0]
    log_inv_a = math.log(1.0 / a)
    theta_x = (thetas[:, None] + 1.0) / 2.0
    scale = lattice or 1  # without a lattice ``v`` holds the differences themselves
    xt = np.ascontiguousarray(((np.asarray(v[:, :kmax], dtype=np.float64) / scale + 1.0) / 2.0).T)
    vt = np.ascontiguousarray(np.asarray(v[:, :kmax], dtype=np.float64).T)
    cov_t = None
    if cov_ok is not None:
        cov_t = np.ascontiguousarray(np.broadcast_to(cov_ok[:, :kmax], (cases, kmax)).T)
    idx = np.arange(cases)  # cases still undecided for some θ
    state = np.zeros((9, cases))  # s_prev, var_acc, l1, l2, q0, q1, q2, vsum, mu_hat
    state[1] = 0.25
    state[8] = 0.5
    dec = np.zeros((n_th, cases), dtype=np.int8)
    stop = np.full((n_th, cases), kmax + 1, dtype=np.int64)
    live = np.ones((n_th, cases), dtype=bool)
    for i in range(1, kmax + 1):
        s_prev, var_acc, l1, l2, q0, q1, q2, vsum, mu_hat = state
        x = xt[i - 1, idx]
        lam = np.minimum(0.5, np.sqrt(2.0 * log_inv_a / (var_acc / i * i * math.log(1.0 + i))))
        psi = -np.log1p(-lam) - lam
        rem = n - i + 1
        ai = x + s_prev / rem
        bi = n / rem
        l1 += lam * ai
        l2 += lam * bi
        q0 += psi * ai * ai
        q1 += psi * ai * bi
        q2 += psi * bi * bi
        var_acc += (x - mu_hat) ** 2
        s_prev += x
        state[8] = (0.5 + s_prev) / (i + 1)
        vsum += vt[i - 1, idx]
        lo = s_prev / n
        hi = (s_prev + n - i) / n
        quad = (l1, l2, q0, q1, q2)
        pos = above(vsum[None, :], i, thetas[:, None], lattice)
        up_lo = _log_wealth(quad, 1, lo) >= log_inv_a
        dn_hi = _log_wealth(quad, -1, hi) >= log_inv_a
        acc = pos & ((lo > theta_x + TOL) | (up_lo & (_log_wealth(quad, 1, theta_x) >= log_inv_a)))
        rej = ~pos & ((hi <= theta_x + TOL) | ((_log_wealth(quad, -1, theta_x) >= log_inv_a) & dn_hi))
        hit = live[:, idx] & (acc | rej)
        if cov_t is not None:
            hit &= cov_t[i - 1, idx][None, :]
        if hit.any():
            th, col = np.nonzero(hit)
            dec[th, idx[col]] = np.where(acc[th, col], ACCEPT, REJECT)
            stop[th, idx[col]] = i
            live[th, idx[col]] = False
            still = live[:, idx].any(axis=0)
            if not still.any():
                break
            if still.sum() < 0.7 * len(idx):  # compact the working set
                idx = idx[still]
                state = state[:, still]
    if np.ndim(theta) == 0:
        return dec[0], stop[0]
    return dec, stop


# --------------------------------------------------------------------- one observed vector


@dataclass(frozen=True)
class RuleResult:
    """A rule's verdict on one observed vector, with the number that decided it."""

    decision: int
    k: int
    mean: float
    statistic: dict[str, float]


def decide(rule: str, d: np.ndarray, theta: float, a: float = 0.05, resamples: int | str = "exact",
           n: int | None = None, rng: np.random.Generator | None = None, binary: bool | None = None) -> RuleResult:
    """Apply one rule to observed differences ``d`` (in [-1, 1]) with threshold ``θ``.

    ``n`` is the population size ``N`` (serfling, anytime); ``rng`` is needed only for a
    finite number of bootstrap resamples. For ``anytime`` the order of ``d`` matters: the
    verdict is the first conclusion along it.
    """
    d = np.asarray(d, dtype=np.float64)
    k = len(d)
    lat = find_lattice(d) if k else 1
    m = float(d.mean()) if k else 0.0
    if k == 0:
        return RuleResult(DEFER, 0, 0.0, {})
    v = np.round(d * lat).astype(np.int64) if lat else d
    s = np.array(v.sum())
    q = np.array((v * v).sum())
    kk = np.array(k)
    if rule == "forced":
        return RuleResult(int(forced(s, kk, theta, lat)), k, m, {})
    if rule == "paired_normal":
        se = float(d.std(ddof=1) / math.sqrt(k)) if k > 1 else float("nan")
        dec = int(paired_normal(s, q, kk, theta, a, lat))
        # special.ndtr is stats.norm.cdf without its argument handling (~50 us on a live answer)
        p = float(special.ndtr(-abs(m - theta) / se)) if k > 1 and se > 0 else float("nan")
        return RuleResult(dec, k, m, {"se": se, "tail_probability": p})
    if rule == "mcnemar":
        if binary is False or not np.all(np.isin(d, (-1.0, 0.0, 1.0))):
            raise ValueError("mcnemar needs binary single-trial outcomes")
        npl, nmi = int((d > 0).sum()), int((d < 0).sum())
        nn = npl + nmi
        p = float(stats.binom.sf(npl - 1, nn, 0.5)) if npl > nmi else float(stats.binom.cdf(npl, nn, 0.5))
        return RuleResult(int(mcnemar(npl, nmi, a)), k, m, {"n_plus": npl, "n_minus": nmi, "p_value": p})
    if rule == "serfling":
        big_n = n or k
        eps = float(serfling_radius(k, big_n, a))
        return RuleResult(int(serfling(s, kk, big_n, theta, a, lat)), k, m, {"radius": eps})
    if rule == "bootstrap":
        pos = above(s, kk, theta, lat)
        if lat is None or 2 * lat * k > MAX_FFT:  # off a small lattice: literal resamples
            if resamples == "exact":
                raise ValueError("the exact bootstrap needs outcomes on a small grid of step 1/L; use a finite B")
            if rng is None:
                raise ValueError("a finite number of resamples needs rng")
            big_b = int(resamples)
            sums = v[rng.integers(0, k, size=(big_b, k))].sum(axis=1)
            low = int((~above(sums.astype(np.float64), k, theta, lat)).sum())
            c_max = math.floor(a * big_b + 1e-9)
            dec = ACCEPT if pos and low <= c_max else REJECT if not pos and big_b - low <= c_max else DEFER
            return RuleResult(dec, k, m, {"p_low": low / big_b, "p_high": 1.0 - low / big_b})
        c = bootstrap_threshold(theta, kk, lat)
        vals = np.unique(v)
        hist = np.array([[int((v == x).sum()) for x in vals]])
        p_low = float(tail_lattice(hist, vals, np.atleast_1d(c))[0])
        u = None
        if resamples != "exact":
            if rng is None:
                raise ValueError("a finite number of resamples needs rng")
            u = rng.random()
        dec = int(bootstrap_from_tail(np.array(p_low), np.array(pos), a, resamples, u))
        return RuleResult(dec, k, m, {"p_low": p_low, "p_high": 1.0 - p_low})
    if rule == "anytime":
        big_n = n or k
        dec, stop = anytime_paths(v[None, :], lat, big_n, theta, a, k)
        return RuleResult(int(dec[0]), k, m, {"stopped_at": int(stop[0]) if stop[0] <= k else None})
    raise ValueError(f"unknown rule '{rule}'")
