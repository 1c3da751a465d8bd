"""The resampling tail on a lattice, exactly or bracketed (SPEC §4.2 for multi-trial and
fractional records): the kernels behind ``lattice_decisions``.

The resampling tail is ``τ = P(S <= c)``, ``S`` the sum of ``k`` draws with replacement from a
case's differences (integers, lattice units) and ``c`` the largest sum with ``m* <= θ``. Each
function here gives, per case, either ``τ`` or a rigorous bracket ``lo <= τ <= hi``:

1. **Bennett** (``bennett_bracket``: closed form from ``k``, ``Σv``, ``Σv²`` and the range of
   the observed values): a bound on each tail;
2. **Berry–Esseen** (``berry_esseen_bracket``: normal law ± ``0.4748·ρ/(σ³√k)``): the middle;
3. **short sum** (``approx_bracket``): the sum below over a window of ``S`` much shorter than
   its support, with the aliased mass bounded by Bennett and the truncation bounded: width
   about 1e-4;
4. **exact** (``tail``): the sum below over the whole support, to rounding (1e-13).

Replays past ``COMPILED_FROM`` take the first three stages compiled instead
(``lattice_kernel``): the same bounds, case by case and row by row.

``tail`` computes ``τ`` without an inverse transform: with ``n`` larger than the support of
``S``, ``ω_j = 2πj/n`` and ``φ_j = E e^{-iω_j V}``, ``P(S <= c) = (c'+1)/n + (2/n)·Σ_j
Re(φ_j^k·G_j)`` where ``G_j`` sums ``e^{iω_j s}`` over the support up to ``c``. A term with
``|φ_j|^k <= EPS_TERM`` is dropped (``|G_j|·2/n <= 1/j``, so all of them move ``τ`` by at most
``EPS_TERM·(ln n + 1)``), and ``φ^k`` is computed only up to the last term that matters.
"""
from __future__ import annotations

import math
import sys

import numpy as np

from service.engine import rules as R
from service.engine.arraycache import bounded_cache
from service.engine.tails import lattice_args

EPS_TERM = 1e-17
"""Largest ``|φ_j|^k`` of a frequency term left out of an exact tail."""

SLACK = 1e-9
"""Relative and absolute widening of every bound: covers rounding in the bounds and in
``tail`` (whose error is below 1e-13). Decisions break at ``a + 1e-12`` or at a uniform,
never within 1e-9 of 0 or 1, so exact 0/1 at the edges of the support need no widening."""

_BLOCK = 1 << 16
"""Elements (rows × frequencies) per working array of the power, so that it runs in cache."""


# ----------------------------------------------------------------------------- exact tail


@bounded_cache(32 << 20)
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


@bounded_cache(8 << 20)
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


