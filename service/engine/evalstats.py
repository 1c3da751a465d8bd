"""Evaluation statistics for single systems and pairs (SPEC §8); leaderboards build on them in
:mod:`service.engine.leaderboard`.

Pure functions over :class:`~service.engine.records.Records` (numpy/scipy only). Results
are small frozen dataclasses; :func:`~service.engine.statbase.to_dict` turns any of them into JSON-ready values
(NaN and infinities become ``None``).

The shared conventions (tasks are the unit of sampling, ``level``, ``z``, errors naming
the argument) are in :mod:`service.engine.statbase`; intervals, pass@k and sample sizes
have their own modules (:mod:`~service.engine.intervals`, :mod:`~service.engine.passk`,
:mod:`~service.engine.samplesize`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from service.engine import binom
from service.engine.intervals import Interval, clopper_pearson_interval, normal_interval, t_interval, wilson_interval
from service.engine.passk import PassK, pass_k_curve
from service.engine.records import Records, group_labels, parse_group_key
from service.engine.statbase import StatsInputError, _count, _level, _system_index, _z

BOOTSTRAP_CELLS = 1 << 21
"""Cells (resamples × resampled units) a bootstrap batch draws at most: each cell holds an
int64 index and its float64 gathered value, so a batch holds about ``16 × BOOTSTRAP_CELLS``
bytes (32 MiB) whatever the number of tasks or clusters (one resample per batch beyond
``BOOTSTRAP_CELLS`` units, then ``16 × units`` bytes: the order of the input itself)."""


@dataclass(frozen=True)
class ClusteredSE:
    """Standard error of a mean over tasks, with and without clustering.

    ``design_effect = se**2 / se_iid**2``; ``effective_tasks = min(n_tasks, n_tasks /
    design_effect)``, capped (``effective_tasks_note`` says so) for the reason given in
    ``clustered_se``.
    """

    mean: float
    se: float
    se_iid: float
    design_effect: float
    effective_tasks: float
    n_tasks: int
    n_clusters: int
    effective_tasks_note: str | None = None


@dataclass(frozen=True)
class SystemStats:
    """One system on a dataset: score, its intervals, clustering and pass@k / pass^k."""

    system: str
    n_tasks: int
    n_trials: int
    mean: float
    se: float
    normal: Interval
    wilson: Interval
    clopper_pearson: Interval | None
    clustered: ClusteredSE | None
    interval: Interval
    pass_k: tuple[PassK, ...]


@dataclass(frozen=True)
class PairStats:
    """A paired comparison of ``a`` and ``b`` on the tasks both ran (``diff = a - b``)."""

    a: str
    b: str
    n_tasks: int
    mean_a: float
    mean_b: float
    diff: float
    se_paired: float
    se_unpaired: float
    correlation: float
    clustered: ClusteredSE | None
    test: str
    p_value: float
    n_plus: int | None
    n_minus: int | None
    mcnemar_p: float | None
    min_gap_unpaired: float
    min_gap_paired: float
    bootstrap: Interval | None
    n_boot: int | None


# --------------------------------------------------------------------------- clustering


def clustered_se(values: np.ndarray, clusters: np.ndarray | None = None) -> ClusteredSE:
    """Cluster-robust (CR1 sandwich) standard error of a mean over tasks.

    For the mean ``m`` of ``v_1..v_N`` with tasks in clusters ``g = 1..G``::

        se² = G / (G - 1) · sum_g (sum_{t in g} (v_t - m))² / N²        (CR1)
        se_iid² = sum_t (v_t - m)² / (N (N - 1))

    With every task its own cluster the two coincide. ``design_effect = se² / se_iid²``
    and ``effective_tasks = N / design_effect``, capped at ``N``. ``se`` is NaN with fewer
    than 2 clusters, ``se_iid`` with fewer than 2 tasks.

    Why the cap: the effective number of tasks reads as "as precise as this many independent
    tasks", and clustering cannot make tasks more informative than independent ones in the
    model that motivates it (non-negative within-cluster correlation). A design effect below 1
    comes from the noise of the CR1 variance, which has only ``G - 1`` degrees of freedom (its
    relative standard error is about ``sqrt(2 / (G - 1))``: 43 % with 12 clusters), or from
    negatively correlated clusters; neither earns 491 "effective" tasks out of 300. The design
    effect and ``se`` are reported as computed (the interval uses the CR1 ``se``); only the
    count is capped, and ``effective_tasks_note`` explains it whenever the cap applies.
    """
    v = np.asarray(values, dtype=np.float64)
    n = v.size
    if n == 0:
        raise StatsInputError("values", "no tasks")
    mean = float(v.mean())
    u = v - mean
    if clusters is None:
        g_index = np.arange(n)
    else:
        _, g_index = np.unique(np.asarray(clusters), return_inverse=True)
    n_clusters = int(g_index.max()) + 1
    sums = np.bincount(g_index, weights=u, minlength=n_clusters)
    se_iid = math.sqrt(float(u @ u) / (n * (n - 1))) if n > 1 else math.nan
    if n_clusters > 1:
        se = math.sqrt(n_clusters / (n_clusters - 1) * float(sums @ sums)) / n
    else:
        se = math.nan
    if se_iid > 0 and math.isfinite(se):
        deff = (se / se_iid) ** 2
        eff = n / deff if deff > 0 else math.inf
    else:
        deff = eff = math.nan
    note = None
    if eff > n:  # NaN compares False: no note without a design effect
        note = (f"design effect {deff:.3g} < 1 with {n_clusters} clusters (the CR1 variance has {n_clusters - 1} "
                f"degrees of freedom, relative SE about {math.sqrt(2 / (n_clusters - 1)):.0%}): effective tasks "
                f"capped at the {n} tasks: below 1 it is noise, not extra information")
        eff = float(n)
    return ClusteredSE(mean, se, se_iid, deff, eff, n, n_clusters, note)


# --------------------------------------------------------------------------- single systems


SAME_SCORE = 1e-12
"""Differences of scores up to this are no difference: the leaderboard ranks scores equal to 12
decimals in one block, and a constant difference this small is the rounding of means over
different numbers of trials (0.1 and 0.2 average to 0.15000000000000002, not 0.15), which a
zero standard error turned into p = 0, a significant lead the letters did not show."""


FLAT_T = 1e12
"""A t statistic past this is an infinite one: the standard error is the rounding of equal unit
differences (2 clusters of 50 tasks, one win for A in each: se 1.2e-17 for a mean of 0.02, so
p = 3.9e-16 where a sign test over the 2 clusters says 0.5)."""


def _flat(se, mean):  # noqa: ANN001, ANN202  (floats or arrays alike)
    """Whether a paired difference is flat: the same in every unit, up to rounding."""
    return se <= np.maximum(np.abs(mean), SAME_SCORE) / FLAT_T


def _labels(records: Records, cluster: str | Sequence[str] | None) -> np.ndarray | None:
    """Each task's cluster, or None without a key (``None``, or an empty string). A key of
    commas alone names no column: it is refused, where it made one cluster of every task."""
    if cluster is None or (isinstance(cluster, str) and not cluster.strip()):
        return None
    try:
        if not parse_group_key(cluster):
            raise ValueError(f"the key {cluster!r} names no column: give a column (or 'col1,col2'), or no key")
        labels, _ = group_labels(records, cluster)
    except ValueError as exc:
        raise StatsInputError("cluster", str(exc)) from None
    return labels


def _binary_single(records: Records, s: int, mask: np.ndarray) -> bool:
    y = records.y[s, mask]
    return bool(np.all(records.trials[s, mask] == 1) and np.all((y == 0.0) | (y == 1.0)))


def system_stats(
    records: Records, system: str, level: float = 0.95, cluster: str | Sequence[str] | None = None
) -> SystemStats:
    """Score of ``system`` over the tasks it ran, with intervals (SPEC §8).

    * ``normal``: ``mean ± z·sd(y, ddof=1)/sqrt(N)``, clipped to [0, 1] like ``cluster_t``.
    * ``wilson``: Wilson score interval with ``x = mean·N`` over ``N`` tasks (exact in its
      assumptions for single-trial 0/1 records, an approximation otherwise).
    * ``clopper_pearson``: exact interval, only for single-trial 0/1 records (else None).
    * ``clustered``: CR1 standard error by the ``cluster`` key (:func:`clustered_se`).
    * ``interval`` (the one a leaderboard shows): ``mean ± t_{G-1}·se_CR1`` when clustered,
      else Clopper–Pearson for single-trial 0/1 records, else ``normal``.
    """
    level = _level(level)
    return _system_stats(records, _system_index(records, system), level, _labels(records, cluster))


def _clip01(bounds: tuple[float, float]) -> tuple[float, float]:
    # a score lies in [0, 1]; a symmetric interval may not (NaN stays NaN)
    low, high = bounds
    return (max(0.0, low) if low == low else low, min(1.0, high) if high == high else high)


def _system_stats(records: Records, s: int, level: float, labels: np.ndarray | None) -> SystemStats:
    mask = records.observed[s]
    y = records.y[s, mask]
    n = int(y.size)
    cl = clustered_se(y, None if labels is None else labels[mask])
    mean, se = cl.mean, cl.se_iid
    normal = Interval(*_clip01(normal_interval(mean, se, level)), "normal")
    wilson = Interval(*wilson_interval(mean * n, n, level), "wilson")
    cp = None
    if _binary_single(records, s, mask):
        cp = Interval(*clopper_pearson_interval(round(mean * n), n, level), "clopper_pearson")
    clustered = cl if labels is not None else None
    if clustered is not None:
        interval = Interval(*_clip01(t_interval(mean, cl.se, cl.n_clusters - 1, level)), "cluster_t")
    else:
        interval = cp if cp is not None else normal
    return SystemStats(
        system=records.systems[s],
        n_tasks=n,
        n_trials=int(records.trials[s].sum()),
        mean=mean,
        se=se,
        normal=normal,
        wilson=wilson,
        clopper_pearson=cp,
        clustered=clustered,
        interval=interval,
        pass_k=pass_k_curve(records, records.systems[s]),
    )


# --------------------------------------------------------------------------- pairs


def mcnemar_exact(n_plus: int, n_minus: int) -> float:
    """Two-sided exact McNemar p-value: ``min(1, 2·P(Bin(n, 1/2) <= min(n+, n-)))`` with
    ``n = n+ + n-`` discordant tasks; 1 when there are none."""
    a = _count(n_plus, "n_plus")
    b = _count(n_minus, "n_minus")
    n = a + b
    if n == 0:
        return 1.0
    return float(min(1.0, 2.0 * binom.cdf(min(a, b), n, 0.5)))


def paired_cluster_bootstrap(
    d: np.ndarray,
    level: float,
    rng: np.random.Generator,
    n_boot: int = 2000,
    clusters: np.ndarray | None = None,
) -> Interval:
    """Percentile interval for the mean paired difference by resampling whole units.

    ``d[t] = y[A, t] - y[B, t]`` where each ``y`` is the mean over that system's trials of
    ``t``. Drawing a task with all trials of both systems together therefore draws its
    ``d[t]``; the trials are never resampled on their own, which would treat repeats as
    independent tasks and understate the error. With ``clusters`` the resampled units are
    whole clusters (every task of the group), and each resample's statistic is
    ``sum d / number of tasks drawn``. Randomness comes only from ``rng``. With one unit (one
    task, or one cluster) there is nothing to resample: the bounds are NaN, as the clustered
    t-interval's are with fewer than two clusters.
    """
    level = _level(level)
    n_boot = _count(n_boot, "n_boot", 1)
    d = np.asarray(d, dtype=np.float64)
    if d.size == 0:
        raise StatsInputError("d", "no tasks")
    if clusters is None:
        sums, sizes = d, None
    else:
        _, g = np.unique(np.asarray(clusters), return_inverse=True)
        sums = np.bincount(g, weights=d)
        sizes = np.bincount(g).astype(np.float64)
    units = sums.size
    if units < 2:  # every resample is the one unit: a zero-width interval that says nothing
        return Interval(math.nan, math.nan, "paired_cluster_bootstrap")
    # Batches are sized by cells, not resamples, so memory stays bounded at any size. The
    # batch size does not change the result: ``rng.integers`` draws a (b1 + b2, units) block
    # as the same stream as a (b1, units) then a (b2, units) block (the bit generator keeps
    # any unused half word between calls), and each resample's sum is a reduction over its
    # own row, which does not depend on how many rows sit beside it.
    batch = max(1, BOOTSTRAP_CELLS // units)
    means = np.empty(n_boot)
    for start in range(0, n_boot, batch):
        stop = min(n_boot, start + batch)
        idx = rng.integers(0, units, size=(stop - start, units))
        total = sums[idx].sum(axis=1)
        # without clusters every unit weighs 1 task: the drawn size is exactly ``units``
        means[start:stop] = total / (units if sizes is None else sizes[idx].sum(axis=1))
        del idx, total
    alpha = 1.0 - level
    low, high = np.quantile(means, [alpha / 2.0, 1.0 - alpha / 2.0])
    return Interval(float(low), float(high), "paired_cluster_bootstrap")


def _pair_arrays(records: Records, a: int, b: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    mask = records.observed[a] & records.observed[b]
    return mask, records.y[a, mask], records.y[b, mask]


def _paired_test(
    d: np.ndarray, labels: np.ndarray | None, binary_single: bool
) -> tuple[str, float, float, ClusteredSE | None]:
    """The leaderboard's paired test on differences ``d``: (name, se, p-value, clustered).

    * no cluster key and single-trial 0/1 outcomes: exact McNemar;
    * otherwise a paired t-test on ``d`` with the CR1 standard error and ``G - 1`` degrees
      of freedom (``G`` = clusters, or tasks without a key: then it is the ordinary paired
      t-test). A flat difference (``_flat``: every unit, task or cluster, shows the same
      difference, so the standard error is 0 but for rounding and t is infinite) gives p = 1
      when that difference is 0 (to ``SAME_SCORE``), else the exact sign test's ``2^(1-G)``
      (all ``G`` units on one side), where p = 0 called 2 tasks, or 2 clusters, a certain lead.

    :func:`paired_tests` runs this for all pairs of a leaderboard at once and must give the
    same bits: change both together (``tests/engine/test_leaderboard_pairs.py`` compares them).
    """
    cl = clustered_se(d, labels)
    if labels is None and binary_single:
        n_plus = int(np.count_nonzero(d > 0))
        n_minus = int(np.count_nonzero(d < 0))
        return "mcnemar_exact", cl.se_iid, mcnemar_exact(n_plus, n_minus), None
    name = "paired_t" if labels is None else "paired_t_clustered"
    se = cl.se
    if not math.isfinite(se):
        return name, se, math.nan, cl if labels is not None else None
    if _flat(se, cl.mean):
        p = 1.0 if abs(cl.mean) <= SAME_SCORE else min(1.0, 2.0 ** (1 - cl.n_clusters))
    else:
        from scipy import stats  # on first use, not at import (engine/binom.py says why)
        p = float(2.0 * stats.t.sf(abs(cl.mean) / se, cl.n_clusters - 1))
    return name, se, p, cl if labels is not None else None


# --------------------------------------------------------------------------- many pairs at once

PAIR_TESTS = ("none", "mcnemar_exact", "paired_t", "paired_t_clustered")
"""Names of :func:`_paired_test`'s tests, indexed by :attr:`PairedTests.test` (``none``: no
common task)."""

PAIR_CELLS = 1 << 16
"""Pairs × tasks that :func:`paired_tests` holds in one array: 512 KiB of float64, so a few such
arrays stay in cache and the memory does not grow with the number of pairs (134 x 500 with
clusters: about half the time of 8 MiB arrays, whose fresh pages were most of the cost)."""


@dataclass(frozen=True)
class PairedTests:
    """:func:`_paired_test` for many pairs, one entry per pair: ``test`` indexes
    :data:`PAIR_TESTS`; ``df`` is ``G - 1`` (clusters, or tasks without a key), -1 without tasks."""

    n_tasks: np.ndarray
    diff: np.ndarray
    se: np.ndarray
    p_value: np.ndarray
    test: np.ndarray
    df: np.ndarray


def paired_tests(records: Records, a: np.ndarray, b: np.ndarray, labels: np.ndarray | None) -> PairedTests:
    """:func:`_paired_test` of every pair ``(a[k], b[k])`` on the tasks both ran, all at once.

    A leaderboard tests ``S(S-1)/2`` pairs; one call each cost 130 µs of Python and numpy
    overhead (1.2 s at 134 systems). The numbers are the same bits as those calls give
    (``tests/engine/test_leaderboard_pairs.py``) because every float comes from the same IEEE
    operations in the same order: a pair's mean is numpy's pairwise sum of the same packed
    differences (pairs with equally many common tasks are packed into one matrix, whose row
    sums are that sum), sums of squares are the same BLAS dot products (``np.vecdot`` runs the
    ddot that ``u @ u`` runs), cluster sums add task after task as ``np.bincount`` does (a task
    outside the common set adds an exact 0), and the p-values come from the same ufuncs. Only
    counts (tasks, clusters, McNemar's n+ and n-) are taken in bulk, where any order is exact.
    """
    a, b = np.asarray(a, dtype=np.intp), np.asarray(b, dtype=np.intp)
    m, t = a.size, records.n_tasks
    n, units = np.zeros(m, dtype=np.int64), np.zeros(m, dtype=np.int64)  # units: G, clusters or tasks
    n_plus, n_minus = np.zeros(m, dtype=np.int64), np.zeros(m, dtype=np.int64)
    diff, uu, ss = np.full(m, np.nan), np.full(m, np.nan), np.full(m, np.nan)
    binary = np.zeros(m, dtype=bool)
    everywhere = bool(records.observed.all())
    # cells that are not one 0/1 trial: a pair with one among its common tasks gets no McNemar
    rough = records.observed & ~((records.trials == 1) & ((records.y == 0.0) | (records.y == 1.0)))
    rough_system = rough.any(axis=1)
    step = max(1, PAIR_CELLS // max(t, 1))
    index = members = None  # cell (row, task) -> its bin (row, cluster); task -> its cluster, one-hot
    if labels is not None:
        g = int(labels.max()) + 1
        index = (np.arange(min(step, m))[:, None] * g + labels[None, :]).ravel()
        members = (labels[:, None] == np.arange(g)[None, :]).astype(np.float64)
    if everywhere:
        n[:] = t
        sequence = np.arange(m)
    else:  # pairs with equally many common tasks side by side, to be packed together
        seen = records.observed.astype(np.float64)
        n[:] = (seen @ seen.T)[a, b]  # whole numbers below 2**53: exact
        sequence = np.argsort(n, kind="stable")
    for start in range(0, m, step):
        rows = sequence[start : start + step]
        ia, ib = a[rows], b[rows]
        d = records.y[ia] - records.y[ib]  # NaN off the common tasks
        common = None if everywhere else records.observed[ia] & records.observed[ib]
        smooth = ~(rough_system[ia] | rough_system[ib])
        if common is not None and not smooth.all():  # a rough cell may lie off the common tasks
            ask = np.flatnonzero(~smooth)
            smooth[ask] = ~((rough[ia[ask]] | rough[ib[ask]]) & common[ask]).any(axis=1)
        binary[rows] = smooth
        mean, squares, signs, u = _centred(d, common, n[rows], labels is None and bool(binary[rows].any()))
        diff[rows], uu[rows] = mean, squares
        if index is None:  # no cluster key
            n_plus[rows], n_minus[rows] = signs
            units[rows], ss[rows] = n[rows], squares  # every task its own cluster: the sums are u
        else:
            if u is None:
                u = np.subtract(d, mean[:, None], out=np.zeros_like(d), where=common)
            ss[rows], units[rows] = _cluster_squares(u, common, index[: u.size], members)
    with np.errstate(divide="ignore", invalid="ignore"):
        se_iid = np.where(n > 1, np.sqrt(uu / (n * (n - 1))), np.nan)
        se_cr1 = np.where(units > 1, np.sqrt(units / (units - 1) * ss) / n, np.nan)
    mcnemar = (n > 0) & binary & (labels is None)
    test = np.where(n == 0, 0, np.where(mcnemar, 1, 2 if labels is None else 3)).astype(np.int8)
    se = np.where(mcnemar, se_iid, se_cr1)
    p = np.where(mcnemar, 1.0, np.nan)
    discordant = n_plus + n_minus
    ran = mcnemar & (discordant > 0)
    p[ran] = np.minimum(1.0, 2.0 * binom.cdf(np.minimum(n_plus, n_minus)[ran], discordant[ran], 0.5))
    t_test = (test >= 2) & np.isfinite(se)
    flat = t_test & _flat(se, diff)
    p[flat] = np.where(np.abs(diff[flat]) <= SAME_SCORE, 1.0, np.minimum(1.0, 2.0 ** (1.0 - units[flat])))
    spread = t_test & ~flat
    if spread.any():
        from scipy import stats  # on first use, not at import (engine/binom.py says why)

        p[spread] = 2.0 * stats.t.sf(np.abs(diff[spread]) / se[spread], units[spread] - 1)
    return PairedTests(n, diff, se, p, test, np.where(n > 0, units - 1, -1))


def _centred(
    d: np.ndarray, common: np.ndarray | None, n: np.ndarray, signs: bool
) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray], np.ndarray | None]:
    """Per row of ``d``: the mean over its common tasks, the sum of squared deviations from it
    and, with ``signs``, how many differences are positive and negative (right for rows of 0/1
    outcomes only, where the sum ``n+ - n-`` is exact); then the deviations of every row when
    every task is common (else None). Rows with equally many common tasks are packed into one
    contiguous matrix, so each row is summed as its own 1-D array is (numpy's pairwise sum,
    BLAS's dot)."""
    k = n.size
    deviations = None
    mean, squares = np.full(k, np.nan), np.full(k, np.nan)
    plus, minus = np.zeros(k, dtype=np.int64), np.zeros(k, dtype=np.int64)
    for size in np.unique(n):
        if size == 0:
            continue
        rows = np.flatnonzero(n == size)
        whole = rows.size == k
        if common is None:
            packed = d if whole else d[rows]
        else:
            packed = (d[common] if whole else d[rows][common[rows]]).reshape(rows.size, size)
        total = packed.sum(axis=1)
        mean[rows] = mu = total / size  # what ``mean`` does: the sum, divided by the count
        u = packed - mu[:, None]
        squares[rows] = np.vecdot(u, u)
        if packed is d:
            deviations = u
        if signs:
            moved = np.count_nonzero(packed, axis=1)
            plus[rows] = np.rint((moved + total) / 2.0)
            minus[rows] = moved - plus[rows]
    return mean, squares, (plus, minus), deviations


def _cluster_squares(
    u: np.ndarray, common: np.ndarray | None, index: np.ndarray, members: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per row: ``sum_g (sum of u over the row's tasks in cluster g)²`` over the clusters it
    has, and how many it has (``index``: a cell's bin ``row · G + label``; ``members``: tasks x
    clusters, one-hot). The cluster sums run task by task, as :func:`clustered_se`'s
    ``np.bincount`` does; the squares over the present clusters only, packed as in :func:`_centred`."""
    k, g = u.shape[0], members.shape[1]
    sums = np.bincount(index, weights=u.ravel(), minlength=k * g).reshape(k, g)
    if common is None:
        present = np.broadcast_to(members.any(axis=0), (k, g))
    else:  # tasks per row and cluster: whole numbers, exact in any order
        present = common.astype(np.float64) @ members > 0
    count = present.sum(axis=1)
    squares = np.full(k, np.nan)
    for size in np.unique(count):
        if size == 0:
            continue
        rows = np.flatnonzero(count == size)
        packed = sums[rows] if size == g else sums[rows][present[rows]].reshape(rows.size, size)
        squares[rows] = np.vecdot(packed, packed)
    return squares, count


def pair_stats(
    records: Records,
    a: str,
    b: str,
    level: float = 0.95,
    cluster: str | Sequence[str] | None = None,
    rng: np.random.Generator | None = None,
    n_boot: int = 2000,
) -> PairStats:
    """Paired comparison of ``a`` and ``b`` on the tasks both ran (SPEC §2 and §8).

    ``diff = mean(D)``, ``D[t] = y[a, t] - y[b, t]``; ``se_paired = sd(D, ddof=1)/sqrt(N)``;
    ``se_unpaired = sqrt(var(y_a)/N + var(y_b)/N)`` (what independent samples would give);
    ``correlation`` = Pearson correlation of the per-task scores (NaN when one is constant).
    ``min_gap_unpaired = z·se_unpaired`` and ``min_gap_paired = z·se_paired`` are the
    smallest significant differences at this N with these variances. ``test``/``p_value``
    follow the leaderboard's paired test; ``mcnemar_p`` is given for single-trial 0/1
    outcomes. With ``rng`` a paired cluster bootstrap interval is added
    (:func:`paired_cluster_bootstrap`, by cluster when a key is given).
    """
    level = _level(level)
    ia, ib = _system_index(records, a, "a"), _system_index(records, b, "b")
    if ia == ib:
        raise StatsInputError("b", "must differ from a")
    labels = _labels(records, cluster)
    mask, ya, yb = _pair_arrays(records, ia, ib)
    n = int(mask.sum())
    if n < 1:
        raise StatsInputError("b", f"'{a}' and '{b}' have no task in common")
    d = ya - yb
    binary = _binary_single(records, ia, mask) and _binary_single(records, ib, mask)
    task_labels = None if labels is None else labels[mask]
    test, _, p, clustered = _paired_test(d, task_labels, binary)
    se_paired = float(np.std(d, ddof=1) / math.sqrt(n)) if n > 1 else math.nan
    se_unpaired = math.sqrt((np.var(ya, ddof=1) + np.var(yb, ddof=1)) / n) if n > 1 else math.nan
    with np.errstate(invalid="ignore", divide="ignore"):
        corr = float(np.corrcoef(ya, yb)[0, 1]) if n > 1 and ya.std() > 0 and yb.std() > 0 else math.nan
    n_plus = n_minus = mc = None
    if binary:
        n_plus, n_minus = int(np.count_nonzero(d > 0)), int(np.count_nonzero(d < 0))
        mc = mcnemar_exact(n_plus, n_minus)
    z = _z(level)
    boot = None
    if rng is not None:
        boot = paired_cluster_bootstrap(d, level, rng, n_boot, task_labels)
    return PairStats(
        a=a,
        b=b,
        n_tasks=n,
        mean_a=float(ya.mean()),
        mean_b=float(yb.mean()),
        diff=float(d.mean()),
        se_paired=se_paired,
        se_unpaired=se_unpaired,
        correlation=corr,
        clustered=clustered,
        test=test,
        p_value=p,
        n_plus=n_plus,
        n_minus=n_minus,
        mcnemar_p=mc,
        min_gap_unpaired=z * se_unpaired,
        min_gap_paired=z * se_paired,
        bootstrap=boot,
        n_boot=n_boot if boot is not None else None,
    )
