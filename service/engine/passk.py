"""pass@k and pass^k (SPEC §8): unbiased per-task estimates from repeated trials, and a
system's curve over every ``k``."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from service.engine.records import Records
from service.engine.statbase import StatsInputError, _count, _system_index


@dataclass(frozen=True)
class PassK:
    """pass@k and pass^k of one system at one ``k``, averaged over ``n_tasks`` tasks.

    ``n_excluded`` tasks had fewer than ``k`` trials and are left out of the average
    (an unbiased estimate needs at least ``k`` trials of the task).
    """

    k: int
    pass_at_k: float
    pass_hat_k: float
    n_tasks: int
    n_excluded: int


def _check_nck(n: int, c: int, k: int) -> tuple[int, int, int]:
    n = _count(n, "n", 1)
    c = _count(c, "c", 0)
    k = _count(k, "k", 1)
    if c > n:
        raise StatsInputError("c", f"passes c={c} exceed trials n={n}")
    if k > n:
        raise StatsInputError("k", f"k={k} exceeds the number of trials n={n}")
    return n, c, k


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one task from ``c`` passes in ``n`` trials (SPEC §8).

    ``pass@k = 1 - C(n - c, k) / C(n, k)``: one minus the chance that a uniformly random
    k-subset of the trials holds no pass (``C(a, b) = 0`` when ``b > a``). Its expectation
    over i.i.d. trials with pass probability ``p`` is ``1 - (1 - p)**k``. Needs ``k <= n``.
    """
    n, c, k = _check_nck(n, c, k)
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """Unbiased pass^k of one task: ``C(c, k) / C(n, k)``, the chance that a random
    k-subset of the trials passes every time; expectation ``p**k`` (SPEC §8)."""
    n, c, k = _check_nck(n, c, k)
    return math.comb(c, k) / math.comb(n, k)


PASS_K_MAX = 100
"""Largest ``k`` of a system's curve (``pass_k_curve``). The work is ``k x trials`` per task: a
dataset of 2 M rows is at most 2e8 weights and products this way. Every ``k`` up to the largest
trial count was unbounded: the exact weights took 3.8 s for one task of 800 trials (Python
integers, ``n^2`` of them), and a task of 20,000 trials would have asked for two 3.2 GB
matrices."""
_WEIGHT_CELLS = 1 << 20
"""Weights computed at once: ``subset_max_min`` takes a task's trials a block of columns at a time."""


def _max_weights(n: int, kmax: int, cols: int) -> Iterator[tuple[int, int, np.ndarray]]:
    """Weights of the order statistics in the max of a random k-subset, ``k = 1 .. kmax``, in
    blocks of ``cols`` statistics from the largest down: ``(lo, hi, w)``, ``w [kmax, hi - lo]``.

    Row ``k - 1``, column ``i - 1 - lo``: ``C(i-1, k-1) / C(n, k)``, the probability that the
    ``i``-th smallest of ``n`` values is the largest of a uniformly random k-subset (0 for
    ``i < k``). The min's weight of statistic ``i`` is the max's of ``n + 1 - i``. From the
    top, ``w(n) = k/n`` and ``w(i-1) = w(i)·(i-k)/(i-1)``: a product of ``n - i`` roundings,
    relative error under ``n·1.2e-16``, where the ratios of exact integers cost ``n^2`` Python
    integers.
    """
    k = np.arange(1, kmax + 1, dtype=np.float64)[:, None]
    carry = k / n  # w(hi) of the block below
    for hi in range(n, 0, -cols):
        lo = max(0, hi - cols)
        t = np.arange(lo + 2, hi + 1, dtype=np.float64)[None, ::-1]  # w(t-1) = w(t)·(t-k)/(t-1), t = hi .. lo+2
        ratios = np.maximum(t - k, 0.0) / (t - 1.0)
        w = np.empty((kmax, hi - lo))
        w[:, -1:] = carry
        if hi - lo > 1:
            w[:, -2::-1] = carry * np.cumprod(ratios, axis=1)
        if lo:  # w(lo) = w(lo + 1)·(lo + 1 - k)/lo, the top of the next block
            carry = w[:, :1] * (np.maximum(lo + 1.0 - k, 0.0) / lo)
        yield lo, hi, w


def subset_max_min(outcomes: np.ndarray, kmax: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Mean over all k-subsets of the max and of the min, for every ``k = 1..kmax`` (default
    ``n``).

    ``outcomes`` is ``[..., n]`` (trials on the last axis). Returns two ``[..., kmax]``
    arrays whose entry ``k - 1`` is the average, over the ``C(n, k)`` subsets of size
    ``k``, of the subset's largest (resp. smallest) outcome. For 0/1 outcomes these are
    exactly pass@k and pass^k of SPEC §8; for fractional rewards they are the unbiased
    estimates of the expected best and worst of ``k`` trials (U-statistics).
    """
    x = np.sort(np.asarray(outcomes, dtype=np.float64), axis=-1)
    n = x.shape[-1]
    kmax = n if kmax is None else max(0, min(int(kmax), n))
    emax = np.zeros((*x.shape[:-1], kmax))
    emin = np.zeros((*x.shape[:-1], kmax))
    if not kmax:
        return emax, emin
    down = x[..., ::-1]  # the min's statistic i weighs as the max's n + 1 - i
    for lo, hi, w in _max_weights(n, kmax, max(1, _WEIGHT_CELLS // kmax)):
        emax += x[..., lo:hi] @ w.T
        emin += down[..., lo:hi] @ w.T
    return emax, emin


def pass_k_curve(records: Records, system: str) -> tuple[PassK, ...]:
    """pass@k and pass^k of ``system`` for every ``k`` from 1 to its largest trial count, or
    to ``PASS_K_MAX``.

    Per task the estimate is :func:`subset_max_min` of that task's trials; the system's
    value is the mean over tasks. A task with fewer than ``k`` trials has no unbiased
    estimate at that ``k`` and is excluded (counted in ``n_excluded``); when every
    task has the same number of trials nothing is excluded. ``k = 1`` gives the mean score.
    """
    s = _system_index(records, system)
    sel = records.raw_system == s
    task = records.raw_task[sel]
    out = records.raw_outcome[sel]
    order = np.lexsort((out, task))
    out = out[order]
    counts = records.trials[s]
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    n_observed = int(np.count_nonzero(counts))
    kmax = min(int(counts.max()), PASS_K_MAX)
    at_sum = np.zeros(kmax)
    hat_sum = np.zeros(kmax)
    used = np.zeros(kmax, dtype=np.int64)
    for n in np.unique(counts[counts > 0]):
        n = int(n)
        rows = np.nonzero(counts == n)[0]
        x = out[starts[rows][:, None] + np.arange(n)]
        kk = min(n, kmax)
        emax, emin = subset_max_min(x, kk)
        at_sum[:kk] += emax.sum(axis=0)
        hat_sum[:kk] += emin.sum(axis=0)
        used[:kk] += len(rows)
    return tuple(
        PassK(
            k=k + 1,
            pass_at_k=float(at_sum[k] / used[k]),
            pass_hat_k=float(hat_sum[k] / used[k]),
            n_tasks=int(used[k]),
            n_excluded=n_observed - int(used[k]),
        )
        for k in range(kmax)
    )
