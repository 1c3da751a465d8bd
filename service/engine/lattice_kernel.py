"""The stages of ``lattice_decisions.Tails`` compiled (numba), for replays of multi-trial and
fractional records past ``lattice.COMPILED_FROM`` and for every replay of a process that has
imported this module (``lattice.kernel_loaded``: a Celery worker does at start).

Why compiled: in numpy each stage is some forty array operations over a block's cases (the
brackets, the decisions at both ends, the gathers of the open ones), and those passes, not
the arithmetic, were most of a replay. Here:

- ``first_stages``: one pass over the cases: Bennett's bracket (or Berry–Esseen's first, near
  the mean, where Bennett's says little, and for the exact rule wherever Bennett's cannot
  reach the breakpoint; Bernstein's, looser and without a log, before it, kept where it
  settles the case), the decision at both ends, Berry–Esseen where they differ, each end
  only where it can settle the case (``lattice.bennett_bracket``, ``lattice.berry_esseen_bracket``);
- ``short_stage``: the short sums of the laws of the open cases, each distinct law summed once,
  then the sums over the whole support for the few still open (``lattice_short``, imported
  and warmed here: this module is the one a process loads).

Each bracket holds the exact tail as numpy's does (the same bounds, or looser ones, their
rounding inside ``lattice.SLACK`` and the 1e-12 added to every sum), and a case still open
after them gets numpy's exact tail, so the decisions, and the reports, are those of the
numpy stages; the tests compare both with exact tails.

Importing this module costs a process about 0.5 s: numba (0.3 s), then the kernels loaded
from numba's cache beside these files (or in the user's cache when the package is read-only),
about 0.2 s; where there is no cache yet they compile, once, in about 8 s (the Docker image
compiles them at build). The import does both, so that a process that has the module has the
kernels.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
from scipy.special import ndtr

from service.engine.lattice import BERRY_ESSEEN, SLACK
from service.engine.lattice_decisions import field_bits
from service.engine.lattice_short import compiled as _compiled
from service.engine.lattice_short import short_brackets, short_stage

# ----------------------------------------------------------------------------- first stages


@_compiled
def _bennett(t, var_sum, b):  # pragma: no cover - compiled
    """``lattice._bennett`` for one case: Bennett's bound on ``P(S - E S >= t)``, 1 where it
    says nothing."""
    if t <= 0.0 or var_sum <= 0.0 or b <= 0.0:
        return 1.0
    u = b * t / var_sum
    h = (u + 1.0) * math.log1p(u) - u
    bound = math.exp(-(var_sum / (b * b)) * h)
    return 1.0 if math.isnan(bound) else bound


@_compiled
def _bernstein(t, var_sum, b):  # pragma: no cover - compiled
    """Bernstein's bound on ``P(S - E S >= t)``, ``e^{-t²/2(v + bt/3)}``: never below
    Bennett's (``h(u) >= u²/2(1 + u/3)``), and without its log. 1 where Bennett's says nothing."""
    if t <= 0.0 or var_sum <= 0.0 or b <= 0.0:
        return 1.0
    bound = math.exp(-(t * t) / (2.0 * (var_sum + b * t / 3.0)))
    return 1.0 if math.isnan(bound) else bound


@_compiled
def _bound(t, var_sum, b, tight):  # pragma: no cover - compiled
    return _bennett(t, var_sum, b) if tight else _bernstein(t, var_sum, b)


@_compiled
def _tail_ends(kf, si, ci, var_sum, mean, vlo, vhi, below, tight):  # pragma: no cover - compiled
    """``lattice.bennett_bracket``'s ``(lo, hi)`` for one case outside the middle, by Bennett's
    bound (``tight``) or Bernstein's (looser, a log cheaper), widened for rounding."""
    if below:  # c below the mean: the bound caps the upper end
        h_i = _bound(si - ci, var_sum, (mean - vlo) * (1.0 + 1e-12), tight)
        l_i = 0.0
        if ci + 1.0 > si:
            l_i = 1.0 - _bound(ci + 1.0 - si, var_sum, (vhi - mean) * (1.0 + 1e-12), tight)
    else:
        h_i = 1.0
        l_i = 1.0 - _bound(ci + 1.0 - si, var_sum, (vhi - mean) * (1.0 + 1e-12), tight)
    h_i = min(1.0, h_i * (1.0 + SLACK) + SLACK)
    l_i = max(0.0, l_i * (1.0 - SLACK) - SLACK)
    if ci < kf * vlo:
        l_i = h_i = 0.0
    elif ci >= kf * vhi:
        l_i = h_i = 1.0
    return l_i, h_i


