"""pass@k and pass^k (SPEC §8): unbiased per-task estimates from repeated trials, and a
system's curve over every ``k``."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

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


@lru_cache(maxsize=128)
def _subset_weights(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Weights of the order statistics for the max and the min of a random k-subset.

    Row ``k - 1``, column ``i - 1``: ``C(i-1, k-1) / C(n, k)`` is the probability that the
    ``i``-th smallest of ``n`` values is the largest of a uniformly random k-subset;
    ``C(n-i, k-1) / C(n, k)`` that it is the smallest. Integer ratios, correctly rounded.
    """
    wmax = np.zeros((n, n))
    wmin = np.zeros((n, n))
    for k in range(1, n + 1):
        total = math.comb(n, k)
        for i in range(1, n + 1):
            wmax[k - 1, i - 1] = math.comb(i - 1, k - 1) / total
            wmin[k - 1, i - 1] = math.comb(n - i, k - 1) / total
    wmax.setflags(write=False)
    wmin.setflags(write=False)
    return wmax, wmin


def subset_max_min(outcomes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean over all k-subsets of the max and of the min, for every ``k = 1..n``.

    ``outcomes`` is ``[..., n]`` (trials on the last axis). Returns two ``[..., n]``
    arrays whose entry ``k - 1`` is the average, over the ``C(n, k)`` subsets of size
    ``k``, of the subset's largest (resp. smallest) outcome. For 0/1 outcomes these are
    exactly pass@k and pass^k of SPEC §8; for fractional rewards they are the unbiased
    estimates of the expected best and worst of ``k`` trials (U-statistics).
    """
    x = np.sort(np.asarray(outcomes, dtype=np.float64), axis=-1)
    wmax, wmin = _subset_weights(x.shape[-1])
    return x @ wmax.T, x @ wmin.T


def pass_k_curve(records: Records, system: str) -> tuple[PassK, ...]:
    """pass@k and pass^k of ``system`` for every ``k`` from 1 to its largest trial count.

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
    kmax = int(counts.max())
    at_sum = np.zeros(kmax)
    hat_sum = np.zeros(kmax)
    used = np.zeros(kmax, dtype=np.int64)
    for n in np.unique(counts[counts > 0]):
        n = int(n)
        rows = np.nonzero(counts == n)[0]
        x = out[starts[rows][:, None] + np.arange(n)]
        emax, emin = subset_max_min(x)
        at_sum[:n] += emax.sum(axis=0)
        hat_sum[:n] += emin.sum(axis=0)
        used[:n] += len(rows)
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