@bounded_cache(16 << 20)
def windows(n: int, lows: tuple[int, ...], cs: tuple[int, ...]) -> np.ndarray:
    """The windows ``G`` of one Fourier CDF call, ``[len(cs), len(lows), 2m]``: the calls of a
    replay meet the same few hundred combinations again and again (1,214 of the 1,440 calls of
    the exact fractional replay), and stacking them took 57 ms of its 1.9 s in one thread."""
    g = np.stack([np.stack([_window(n, low, c) for low in lows]) for c in cs])
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
    pmf: np.ndarray, values: tuple[int, ...], k: int, lo, cs: tuple[int, ...], n: int, eps: float = EPS_TERM
) -> np.ndarray:
    """``Σ_{s=lo}^{c} P(S ≡ s mod n)`` for rows of ``pmf [r, V]`` (``k`` draws) and each ``c``
    of ``cs``, as ``[len(cs), r]``, leaving out terms with ``|φ_j|^k <= eps`` (error at most
    ``truncation_error(n, eps)``): the CDF at ``c`` when ``lo`` is the least possible sum and
    ``n`` exceeds the support. Several ``c`` share the power ``φ^k``: one projection each.

    ``lo`` is one integer or one per row (windows that start at different sums share the
    power too). Each run of equal ``lo`` gets one window, so rows sorted by ``lo`` (as
    ``approx_bracket`` passes them) keep the windows, and the projections per block, few."""
    m = (n - 1) // 2
    per_row = np.ndim(lo) > 0
    lows, which, out = cdf_start(lo, cs, n, len(pmf))
    if m == 0 or not len(pmf):
        return out
    cos, nsin = _tables(values, n)
    gmat = windows(n, tuple(lows.tolist()), tuple(cs))  # [c, windows, 2m]
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
        hit = mag > thr - slack
        row_top = m - np.argmax(hit[:, ::-1], axis=1)  # per row: one past its last term that matters
        row_top[~hit[np.arange(len(p)), row_top - 1]] = 0  # (argmax of a row without a hit is 0)
        top, split = _split(row_top)
        if not top:
            continue
        # every row's terms below ``split``; those above it only for the rows that have them
        # (a few rows whose law sits on a sub-lattice keep |φ| high far out)
        for sub, j0, j1 in ((None, 0, split), (np.flatnonzero(row_top > split), split, top)):
            if j1 <= j0 or (sub is not None and not len(sub)):
                continue
            rr = slice(None) if sub is None else sub
            z = np.empty((len(p) if sub is None else len(sub), j1 - j0), dtype=np.complex128)
            z.real = re[rr, j0:j1]
            z.imag = im[rr, j0:j1]
            zf = _power(z, k).view(np.float64)
            at = slice(i, i + len(p)) if sub is None else i + sub
            for t in range(len(cs)):
                if not per_row:
                    out[t, at] += (2.0 / n) * (zf @ gmat[t, 0, 2 * j0 : 2 * j1])
                    continue
                w = which[at]
                first = int(w.min())
                proj = zf @ gmat[t, first : int(w.max()) + 1, 2 * j0 : 2 * j1].T  # [rows, windows of this block]
                out[t, at] += (2.0 / n) * proj[np.arange(len(w)), w - first]
    return out


def cdf_start(lo, cs: tuple[int, ...], n: int, n_rows: int) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """What a Fourier CDF starts from: the windows' distinct starts (runs of equal ``lo``, one
    integer or one per row), each row's run (None for one start) and the sums' first term,
    ``(c + 1 - lo) / n`` per threshold and row."""
    if np.ndim(lo) > 0:
        new = np.empty(len(lo), dtype=bool)
        new[:1] = True
        np.not_equal(lo[1:], lo[:-1], out=new[1:])
        lows, which = lo[new], np.cumsum(new) - 1
    else:
        lows, which = np.array([lo]), None
    out = np.empty((len(cs), n_rows))
    for t, c in enumerate(cs):
        np.subtract(c + 1, lo, out=out[t])
    out /= n
    return lows, which, out


def _split(row_top: np.ndarray) -> tuple[int, int]:
    """``(top, split)``: the block's last term and the column below which every row is powered,
    chosen to minimise the terms powered (``rows·split`` plus, for the rows whose terms go
    further, their columns from ``split`` to ``top``)."""
    top = int(row_top.max(initial=0))
    if not top:
        return 0, 0
    beyond = len(row_top) - np.cumsum(np.bincount(row_top, minlength=top + 1))  # rows with row_top > j
    j = np.arange(top + 1)
    cost = len(row_top) * j + beyond * (top - j)
    return top, int(np.argmin(cost))


