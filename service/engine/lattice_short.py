"""The short sums of the lattice stages, compiled (numba): ``lattice.approx_runs``'s
brackets row by row (``short_brackets``), and ``Tails._short_sums`` over the open cases of a
block (``short_stage``). Part of ``lattice_kernel``, which imports this module and whose
import is what loads (or compiles) every kernel; the engine reaches these through it.

Why compiled: in numpy the short sum is some sixty array operations per group of rows that
share a window, behind a sort that groups them; those passes, not the arithmetic, were most
of the time (a fractional replay spent 0.6 s of its 0.9 s of short sums outside the sums
themselves). Here each distinct ``(histogram, k, thresholds)`` is summed once (a hash table
instead of a sort), each row over its own window, and the brackets are written back to every
case of those laws; the few cases still open then get the same sums over the whole support of
``S`` (brackets of width about 2e-9), where numpy computed exact tails at 20-80 µs each.

Where the values are many (outcomes of step 1/100: ``SPARSE_MAGS``), a row's ``φ`` is evaluated
only at the frequencies where it can still matter, found by a bound on how fast ``|φ|`` moves
(``E|X - c|`` at the row's median ``c``), and only the terms above the threshold are raised
to the ``k``-th power and summed: a row of step-1/100 outcomes evaluated 133 of its 1,247
frequencies (with ``σ`` for the bound, before the median) and kept 13, and such replays took
about half the time.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from service.engine.lattice import SLACK


def compiled(fn=None, *, reorder: bool = False):
    """``fn`` compiled without the GIL, cached on disk where numba finds a writable place (beside
    this file, else the user's cache); elsewhere compiled anew in each process. ``reorder``
    lets sums be reassociated (and so vectorised): only for sums whose rounding the brackets
    already allow for."""
    if fn is None:
        return lambda f: compiled(f, reorder=reorder)
    flags = {"fastmath": {"reassoc", "contract"}} if reorder else {}
    try:
        return njit(cache=True, nogil=True, **flags)(fn)
    except RuntimeError:  # "cannot cache function": a read-only install and no writable home
        return njit(nogil=True, **flags)(fn)


# ----------------------------------------------------------------------------- short sums


@compiled
def _reach(var_sum, b, log_inv):  # pragma: no cover - compiled
    """``lattice._bernstein_reach`` for one value."""
    lb = b * log_inv / 3.0
    return lb + math.sqrt(lb * lb + 2.0 * var_sum * log_inv)


@compiled
def _phases(h_cos, h_sin, x, n, m, re, im):  # pragma: no cover - compiled
    """``re[j] + i·im[j] = e^{iω_f x}`` for ``f = j + 1 <= m``, read off ``e^{iπp/n}`` (``h_cos``,
    ``h_sin`` for ``p < 2n``) at exact phases."""
    step = (2 * x) % (2 * n)
    at = 0
    for j in range(m):
        at += step
        if at >= 2 * n:
            at -= 2 * n
        re[j] = h_cos[at]
        im[j] = h_sin[at]


@compiled
def _mod(x, m, inv_m):  # pragma: no cover - compiled
    """``x % m`` for ``0 <= x < 2**40`` and ``inv_m = 1/m``, by a multiply instead of a 64-bit
    division (tens of cycles, once per value and frequency where ``φ`` is evaluated off the
    phase table): the quotient's float estimate is off by at most one, which the two
    corrections take back."""
    r = x - int(x * inv_m) * m
    if r < 0:
        r += m
    elif r >= m:
        r -= m
    return r


@compiled
def _half_turn(h_cos, h_sin, n):  # pragma: no cover - compiled
    """``h_cos[p] + i·h_sin[p] = e^{iπp/n}`` for ``p < 2n`` (``n`` odd), a quarter of them by
    ``cos`` and ``sin`` and the rest by symmetry: ``e^{iπ(n-p)/n} = -cos + i·sin`` and
    ``e^{iπ(2n-p)/n} = cos - i·sin`` of ``πp/n``. A window over the whole support of ``S`` (tens
    of thousands of points, a length of its own per row) spent much of its time on these tables.
    The mirrored values are as accurate as the direct ones: their arguments are the smaller."""
    half = n // 2  # n odd: p and n - p never meet
    for p in range(half + 1):
        x = p * math.pi / n
        c, s = math.cos(x), math.sin(x)
        h_cos[p], h_sin[p] = c, s
        if p > 0:
            h_cos[n - p], h_sin[n - p] = -c, s
    h_cos[n], h_sin[n] = -1.0, 0.0
    for p in range(1, n):
        h_cos[2 * n - p], h_sin[2 * n - p] = h_cos[p], -h_sin[p]


_G_TABLE = 1024
"""Longest window whose sums ``H_f(cnt)`` and phases ``e^{iω_f x}`` are tabulated for every
``cnt`` and start ``x`` (two tables, 17 MB at most per call, touched only as far as windows
reach), so that a row's projection is one product and one dot product per threshold; longer
windows read their phases off ``e^{iπp/n}`` term by term."""


SPARSE_MAGS = 32
"""From this many distinct ``|v|`` (values -L..L: L of them), ``_brackets`` computes a row's
``φ`` frequency by frequency, skipping those that a bound on how fast ``|φ|`` moves shows to be
below the threshold, and sums only the terms it keeps. Where ``|v|`` are few the dense passes
over every frequency, vectorised, cost less; where they are many (scores of step 1/100) nearly
every frequency past the main lobe is skipped. On 4,000 rows of k = 20-285 (2026-12-05), dense
against sparse: L = 10 14 against 21 ms, L = 20 23 against 31, L = 30 31 against 33, L = 50 46
against 33, L = 100 292 against 105."""


_FLY_ROWS = 4
"""Below this many rows of a window length, the sparse sums build no table of φ's phases (one
of ``n/2`` frequencies x ``|v|``, built for each length) but read each phase off ``e^{iπp/n}``
where they evaluate φ: a whole-support window is one row, with tens of thousands of frequencies
of which a few hundred are evaluated."""


@compiled(reorder=True)
def _brackets(counts, values, k, s, q, vlo, vhi, cs, log_inv, eps, slack, full, lo_out, hi_out):  # pragma: no cover
    """``lattice.approx_runs``'s brackets, row by row: each row its own window (not shared with
    other rows; its length rounded up to four sizes per octave, since building the tables of a
    hundred lengths per call cost more than the longer sums), the rows taken in order of window
    length so that one table of ``e^{-iπp/n}`` serves every row of a length; with ``full``,
    every window the whole support.

    One difference: the mass aliased from beyond each end of a window is bounded by
    ``e^{-log_inv}`` itself, not by Bennett at the end. The window reaches past Bernstein's
    distance for that mass on each side of the mean (``_reach``), and Bernstein's bound falls
    with the distance, so the bound holds; it is looser than Bennett's, which costs a log and
    an exp per row, and the few cases it leaves open go to the sums over the whole support.

    With ``SPARSE_MAGS`` distinct ``|v|`` or more, the terms summed are those above the
    threshold (not every term up to the last such), at the frequencies ``φ`` was evaluated at;
    each term left out is under ``eps`` either way, which is what the truncation bound needs."""
    n_rows, n_v = counts.shape
    n_t = cs.shape[0]
    low_v = values[0]
    span = values[n_v - 1] - low_v
    length = np.zeros(n_rows, dtype=np.int64)  # 0: every threshold outside the support
    start = np.empty(n_rows, dtype=np.int64)
    e_lo = np.zeros(n_rows)  # the mass either end of a window may alias (0: the whole support)
    edge = math.exp(-log_inv) * (1.0 + 1e-9)  # Bernstein's bound at ``_reach`` (see above)
    for r in range(n_rows):
        kk = k[r]
        low, high = low_v * kk, (low_v + span) * kk  # the support of S
        c_min, c_max, any_inside = 0, 0, False
        for t in range(n_t):
            c = cs[t, r]
            if c < low:
                lo_out[t, r] = hi_out[t, r] = 0.0
            elif c >= high:
                lo_out[t, r] = hi_out[t, r] = 1.0
            else:
                if not any_inside or c < c_min:
                    c_min = c
                if not any_inside or c > c_max:
                    c_max = c
                any_inside = True
        if not any_inside:
            continue
        kf = float(kk)
        var_sum = max(kf * q[r] - s[r] * s[r], 0.0) / max(kf, 1.0) * (1.0 + 1e-12)
        mean = s[r] / max(kf, 1.0)
        b_lo = (mean - vlo[r]) * (1.0 + 1e-12)
        b_hi = (vhi[r] - mean) * (1.0 + 1e-12)
        first = min(int(math.floor(s[r] - _reach(var_sum, b_lo, log_inv))), c_min)
        last = max(int(math.ceil(s[r] + _reach(var_sum, b_hi, log_inv))), c_max)
        n = last - first + 1
        if n > 16:  # up to a step of a quarter octave: fewer lengths, fewer tables to build
            top_bit = 0  # floor(log2(n)), without a float log per row
            while (n >> (top_bit + 1)) > 0:
                top_bit += 1
            step = 1 << max(0, top_bit - 2)
            n = -(-n // step) * step
        n |= 1  # odd: no Nyquist term
        exact_n = (span * kk + 1) | 1
        if full or n >= exact_n:  # the whole support: no aliasing
            length[r], start[r] = exact_n, low
        else:
            length[r], start[r] = n, first
            e_lo[r] = edge
    # rows by window length (a counting sort: lengths are at most the support)
    top_n = 0
    for r in range(n_rows):
        top_n = max(top_n, length[r])
    tally = np.zeros(top_n + 2, dtype=np.int64)
    for r in range(n_rows):
        tally[length[r] + 1] += 1
    rows_of = tally[1:].copy()  # rows per window length
    for i in range(1, top_n + 2):
        tally[i] += tally[i - 1]
    order = np.empty(n_rows, dtype=np.int64)
    for r in range(n_rows):
        order[tally[length[r]]] = r
        tally[length[r]] += 1
    # what the sums read of each row, in that order: one pass of independent gathers, then a
    # loop that reads in sequence (read in the sorted order, each row cost a handful of cache misses)
    cnt_s = np.empty((n_rows, n_v), dtype=counts.dtype)
    c_s = np.empty((n_t, n_rows), dtype=np.int64)
    k_s = np.empty(n_rows, dtype=np.int64)
    len_s = np.empty(n_rows, dtype=np.int64)
    start_s = np.empty(n_rows, dtype=np.int64)
    e_s = np.empty(n_rows)
    for i in range(n_rows):
        r = order[i]
        len_s[i], k_s[i], start_s[i], e_s[i] = length[r], k[r], start[r], e_lo[r]
        for v in range(n_v):
            cnt_s[i, v] = counts[r, v]
        for t in range(n_t):
            c_s[t, i] = cs[t, r]
    m_max = max((top_n - 1) // 2, 1)
    n_g = min(top_n, _G_TABLE)  # the longest window whose G table is kept
    g_re = np.empty((n_g + 1, max((n_g - 1) // 2, 1)))
    g_im = np.empty((n_g + 1, max((n_g - 1) // 2, 1)))
    s_re = np.empty((n_g, max((n_g - 1) // 2, 1)))
    s_im = np.empty((n_g, max((n_g - 1) // 2, 1)))
    ps_re = np.empty(m_max)
    ps_im = np.empty(m_max)
    # φ by |v|: Σ_v p_v e^{-iωv} = p_0 + Σ_u (p_u + p_-u) cos ωu - i Σ_u (p_u - p_-u) sin ωu, so
    # a law that holds both v and -v costs one product of each kind instead of two
    n_u = 0
    mags = np.empty(n_v, dtype=np.int64)  # the distinct |v| > 0
    u_of = np.full(n_v, -1, dtype=np.int64)  # each value's |v| (-1 for 0)
    for v in range(n_v):
        a = abs(values[v])
        if a == 0:
            continue
        for w in range(n_u):
            if mags[w] == a:
                u_of[v] = w
        if u_of[v] < 0:
            mags[n_u] = a
            u_of[v] = n_u
            n_u += 1
    sym = np.empty(max(n_u, 1))
    anti = np.empty(max(n_u, 1))
    sparse = n_u >= SPARSE_MAGS  # each row's φ only where it can matter (below)
    if sparse:  # φ's tables by frequency: a row of each is what one frequency's φ reads
        cos_t = np.empty((m_max, n_u))
        sin_t = np.empty((m_max, n_u))
        at_u = np.zeros(n_u, dtype=np.int64)
        step_u = np.zeros(n_u, dtype=np.int64)
    else:  # by |v|: a row of each is what one value adds to every frequency
        cos_t = np.empty((max(n_u, 1), m_max))
        sin_t = np.empty((max(n_u, 1), m_max))
    kept = np.empty(m_max if sparse else 1, dtype=np.int64)  # the frequencies (f - 1) a sparse row keeps
    inv_sin = np.empty(m_max)
    h_cos = np.empty(2 * top_n + 2)
    h_sin = np.empty(2 * top_n + 2)
    re = np.empty(m_max)
    im = np.empty(m_max)
    pr = np.empty(m_max)
    pi = np.empty(m_max)
    table_n = -1
    tabled = fly = False
    err = 0.0
    thr_of = np.full(64, -1.0)
    for i in range(n_rows):
        r = order[i]
        n = len_s[i]
        if n == 0:
            continue
        m = (n - 1) // 2
        kk = k_s[i]
        kf = float(kk)
        if n != table_n:  # e^{-iπp/n} for p < 2n, exact phases; φ's tables read off it
            table_n = n
            tabled = n <= _G_TABLE and 4 * rows_of[n] >= n  # the tables cost about n rows' projections
            err = eps * (math.log(max(1, m)) + 1.0) + 1e-12  # lattice.truncation_error, and rounding
            _half_turn(h_cos, h_sin, n)
            for j in range(m):
                inv_sin[j] = 1.0 / h_sin[j + 1]  # 1/sin(π f/n), f = j + 1
            if tabled:  # H_f(cnt) = Σ_{x<cnt} e^{iω_f x} = amp·e^{iπ f (cnt - 1)/n}, every cnt
                for cnt in range(1, n + 1):
                    a_step = cnt % (2 * n)
                    b_step = cnt - 1
                    a_at, b_at = 0, 0
                    for j in range(m):
                        a_at += a_step
                        if a_at >= 2 * n:
                            a_at -= 2 * n
                        b_at += b_step
                        if b_at >= 2 * n:
                            b_at -= 2 * n
                        amp = h_sin[a_at] * inv_sin[j]
                        g_re[cnt, j] = amp * h_cos[b_at]
                        g_im[cnt, j] = amp * h_sin[b_at]
                for x in range(n):  # e^{iω_f x}, every start x mod n
                    _phases(h_cos, h_sin, x, n, m, s_re[x], s_im[x])
            # a window of few rows (the whole support) reads its phases off e^{iπp/n} where φ
            # is evaluated, without a table
            fly = sparse and rows_of[n] < _FLY_ROWS
            if sparse:  # each |v|'s phase step, once per length (a division each)
                inv_2n = 1.0 / (2 * n)
                for w in range(n_u):
                    step_u[w] = (2 * mags[w]) % (2 * n)
            if sparse and not fly:  # as _phases, frequency by frequency
                at_u[:n_u] = 0
                for j in range(m):
                    for w in range(n_u):
                        at = at_u[w] + step_u[w]
                        if at >= 2 * n:
                            at -= 2 * n
                        at_u[w] = at
                        cos_t[j, w] = h_cos[at]
                        sin_t[j, w] = h_sin[at]
            elif not sparse:
                for w in range(n_u):
                    _phases(h_cos, h_sin, mags[w], n, m, cos_t[w], sin_t[w])
        p0 = 0.0
        sym[:n_u] = 0.0
        anti[:n_u] = 0.0
        for v in range(n_v):
            if cnt_s[i, v] != 0:
                p = cnt_s[i, v] / kf
                w = u_of[v]
                if w < 0:
                    p0 = p
                else:
                    sym[w] += p
                    anti[w] += p if values[v] > 0 else -p
        if kk >= len(thr_of) or thr_of[kk] < 0.0:  # eps**(2/k) once per k (a pow takes ~50 ns)
            if kk >= len(thr_of):
                grown = np.full(2 * kk + 1, -1.0)
                grown[: len(thr_of)] = thr_of
                thr_of = grown
            thr_of[kk] = eps ** (2.0 / kf) - slack
        thr = thr_of[kk]
        if sparse:
            # |φ| moves by at most E|X - c|·Δω = E|X - c|·2π/n from one frequency to the next (its
            # derivative is E[-i(X - c)e^{-iω(X - c)}] up to a unit factor, for any c), so past a
            # frequency where |φ| is below sqrt(thr) the next ones up to where it could climb back
            # are below it too, and are left out as the dense sum leaves out those it computes
            root = math.sqrt(max(thr, 0.0))
            # the slope's bound E|X - c| at the row's median c, where it is least (never above
            # σ, which this used before; on rows of step-1/100 outcomes 0.67-0.79 σ, and so
            # fewer frequencies evaluated). Integer sums: exact, then one division, whose
            # rounding the factor covers
            below = 0.0
            med = values[n_v - 1]
            for v in range(n_v):
                below += cnt_s[i, v]
                if 2.0 * below >= kf:
                    med = values[v]
                    break
            dev = 0.0
            for v in range(n_v):
                if cnt_s[i, v] != 0:
                    dev += cnt_s[i, v] * abs(values[v] - med)
            step = dev / kf * (1.0 + 1e-9) * (2.0 * math.pi / n)
            top = 0
            j = 0
            while j < m:
                x, y = p0, 0.0
                if fly:
                    for w in range(n_u):
                        at = _mod((j + 1) * step_u[w], 2 * n, inv_2n)
                        x += sym[w] * h_cos[at]
                        y -= anti[w] * h_sin[at]
                else:
                    for w in range(n_u):
                        x += sym[w] * cos_t[j, w]
                        y -= anti[w] * sin_t[j, w]
                a2 = x * x + y * y
                if a2 > thr:
                    kept[top], re[top], im[top] = j, x, y
                    top += 1
                    j += 1
                    continue
                gap = root - math.sqrt(a2) - slack  # how far |φ| may rise before it matters
                j += 1 + (int(min(gap / step, m)) if gap > 0.0 and step > 0.0 else 0)
        else:
            re[:m] = p0
            im[:m] = 0.0
            for w in range(n_u):
                x = sym[w]
                if x != 0.0:
                    for j in range(m):
                        re[j] += x * cos_t[w, j]
                y = anti[w]
                if y != 0.0:
                    for j in range(m):
                        im[j] -= y * sin_t[w, j]
            top = 0
            for j in range(m):
                if re[j] * re[j] + im[j] * im[j] > thr:
                    top = j + 1
        e = kk  # φ^k by repeated squaring, as lattice._power
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
                x, y = re[j] * re[j] - im[j] * im[j], 2.0 * re[j] * im[j]
                re[j], im[j] = x, y
        low = low_v * kk
        high = (low_v + span) * kk
        two_n = 2 * n
        if tabled:  # ψ_f = φ_f^k·e^{iω_f L}, then Re Σ ψ_f·H_f(cnt) per threshold
            x = start_s[i] % n
            for j in range(top):
                f = kept[j] if sparse else j
                ps_re[j] = pr[j] * s_re[x, f] - pi[j] * s_im[x, f]
                ps_im[j] = pr[j] * s_im[x, f] + pi[j] * s_re[x, f]
        for t in range(n_t):
            c = c_s[t, i]
            if c < low or c >= high:
                continue
            cnt = c - start_s[i] + 1
            acc = 0.0
            if tabled and sparse:
                for j in range(top):
                    acc += ps_re[j] * g_re[cnt, kept[j]] - ps_im[j] * g_im[cnt, kept[j]]
            elif tabled:
                for j in range(top):
                    acc += ps_re[j] * g_re[cnt, j] - ps_im[j] * g_im[cnt, j]
            elif sparse:  # as below, each kept frequency's phases by a product
                a_step = cnt % two_n
                b_step = (2 * start_s[i] + cnt - 1) % two_n
                for j in range(top):
                    f = kept[j] + 1
                    a_at = _mod(f * a_step, two_n, inv_2n)
                    b_at = _mod(f * b_step, two_n, inv_2n)
                    acc += h_sin[a_at] * inv_sin[f - 1] * (pr[j] * h_cos[b_at] - pi[j] * h_sin[b_at])
            else:  # G_f = amp_f·e^{iπ f (2L + cnt - 1)/n}, amp_f = sin(π f cnt/n)/sin(π f/n)
                a_step = cnt % two_n
                b_step = (2 * start_s[i] + cnt - 1) % two_n
                a_at, b_at = 0, 0
                for j in range(top):
                    a_at += a_step
                    if a_at >= two_n:
                        a_at -= two_n
                    b_at += b_step
                    if b_at >= two_n:
                        b_at -= two_n
                    acc += h_sin[a_at] * inv_sin[j] * (pr[j] * h_cos[b_at] - pi[j] * h_sin[b_at])
            val = cnt / n + (2.0 / n) * acc
            lo = (val - e_s[i] - err) * (1.0 - SLACK) - SLACK
            hi = (val + e_s[i] + err) * (1.0 + SLACK) + SLACK
            lo = min(max(lo, 0.0), 1.0)
            lo_out[t, r] = lo
            hi_out[t, r] = min(max(hi, lo), 1.0)


def _slack(n_values: int) -> float:
    """Margin below ``eps**(2/k)`` at which ``|φ|²`` still keeps a term: the rounding of sums of
    at most ``n_values`` products of magnitude <= 1, each of a folded ``p_u ± p_-u`` (so that no
    term above ``eps`` is left out)."""
    return 8e-16 * (n_values + 2)


def short_brackets(counts, values, c, k, s, q, vlo, vhi, eps_alias: float, eps: float, full: bool = False):
    """Rigorous ``lo <= P(S <= c) <= hi`` per row and threshold (``c [T, rows]``), as
    ``lattice.approx_runs`` gives them, in one compiled pass: each row its own window, its own
    sum, its own aliasing bounds; no sort, no merging of rows. ``counts [rows, V]`` are the
    histograms over ``values`` (ascending integers)."""
    cs = np.atleast_2d(np.asarray(c, dtype=np.int64))
    lo = np.empty(cs.shape)
    hi = np.empty(cs.shape)
    if cs.shape[1]:
        _brackets(
            np.ascontiguousarray(counts), np.asarray(values, dtype=np.int64), np.asarray(k, dtype=np.int64),
            np.asarray(s, dtype=np.float64), np.asarray(q, dtype=np.float64), np.asarray(vlo, dtype=np.float64),
            np.asarray(vhi, dtype=np.float64), np.ascontiguousarray(cs), math.log(1.0 / eps_alias), eps,
            _slack(len(values)), full, lo, hi,
        )
    return lo, hi


_MIX = np.uint64(0x9E3779B97F4A7C15)


@compiled
def _short_stage(idx, law, flip, own, mirror, counts, words, values, c, k, s, q, vlo, vhi, log_inv, eps, slack,
                 target, lo, hi, stage):  # pragma: no cover - compiled
    """``Tails._short_sums`` in one compiled pass: the law rows of the cases ``idx``, each
    computed once per distinct ``(histogram, k, c)`` with its own threshold and its mirror's,
    and the brackets of every case of those laws (the cases ``idx``, each law's own case and
    its mirror) intersected with what they had. Returns the cases refined."""
    n_laws, n_v = counts.shape
    slot = np.full(n_laws, -1, dtype=np.int64)
    n_need = 0
    for i in idx:
        g = law[i]
        if slot[g] < 0:
            slot[g] = n_need
            n_need += 1
    laws = np.empty(n_need, dtype=np.int64)
    for g in range(n_laws):
        if slot[g] >= 0:
            laws[slot[g]] = g
    # equal computations once: a hash table of (histogram, k, thresholds) over the needed laws,
    # the histograms read as their words (a few integers that code each row exactly)
    size = 1
    while size < 2 * n_need:
        size *= 2
    t_comp = np.full(size, -1, dtype=np.int64)
    t_hash = np.empty(size, dtype=np.uint64)
    rep = np.empty(n_need, dtype=np.int64)  # the computation of each needed law
    first = np.empty(n_need, dtype=np.int64)  # each computation's first law
    n_comp = 0
    n_w = words.shape[1]
    for j in range(n_need):
        g = laws[j]
        o = own[g]
        c_own = c[o]
        mirrored = mirror[g] >= 0
        h = (np.uint64(k[o]) * _MIX) ^ np.uint64(c_own + (1 << 40)) ^ np.uint64(2 if mirrored else 1)
        for w in range(n_w):
            h = (h ^ np.uint64(words[g, w])) * _MIX
            h ^= h >> np.uint64(29)
        at = np.int64(h & np.uint64(size - 1))
        while True:
            e = t_comp[at]
            if e < 0:
                t_comp[at], t_hash[at] = n_comp, h
                first[n_comp] = j
                rep[j] = n_comp
                n_comp += 1
                break
            if t_hash[at] == h:
                f = laws[first[e]]
                fo = own[f]
                same = k[fo] == k[o] and c[fo] == c_own and (mirror[f] >= 0) == mirrored
                for w in range(n_w):
                    same = same and words[f, w] == words[g, w]
                if same:
                    rep[j] = e
                    break
            at = (at + 1) & (size - 1)
    sub = np.empty((n_comp, n_v), dtype=counts.dtype)
    kc = np.empty(n_comp, dtype=np.int64)
    sc = np.empty(n_comp)
    qc = np.empty(n_comp)
    lc = np.empty(n_comp)
    hc = np.empty(n_comp)
    cs = np.empty((2, n_comp), dtype=np.int64)
    for e in range(n_comp):
        g = laws[first[e]]
        o = own[g]
        sub[e] = counts[g]
        kc[e], sc[e], qc[e], lc[e], hc[e] = k[o], s[o], q[o], vlo[o], vhi[o]
        cs[0, e] = c[o]
        cs[1, e] = -c[o] - 1 if mirror[g] >= 0 else c[o]
    b_lo = np.empty((2, n_comp))
    b_hi = np.empty((2, n_comp))
    _brackets(sub, values, kc, sc, qc, lc, hc, cs, log_inv, eps, slack, target == 3, b_lo, b_hi)
    # every case of the needed laws: idx, then each law's own case and mirror
    n_refined = 0
    for pass_ in range(2):
        todo = idx if pass_ == 0 else laws
        for x in range(len(todo)):
            cases = (todo[x], -1) if pass_ == 0 else (own[todo[x]], mirror[todo[x]])
            for i in cases:
                if i < 0 or stage[i] >= target:  # not a case, or refined already (by this pass or before)
                    continue
                e = rep[slot[law[i]]]
                if flip[i]:  # its law negated: 1 - P(S <= -c - 1)
                    n_lo, n_hi = 1.0 - b_hi[1, e], 1.0 - b_lo[1, e]
                else:
                    n_lo, n_hi = b_lo[0, e], b_hi[0, e]
                lo[i] = max(n_lo, lo[i])
                hi[i] = min(n_hi, hi[i])
                stage[i] = target
                n_refined += 1
    return n_refined


def short_stage(idx, hist, c, lo, hi, stage, eps_alias: float, eps: float, full: bool = False) -> int:
    """``_short_stage`` on the cases ``idx`` of a block (``lattice_decisions.Histograms``
    ``hist``, thresholds ``c``): refines ``lo``, ``hi`` in place and sets ``stage`` to 2, or
    with ``full`` (every window the whole support of ``S``: no aliasing, a bracket as wide as
    the terms below ``eps`` and the rounding allow) to 3."""
    h = hist
    return int(_short_stage(np.asarray(idx, dtype=np.int64), h.law, h.flip, h.own, h.mirror, h.counts, h.words,
                            h.values, c, h.k, h.s, h.q, h.vlo, h.vhi, math.log(1.0 / eps_alias), eps,
                            _slack(len(h.values)), 3 if full else 2, lo, hi, stage))


__all__ = ["compiled", "short_brackets", "short_stage"]