NORMAL_CDF_ERROR = 1e-7
"""Bound on ``|_normal_cdf - Φ|`` (the table's is under 3e-9: ``_PHI_STEP``), added to the
Berry–Esseen error, which is some 1e-2 or more."""

_PHI_REACH = 6.0
"""Past this many standard deviations ``_normal_cdf`` says 0 or 1: Φ(-6) = 9.9e-10."""
_PHI_STEP = 1.0 / 32
"""Spacing of ``_normal_cdf``'s table. Cubic Hermite interpolation (Φ and its derivative φ at
both ends of a cell) errs by at most ``h⁴/384·max|Φ⁗|`` = (1/32)⁴/384 × 0.551 = 1.4e-9
(``Φ⁗ = (3x - x³)φ``, whose largest magnitude is 0.551, at x = ±0.742)."""
_PHI_X = np.arange(-_PHI_REACH, _PHI_REACH + _PHI_STEP / 2, _PHI_STEP)
_PHI = ndtr(_PHI_X)
_PHI_D = _PHI_STEP * np.exp(-0.5 * _PHI_X * _PHI_X) / math.sqrt(2.0 * math.pi)  # h·φ at the nodes


@_compiled
def _normal_cdf(x):  # pragma: no cover - compiled
    """Φ(x) from a table of 385 values and slopes (``_PHI_STEP``): two loads and a cubic, where
    an exp (Hastings' approximation, this function before) took three times as long, once or
    twice per case that reaches Berry–Esseen."""
    if x != x:
        return x
    if not -_PHI_REACH < x < _PHI_REACH:
        return 1.0 if x > 0.0 else 0.0
    u = (x + _PHI_REACH) * (1.0 / _PHI_STEP)
    i = min(int(u), len(_PHI) - 2)
    t = u - i
    t2 = t * t
    t3 = t2 * t
    return ((2.0 * t3 - 3.0 * t2 + 1.0) * _PHI[i] + (t3 - 2.0 * t2 + t) * _PHI_D[i]
            + (3.0 * t2 - 2.0 * t3) * _PHI[i + 1] + (t3 - t2) * _PHI_D[i + 1])


@_compiled
def _decide(p, pos, exact, a, t_lo, t_hi):  # pragma: no cover - compiled
    """One end of a case's bracket decided: ``rules.bootstrap_from_tail`` (exact ``B``), or
    ``lattice_decisions._finite_b_decide``'s sure thresholds; 2 where only the binomial can
    tell (finite ``B``, ``p`` within a cell of the case's breakpoint)."""
    if exact:
        if pos:
            return 1 if p <= a + 1e-12 else 0
        return -1 if 1.0 - p <= a + 1e-12 else 0
    if p <= t_lo:
        return 1 if pos else 0
    if p >= t_hi:
        return 0 if pos else -1
    return 2


_OPEN = 3
"""What ``_settled`` says of a bracket whose two ends decide differently (or not here)."""


@_compiled
def _settled(lo, hi, pos, exact, a, t_lo, t_hi):  # pragma: no cover - compiled
    """The decision at both ends of a bracket where they agree, else ``_OPEN``."""
    d = _decide(lo, pos, exact, a, t_lo, t_hi)
    return d if d != 2 and d == _decide(hi, pos, exact, a, t_lo, t_hi) else _OPEN


@_compiled
def _conclude_reach(pos, exact, a, t_lo, t_hi):  # pragma: no cover - compiled
    """How far from 0 (``pos``: an upper end) or from 1 (otherwise: a lower end) a bracket's end
    may lie and ``_decide`` still conclude there (1 or -1) for some uniform. A Berry–Esseen
    bracket ``Φ ± err`` with ``err`` past this cannot conclude at that end whatever ``Φ`` is,
    so the first stages do not compute that end."""
    if exact:
        return a + 1e-12
    return t_hi if pos else 1.0 - t_lo


_BERNSTEIN = -2
"""``stage`` of a case whose bracket is Bernstein's (it settled the case for one rule), below
Bennett's 0: another rule tries it before computing Bennett's, and never computes it twice."""

