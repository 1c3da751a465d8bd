"""Bootstrap decisions on a lattice, fast and exact (SPEC §4.2 for multi-trial and fractional
records).

Binary records have a few thousand distinct ``(k, n+, n-)`` and so a few thousand resampling
tails; a case of fractional or repeated-trial records has a histogram over up to ``2L+1``
values, and a replay meets millions of distinct ones. The decision needs the tail ``τ`` only
against one breakpoint (``a`` for ``B = "exact"``; for finite ``B``, the ``p`` at which
``P(Bin(B, p) <= a·B)`` crosses the case's uniform), so ``τ`` is bracketed in the stages of
``lattice.py`` (Bennett on every case, Berry–Esseen, the short sum, the exact tail) and each
case is refined only while its bracket still holds a breakpoint: about 45 % of the cases of
the terminal-bench replays reach the short sum, under 0.1 % the exact tail.

Each stage's bracket contains the exact tail, so a decision fixed at both ends of it is the
decision on the exact tail: the answers are those of computing every tail exactly.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from service.engine import rules as R
from service.engine.lattice import (
    COMPILED_FROM,
    EPS_ALIAS,
    EPS_APPROX,
    EPS_TERM,
    approx_runs,
    bennett_bracket,
    berry_esseen_bracket,
    kernel_loaded,
    tail,
)


class Histograms:
    """The observed counts of a block of cases and what every threshold needs from them.

    A pair and its mirror (``(a, b)`` and ``(b, a)``: differences negated, the same tasks in
    the same orders) have one resampling law up to the sign of ``S``, and so do equal pairs:
    counts are kept for one *law row* per such family (``counts [laws, V]`` over ``values``,
    exact integers; ``words [laws, W]``, integers that code each row exactly), and each case
    points at its law (``law``) and says whether it sees it negated (``flip``). ``k``, ``Σv``,
    ``Σv²`` (lattice units, exact) and the least and largest observed value are per case.
    ``own`` and ``mirror`` give, per law row, its own case and a negated one (-1 if none).
    Laws are shared only where ``summer.shared`` says that every pair observes the same
    tasks in case ``(r, j)``. Built once per block; ``Tails`` at several thresholds share it.
    ``compiled``: the observed ranges by ``lattice_kernel`` (``lattice.COMPILED_FROM``)."""

    def __init__(self, values: np.ndarray, summer, ssum: np.ndarray, qsum: np.ndarray, ks: np.ndarray,
                 compiled: bool = False):
        n_pairs = len(values)
        if getattr(summer, "shared", False):
            src, flip = _families(values)
        else:  # each pair observes tasks of its own (neyman): no two share a law
            src, flip = np.arange(n_pairs), np.zeros(n_pairs, dtype=bool)
        law_pairs = np.flatnonzero(src == np.arange(n_pairs))
        per_pair = ssum.size // max(n_pairs, 1)  # cases per pair (orders x budgets)
        n_laws = len(law_pairs) * per_pair
        if compiled:  # unpacked with each row's range in one compiled pass
            from service.engine.lattice_kernel import case_ranges, count_words, law_ranges, unpack_counts

            counted = count_words(values[law_pairs], summer)  # along shared orders, without products
            if counted is not None:
                self.values, self.words, bits, self.counts, lo_i, hi_i = counted
            else:
                self.values, self.words, bits = pack_counts(values[law_pairs], summer, n_laws)
                if bits:  # one type of counts for the kernels (uint16): one compilation
                    self.counts, lo_i, hi_i = unpack_counts(self.words, bits, len(self.values))
                else:
                    self.counts = self.words.view(np.float32)
                    lo_i, hi_i = np.empty(n_laws, dtype=np.int64), np.empty(n_laws, dtype=np.int64)
                    law_ranges(self.counts, lo_i, hi_i)
        else:
            self.values, self.counts, self.words = count_values(values[law_pairs], summer, n_laws)
        self.values = np.asarray(self.values, dtype=np.int64)
        slot = np.full(n_pairs, -1)
        slot[law_pairs] = np.arange(len(law_pairs))
        within = np.arange(per_pair)
        self.law = (slot[src][:, None] * per_pair + within[None, :]).ravel()  # case -> law row
        self.flip = np.repeat(flip, per_pair)
        self.own = (law_pairs[:, None] * per_pair + within[None, :]).ravel()  # law row -> its case
        mirror_pair = np.full(len(law_pairs), -1)
        for p in np.flatnonzero(flip)[::-1]:  # the first negated pair of each law
            mirror_pair[slot[src[p]]] = p
        self.mirror = np.where(mirror_pair[:, None] >= 0, mirror_pair[:, None] * per_pair + within[None, :], -1).ravel()
        # one copy each at most (these are read, never written)
        self.k = np.broadcast_to(np.asarray(ks, dtype=np.int64)[None, None, :], ssum.shape).reshape(-1)
        self.s = ssum.reshape(-1).astype(np.float64, copy=False)
        self.q = qsum.reshape(-1).astype(np.float64, copy=False)
        vals = self.values.astype(np.float64)
        if compiled:  # the ranges by the kernels too (numpy's took a sixth of a block's time)
            self.vlo, self.vhi = np.empty(len(self.law)), np.empty(len(self.law))
            case_ranges(lo_i, hi_i, vals, self.law, self.flip, self.k, self.vlo, self.vhi)
            return
        lo_i, hi_i = _present_range(self.counts)
        vlo, vhi = vals[lo_i][self.law], vals[hi_i][self.law]
        vlo, vhi = np.where(self.flip, -vhi, vlo), np.where(self.flip, -vlo, vhi)
        self.vlo = np.where(self.k > 0, vlo, vals[-1])
        self.vhi = np.where(self.k > 0, vhi, vals[0])


def _families(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per pair (row of ``values [P, N]``): the first pair whose differences equal its own
    (``flip`` False) or their negation (``flip`` True), itself if none."""
    seen: dict[bytes, int] = {}
    src = np.arange(len(values))
    flip = np.zeros(len(values), dtype=bool)
    for p, row in enumerate(np.asarray(values)):
        key = row.tobytes()
        if key in seen:
            src[p] = seen[key]
            continue
        neg = (-row).tobytes()
        if neg in seen:
            src[p], flip[p] = seen[neg], True
            continue
        seen[key] = p
    return src, flip