def truncation_error(n: int, eps: float) -> float:
    """Bound on the terms ``_fourier_cdf`` leaves out: ``Σ_{j<=m} eps·(2/n)·|G_j| <= eps·Σ 1/j``."""
    return eps * (math.log(max(1, (n - 1) // 2)) + 1.0)


def tail(hist: np.ndarray, values: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Exact ``P(Σ_{i<=k} V_i <= c)`` for ``k = Σ hist`` draws from ``hist/k`` over integer
    ``values`` (ascending), per row: ``tails.tail_lattice``'s numbers (to 1e-13), faster."""
    hist, values, c, k, vmin, span = lattice_args(hist, values, c)
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
            out[rows] = _fourier_cdf(hist[rows] / kk, vt, kk, vmin * kk, (cc,), n)[0]
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


EPS_ALIAS = 1e-4
"""Target mass of ``S`` outside the window of an approximate tail (bounded by Bennett)."""

EPS_APPROX = 1e-5
"""Largest ``|φ_j|^k`` of a term left out of an approximate tail."""


def _bernstein_reach(var_sum: np.ndarray, b: np.ndarray, log_inv: float) -> np.ndarray:
    """Distance beyond which Bernstein (weaker than Bennett) puts less than ``e^-log_inv``."""
    lb = b * log_inv / 3.0
    return lb + np.sqrt(lb * lb + 2.0 * var_sum * log_inv)


_MIX = np.array([0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0xD6E8FEB86659FD93], dtype=np.uint64)
"""Odd multipliers of the row hash (fixed: the same rows always sort the same way)."""


def row_hash(words: np.ndarray) -> np.ndarray:
    """A 64-bit hash per row of ``words [rows, W]`` (integers that code a histogram exactly):
    equal rows, equal hashes. Only a sort key; equality is always checked on ``words``."""
    h = np.zeros(len(words), dtype=np.uint64)
    for i in range(words.shape[1]):
        h += words[:, i].astype(np.uint64) * _MIX[i % len(_MIX)]
        h ^= h >> np.uint64(29)
    return h.view(np.int64)


def _group_order(keys: tuple[np.ndarray, ...], hashes: np.ndarray) -> np.ndarray:
    """An order of the rows sorted by ``keys`` (integers, the first most significant) and,
    within equal keys, with equal hashes adjacent: what ``np.lexsort((hashes, *keys[::-1]))``
    gives up to the order among hashes, several times faster.

    The keys are packed (``_pack``) into one integer with as many low bits of the hash as fit
    beside them (22 in a replay), so one sort does it; rows that share those bits but not the
    whole hash may then interleave, which only costs a merge."""
    composite = _pack(keys)
    bits = min(62 - int(composite.max(initial=0)).bit_length(), 22)
    if bits >= 8:
        return np.argsort((composite << bits) | (hashes & ((1 << bits) - 1)))
    by_hash = np.argsort(hashes)  # keys too wide to share a word with it: two sorts
    return by_hash[np.argsort(composite[by_hash], kind="stable")]


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


def approx_bracket(*args: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Rigorous ``lo <= P(S <= c) <= hi`` per row (``[T, rows]`` for ``T`` thresholds per row),
    from a short characteristic-function sum: ``approx_runs``, whose arguments these are and
    whose doc says how, with each row's bracket read off its run."""
    lo, hi, at = approx_runs(*args)  # type: ignore[arg-type]
    return (lo[0, at], hi[0, at]) if np.ndim(args[2]) == 1 else (lo[:, at], hi[:, at])


def approx_runs(
    hist: np.ndarray,
    values: np.ndarray,
    c: np.ndarray,
    k: np.ndarray,
    s: np.ndarray,
    q: np.ndarray,
    vlo: np.ndarray,
    vhi: np.ndarray,
    words: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rigorous ``lo <= P(S <= c) <= hi`` from a short characteristic-function sum.

    With ``n`` below the support of ``S``, the sum over a window ``[L, L+n-1]`` that holds
    ``c`` gives the law of ``S mod n``: ``Σ_{L<=x<=c} P(S ≡ x)`` exceeds ``P(L <= S <= c)`` by
    at most the mass above the window and misses the mass below it, so ``τ`` lies in
    ``[val - e_hi, val + e_lo]`` with ``e_lo, e_hi`` Bennett's bounds on those masses. The
    window spans the law's bulk (Bernstein's reach for ``EPS_ALIAS`` either side of the mean)
    and ``c``, its length rounded up to four sizes per octave and its start to a multiple of
    a quarter-octave step, so rows share it; rows with the same ``(k, c, n)`` share one call
    (a group of few rows joins the next longer window of its ``(k, c)``: ``_merged_groups``),
    and terms with ``|φ_j|^k <= EPS_APPROX`` are left out, row by row.

    ``c`` is one threshold per row, or ``[T, rows]``: ``T`` thresholds per row, whose tails
    share the window (it holds them all) and the power ``φ^k`` (a pair and its mirror need
    the same law at two points).

    ``words [rows, W]`` codes each histogram exactly (equal rows, equal words; the counts
    themselves when not given): rows with equal words and windows are computed once, so the
    brackets come per computation, ``lo, hi [T, runs]``, with each row's run in ``at``.
    (``lattice_kernel.short_stage`` computes these brackets compiled, row by row.)
    """
    hist = np.asarray(hist)
    values = np.asarray(values, dtype=np.int64)
    vt = tuple(int(v) for v in values)
    span = int(values.max() - values.min())
    low_v = int(values.min())
    k = np.asarray(k, dtype=np.int64)
    cs = np.atleast_2d(np.asarray(c, dtype=np.int64))  # [T, rows]
    c_top = cs.max(axis=0)
    kf = k.astype(np.float64)
    var_sum = np.maximum(kf * q - s * s, 0.0) / np.maximum(kf, 1.0) * (1.0 + 1e-12)
    mean = s / np.maximum(kf, 1.0)
    b_lo = (mean - vlo) * (1.0 + 1e-12)
    b_hi = (vhi - mean) * (1.0 + 1e-12)
    log_inv = math.log(1.0 / EPS_ALIAS)
    first = np.minimum(np.floor(s - _bernstein_reach(var_sum, b_lo, log_inv)), cs.min(axis=0)).astype(np.int64)
    last = np.maximum(np.ceil(s + _bernstein_reach(var_sum, b_hi, log_inv)), c_top).astype(np.int64)
    width = last - first + 1
    step = 2 ** np.maximum(np.floor(np.log2(width)).astype(np.int64) - 2, 0)
    below = -(-(c_top - first) // step) * step  # c - L, rounded up: the window starts at or before `first`
    n = -(-(below + (last - c_top) + 1) // step) * step
    n |= 1  # odd: no Nyquist term
    exact_n = (span * k + 1) | 1
    use_exact = n >= exact_n  # the whole support fits: no aliasing
    n = np.where(use_exact, exact_n, n)
    start = np.where(use_exact, low_v * k, c_top - below)
    # rows with equal (k, c, n, start) and equal words are one computation: sort them together
    # (the hash last) and take the first row of each run
    if words is None:
        words = hist.astype(np.int64).reshape(len(hist), -1)
    group = _pack((k, *cs, n))  # one integer per (k, c, n): one gather and one comparison
    order = _group_order((group, start), row_hash(words))
    gs, st = group[order], start[order]
    ws = np.take(words, order, axis=0)
    new_group = np.r_[True, gs[1:] != gs[:-1]]
    new_run = new_group | np.r_[True, (st[1:] != st[:-1]) | (ws[1:] != ws[:-1]).any(axis=1)]
    heads = np.flatnonzero(new_run)  # positions in ``order`` of each run's first row
    run = np.cumsum(new_run) - 1  # the run of each position
    rows = order[heads]  # one row per distinct computation
    h_st = st[heads]
    h_hist = np.take(hist, rows, axis=0)
    n_t = len(cs)
    val = np.empty((n_t, len(heads)))
    err = np.zeros(len(heads))
    inside = np.ones((n_t, len(heads)), dtype=bool)
    h_n = n[rows]  # the window length each computation is done with (a merged group's is larger)
    for a, last, b in _merged_groups(np.flatnonzero(new_group[heads]), len(heads), rows, k, cs, n):
        head = rows[last]
        kk, nn = int(k[head]), int(n[head])
        h_n[a:b] = nn
        ccs = [int(x) for x in cs[:, head]]
        low = low_v * kk
        todo = []
        for t, cc in enumerate(ccs):
            if cc < low or cc >= low + span * kk:  # outside the support: 0 or 1 exactly
                val[t, a:b] = 0.0 if cc < low else 1.0
                inside[t, a:b] = False
            else:
                todo.append(t)
        if not todo:
            continue
        pmf = h_hist[a:b].astype(np.float64)
        pmf /= kk
        val[todo, a:b] = _fourier_cdf(pmf, vt, kk, h_st[a:b], tuple(ccs[t] for t in todo), nn, EPS_APPROX)
        err[a:b] = truncation_error(nn, EPS_APPROX) + 1e-12
    aliased = ~use_exact[rows]
    e_lo = np.zeros(len(rows))
    e_hi = np.zeros(len(rows))
    if aliased.any():
        r = rows[aliased]
        e_lo[aliased] = _bennett(s[r] - (h_st[aliased] - 1), var_sum[r], b_lo[r])  # P(S <= L-1)
        e_hi[aliased] = _bennett((h_st[aliased] + h_n[aliased]) - s[r], var_sum[r], b_hi[r])  # P(S >= L+n)
    # no error on a tail that is 0 or 1 exactly
    e_lo, e_hi = (np.where(inside, e + err, 0.0) for e in (e_lo, e_hi))
    lo = val - e_hi
    hi = val + e_lo
    lo = np.clip(lo * (1.0 - SLACK) - SLACK, 0.0, 1.0)
    hi = np.clip(hi * (1.0 + SLACK) + SLACK, lo, 1.0)
    at = np.empty(len(order), dtype=np.intp)
    at[order] = run
    return lo, hi, at


COMPILED_FROM = 2_500_000
"""Lattice bootstrap cases (pairs × bootstrap configurations × seeds × orders × budgets) from
which a replay loads ``lattice_kernel`` for its stages, in a process that has not loaded it
yet (one that has uses it for every replay: ``kernel_loaded``). Loading costs a process about
0.5 s (numba's import, the kernels from numba's cache); the compiled stages save about 0.075 µs
of wall time per case. In fresh processes on two threads, best of three, import included:
the exact bootstrap of ``terminal_bench_core_0.1.1`` (1.5 M cases) took 0.54 s compiled
against 0.47 s in numpy, B = 200 0.57 against 0.51 s; ``terminal_bench_1_fractional`` (5.7 M)
1.09 against 1.53 s and 1.22 against 1.60 s: even near 2.5 M cases."""


def kernel_loaded() -> bool:
    """Whether this process has loaded ``lattice_kernel`` (a Celery worker does at start, any
    process on its first replay past ``COMPILED_FROM``): then every short sum may use it.

    The choice cannot change a report: a stage settles a case only where its bracket, which
    holds the exact tail whichever way the sum was computed, lies on one side of the
    breakpoint, so either way the case gets the decision of its exact tail."""
    return "service.engine.lattice_kernel" in sys.modules


MERGE_BELOW = 64
"""Computations in a group below which it joins the next group of the same ``(k, c)``."""


def _merged_groups(starts: np.ndarray, end: int, rows: np.ndarray, k: np.ndarray, cs: np.ndarray, n: np.ndarray):
    """``(a, last, b)`` per call of ``_fourier_cdf``: the computations ``a:b`` (groups of equal
    ``(k, c, n)``, ascending in ``n`` within each ``(k, c)``), done with the window length of
    the group starting at ``last``. A group with few computations joins the next one of the
    same ``(k, c)``: a longer window still holds the row's own ``[L, c]`` and the aliasing bound
    is taken at the length used, and a call costs more than the longer window on a few rows."""
    bounds = np.append(starts, end)
    key = _pack((k[rows[starts]], *cs[:, rows[starts]]))
    length = n[rows[starts]]
    a = None
    for g in range(len(starts)):
        if a is None:
            a = int(bounds[g])
        b = int(bounds[g + 1])
        if b - a < MERGE_BELOW and g + 1 < len(starts) and key[g + 1] == key[g] and length[g + 1] >= length[g]:
            continue
        yield a, int(bounds[g]), b
        a = None


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