_MIDDLE = 1.5**2
"""Squared distance (in standard deviations of ``S``) from the mean within which a case skips
Bennett's bound and goes to Berry–Esseen's: there Bennett's bound is at least e^{-1.125} = 0.32
(it is never below e^{-t²/2σ²}), too weak for the breakpoints of the rules, and it costs a log
and an exp. Skipping it only leaves the bracket looser, never wrong."""


@_compiled
def _first_stages(k, s, q, vlo, vhi, c, pos, exact, a, t_lo, t_hi, far, lo, hi, stage, out,
                  open_):  # pragma: no cover - compiled
    """``Tails.settle``'s first two stages, one case at a time: Bennett where a case has no
    bracket yet (``stage`` -1, or ``_BERNSTEIN``), the decision at both ends, Berry–Esseen
    where they differ and the case has not had it. A case still open (or not decidable here)
    is left for the later stages in ``open_``. Returns the cases Berry–Esseen refined.

    Bernstein's bracket comes before Bennett's (a log1p costs 21 ns here, an exp 8): on 12 x
    300 ten-trial records it settled 85 % of the cases and took a quarter off the stage; on
    terminal_bench_core_0.1.1 40 % and a tenth, exact, and no measurable change with B = 200.

    ``far``: the squared distance (in standard deviations of ``S``) within which Bennett's
    bound on the end that would conclude cannot conclude (``first_stages``); such a case skips
    it, as in the middle (``_MIDDLE``)."""
    n_be = 0
    for i in range(len(c)):
        kf = float(k[i])
        si = s[i]
        ci = float(c[i])
        kq_ss = max(kf * q[i] - si * si, 0.0)
        ti_lo, ti_hi = t_lo[i] if not exact else 0.0, t_hi[i] if not exact else 0.0
        if stage[i] < 0:  # lattice.bennett_bracket
            var_sum = kq_ss / max(kf, 1.0) * (1.0 + 1e-12)
            mean = si / max(kf, 1.0)
            below = si > ci  # c below the mean: Bennett bounds the upper end, else the lower
            t = si - ci if below else ci + 1.0 - si
            if (ci + 0.5 - si) ** 2 < _MIDDLE * var_sum or (below == pos[i] and t * t < far * var_sum):
                # Bennett's bound says little here: Berry–Esseen next (from Bernstein's
                # bracket where another rule left one: it holds, and is no wider)
                if stage[i] == _BERNSTEIN:
                    l_i, h_i = lo[i], hi[i]
                else:
                    h_i, l_i = 1.0, 0.0
                    if ci < kf * vlo[i]:
                        l_i = h_i = 0.0
                    elif ci >= kf * vhi[i]:
                        l_i = h_i = 1.0
            else:
                # Bernstein's bracket first: where it settles the case, Bennett's (inside it)
                # would settle it the same way, and the log is saved. The case is then left at
                # _BERNSTEIN with that bracket, which another rule on these brackets tries first.
                if stage[i] == _BERNSTEIN:
                    l_i, h_i = lo[i], hi[i]
                else:
                    l_i, h_i = _tail_ends(kf, si, ci, var_sum, mean, vlo[i], vhi[i], below, False)
                d = _settled(l_i, h_i, pos[i], exact, a, ti_lo, ti_hi)
                if d != _OPEN:
                    lo[i], hi[i] = l_i, h_i
                    stage[i] = _BERNSTEIN
                    out[i] = d
                    open_[i] = False
                    continue
                l_i, h_i = _tail_ends(kf, si, ci, var_sum, mean, vlo[i], vhi[i], below, True)
            lo[i], hi[i] = l_i, h_i
            stage[i] = 0
        d = _settled(lo[i], hi[i], pos[i], exact, a, ti_lo, ti_hi)
        if d != _OPEN:
            out[i] = d
            open_[i] = False
            continue
        if stage[i] < 1:  # lattice.berry_esseen_bracket
            kb = max(kf, 1.0)
            var = kq_ss / (kb * kb)
            if var > 0.0:
                mean = si / kb
                reach = max(mean - vlo[i], vhi[i] - mean)
                sd = math.sqrt(var * kb)
                err = BERRY_ESSEEN * reach / sd * (1.0 + 1e-9) + SLACK  # σ√k = sd
                err += NORMAL_CDF_ERROR
                # an end that cannot conclude whatever Φ is (err past the rule's breakpoint:
                # ``_conclude_reach``) is left as it was: it would not settle the case either way
                if not (pos[i] and err > _conclude_reach(True, exact, a, ti_lo, ti_hi)):
                    hi[i] = min(min(_normal_cdf((ci - si) / sd) + err, 1.0), hi[i])
                if pos[i] or err <= _conclude_reach(False, exact, a, ti_lo, ti_hi):
                    lo[i] = max(max(_normal_cdf((ci + 1.0 - si) / sd) - err, 0.0), lo[i])
            stage[i] = 1
            n_be += 1
            d = _settled(lo[i], hi[i], pos[i], exact, a, ti_lo, ti_hi)
            if d != _OPEN:
                out[i] = d
                open_[i] = False
                continue
        open_[i] = True
    return n_be