def count_values(values: np.ndarray, summer, n_cases: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(vals, counts [cases, V], words [cases, W])``: how often each distinct value of
    ``values [P, N]`` occurs among each case's observed tasks (``pack_counts``, unpacked)."""
    vals, words, bits = pack_counts(values, summer, n_cases)
    if not bits:
        return vals, words.view(np.float32), words
    dtype = np.uint8 if bits == 8 else np.uint16
    per = 48 // bits  # fields per word
    fields = words.view(dtype).reshape(n_cases, words.shape[1], 64 // bits)
    counts = np.empty((n_cases, len(vals)), dtype=dtype)
    for w in range(words.shape[1]):
        cols = min(per, len(vals) - w * per)
        counts[:, w * per : w * per + cols] = fields[:, w, :cols]
    return vals, counts, words


def field_bits(n_tasks: int) -> int:
    """Bits of a packed count (``pack_counts``): 8 below 256 tasks, 16 below 65,536, else 0
    (no packing)."""
    return 8 if n_tasks < 1 << 8 else 16 if n_tasks < 1 << 16 else 0


def pack_counts(values: np.ndarray, summer, n_cases: int) -> tuple[np.ndarray, np.ndarray, int]:
    """``(vals, words [cases, W], bits)``: the counts of each distinct value of ``values [P, N]``
    among each case's observed tasks, packed.

    Counts are packed several to a float64 (fields of ``bits`` = 8 below 256 tasks, else 16;
    the field of a value holds ``2**(bits·slot)`` per task), so one sum over the observed tasks
    gives ``W = ceil(V / fields)`` words instead of ``V`` sums: each word stays below
    ``2**48`` however many tasks are summed, so it is exact, and its bytes are the counts.
    The words code the row exactly, for merging equal rows. From ``2**16`` tasks, ``bits`` is
    0: one float32 sum per value (exact below ``2**24`` tasks), the words their int32 view."""
    vals = np.unique(values)
    bits = field_bits(values.shape[1])
    if not bits:
        counts = np.empty((n_cases, len(vals)), dtype=np.float32)
        for i, v in enumerate(vals):
            counts[:, i] = summer((values == v).astype(np.float32)).ravel()
        return vals, counts.view(np.int32), 0
    per = 48 // bits  # fields per word
    slot = np.searchsorted(vals, values)  # [P, N]: each task's value, as a column
    n_words = -(-len(vals) // per)
    words = np.empty((n_cases, n_words), dtype=np.int64)
    for w in range(n_words):
        field = slot - w * per
        x = np.where((field >= 0) & (field < per), np.exp2(bits * np.clip(field, 0, per - 1)), 0.0)
        words[:, w] = summer(x).ravel()  # float64 sums of powers of two below 2**48: exact
    return vals, words, bits


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
    threshold share one ``Tails``. The short sum of a law row serves its mirror too: a case
    that sees its law negated has ``τ = 1 - P(S <= -c - 1)``, a second point of the same
    power ``φ^k`` (``approx_runs`` with two thresholds).

    ``compiled`` (``lattice.COMPILED_FROM``): the same stages by ``lattice_kernel`` (``settle``
    then needs the rule's thresholds, ``fast``), a case's Bennett bracket with its first
    settle, and before the exact tail a sum over the whole support (stage 3; exact tails 4).
    """

    def __init__(self, hist: Histograms, c: np.ndarray, compiled: bool = False):
        self.hist = hist
        self.compiled = compiled  # stages by lattice_kernel (lattice.COMPILED_FROM)
        self.c = np.asarray(c, dtype=np.int64)
        if compiled:  # Bennett's brackets come with the first settle, case by case
            self.lo, self.hi = np.zeros(len(self.c)), np.ones(len(self.c))
            self.stage = np.full(len(self.c), -1, dtype=np.int8)
        else:
            self.lo, self.hi = bennett_bracket(hist.k, hist.s, hist.q, hist.vlo, hist.vhi, self.c)
            self.stage = np.zeros(len(self.c), dtype=np.int8)
        self.refined = [len(self.c), 0, 0, 0, 0]  # cases taken to each stage

    def _short_sums(self, idx: np.ndarray) -> np.ndarray:
        """The short-sum brackets of the cases ``idx`` and of the other cases of their laws (own
        and mirror), intersected with what they had; returns the cases refined."""
        h = self.hist
        need = np.zeros(len(h.own), dtype=bool)
        need[h.law[idx]] = True
        laws = np.flatnonzero(need)
        own, mirror = h.own[laws], h.mirror[laws]
        c_own = self.c[own]
        c_neg = np.where(mirror >= 0, -c_own - 1, c_own)  # the mirror's c is its own (same k)
        lo, hi, at = approx_runs(
            np.take(h.counts, laws, axis=0), h.values, np.stack([c_own, c_neg]), h.k[own], h.s[own], h.q[own],
            h.vlo[own], h.vhi[own],
            np.take(h.words, laws, axis=0),
        )
        mark = np.zeros(len(self.c), dtype=bool)
        mark[idx] = True
        mark[own] = True
        mark[mirror[mirror >= 0]] = True
        rows = np.flatnonzero(mark)
        slot = np.full(len(h.own), -1)
        slot[laws] = np.arange(len(laws))
        j, fl = at[slot[h.law[rows]]], h.flip[rows]  # each case's computation
        new_lo, new_hi = lo[0, j], hi[0, j]
        jf = j[fl]  # cases that see their law negated: 1 - P(S <= -c - 1)
        new_lo[fl], new_hi[fl] = 1.0 - hi[1, jf], 1.0 - lo[1, jf]
        self.lo[rows] = np.maximum(new_lo, self.lo[rows])
        self.hi[rows] = np.minimum(new_hi, self.hi[rows])
        return rows

    def _exact(self, idx: np.ndarray) -> np.ndarray:
        """Exact tails of the cases ``idx``, each on its own law (a negated one reversed)."""
        h = self.hist
        counts, c, fl = np.take(h.counts, h.law[idx], axis=0), self.c[idx], h.flip[idx]
        out = np.empty(len(idx))
        if (~fl).any():
            out[~fl] = tail(counts[~fl], h.values, c[~fl])
        if fl.any():
            out[fl] = tail(counts[fl][:, ::-1], -h.values[::-1], c[fl])
        return out

    def settle(self, decide, fast: tuple | None = None) -> np.ndarray:
        """Decisions ``decide(p, index)`` for every case (``decide`` monotone in ``p``).

        ``fast``: the same rule as ``(pos, a, t_lo, t_hi)`` (``t_lo``, ``t_hi`` the sure
        thresholds of a finite ``B``, None for the exact rule), which lets a compiled ``Tails``
        take its first stages in one pass over the cases (``lattice_kernel.first_stages``)."""
        if self.compiled:
            if fast is None:  # its brackets start empty: only _settle_compiled fills them
                raise TypeError("a compiled Tails settles with the rule's thresholds (fast)")
            return self._settle_compiled(decide, fast)
        h = self.hist
        every = slice(None)  # every case, without a gather
        d_lo, d_hi = decide(self.lo, every), decide(self.hi, every)
        for stage in (1, 2, 3):
            open_ = d_lo != d_hi
            if not open_.any():
                break
            idx = np.flatnonzero(open_ & (self.stage < stage))  # a case refined for another rule skips ahead
            if not len(idx):
                continue
            if stage == 1:
                lo, hi = berry_esseen_bracket(h.k[idx], h.s[idx], h.q[idx], h.vlo[idx], h.vhi[idx], self.c[idx])
                self.lo[idx], self.hi[idx] = np.maximum(lo, self.lo[idx]), np.minimum(hi, self.hi[idx])
                refined = idx
            elif stage == 2:
                refined = self._short_sums(idx)
            else:
                self.lo[idx] = self.hi[idx] = self._exact(idx)
                refined = idx
            self.stage[refined] = stage
            self.refined[stage] += len(refined)
            d_lo[idx], d_hi[idx] = decide(self.lo[idx], idx), decide(self.hi[idx], idx)
        return d_lo

    def _settle_compiled(self, decide, fast: tuple) -> np.ndarray:
        """``settle`` with Bennett, Berry–Esseen and the decisions they settle in one compiled
        pass: the numpy stages made some forty passes over every case's arrays, most of the
        time of a replay outside the short sums. The cases it leaves open (and those only
        the binomial of a finite ``B`` can decide) go on as in ``settle``."""
        from service.engine.lattice_kernel import decide_cases, first_stages, short_stage

        h = self.hist
        pos, a, t_lo, t_hi = fast
        out = np.empty(len(self.c), dtype=np.int8)
        open_ = np.empty(len(self.c), dtype=bool)
        self.refined[1] += first_stages(h.k, h.s, h.q, h.vlo, h.vhi, self.c, pos, a, t_lo, t_hi, self.lo, self.hi,
                                        self.stage, out, open_)
        idx = np.flatnonzero(open_)
        if not len(idx):
            return out
        d_lo, d_hi = decide_cases(idx, self.lo, self.hi, pos, a, t_lo, t_hi, decide)
        for stage in (2, 3, 4):  # short sums, sums over the whole support, exact tails
            still = d_lo != d_hi
            if not still.any():
                break
            sub = np.flatnonzero(still & (self.stage[idx] < stage))  # refined for another rule: skips ahead
            if not len(sub):
                continue
            cases = idx[sub]
            if stage < 4:
                n = short_stage(cases, h, self.c, self.lo, self.hi, self.stage, EPS_ALIAS,
                                EPS_APPROX if stage == 2 else EPS_TERM, full=stage == 3)
                self.refined[stage] += n
            else:  # within rounding of a breakpoint: numpy's exact tail
                self.lo[cases] = self.hi[cases] = self._exact(cases)
                self.stage[cases] = 4
                self.refined[4] += len(cases)
            d_lo[sub], d_hi[sub] = decide_cases(cases, self.lo, self.hi, pos, a, t_lo, t_hi, decide)
        out[idx] = d_lo
        return out


def compiled_stages(plan) -> bool:
    """Whether a replay takes its lattice stages compiled (``lattice_kernel``): where this
    process has it loaded already (``lattice.kernel_loaded``), or where the replay's lattice bootstrap is
    large enough to repay loading it (``lattice.COMPILED_FROM``, counted on the whole replay).
    Either way gives the same report (``kernel_loaded`` says why), so chunks of one replay in
    different processes may choose differently."""
    if kernel_loaded():
        return True
    boot = sum(1 for cfg in plan.configs if cfg.policy.rule == "bootstrap")
    return boot * plan.n_pairs * plan.spec.seeds * plan.spec.orders * len(plan.spec.budgets) >= COMPILED_FROM


_GRID = 4096
"""Points of the table of ``P(conclude)`` against the wrong-side tail, for finite ``B``."""


@lru_cache(maxsize=64)
def _conclude_table(a: float, big_b: int) -> tuple[np.ndarray, np.ndarray]:
    """``P(conclude)`` of the finite-B rule (``rules.bootstrap_conclude_prob``) on a grid of
    the wrong-side tail ``w`` between the saturation points, decreasing in ``w``."""
    p1, p0 = R.saturation(a, big_b)
    w = np.linspace(p1, p0, _GRID)
    q = R.bootstrap_conclude_prob(w, np.ones(_GRID, dtype=bool), a, big_b)
    w.flags.writeable = False
    q.flags.writeable = False
    return w, q


def bootstrap_decisions(
    values: np.ndarray,
    summer,
    ssum: np.ndarray,
    qsum: np.ndarray,
    ks: np.ndarray,
    theta: float,
    lattice: int,
    a: float,
    resamples: int | str,
    u: np.ndarray | None,
    cache: dict,
    compiled: bool = False,
) -> np.ndarray:
    """Bootstrap decisions ``[P, R, J]`` for pairs whose differences (``values [P, N]``,
    lattice units) are not all in {-1, 0, 1}: ``rules.bootstrap_from_tail`` (exact) or
    ``u < rules.bootstrap_conclude_prob`` (finite ``B``, one uniform per case in ``u``) on the
    exact tail, which is computed only where a bracket cannot decide.

    ``summer`` maps per-task values to sums over each case's observed tasks; ``ssum`` and
    ``qsum`` are its sums of ``values`` and their squares (exact). ``cache`` keeps the
    brackets per threshold, so the exact and finite-B rules of a block refine the same ones.
    ``compiled``: the stages by ``lattice_kernel`` (see ``lattice.COMPILED_FROM``).
    """
    if ("lattice",) not in cache:
        cache[("lattice",)] = Histograms(values, summer, ssum, qsum, ks, compiled)
    key = ("lattice", f"{theta!r}")
    if key not in cache:
        hist = cache[("lattice",)]
        # both depend on the case's budget alone: per budget, then spread over the cases
        c = np.broadcast_to(R.bootstrap_threshold(theta, ks, lattice), ssum.shape).ravel()
        pos = R.above(ssum, ks.astype(np.float64), theta, lattice).ravel()
        cache[key] = (Tails(hist, c, compiled), pos)
    tails, pos = cache[key]
    if resamples == "exact":

        def decide(p: np.ndarray, i: np.ndarray | slice) -> np.ndarray:
            return R.bootstrap_from_tail(p, pos[i], a, "exact")

        fast = (pos, float(a), None, None)
    else:
        decide, t_lo, t_hi = _finite_b_decide(float(a), int(resamples), pos, np.asarray(u).ravel())
        fast = (pos, float(a), t_lo, t_hi)
    return tails.settle(decide, fast).reshape(ssum.shape)


_U_GRID = 1 << 16
"""Cells of the uniform's range in the tables of ``_finite_b_decide``."""


@lru_cache(maxsize=16)  # 1 MB each
def _threshold_tables(a: float, big_b: int) -> tuple[np.ndarray, np.ndarray]:
    """Per cell ``[i/U, (i+1)/U)`` of the uniform: the largest wrong-side tail at which every
    uniform of the cell surely concludes, and the least at which every one (above 0) surely
    defers, both grid points of ``_conclude_table`` (so ``w <= W`` compares floats exactly).

    ``P(conclude)`` decreases in the tail, so ``w <= w_j`` gives ``P(w) >= q_j``: ``u < q_j -
    1e-12`` concludes (the margin absorbs the table's rounding); ``w >= w_j`` and ``u >= q_j +
    1e-12`` defers. Monotone envelopes of ``q`` keep both rules sound should rounding make it
    rise somewhere; each cell takes the threshold of its least favourable end. Below ``p1``
    every ``u < 1`` concludes, above ``p0`` every ``u > 0`` defers (``rules.saturation``)."""
    w, q = _conclude_table(a, big_b)
    q_lo = np.minimum.accumulate(q) - 1e-12  # <= q, nonincreasing
    q_hi = np.maximum.accumulate(q[::-1])[::-1] + 1e-12  # >= q, nonincreasing
    v = np.arange(_U_GRID + 1) / _U_GRID
    # largest j with u < q_lo[j] for every u of the cell: for u = its upper end
    n_conclude = len(q) - np.searchsorted(q_lo[::-1], v[1:], side="right")
    conclude = np.where(n_conclude > 0, w[np.maximum(n_conclude - 1, 0)], w[0])
    # least j with u >= q_hi[j] for every u of the cell: for u = its lower end
    n_defer = np.searchsorted(q_hi[::-1], v[:-1], side="right")
    defer = np.where(n_defer > 0, w[len(q) - np.maximum(n_defer, 1)], w[-1])
    conclude.flags.writeable = False
    defer.flags.writeable = False
    return conclude, defer


def _finite_b_decide(a: float, big_b: int, pos: np.ndarray, u: np.ndarray):
    """The finite-B decision as a function of a tail bound: ``u < P(conclude)``, settled by
    comparing the tail with two thresholds of the case's uniform (``_threshold_tables``,
    looked up once per case) and evaluated exactly only in between.

    The thresholds are turned into ones on ``p`` itself (for ``m <= θ`` the wrong-side tail is
    ``1 - p``: concluding below ``w`` is ``p >= 1 - w``), so each stage costs two comparisons
    per case, and a binomial CDF only for the cases within a grid cell of their breakpoint.
    (``1 - w`` and ``1 - p`` round differently by an ulp; the tables' margin of 1e-12 in the
    probability of concluding is many ulps of ``w``.) Returns the decision and the thresholds,
    ``(decide, t_lo, t_hi)``: at or below ``t_lo`` and at or above ``t_hi`` the decision is
    sure, as ``lattice_kernel.first_stages`` reads them."""
    sure_c, sure_d = _threshold_tables(a, big_b)
    cell = (u * _U_GRID).astype(np.intp)
    np.clip(cell, 0, _U_GRID - 1, out=cell)
    w_conclude = sure_c[cell]
    w_defer = np.where(u > 0, sure_d[cell], np.inf)  # u = 0 concludes wherever P(conclude) > 0
    # at or below ``t_lo`` a case surely accepts (pos) or defers; at or above ``t_hi`` it surely
    # defers (pos) or rejects: ``pos`` as 0/1 below, less 1 above
    t_lo = np.where(pos, w_conclude, 1.0 - w_defer)
    t_hi = np.where(pos, w_defer, 1.0 - w_conclude)
    assert (R.ACCEPT, R.DEFER, R.REJECT) == (1, 0, -1)
    sure = pos.view(np.int8)
    sign = np.array([R.REJECT, R.ACCEPT], dtype=np.int8)  # by pos

    def decide(p: np.ndarray, i: np.ndarray | slice) -> np.ndarray:
        low = p <= t_lo[i]
        high = p >= t_hi[i]
        out = sure[i] - ~low
        mid = np.flatnonzero(~(low | high))
        if len(mid):
            ps, ui = (pos[i][mid], u[i][mid]) if isinstance(i, slice) else (pos[i[mid]], u[i[mid]])
            conclude = ui < R.bootstrap_conclude_prob(p[mid], ps, a, big_b)
            out[mid] = np.where(conclude, sign[ps.view(np.uint8)], R.DEFER)
        return out

    return decide, t_lo, t_hi
