"""The bootstrap on a lattice, fast and exact (SPEC §4.2 for multi-trial and fractional records).

The resampling tail is ``τ = P(S <= c)``, ``S`` the sum of ``k`` draws with replacement from a
case's differences (integers, lattice units) and ``c`` the largest sum with ``m* <= θ``.
Binary records have a few thousand distinct ``(k, n+, n-)`` and so a few thousand tails; a
case of fractional or repeated-trial records has a histogram over up to ``2L+1`` values, and a
replay meets millions of distinct ones. The decision needs ``τ`` only against one breakpoint
(``a`` for ``B = "exact"``; for finite ``B``, the ``p`` at which ``P(Bin(B, p) <= a·B)``
crosses the case's uniform), so ``τ`` is bracketed in stages and refined only where the
bracket still holds a breakpoint:

1. **Bennett** (closed form from ``k``, ``Σv``, ``Σv²`` and the range of the observed
   values): a rigorous upper bound on each tail; every case;
2. **Berry–Esseen** (normal law ± ``0.4748·ρ/(σ³√k)``): decides cases near the middle;
3. **short sum** (``approx_bracket``): the sum below over a window of ``S`` much shorter than
   its support, with the aliased mass bounded by Bennett and the truncation bounded: width
   about 1e-4; about 40 % of the cases of the terminal-bench replays get here;
4. **exact** (``tail``): the sum below over the whole support, to rounding (1e-13): under
   0.1 % of the cases.

Each stage's bracket contains the exact tail, so a decision fixed at both ends of it is the
decision on the exact tail: the answers are those of computing every tail exactly.

``tail`` computes ``τ`` without an inverse transform: with ``n`` larger than the support of
``S``, ``ω_j = 2πj/n`` and ``φ_j = E e^{-iω_j V}``, ``P(S <= c) = (c'+1)/n + (2/n)·Σ_j
Re(φ_j^k·G_j)`` where ``G_j`` sums ``e^{iω_j s}`` over the support up to ``c``. A term with
``|φ_j|^k <= EPS_TERM`` is dropped (``|G_j|·2/n <= 1/j``, so all of them move ``τ`` by at most
``EPS_TERM·(ln n + 1)``), and ``φ^k`` is computed only up to the last term that matters.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from service.engine import rules as R

EPS_TERM = 1e-17
"""Largest ``|φ_j|^k`` of a frequency term left out of an exact tail."""

SLACK = 1e-9
"""Relative and absolute widening of every bound: covers rounding in the bounds and in
``tail`` (whose error is below 1e-13). Decisions break at ``a + 1e-12`` or at a uniform,
never within 1e-9 of 0 or 1, so exact 0/1 at the edges of the support need no widening."""

_BLOCK = 1 << 16
"""Elements (rows × frequencies) per working array of the power, so that it runs in cache."""


# ----------------------------------------------------------------------------- exact tail


@lru_cache(maxsize=256)
def _tables(values: tuple[int, ...], n: int) -> tuple[np.ndarray, np.ndarray]:
    """``cos`` and ``-sin`` of ``ω_j·v`` for ``j = 1 .. (n-1)//2`` and each value: ``[V, m]``
    (``p @ cos + i·(p @ nsin)`` is the characteristic function ``Σ p·e^{-iω_j v}``)."""
    j = np.arange(1, (n - 1) // 2 + 1, dtype=np.int64)
    phase = np.outer(np.asarray(values, dtype=np.int64), j) % n  # exact reduction first
    ang = phase.astype(np.float64) * (2.0 * math.pi / n)
    cos, nsin = np.cos(ang), -np.sin(ang)
    cos.flags.writeable = False
    nsin.flags.writeable = False
    return cos, nsin


@lru_cache(maxsize=1024)
def _window(n: int, lo: int, hi: int) -> np.ndarray:
    """``G_j = Σ_{s=lo}^{hi} e^{iω_j s}`` for ``j = 1 .. (n-1)//2``, interleaved as
    ``(Re G_j, -Im G_j)`` so that ``Re(ψ_j·G_j)`` is one real dot product with ψ's floats."""
    j = np.arange(1, (n - 1) // 2 + 1, dtype=np.int64)
    count = hi - lo + 1
    amp = np.sin(((j * count) % (2 * n)).astype(np.float64) * (math.pi / n)) / np.sin(j * (math.pi / n))
    mid = ((j * (lo + hi)) % (2 * n)).astype(np.float64) * (math.pi / n)  # ω_j·(lo+hi)/2
    g = np.empty(2 * len(j))
    g[0::2], g[1::2] = amp * np.cos(mid), -amp * np.sin(mid)
    g.flags.writeable = False
    return g


def _power(z: np.ndarray, k: int) -> np.ndarray:
    """``z**k`` for ``k >= 1`` by repeated squaring, in place on ``z``: numpy's complex power
    is 3x slower for small ``k`` and goes through ``exp(k·log z)`` (40x slower) past 100."""
    out = None
    while True:
        if k & 1:
            out = z.copy() if out is None else np.multiply(out, z, out=out)
        k >>= 1
        if not k:
            return out
        np.multiply(z, z, out=z)


def _fourier_cdf(
    pmf: np.ndarray, values: tuple[int, ...], k: int, lo, c: int, n: int, eps: float = EPS_TERM
) -> np.ndarray:
    """``Σ_{s=lo}^{c} P(S ≡ s mod n)`` for rows of ``pmf [r, V]`` (``k`` draws), leaving out
    terms with ``|φ_j|^k <= eps`` (error at most ``truncation_error(n, eps)``): the CDF at
    ``c`` when ``lo`` is the least possible sum and ``n`` exceeds the support.

    ``lo`` is one integer or one per row (windows that start at different sums share the
    power ``φ^k``; rows sorted by ``lo`` keep the projections per block few)."""
    m = (n - 1) // 2
    per_row = np.ndim(lo) > 0
    if not per_row:
        lows, which = np.array([lo]), None
    elif np.all(lo[1:] >= lo[:-1]):  # sorted (as approx_bracket passes them): runs, no sort
        new = np.r_[True, lo[1:] != lo[:-1]]
        lows, which = lo[new], np.cumsum(new) - 1
    else:
        lows, which = np.unique(lo, return_inverse=True)
    out = (c - (lows[which] if per_row else lows[0]) + 1) / n * np.ones(len(pmf))
    if m == 0 or not len(pmf):
        return out
    cos, nsin = _tables(values, n)
    gmat = np.stack([_window(n, int(low), c) for low in lows])  # [windows, 2m]
    thr = eps ** (2.0 / k)
    slack = 4e-16 * (len(values) + 2)
    rows_per = max(1, _BLOCK // m)
    for i in range(0, len(pmf), rows_per):
        p = pmf[i : i + rows_per]
        re = p @ cos
        im = p @ nsin
        mag = re * re
        mag += im * im
        # frequencies that matter for some row of the block; ``slack`` covers the rounding of
        # ``mag`` (V products of magnitude <= 1), so no term above ``eps`` is left out
        hit = (mag > thr - slack).any(axis=0)
        top = m - int(np.argmax(hit[::-1])) if hit.any() else 0
        if not top:
            continue
        z = np.empty((len(p), top), dtype=np.complex128)
        z.real = re[:, :top]
        z.imag = im[:, :top]
        zf = _power(z, k).view(np.float64)
        if not per_row:
            out[i : i + len(p)] += (2.0 / n) * (zf @ gmat[0, : 2 * top])
            continue
        w = which[i : i + len(p)]
        first = int(w.min())
        proj = zf @ gmat[first : int(w.max()) + 1, : 2 * top].T  # [rows, windows of this block]
        out[i : i + len(p)] += (2.0 / n) * proj[np.arange(len(p)), w - first]
    return out


def truncation_error(n: int, eps: float) -> float:
    """Bound on the terms ``_fourier_cdf`` leaves out: ``Σ_{j<=m} eps·(2/n)·|G_j| <= eps·Σ 1/j``."""
    return eps * (math.log(max(1, (n - 1) // 2)) + 1.0)


def tail(hist: np.ndarray, values: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Exact ``P(Σ_{i<=k} V_i <= c)`` for ``k = Σ hist`` draws from ``hist/k`` over integer
    ``values`` (ascending), per row: ``rules.tail_lattice``'s numbers (to 1e-13), faster."""
    hist = np.asarray(hist, dtype=np.float64)
    values = np.asarray(values, dtype=np.int64)
    c = np.asarray(c, dtype=np.int64)
    k = hist.sum(axis=1).astype(np.int64)
    vmin = int(values.min())
    span = int(values.max()) - vmin
    vt = tuple(int(v) for v in values)
    out = R.lattice_screen(hist, values, c)
    todo = np.isnan(out)
    out[todo & (c < vmin * k)] = 0.0
    out[todo & (c >= (vmin + span) * k)] = 1.0
    todo = np.isnan(out)
    order = np.lexsort((c, k))
    order = order[todo[order]]
    if len(order):
        key_k, key_c = k[order], c[order]
        edges = np.flatnonzero(np.r_[True, (key_k[1:] != key_k[:-1]) | (key_c[1:] != key_c[:-1]), True])
        for a, b in zip(edges[:-1], edges[1:], strict=True):
            rows = order[a:b]
            kk, cc = int(key_k[a]), int(key_c[a])
            if kk == 0:
                out[rows] = 1.0
                continue
            n = span * kk + 1
            n += 1 - n % 2  # odd: no Nyquist term
            out[rows] = _fourier_cdf(hist[rows] / kk, vt, kk, vmin * kk, cc, n)
    return np.clip(out, 0.0, 1.0)


# ----------------------------------------------------------------------------- bounds


def _bennett(t: np.ndarray, var_sum: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Bennett's bound on ``P(S - E S >= t)`` for ``t > 0``: summands at most ``b`` above their
    mean, total variance ``var_sum`` (1 where it says nothing)."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        u = b * t
        u /= var_sum
        h = np.log1p(u)
        h *= u + 1.0
        h -= u  # (1 + u)·log(1 + u) - u
        bound = b * b
        np.divide(var_sum, bound, out=bound)
        bound *= h
        np.negative(bound, out=bound)
        np.exp(bound, out=bound)
    says_nothing = (t <= 0) | (var_sum <= 0) | (b <= 0) | np.isnan(bound)
    bound[says_nothing] = 1.0
    return bound


def bennett_bracket(
    k: np.ndarray, s: np.ndarray, q: np.ndarray, vlo: np.ndarray, vhi: np.ndarray, c: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Rigorous ``lo <= P(S <= c) <= hi`` from ``k``, ``s = Σv``, ``q = Σv²`` of the observed
    values (lattice units, exact integers) and their least and largest value ``vlo, vhi``.

    The resample has ``E S = s`` and variance ``(k·q - s²)/k`` (computed in integers); each
    draw lies in ``[vlo, vhi]``. Below the mean, Bennett bounds ``τ`` from above; above it,
    ``1 - τ``; outside ``[k·vlo, k·vhi]`` the tail is exactly 0 or 1.
    """
    k = np.asarray(k, dtype=np.float64)
    s = np.asarray(s, dtype=np.float64)
    c = np.asarray(c, dtype=np.float64)
    kq_ss = np.maximum(k * np.asarray(q, dtype=np.float64) - s * s, 0.0)  # exact below 2**53
    with np.errstate(divide="ignore", invalid="ignore"):
        var_sum = kq_ss / np.maximum(k, 1.0) * (1.0 + 1e-12)
        mean = s / np.maximum(k, 1.0)
    # s and c are integers in a replay, so a row is on one side of the mean; a row strictly
    # between c and c + 1 (possible only for other callers) takes both bounds
    below = s > c  # c below the mean: P(S <= c) = P(s - S >= s - c)
    bound = _bennett(
        np.where(below, s - c, c + 1.0 - s),
        var_sum,
        np.where(below, mean - vlo, vhi - mean) * (1.0 + 1e-12),
    )
    hi = np.where(below, bound, 1.0)
    lo = np.where(below, 0.0, 1.0 - bound)
    both = np.flatnonzero(below & (c + 1.0 > s))  # c + 1 above the mean too: 1 - τ = P(S >= c + 1)
    if len(both):
        lo[both] = 1.0 - _bennett(c[both] + 1.0 - s[both], var_sum[both], (vhi[both] - mean[both]) * (1.0 + 1e-12))
    hi = np.minimum(1.0, hi * (1.0 + SLACK) + SLACK)
    lo = np.maximum(0.0, lo * (1.0 - SLACK) - SLACK)
    below = c < k * vlo
    above = c >= k * vhi
    lo = np.where(below, 0.0, np.where(above, 1.0, lo))
    hi = np.where(below, 0.0, np.where(above, 1.0, hi))
    return lo, hi


_FINGERPRINT = np.random.default_rng(20261201).random(64) + 1.0
"""Weights of a histogram's fingerprint (fixed, so the same rows always merge the same way)."""

EPS_ALIAS = 1e-4
"""Target mass of ``S`` outside the window of an approximate tail (bounded by Bennett)."""

EPS_APPROX = 1e-5
"""Largest ``|φ_j|^k`` of a term left out of an approximate tail."""


def _bernstein_reach(var_sum: np.ndarray, b: np.ndarray, log_inv: float) -> np.ndarray:
    """Distance beyond which Bernstein (weaker than Bennett) puts less than ``e^-log_inv``."""
    lb = b * log_inv / 3.0
    return lb + np.sqrt(lb * lb + 2.0 * var_sum * log_inv)


def fingerprints(hist: np.ndarray) -> np.ndarray:
    """A 64-bit fingerprint per histogram row (equal rows, equal fingerprints), for sorting."""
    n_v = hist.shape[1]
    weights = _FINGERPRINT[:n_v] if n_v <= len(_FINGERPRINT) else np.zeros(n_v)
    out = np.zeros(len(hist))
    for i in range(n_v):  # column by column, as bootstrap_decisions builds it
        out += np.asarray(hist[:, i], dtype=np.float64) * weights[i]
    return out.view(np.int64)  # bits: sorts as integers


def _group_order(keys: tuple[np.ndarray, ...], fingerprint: np.ndarray) -> np.ndarray:
    """An order of the rows sorted by ``keys`` (integers, the first most significant) and,
    within equal keys, with equal fingerprints adjacent: what ``np.lexsort((fingerprint,
    *keys[::-1]))`` gives up to the order among fingerprints, several times faster.

    The keys are packed into one integer with as many low bits of the fingerprint as fit
    beside them (22 in a replay), so one sort does it; rows that share those bits but not the
    whole fingerprint may then interleave, which only costs a merge."""
    if not len(fingerprint):
        return np.arange(0)
    composite = np.zeros(len(fingerprint), dtype=np.int64)
    scale = 1
    for key in keys:
        lo = int(key.min())
        width = int(key.max()) - lo + 1
        scale *= width
        if scale >= 1 << 40:  # too wide to pack with fingerprint bits: dense ids, two sorts
            return _group_order_dense(keys, fingerprint)
        composite = composite * width + (key - lo)
    bits = min(62 - scale.bit_length(), 22)
    return np.argsort((composite << bits) | (fingerprint & ((1 << bits) - 1)))


def _pack(keys: tuple[np.ndarray, ...]) -> np.ndarray:
    """One integer per row that is equal exactly where all ``keys`` are (and sorts as they do,
    the first most significant): mixed radix when it fits in 62 bits, else dense ids."""
    composite = np.zeros(len(keys[0]), dtype=np.int64)
    scale = 1
    for key in keys:
        if not len(key):
            return composite
        lo = int(key.min())
        width = int(key.max()) - lo + 1
        scale *= width
        if scale >= 1 << 62:
            return np.unique(np.stack(keys, axis=1), axis=0, return_inverse=True)[1].ravel().astype(np.int64)
        composite = composite * width + (key - lo)
    return composite


def _group_order_dense(keys: tuple[np.ndarray, ...], fingerprint: np.ndarray) -> np.ndarray:
    """``_group_order`` for keys too wide to pack: the keys become one dense id, sorted stably
    after an unstable sort by fingerprint."""
    ids, dense = np.unique(np.stack(keys, axis=1), axis=0, return_inverse=True)
    by_fp = np.argsort(fingerprint)
    dense = dense.ravel()[by_fp].astype(np.uint16 if len(ids) <= 1 << 16 else np.int64)
    return by_fp[np.argsort(dense, kind="stable")]


def approx_bracket(
    hist: np.ndarray,
    values: np.ndarray,
    c: np.ndarray,
    k: np.ndarray,
    s: np.ndarray,
    q: np.ndarray,
    vlo: np.ndarray,
    vhi: np.ndarray,
    fingerprint: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Rigorous ``lo <= P(S <= c) <= hi`` from a short characteristic-function sum.

    With ``n`` below the support of ``S``, the sum over a window ``[L, L+n-1]`` that holds
    ``c`` gives the law of ``S mod n``: ``Σ_{L<=x<=c} P(S ≡ x)`` exceeds ``P(L <= S <= c)`` by
    at most the mass above the window and misses the mass below it, so ``τ`` lies in
    ``[val - e_hi, val + e_lo]`` with ``e_lo, e_hi`` Bennett's bounds on those masses. The
    window spans the law's bulk (Bernstein's reach for ``EPS_ALIAS`` either side of the mean)
    and ``c``, its length rounded up to four sizes per octave and its start to a multiple of
    a quarter-octave step, so rows share it; rows with the same ``(k, c, n)`` share one call,
    and terms with ``|φ_j|^k <= EPS_APPROX`` are left out.
    """
    hist = np.asarray(hist)
    values = np.asarray(values, dtype=np.int64)
    vt = tuple(int(v) for v in values)
    span = int(values.max() - values.min())
    k = np.asarray(k, dtype=np.int64)
    c = np.asarray(c, dtype=np.int64)
    kf = k.astype(np.float64)
    var_sum = np.maximum(kf * q - s * s, 0.0) / np.maximum(kf, 1.0) * (1.0 + 1e-12)
    mean = s / np.maximum(kf, 1.0)
    b_lo = (mean - vlo) * (1.0 + 1e-12)
    b_hi = (vhi - mean) * (1.0 + 1e-12)
    log_inv = math.log(1.0 / EPS_ALIAS)
    first = np.minimum(np.floor(s - _bernstein_reach(var_sum, b_lo, log_inv)), c).astype(np.int64)
    last = np.maximum(np.ceil(s + _bernstein_reach(var_sum, b_hi, log_inv)), c).astype(np.int64)
    width = last - first + 1
    step = 2 ** np.maximum(np.floor(np.log2(width)).astype(np.int64) - 2, 0)
    below = -(-(c - first) // step) * step  # c - L, rounded up: the window starts at or before `first`
    n = -(-(below + (last - c) + 1) // step) * step
    n += 1 - n % 2  # odd: no Nyquist term
    low_v = int(values.min())
    exact_n = span * k + 1
    exact_n += 1 - exact_n % 2
    use_exact = n >= exact_n  # the whole support fits: no aliasing
    n = np.where(use_exact, exact_n, n)
    start = np.where(use_exact, low_v * k, c - below)
    e_lo = np.where(use_exact, 0.0, _bennett(s - (start - 1), var_sum, b_lo))  # P(S <= L-1)
    e_hi = np.where(use_exact, 0.0, _bennett((start + n) - s, var_sum, b_hi))  # P(S >= L+n)
    # equal histograms have equal (k, c, n, start) and, last in the sort, equal fingerprints,
    # so each run of them is computed once; a group's runs are checked row by row before they
    # are merged (two histograms sharing a fingerprint would only cost the saving)
    if fingerprint is None:
        fingerprint = fingerprints(hist)
    group = _pack((k, c, n))  # one integer per (k, c, n): one gather and one comparison
    order = _group_order((group, start), fingerprint)
    gs, st, fp = group[order], start[order], fingerprint[order]
    hs = hist[order]  # one gather; the groups are slices of it
    new_group = np.r_[True, gs[1:] != gs[:-1]]
    new_run = new_group | np.r_[True, (fp[1:] != fp[:-1]) | (st[1:] != st[:-1])]
    edges = np.r_[np.flatnonzero(new_group), len(order)]
    val = np.empty(len(order))
    err = np.empty(len(order))
    for a, b in zip(edges[:-1], edges[1:], strict=True):
        head = order[a]
        kk, cc, nn = int(k[head]), int(c[head]), int(n[head])
        low = low_v * kk
        if cc < low or cc >= low + span * kk:  # outside the support: 0 or 1 exactly
            val[a:b] = 0.0 if cc < low else 1.0
            err[a:b] = 0.0
            e_lo[order[a:b]] = e_hi[order[a:b]] = 0.0
            continue
        h = hs[a:b]
        heads = np.flatnonzero(new_run[a:b])
        run = np.cumsum(new_run[a:b]) - 1
        if not np.array_equal(h, h[heads][run]):  # a shared fingerprint: no merging in this group
            heads = run = np.arange(b - a)
        pmf = h[heads].astype(np.float64)
        pmf /= kk
        val[a:b] = _fourier_cdf(pmf, vt, kk, st[a:b][heads], cc, nn, EPS_APPROX)[run]
        err[a:b] = truncation_error(nn, EPS_APPROX) + 1e-12
    val[order], err[order] = val.copy(), err.copy()
    lo = val - e_hi - err
    hi = val + e_lo + err
    lo = np.clip(lo * (1.0 - SLACK) - SLACK, 0.0, 1.0)
    return lo, np.clip(hi * (1.0 + SLACK) + SLACK, lo, 1.0)


BERRY_ESSEEN = 0.4748
"""Shevtsova (2011): ``sup_x |P(S <= x) - Φ((x - kμ)/(σ√k))| <= 0.4748·ρ/(σ³√k)`` for ``k``
iid summands with ``ρ = E|X - μ|³``."""


def berry_esseen_bracket(
    k: np.ndarray, s: np.ndarray, q: np.ndarray, vlo: np.ndarray, vhi: np.ndarray, c: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Rigorous ``lo <= P(S <= c) <= hi`` from the normal law and the Berry–Esseen bound: it
    decides cases near the middle of the resampling law, where Bennett says nothing.

    ``ρ = E|X - μ|³`` is bounded by ``σ²·max|X - μ|`` (``max`` over the observed values), which
    needs no pass over the histogram; it is exact for two-point laws and within about 30 % for
    the others, so the bracket is a little wider than with ``ρ`` itself."""
    from scipy.special import ndtr

    kf = np.maximum(np.asarray(k, dtype=np.float64), 1.0)
    mean = s / kf
    var = np.maximum(kf * q - s * s, 0.0) / (kf * kf)
    reach = np.maximum(mean - vlo, vhi - mean)
    with np.errstate(divide="ignore", invalid="ignore"):
        sd = np.sqrt(var * kf)
        err = BERRY_ESSEEN * reach / (np.sqrt(var) * np.sqrt(kf)) * (1.0 + 1e-9) + SLACK
        hi = ndtr((c - s) / sd) + err
        lo = ndtr((c + 1 - s) / sd) - err
    ok = var > 0
    return np.where(ok, np.maximum(lo, 0.0), 0.0), np.where(ok, np.minimum(hi, 1.0), 1.0)


# ----------------------------------------------------------------------------- decisions


class Histograms:
    """The observed counts of a block of cases and what every threshold needs from them:
    ``counts [cases, V]`` (exact integers, a row per case) over ``values``, ``k``, ``Σv``,
    ``Σv²``, least and largest observed value, and a fingerprint of each row. Built once per
    block; ``Tails`` at several thresholds share it."""

    def __init__(self, counts: np.ndarray, values: np.ndarray, fingerprint: np.ndarray | None = None):
        self.counts = counts
        self.values = np.asarray(values, dtype=np.int64)
        self.fingerprint = fingerprints(counts) if fingerprint is None else fingerprint
        vals = self.values.astype(np.float64)
        kmax = float(counts.shape[0] and counts.max(axis=None)) * len(vals)
        # float32 sums are exact while they stay below 2**24 (the common case: fifths, k < 500)
        dt = np.float32 if kmax * float(np.max(vals * vals, initial=1.0)) < 2**24 else np.float64
        moments = np.stack([np.ones_like(vals), vals, vals * vals], axis=1).astype(dt)
        kq = counts.astype(dt, copy=False) @ moments  # [cases, 3]: k, Σv, Σv²
        self.k = kq[:, 0].astype(np.int64)
        self.s = kq[:, 1].astype(np.float64)
        self.q = kq[:, 2].astype(np.float64)
        lo_i, hi_i = _present_range(counts)
        self.vlo = np.where(self.k > 0, vals[lo_i], vals[-1])
        self.vhi = np.where(self.k > 0, vals[hi_i], vals[0])


def _present_range(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row of ``counts [cases, V]``: the first and last column that is not 0 (0 for an
    empty row). The columns present form a bit code (exact in float64 up to 53 columns), whose
    lowest and highest set bit ``frexp`` reads off; a reduction along the short axis would be
    several times slower."""
    n_v = counts.shape[1]
    if n_v > 53:
        present = counts > 0
        return np.argmax(present, axis=1), n_v - 1 - np.argmax(present[:, ::-1], axis=1)
    dt = np.float32 if n_v <= 24 else np.float64
    code = ((counts > 0).astype(dt) @ (2.0 ** np.arange(n_v)).astype(dt)).astype(np.int64)
    low_bit = code & -code
    return np.frexp(low_bit)[1] - 1, np.maximum(np.frexp(code)[1] - 1, 0)


class Tails:
    """Brackets on the resampling tail of every case of a block at one threshold ``c`` per
    case, refined on demand.

    ``settle(decide)`` evaluates a decision (a monotone step function of ``τ``) at both ends
    of each bracket and refines only the cases where they differ: Bennett (every case),
    Berry–Esseen, the short sum, then the exact tail. Exact and finite-B rules at one
    threshold share one ``Tails``.
    """

    def __init__(self, hist: Histograms, c: np.ndarray):
        self.counts, self.values = hist.counts, hist.values
        self.k, self.s, self.q, self.vlo, self.vhi = hist.k, hist.s, hist.q, hist.vlo, hist.vhi
        self.fingerprint = hist.fingerprint
        self.c = np.asarray(c, dtype=np.int64)
        self.lo, self.hi = bennett_bracket(self.k, self.s, self.q, self.vlo, self.vhi, self.c)
        self.stage = np.zeros(len(self.c), dtype=np.int8)
        self.refined = [len(self.c), 0, 0, 0]  # cases taken to each stage

    def _rows(self, idx: np.ndarray) -> np.ndarray:
        return self.counts[idx]  # exact counts; the kernels take float64 pmfs of them

    def settle(self, decide) -> np.ndarray:
        """Decisions ``decide(p, index)`` for every case (``decide`` monotone in ``p``)."""
        every = slice(None)  # every case, without a gather
        d_lo, d_hi = decide(self.lo, every), decide(self.hi, every)
        for stage in (1, 2, 3):
            open_ = d_lo != d_hi
            if not open_.any():
                break
            idx = np.flatnonzero(open_ & (self.stage < stage))  # a case refined for another rule skips ahead
            if not len(idx):
                continue
            if stage == 3:
                lo = hi = tail(self._rows(idx), self.values, self.c[idx])
            else:
                if stage == 1:
                    lo, hi = berry_esseen_bracket(
                        self.k[idx], self.s[idx], self.q[idx], self.vlo[idx], self.vhi[idx], self.c[idx]
                    )
                else:
                    lo, hi = approx_bracket(
                        self._rows(idx),
                        self.values,
                        self.c[idx],
                        self.k[idx],
                        self.s[idx],
                        self.q[idx],
                        self.vlo[idx],
                        self.vhi[idx],
                        self.fingerprint[idx],
                    )
                lo, hi = np.maximum(lo, self.lo[idx]), np.minimum(hi, self.hi[idx])
            self.lo[idx], self.hi[idx] = lo, hi
            self.stage[idx] = stage
            self.refined[stage] += len(idx)
            d_lo[idx], d_hi[idx] = decide(lo, idx), decide(hi, idx)
        return d_lo


def _chernoff_edge(big_b: int, c: int, upper: bool, tiny: float) -> float:
    """For ``X ~ Bin(B, p)``: the largest ``p`` with ``P(X > c) < tiny`` (``upper``) or the
    smallest with ``P(X <= c) < tiny``, by Chernoff's ``exp(-B·KL(x/B || p))`` and bisection."""

    def kl(x: float, p: float) -> float:
        out = 0.0
        if x > 0:
            out += x * math.log(x / p)
        if x < 1:
            out += (1 - x) * math.log((1 - x) / (1 - p))
        return out

    if upper:
        x = (c + 1) / big_b
        if x > 1:
            return 1.0  # X > c is impossible
        lo, hi = 0.0, x  # bound holds for p < x
        for _ in range(200):
            mid = (lo + hi) / 2
            if mid > 0 and math.exp(-big_b * kl(x, mid)) < tiny:
                lo = mid
            else:
                hi = mid
        return lo
    x = c / big_b
    if x < 0:
        return 0.0  # X <= c is impossible
    lo, hi = x, 1.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if mid < 1 and math.exp(-big_b * kl(x, mid)) < tiny:
            hi = mid
        else:
            lo = mid
    return hi


@lru_cache(maxsize=64)
def _saturation(a: float, big_b: int) -> tuple[float, float]:
    """``(p1, p0)`` for the finite-B rule: below ``p1`` the chance to conclude is within
    ``2^-54`` of 1 (every uniform ``u < 1`` concludes), above ``p0`` it is below ``2^-60``
    (every ``u > 0`` defers). ``p`` is the tail on the wrong side (``p_low`` when ``m > θ``)."""
    c = math.floor(a * big_b + 1e-9)
    return _chernoff_edge(big_b, c, True, 2.0**-55), _chernoff_edge(big_b, c, False, 2.0**-61)  # with margin


_GRID = 4096
"""Points of the table of ``P(conclude)`` against the wrong-side tail, for finite ``B``."""


@lru_cache(maxsize=64)
def _conclude_table(a: float, big_b: int) -> tuple[np.ndarray, np.ndarray]:
    """``P(conclude)`` of the finite-B rule (``rules.bootstrap_conclude_prob``) on a grid of
    the wrong-side tail ``w`` between the saturation points, decreasing in ``w``."""
    p1, p0 = _saturation(a, big_b)
    w = np.linspace(p1, p0, _GRID)
    q = R.bootstrap_conclude_prob(w, np.ones(_GRID, dtype=bool), a, big_b)
    w.flags.writeable = False
    q.flags.writeable = False
    return w, q


def bootstrap_decisions(
    values: np.ndarray,
    summer,
    ssum: np.ndarray,
    ks: np.ndarray,
    theta: float,
    lattice: int,
    a: float,
    resamples: int | str,
    u: np.ndarray | None,
    cache: dict,
) -> np.ndarray:
    """Bootstrap decisions ``[P, R, J]`` for pairs whose differences (``values [P, N]``,
    lattice units) are not all in {-1, 0, 1}: ``rules.bootstrap_from_tail`` (exact) or
    ``u < rules.bootstrap_conclude_prob`` (finite ``B``, one uniform per case in ``u``) on the
    exact tail, which is computed only where a bracket cannot decide.

    ``summer`` maps per-task values to sums over each case's observed tasks. ``cache`` keeps
    the brackets per threshold, so the exact and finite-B rules of a block refine the same ones.
    """
    if ("lattice",) not in cache:
        vals = np.unique(values)
        kmax = int(ks.max(initial=0))
        dtype = np.uint8 if kmax < 1 << 8 else np.uint16 if kmax < 1 << 16 else np.float32
        # [cases, V], the smallest type that holds k: the random gathers of the short sum's rows
        # then stay in cache (a block of uint8 counts is a quarter of the float32 one)
        counts = np.empty((ssum.size, len(vals)), dtype=dtype)
        weights = _FINGERPRINT[: len(vals)] if len(vals) <= len(_FINGERPRINT) else np.zeros(len(vals))
        fingerprint = np.zeros(ssum.size)
        for i, v in enumerate(vals):  # one value at a time: a neyman summer is per pair
            col = summer((values == v).astype(np.float32)).ravel()  # float32 sums of 0/1: exact
            counts[:, i] = col
            fingerprint += col * weights[i]  # as ``fingerprints(counts)``, without a strided pass
        cache[("lattice",)] = Histograms(counts, vals, fingerprint.view(np.int64))
    key = ("lattice", f"{theta!r}")
    if key not in cache:
        k = np.broadcast_to(ks[None, None, :], ssum.shape).ravel()
        c = R.bootstrap_threshold(theta, k, lattice)
        pos = R.above(ssum.ravel(), k.astype(np.float64), theta, lattice)
        cache[key] = (Tails(cache[("lattice",)], c), pos)
    tails, pos = cache[key]
    if resamples == "exact":

        def decide(p: np.ndarray, i: np.ndarray | slice) -> np.ndarray:
            return R.bootstrap_from_tail(p, pos[i], a, "exact")
    else:
        decide = _finite_b_decide(float(a), int(resamples), pos, np.asarray(u).ravel())

    return tails.settle(decide).reshape(ssum.shape)


def _finite_b_decide(a: float, big_b: int, pos: np.ndarray, u: np.ndarray):
    """The finite-B decision as a function of a tail bound: ``u < P(conclude)``, read off the
    table where one cell settles it and evaluated exactly only where it cannot.

    ``P(conclude)`` decreases in the wrong-side tail ``w``; for ``w`` in the table's range, the
    grid points three cells around its index bracket ``w`` whatever the rounding of the index,
    so ``q[j_hi] <= P(conclude) <= q[j_lo]``. A margin of 1e-12 on ``u`` absorbs rounding in
    the table. One look-up per case and stage replaces a binomial CDF per case and stage.
    """
    p1, p0 = _saturation(a, big_b)
    _, q = _conclude_table(a, big_b)
    scale = (_GRID - 1) / (p0 - p1) if p0 > p1 else 0.0
    top = _GRID - 1

    sign = np.array([R.REJECT, R.ACCEPT], dtype=np.int8)  # by pos

    def decide(p: np.ndarray, i: np.ndarray | slice) -> np.ndarray:
        ps, ui = pos[i], u[i]
        wrong = np.where(ps, p, 1.0 - p)  # the tail that must be small to conclude
        g = np.floor((wrong - p1) * scale)
        np.clip(g, -2.0, float(top), out=g)
        gi = g.astype(np.intp)
        j_lo = np.maximum(gi - 1, 0)
        j_hi = np.clip(gi + 2, 0, top)
        conclude = (wrong <= p1) | ((wrong <= p0) & (ui < q[j_hi] - 1e-12))
        defer = ((wrong >= p0) & (ui > 0)) | ((wrong >= p1) & (ui >= q[j_lo] + 1e-12))
        mid = np.flatnonzero(~(conclude | defer))
        if len(mid):
            conclude[mid] = ui[mid] < R.bootstrap_conclude_prob(p[mid], ps[mid], a, big_b)
        out = sign[ps.view(np.uint8)]
        out[~conclude] = R.DEFER
        return out

    return decide