@_compiled
def _decide_cases(idx, lo, hi, pos, exact, a, t_lo, t_hi, d_lo, d_hi):  # pragma: no cover - compiled
    """``_decide`` at both ends of the brackets of the cases ``idx``; returns how many ends only
    the binomial can tell (2)."""
    unknown = 0
    for x in range(len(idx)):
        i = idx[x]
        ti_lo, ti_hi = t_lo[i] if not exact else 0.0, t_hi[i] if not exact else 0.0
        d_lo[x] = _decide(lo[i], pos[i], exact, a, ti_lo, ti_hi)
        d_hi[x] = _decide(hi[i], pos[i], exact, a, ti_lo, ti_hi)
        unknown += (d_lo[x] == 2) + (d_hi[x] == 2)
    return unknown


def _rule(t_lo, t_hi) -> tuple[bool, np.ndarray, np.ndarray]:
    """``(exact, t_lo, t_hi)`` for the kernels: the exact rule (``t_lo`` None) has no thresholds,
    but a compiled signature wants arrays in their place."""
    if t_lo is None:
        return True, np.zeros(1), np.zeros(1)
    return False, t_lo, t_hi


def decide_cases(idx, lo, hi, pos, a: float, t_lo, t_hi, decide) -> tuple[np.ndarray, np.ndarray]:
    """The decisions at both ends of the brackets of the cases ``idx``, by ``_decide``, and by
    ``decide`` (numpy's, with the binomial) at the ends ``_decide`` cannot tell."""
    exact, t_lo, t_hi = _rule(t_lo, t_hi)
    idx = np.asarray(idx, dtype=np.int64)
    d_lo = np.empty(len(idx), dtype=np.int8)
    d_hi = np.empty(len(idx), dtype=np.int8)
    if _decide_cases(idx, lo, hi, pos, exact, float(a), t_lo, t_hi, d_lo, d_hi):
        for d, ends in ((d_lo, lo), (d_hi, hi)):
            at = np.flatnonzero(d == 2)
            if len(at):
                d[at] = decide(ends[idx[at]], idx[at])
    return d_lo, d_hi


@_compiled
def law_ranges(counts, lo_i, hi_i):  # pragma: no cover - compiled
    """Per row of ``counts [rows, V]``: its first and last column that is not 0 (0 and 0 for an
    empty row), as ``lattice_decisions._present_range``."""
    n_rows, n_v = counts.shape
    for r in range(n_rows):
        lo_i[r] = hi_i[r] = 0
        for v in range(n_v):
            if counts[r, v] != 0:
                lo_i[r] = v
                break
        for v in range(n_v - 1, -1, -1):
            if counts[r, v] != 0:
                hi_i[r] = v
                break


@_compiled
def _unpack_counts(words, bits, counts, lo_i, hi_i):  # pragma: no cover - compiled
    """``counts [rows, V]`` read off the packed ``words`` (fields of ``bits``, as
    ``lattice_decisions.pack_counts`` sums them) and, as ``law_ranges``, each row's first and
    last column that is not 0."""
    n_rows, n_v = counts.shape
    n_w = words.shape[1]
    per = 48 // bits
    mask = (1 << bits) - 1
    for r in range(n_rows):
        first, last, v = -1, 0, 0
        for w in range(n_w):
            x = words[r, w]
            for _ in range(min(per, n_v - v)):
                n = x & mask
                x >>= bits
                counts[r, v] = n
                if n != 0:
                    if first < 0:
                        first = v
                    last = v
                v += 1
        lo_i[r] = max(first, 0)
        hi_i[r] = last


