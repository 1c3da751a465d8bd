"""Sequential schedules: checkpoints that spend the level ``a`` (SPEC §4.4).

A fixed-sample rule consulted at level ``a`` at every checkpoint of a schedule is optional
stopping: its overall error grows with the number of looks. A schedule therefore spends
``a`` over its checkpoints with a cumulative spending function ``α(t)`` of the information
fraction ``t_j = k_j / k_m`` (``α(1) = a``), and consults the rule at checkpoint ``j`` at the
increment ``α(t_j) − α(t_{j−1})``. By the union bound the probability of any wrong conclusion
over the schedule is at most ``Σ_j (α(t_j) − α(t_{j−1})) = a`` for every rule whose
fixed-sample error at level ``ℓ`` is at most ``ℓ``, whatever order the harness chooses
(as long as the order does not depend on the outcomes).

* ``obrien_fleming``: ``α(t) = 2 − 2Φ(z_{1−a/2}/√t)`` (spends almost nothing early);
* ``pocock``: ``α(t) = a·ln(1 + (e − 1)·t)`` (spends evenly);
* ``none``: level ``a`` at every checkpoint (kept for comparison: not a valid schedule).

``scheduled_paths`` runs a schedule over many observation orders at once (simulations,
replay, and the verdict a live session reaches at each of its checkpoints); ``GUARD`` says
how the bootstrap and paired-normal tails are taken there.

Example::

    >>> [float(f"{x:.3g}") for x in levels([250, 500, 750, 1000], 0.05, "obrien_fleming")]
    [8.86e-05, 0.00549, 0.0181, 0.0264]
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import special

from service.engine import rules as R
from service.engine.errors import FieldError

SPENDINGS = ("obrien_fleming", "pocock", "none")
DEFAULT_SPENDING = "obrien_fleming"
GUARD = (
    "At a checkpoint the bootstrap and paired-normal tails are taken over the k observed tasks plus one "
    "guard task at the far end of the range, against the conclusion in view (d = -1 against an accept, "
    "+1 against a reject). Without it a degenerate sample (no task beyond θ, e.g. no win for A in the "
    "first few tasks) has a tail of exactly 0 and concludes at any level, however small: the small "
    "early levels of a spending schedule would then not bound the error. McNemar (exact) and Serfling "
    "(a bound) need no guard."
)
"""Rules a schedule can consult: the fixed-sample rules that defer (``forced`` never does,
and ``anytime`` needs no schedule)."""
NO_SPENDING_WARNING = (
    "spending 'none' consults the rule at the full level a at each of the {m} checkpoints: that is "
    "optional stopping, and the overall error can exceed a several times over (a tie population with "
    "26 checkpoints: about 21% false accepts for the bootstrap at a = 0.05). Use spending "
    "'obrien_fleming' or 'pocock', or the rule 'anytime'."
)


def check_spending(spending: str, rule: str, field: str = "spending") -> str:
    """``spending`` must be a known name, and only fixed-sample rules take one."""
    if spending not in SPENDINGS:
        raise FieldError(field, f"unknown spending '{spending}'; spendings: {', '.join(SPENDINGS)}")
    if rule in ("anytime", "anytime_eb"):
        raise FieldError(field, f"{rule} needs no spending: it is valid when checked after every task")
    return spending


def check_checkpoints(fractions: Sequence[object], field: str = "checkpoints") -> tuple[float, ...]:
    """Checkpoint fractions: at least one, each a finite number in (0, 1], strictly increasing."""
    if not fractions:
        raise FieldError(field, "give at least one checkpoint")
    out: list[float] = []
    for i, x in enumerate(fractions):
        if isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(float(x)):
            raise FieldError(f"{field}[{i}]", f"a checkpoint is a number in (0, 1], got {x!r}")
        v = float(x)
        if not 0.0 < v <= 1.0:
            raise FieldError(f"{field}[{i}]", f"checkpoints are fractions of N in (0, 1], got {x}")
        if out and v <= out[-1]:
            raise FieldError(f"{field}[{i}]", f"checkpoints must be strictly increasing: {v} follows {out[-1]}")
        out.append(v)
    return tuple(out)


def spent(t: np.ndarray | float, a: float, spending: str) -> np.ndarray:
    """Cumulative level ``α(t)`` spent by information fraction ``t`` (``α(0) = 0``, ``α(1) = a``)."""
    t = np.clip(np.asarray(t, dtype=np.float64), 0.0, 1.0)
    if spending == "obrien_fleming":
        z = -special.ndtri(a / 2.0)  # stats.norm.isf(a / 2), without importing scipy.stats
        with np.errstate(divide="ignore"):
            return np.where(t > 0, 2.0 * special.ndtr(-z / np.sqrt(t)), 0.0)
    if spending == "pocock":
        return a * np.log1p((math.e - 1.0) * t)
    if spending == "none":
        return np.where(t > 0, a, 0.0)
    raise ValueError(f"unknown spending '{spending}'")


def levels(ks: Sequence[int], a: float, spending: str) -> np.ndarray:
    """The level of each checkpoint ``k_1 < … < k_m``: ``α(t_j) − α(t_{j−1})`` with
    ``t_j = k_j/k_m`` (``a`` at every checkpoint for ``none``)."""
    kk = np.asarray(ks, dtype=np.float64)
    if spending == "none":
        return np.full(len(kk), float(a))
    cum = spent(kk / kk[-1], a, spending)
    cum[-1] = a  # the last checkpoint spends the rest exactly (no rounding leftover)
    return np.diff(np.r_[0.0, cum])


def scheduled_paths(
    rule: str,
    v: np.ndarray,
    lattice: int,
    ks: Sequence[int],
    lvls: Sequence[float],
    theta: float,
    n: int,
    cov_ok: np.ndarray | None = None,
    resamples: int | str = "exact",
    u: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """First conclusion of a fixed-sample rule consulted at checkpoints ``ks`` with levels ``lvls``.

    ``v``: ``[cases, >= k_m]`` integer lattice values in observation order (``d = v/L``);
    ``cov_ok``: ``[cases, m]`` whether coverage is met at each checkpoint (coverage-aware
    policies conclude only there); ``n``: population size (serfling). The bootstrap is the
    exact one. Returns ``(decision, stop)`` per case, ``stop = k_j`` of the concluding
    checkpoint (``k_m + 1`` when none concludes). A finite bootstrap ``resamples`` draws its
    verdict from ``u`` (``[cases, m]`` uniforms), as replay does at a budget. The paths are
    decided a slice at a time (``slice_rows``), which bounds the memory of many paths on a
    fine lattice.
    """
    v = np.asarray(v)
    if rule not in ("paired_normal", "serfling", "mcnemar", "bootstrap"):
        raise ValueError(f"rule '{rule}' takes no schedule")
    rows = slice_rows(int(max(ks, default=0)), rule, lattice)
    parts = []
    for i in range(0, max(v.shape[0], 1), rows):  # (no paths: one empty slice)
        cov_i = None if cov_ok is None else cov_ok[i : i + rows]
        u_i = None if u is None else u[i : i + rows]
        parts.append(_paths(rule, v[i : i + rows], lattice, ks, lvls, theta, n, cov_i, resamples, u_i))
    if len(parts) == 1:
        return parts[0]
    return np.concatenate([d for d, _ in parts]), np.concatenate([st for _, st in parts])


SLICE_ELEMENTS = 6_000_000
"""Most values of the paths ``scheduled_paths`` takes at once (its float64 copy of them: 48 MB)."""
_HIST_BYTES = 16 << 20
"""Most bytes of the histograms a lattice bootstrap keeps along a slice of paths (``paths x
(2L + 1)`` int64). A checkpoint holds about five times as much again (its segment's counts, the
live rows' copies, the staged brackets' laws). 60,000 paths of 60 tasks on a lattice of step
1/100 in one piece, whose histograms were too large to keep and so were counted by comparing
every value of each prefix with every value, peaked at 948 MB (8.0 s); in slices, 156 MB (4.5 s)."""


def slice_rows(k_m: int, rule: str, lattice: int | None) -> int:
    """Paths per slice of ``scheduled_paths`` (each slice is decided on its own): at most
    ``SLICE_ELEMENTS`` values, and a lattice bootstrap's histograms within ``_HIST_BYTES``."""
    rows = SLICE_ELEMENTS // max(k_m, 1)
    if rule == "bootstrap" and lattice is not None and lattice > 1:
        rows = min(rows, _HIST_BYTES // (8 * (2 * lattice + 1)))
    return max(1, rows)


def _paths(
    rule: str,
    v: np.ndarray,
    lattice: int | None,
    ks: Sequence[int],
    lvls: Sequence[float],
    theta: float,
    n: int,
    cov_ok: np.ndarray | None,
    resamples: int | str,
    u: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray]:
    """``scheduled_paths`` on one slice of its paths."""
    cases = v.shape[0]
    dec = np.zeros(cases, dtype=np.int8)
    stop = np.full(cases, int(ks[-1]) + 1, dtype=np.int64)
    live = np.ones(cases, dtype=bool)
    vf = v[:, : int(max(ks, default=0))].astype(np.float64)
    run = _Running(vf, ks, rule, lattice, v.dtype.kind in "iub")
    for j, (k, lvl) in enumerate(zip(ks, lvls, strict=True)):
        idx = np.flatnonzero(live)
        if not len(idx):
            break
        part = None
        if run.covers:
            run.advance(idx, k)
            s = run.s[idx]
        else:
            part = vf[idx, :k]
            s = part.sum(axis=1)
        kk = np.full(len(idx), k)
        if rule == "paired_normal":
            d = _paired_normal_guarded(s, run.q[idx] if part is None else (part * part).sum(axis=1), k, theta, lvl,
                                       lattice)
        elif rule == "serfling":
            d = R.serfling(s, kk, n, theta, lvl, lattice)
        elif rule == "mcnemar":
            counts = (run.plus[idx], run.minus[idx]) if part is None else ((part > 0).sum(axis=1),
                                                                           (part < 0).sum(axis=1))
            d = R.mcnemar(*counts, lvl)
        else:
            if part is None and not run.binary and not run.width:  # the tail needs each row's histogram
                part = vf[idx, :k]
            counts = (run.plus[idx], run.minus[idx]) if run.binary else None
            d = _bootstrap_exact(part, s, k, theta, lvl, lattice, resamples, None if u is None else u[idx, j], counts,
                                 run.hist[idx] if run.width else None)
        if cov_ok is not None:
            d = np.where(cov_ok[idx, j], d, R.DEFER)
        hit = d != R.DEFER
        dec[idx[hit]] = d[hit]
        stop[idx[hit]] = k
        live[idx[hit]] = False
    return dec, stop


class _Running:
    """Each path's sums so far, advanced checkpoint by checkpoint over the paths still live:
    ``s``, and as the rule needs them ``q`` (squares) or ``plus`` and ``minus`` (the counts of
    positive and negative values). Summed anew over each live path's first ``k`` values at
    every checkpoint, they cost a copy and a pass over the whole prefix each time: a scheduled
    replay of ``swebench_lite`` spent half its time there. Only on a lattice (``covers``:
    integer values, whose sums are exact in any order, so the same numbers); ``binary``: a 0/1
    bootstrap's counts are kept too (its values all within ``[-1, 1]``, as ``_bootstrap_exact``
    asks); ``width``: a lattice bootstrap's histograms over ``-L..L`` (``hist``), which a
    comparison of every value of every prefix with every value took most of the time to count."""

    def __init__(self, vf: np.ndarray, ks: Sequence[int], rule: str, lattice: int | None, integral: bool = False):
        self.vf, self.rule = vf, rule
        self.covers = lattice is not None and len(ks) > 0 and min(ks) >= 1
        # the values' range and whether they are whole, without a temporary the size of vf
        # (np.abs(vf) and np.round(vf) each took as much again as vf: 48 MB a slice)
        lo, hi = (float(vf.min()), float(vf.max())) if vf.size else (0.0, 0.0)
        self.binary = self.covers and rule == "bootstrap" and lattice == 1 and -1 <= lo and hi <= 1
        cases = len(vf)
        self.s, self.q = np.zeros(cases), np.zeros(cases)
        self.plus, self.minus = np.zeros(cases, dtype=np.int64), np.zeros(cases, dtype=np.int64)
        self.at = 0  # the values summed so far, per live path
        # a lattice bootstrap's histograms over -L..L, counted as the sums are
        self.width = 0
        if self.covers and rule == "bootstrap" and not self.binary and lattice is not None:
            fits = cases * (2 * lattice + 1) * 8 <= _HIST_BYTES
            if fits and -lattice <= lo and hi <= lattice and (integral or np.array_equal(vf, np.round(vf))):
                self.width, self.lattice = 2 * lattice + 1, lattice
                self.hist = np.zeros((cases, self.width), dtype=np.int64)

    def advance(self, idx: np.ndarray, k: int) -> None:
        """Add values ``at..k`` of the paths ``idx`` (every path still live: the others are not
        read again)."""
        # every path live (the first checkpoint, often): a view, not a copy (the sums are of
        # integers, exact in any order)
        seg = self.vf[:, self.at : k] if len(idx) == len(self.vf) else self.vf[idx, self.at : k]
        self.s[idx] += seg.sum(axis=1)
        if self.rule == "paired_normal":
            self.q[idx] += np.einsum("ij,ij->i", seg, seg)
        if self.rule == "mcnemar" or self.binary:
            self.plus[idx] += (seg > 0).sum(axis=1)
            self.minus[idx] += (seg < 0).sum(axis=1)
        if self.width:
            cell = seg.astype(np.int64)
            cell += np.arange(len(idx))[:, None] * self.width + self.lattice
            self.hist[idx] += np.bincount(cell.ravel(), minlength=len(idx) * self.width).reshape(len(idx), -1)
        self.at = k


def _paired_normal_guarded(
    s: np.ndarray, q: np.ndarray, k: int, theta: float, level: float, lattice: int | None
) -> np.ndarray:
    """Paired normal at a checkpoint, its tail taken with one guard task (see ``GUARD``)."""
    lat = lattice or 1
    kk = np.full(len(s), k)
    pos = R.above(s, kk, theta, lattice)
    s_g = np.where(pos, s - lat, s + lat)  # the guard lies against the conclusion in view
    q_g, k_g = q + lat * lat, k + 1.0
    ss = np.maximum(q_g * k_g - s_g * s_g, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        se = np.sqrt(ss / (k_g * (k_g - 1))) / lat / np.sqrt(k_g)
        m = s_g / (k_g * lat)
        tail = np.where(pos, special.ndtr(-(m - theta) / se), special.ndtr(-(theta - m) / se))
    tail = np.where(se > 0, tail, 1.0)
    out = np.where(tail <= level, np.where(pos, R.ACCEPT, R.REJECT), R.DEFER).astype(np.int8)
    return np.where(k < 2, R.DEFER, out).astype(np.int8)


def _bootstrap_exact(
    part: np.ndarray,
    s: np.ndarray,
    k: int,
    theta: float,
    level: float,
    lattice: int,
    resamples: int | str = "exact",
    u: np.ndarray | None = None,
    counts: tuple[np.ndarray, np.ndarray] | None = None,
    full_hist: np.ndarray | None = None,
) -> np.ndarray:
    """The bootstrap verdict of each row from the exact resampling tail of its ``k`` tasks and
    one guard task (see ``GUARD``); ``B`` resamples draw from ``u``. ``counts``: the rows' positive
    and negative counts where they are known to be 0/1; ``full_hist``: their histograms over
    ``-L..L`` (``part`` is then not read)."""
    kk = np.full(len(s), k)
    pos = R.above(s, kk, theta, lattice)
    c = R.bootstrap_threshold(theta, kk + 1, lattice)
    if counts is None and full_hist is None and lattice == 1 and np.all(np.abs(part) <= 1):
        counts = (part > 0).sum(axis=1), (part < 0).sum(axis=1)
    if counts is not None:
        n_plus, n_minus = counts
        p_low = R.tail_binary(kk + 1, n_plus + ~pos, n_minus + pos, c)
        return R.bootstrap_from_tail(p_low, pos, level, resamples, u)
    if full_hist is not None:  # the values present in some row, and -L and L
        present = full_hist.any(axis=0)
        present[0] = present[-1] = True
        vals = np.arange(-lattice, lattice + 1, dtype=np.int64)[present]
        hist = full_hist[:, present]
    else:
        vals = np.union1d(np.unique(part).astype(np.int64), [-lattice, lattice])
        hist = (part[:, :, None] == vals[None, None, :]).sum(axis=1)
    hist[:, 0] += pos  # -L against an accept
    hist[:, -1] += ~pos  # +L against a reject
    return _staged(hist, vals, c, pos, level, resamples, u)


class _RowLaws:
    """``lattice_decisions.Histograms`` for rows given whole (``hist [rows, V]`` over ``values``,
    lattice units): each row its own law, none seen negated."""

    def __init__(self, hist: np.ndarray, values: np.ndarray):
        rows = len(hist)
        self.values = np.asarray(values, dtype=np.int64)
        self.counts = np.asarray(hist, dtype=np.float64)
        self.words = np.asarray(hist, dtype=np.int64)  # code each row exactly
        self.law = self.own = np.arange(rows)
        self.mirror = np.full(rows, -1)
        self.flip = np.zeros(rows, dtype=bool)
        self.k = self.words.sum(axis=1)
        vf = self.values.astype(np.float64)
        self.s = self.counts @ vf
        self.q = self.counts @ (vf * vf)
        present = self.words > 0
        self.vlo = vf[np.argmax(present, axis=1)]
        self.vhi = vf[len(vf) - 1 - np.argmax(present[:, ::-1], axis=1)]


def _staged(hist: np.ndarray, vals: np.ndarray, c: np.ndarray, pos: np.ndarray, level: float,
            resamples: int | str, u: np.ndarray | None) -> np.ndarray:
    """The bootstrap verdicts of ``_bootstrap_exact`` on a lattice, each row's tail bracketed in
    stages (Bennett, Berry-Esseen, a short characteristic-function sum) and computed exactly
    only where its bracket straddles the level, as an unscheduled replay does
    (``lattice_decisions.Tails``)."""
    from service.engine.lattice_decisions import Tails, _finite_b_decide

    if resamples == "exact":

        def decide(p: np.ndarray, i: np.ndarray | slice) -> np.ndarray:
            return R.bootstrap_from_tail(p, pos[i], level, "exact")

    else:
        decide = _finite_b_decide(float(level), int(resamples), pos, np.asarray(u, dtype=np.float64))[0]
    return Tails(_RowLaws(hist, vals), np.asarray(c, dtype=np.int64)).settle(decide)