def unpack_counts(words: np.ndarray, bits: int, n_values: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(counts [rows, V] as uint16, first, last)`` from ``lattice_decisions.pack_counts``'s
    words: one pass, where numpy's unpacking, a widening copy to uint16 and ``law_ranges``
    took three (11 ms of the 5-trial exact replay's 247, against 9)."""
    counts = np.empty((len(words), n_values), dtype=np.uint16)
    lo_i, hi_i = np.empty(len(words), dtype=np.int64), np.empty(len(words), dtype=np.int64)
    _unpack_counts(np.ascontiguousarray(words, dtype=np.int64), int(bits), counts, lo_i, hi_i)
    return counts, lo_i, hi_i


@_compiled
def _count_words(slot, order, ks, bits, words, counts, lo_i, hi_i):  # pragma: no cover - compiled
    """``pack_counts``' words, ``unpack_counts``' counts and each row's first and last value
    column, counted along each order: case ``(p, r, j)`` observes ``order[r, :ks[j]]`` (the
    budgets ascending), so each budget's counts are the last one's plus the tasks between."""
    n_p = slot.shape[0]
    reps = order.shape[0]
    n_j = len(ks)
    n_w = words.shape[1]
    n_v = counts.shape[1]
    per = 48 // bits
    word_of = np.empty(n_v, dtype=np.int64)  # each value's word and the unit of its field there:
    unit = np.empty(n_v, dtype=np.int64)  # a division per task (by a run-time ``per``) cost a third
    for v in range(n_v):
        word_of[v] = v // per
        unit[v] = np.int64(1) << (bits * (v % per))
    cur = np.zeros(n_w, dtype=np.int64)
    cnt = np.zeros(n_v, dtype=np.int64)
    for p in range(n_p):
        for r in range(reps):
            cur[:] = 0
            cnt[:] = 0
            first, last = n_v, -1
            i = 0
            for j in range(n_j):
                while i < ks[j]:
                    v = slot[p, order[r, i]]
                    cur[word_of[v]] += unit[v]
                    cnt[v] += 1
                    first = min(first, v)
                    last = max(last, v)
                    i += 1
                row = (p * reps + r) * n_j + j
                for w in range(n_w):
                    words[row, w] = cur[w]
                for v in range(n_v):
                    counts[row, v] = cnt[v]
                lo_i[row] = first if last >= 0 else 0
                hi_i[row] = max(last, 0)


def count_words(values: np.ndarray, summer) -> tuple | None:
    """``(vals, words, bits, counts, first, last)`` as ``pack_counts`` then ``unpack_counts``
    give them, counted along the orders of a summer whose cases observe prefixes of shared
    orders (``summers.MatrixSummer``) instead of a matrix product per packed word: a word
    product costs pairs x tasks x orders x budgets, the count tasks x orders and a copy per
    budget (outcomes of step 1/100, up to 67 words: 2.3 ms a word per block). None where that
    does not apply (another summer, counts too wide to pack, budgets out of order)."""
    order, ks = getattr(summer, "order", None), getattr(summer, "ks", None)
    n_tasks = values.shape[1]
    bits = field_bits(n_tasks)
    if order is None or ks is None or not bits or np.any(np.diff(ks) < 0) or (len(ks) and ks[-1] > n_tasks):
        return None
    vals = np.unique(values)
    slot = np.searchsorted(vals, values).astype(np.int64)
    n_rows = len(values) * order.shape[0] * len(ks)
    words = np.empty((n_rows, -(-len(vals) // (48 // bits))), dtype=np.int64)
    counts = np.empty((n_rows, len(vals)), dtype=np.uint16)
    lo_i, hi_i = np.empty(n_rows, dtype=np.int64), np.empty(n_rows, dtype=np.int64)
    _count_words(slot, np.ascontiguousarray(order, dtype=np.int64), np.asarray(ks, dtype=np.int64), bits, words,
                 counts, lo_i, hi_i)
    return vals, words, bits, counts, lo_i, hi_i


@_compiled
def case_ranges(lo_i, hi_i, vals, law, flip, k, vlo, vhi):  # pragma: no cover - compiled
    """Per case: the least and largest value it observed (its law's, negated for a mirror), and
    for a case of no tasks the empty range ``(vals[-1], vals[0])``: ``Histograms.vlo, vhi``."""
    for i in range(len(law)):
        if k[i] <= 0:
            vlo[i], vhi[i] = vals[-1], vals[0]
        elif flip[i]:
            vlo[i], vhi[i] = -vals[hi_i[law[i]]], -vals[lo_i[law[i]]]
        else:
            vlo[i], vhi[i] = vals[lo_i[law[i]]], vals[hi_i[law[i]]]


def first_stages(k, s, q, vlo, vhi, c, pos, a: float, t_lo, t_hi, lo, hi, stage, out, open_) -> int:
    """``_first_stages`` on a block (``t_lo``, ``t_hi`` None for the exact rule): fills ``out``
    where the first stages decide, ``open_`` elsewhere, and refines ``lo``, ``hi``, ``stage``
    in place."""
    exact, t_lo, t_hi = _rule(t_lo, t_hi)
    return int(_first_stages(k, s, q, vlo, vhi, c, pos, exact, float(a), t_lo, t_hi, _far(exact, a),
                             lo, hi, stage, out, open_))


def _far(exact: bool, a: float) -> float:
    """Bennett's bound at a distance ``t`` from the mean is at least ``e^{-t²/2σ²}`` (``h(u) <=
    u²/2``), so below ``t² = 2σ²·ln(1/r)``, ``r = _conclude_reach`` (``a`` for the exact rule),
    it is above ``r``: the end that would conclude cannot, and the case goes straight to
    Berry–Esseen (which it needs anyway), a log and an exp saved. A finite ``B``'s reach varies
    by case (with its uniform), so there only the middle is skipped."""
    reach = _conclude_reach(True, exact, a, 0.0, 0.0)
    if not exact or not 0.0 < reach < 1.0:
        return _MIDDLE
    return max(_MIDDLE, 2.0 * math.log(1.0 / reach))


def warm() -> None:
    """Compile the kernels (or load them from the cache): done on import."""
    case = [np.array([4]), np.array([1.0]), np.array([3.0]), np.array([-1.0]), np.array([1.0]), np.array([0])]
    for t_lo, t_hi in ((None, None), (np.array([0.01]), np.array([0.02]))):
        first_stages(*case, np.array([True]), 0.05, t_lo, t_hi, np.zeros(1), np.ones(1), np.full(1, -1, dtype=np.int8),
                     np.zeros(1, dtype=np.int8), np.zeros(1, dtype=bool))
    for t_lo, t_hi in ((None, None), (np.array([0.01]), np.array([0.02]))):
        decide_cases(np.array([0]), np.zeros(1), np.ones(1), np.array([True]), 0.05, t_lo, t_hi,
                     lambda p, i: np.zeros(len(p), dtype=np.int8))
    case_ranges(np.array([0]), np.array([2]), np.array([-1.0, 0.0, 1.0]), np.array([0]), np.array([False]),
                np.array([4]), np.zeros(1), np.zeros(1))
    unpack_counts(np.array([[1 + 2 * 256 + 65536]]), 8, 3)
    count_words(np.array([[-1, 0, 1]]), SimpleNamespace(order=np.array([[2, 0, 1]]), ks=np.array([1, 3])))
    # the counts of a compiled lattice_decisions.Histograms are uint16 (uint8 widened)
    law_ranges(np.array([[1, 2, 1]], dtype=np.uint16), np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64))
    # one law of two cases (a pair and its mirror), k = 4: what short_stage reads of a Histograms
    hist = SimpleNamespace(
        law=np.array([0, 0]), flip=np.array([False, True]), own=np.array([0]), mirror=np.array([1]),
        counts=np.array([[1, 2, 1]], dtype=np.uint16), words=np.array([[1 + 2 * 256 + 65536]]),
        values=np.array([-1, 0, 1]), k=np.array([4, 4]), s=np.array([0.0, 0.0]), q=np.array([2.0, 2.0]),
        vlo=np.array([-1.0, -1.0]), vhi=np.array([1.0, 1.0]),
    )
    for full in (False, True):
        short_stage(np.array([0]), hist, np.array([0, 0]), np.zeros(2), np.ones(2), np.zeros(2, dtype=np.int8),
                    1e-4, 1e-5, full)
    short_brackets(hist.counts, hist.values, [[0], [-1]], [4], [0], [2], [-1], [1], 1e-4, 1e-5)

warm()

__all__ = ["case_ranges", "count_words", "decide_cases", "first_stages", "law_ranges", "short_brackets", "short_stage",
           "unpack_counts", "warm"]
