"""Evaluation statistics for single systems and pairs (SPEC §8); leaderboards build on them in
:mod:`service.engine.leaderboard`.

Pure functions over :class:`~service.engine.records.Records` (numpy/scipy only). Results
are small frozen dataclasses; :func:`to_dict` turns any of them into JSON-ready values
(NaN and infinities become ``None``).

Conventions used throughout:

* A **task** is the unit of sampling. A system's score is the mean over the tasks it ran
  of ``y[s, t]`` (the mean over that task's trials), as in SPEC §1; repeated trials of a
  task are never treated as extra tasks.
* ``level`` is a two-sided confidence level in (0, 1); tests run at ``alpha = 1 - level``.
  The one-sided binomial bounds use the whole ``alpha`` in one tail.
* ``z`` is the exact normal quantile ``Phi^-1(1 - alpha/2)`` (1.959964 at 95 %), not the
  rounded 1.96; every worked value of SPEC §8 comes out the same either way.
* Invalid inputs raise :class:`StatsInputError` whose ``field`` names the argument.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields, is_dataclass
from functools import lru_cache

import numpy as np
from scipy import stats

from service.engine.errors import FieldError
from service.engine.records import Records, group_labels

BOOTSTRAP_BATCH = 256
"""Bootstrap resamples drawn per batch: bounds memory at ``batch × tasks`` indices."""


class StatsInputError(FieldError):
    """An argument outside its domain; ``field`` names it (the API answers 422 with it)."""


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class Interval:
    """A two-sided interval ``[low, high]`` and the method that produced it."""

    low: float
    high: float
    method: str


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
class BinomialBounds:
    """Exact one-sided Clopper–Pearson bounds at ``level`` for ``successes`` of ``n``.

    ``success_lower`` is the lower bound on the success probability, ``failure_upper =
    1 - success_lower`` the upper bound on the failure probability (and symmetrically).
    """

    successes: int
    n: int
    level: float
    success_lower: float
    success_upper: float
    failure_lower: float
    failure_upper: float


@dataclass(frozen=True)
class Gap:
    """Minimum significant gap between two scores, independent samples vs paired."""

    n: float
    unpaired: float
    paired: float


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


def to_dict(obj: object) -> object:
    """JSON-ready form of a result: dataclasses to dicts, tuples to lists, NaN/inf to None."""
    if is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_dict(getattr(obj, f.name)) for f in fields(obj)}
    if isinstance(obj, dict):
        return {str(k): to_dict(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [to_dict(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return [to_dict(v) for v in obj.tolist()]
    if isinstance(obj, bool | np.bool_):
        return bool(obj)
    if isinstance(obj, int | np.integer):
        return int(obj)
    if isinstance(obj, float | np.floating):
        v = float(obj)
        return v if math.isfinite(v) else None
    return obj


# --------------------------------------------------------------------------- validation


def _level(level: float, field: str = "level") -> float:
    try:
        value = float(level)
    except (TypeError, ValueError):
        raise StatsInputError(field, f"must be a number in (0, 1), got {level!r}") from None
    if not (0.0 < value < 1.0):
        raise StatsInputError(field, f"must be in (0, 1), got {level!r}")
    return value


def _count(value: object, field: str, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        if isinstance(value, float | np.floating) and float(value).is_integer():
            value = int(value)
        else:
            raise StatsInputError(field, f"must be an integer, got {value!r}")
    if value < minimum:
        raise StatsInputError(field, f"must be at least {minimum}, got {value}")
    return int(value)


def _unit(value: float, field: str, low_open: bool = False, high_open: bool = False) -> float:
    v = float(value)
    if not math.isfinite(v) or v < 0 or v > 1 or (low_open and v == 0) or (high_open and v == 1):
        lo = "(" if low_open else "["
        hi = ")" if high_open else "]"
        raise StatsInputError(field, f"must be in {lo}0, 1{hi}, got {value!r}")
    return v


def _positive(value: float, field: str) -> float:
    v = float(value)
    if not math.isfinite(v) or v <= 0:
        raise StatsInputError(field, f"must be a finite number > 0, got {value!r}")
    return v


def _z(level: float) -> float:
    return float(stats.norm.ppf(0.5 + level / 2.0))


# --------------------------------------------------------------------------- pass@k / pass^k


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


# --------------------------------------------------------------------------- intervals


def _out(a: np.ndarray) -> np.ndarray | float:
    return float(a) if np.ndim(a) == 0 else a


def normal_interval(mean, se, level: float = 0.95):
    """``mean ± z·se`` (vectorised); ``z = Phi^-1(1 - alpha/2)``."""
    z = _z(_level(level))
    m, s = np.asarray(mean, dtype=float), np.asarray(se, dtype=float)
    return _out(m - z * s), _out(m + z * s)


def t_interval(mean, se, df, level: float = 0.95):
    """``mean ± t_{df, 1-alpha/2}·se`` (vectorised); used with clustered errors, ``df = G - 1``."""
    level = _level(level)
    q = stats.t.ppf(0.5 + level / 2.0, np.asarray(df, dtype=float))
    m, s = np.asarray(mean, dtype=float), np.asarray(se, dtype=float)
    return _out(m - q * s), _out(m + q * s)


def wilson_interval(successes, n, level: float = 0.95):
    """Wilson score interval for a proportion ``successes / n`` (vectorised).

    ``(x + z²/2) / (n + z²)  ±  z / (n + z²) · sqrt(x (n - x) / n + z² / 4)``.
    ``successes`` may be fractional (a mean score times ``n``).
    """
    z = _z(_level(level))
    x = np.asarray(successes, dtype=float)
    m = np.asarray(n, dtype=float)
    center = (x + z * z / 2.0) / (m + z * z)
    half = z / (m + z * z) * np.sqrt(np.maximum(x * (m - x) / m, 0.0) + z * z / 4.0)
    return _out(np.clip(center - half, 0.0, 1.0)), _out(np.clip(center + half, 0.0, 1.0))


def clopper_pearson_interval(successes, n, level: float = 0.95):
    """Exact two-sided Clopper–Pearson interval (vectorised, integer counts):
    ``[Beta_{alpha/2}(x, n - x + 1), Beta_{1-alpha/2}(x + 1, n - x)]``, with 0 at ``x = 0``
    and 1 at ``x = n``."""
    alpha = 1.0 - _level(level)
    x = np.asarray(successes, dtype=float)
    m = np.asarray(n, dtype=float)
    with np.errstate(invalid="ignore"):
        low = np.where(x > 0, stats.beta.ppf(alpha / 2.0, np.maximum(x, 1), m - x + 1), 0.0)
        high = np.where(x < m, stats.beta.ppf(1.0 - alpha / 2.0, x + 1, np.maximum(m - x, 1)), 1.0)
    return _out(low), _out(high)


def binomial_bounds(successes: int, n: int, level: float = 0.95) -> BinomialBounds:
    """Exact one-sided Clopper–Pearson bounds (SPEC §8), each with the whole ``alpha``.

    ``success_lower = Beta_alpha(x, n - x + 1)`` (0 when ``x = 0``) and ``success_upper =
    Beta_{1-alpha}(x + 1, n - x)`` (1 when ``x = n``). With zero failures the closed form
    ``success_lower = alpha**(1/n)`` is used, so ``failure_upper = 1 - alpha**(1/n)``:
    20 clean runs bound the failure rate by 13.91 % at 95 %.
    """
    n = _count(n, "n", 1)
    x = _count(successes, "successes", 0)
    if x > n:
        raise StatsInputError("successes", f"successes={x} exceed n={n}")
    alpha = 1.0 - _level(level)
    if x == n:
        lower = alpha ** (1.0 / n)
    elif x == 0:
        lower = 0.0
    else:
        lower = float(stats.beta.ppf(alpha, x, n - x + 1))
    if x == 0:
        upper = 1.0 - alpha ** (1.0 / n)
    elif x == n:
        upper = 1.0
    else:
        upper = float(stats.beta.ppf(1.0 - alpha, x + 1, n - x))
    return BinomialBounds(x, n, level, lower, upper, 1.0 - upper, 1.0 - lower)


MAX_RUNS = 2**53


def runs_for_bound(max_failure_rate: float, level: float = 0.95, failures: int = 0) -> int:
    """Fewest runs ``n`` such that ``failures`` failures in ``n`` runs give an exact
    one-sided upper bound on the failure rate of at most ``max_failure_rate``.

    With zero failures: the smallest ``n >= ln(alpha) / ln(1 - target)`` (59 runs for 5 %
    at 95 %). Otherwise the bound ``Beta_{1-alpha}(f + 1, n - f)`` decreases in ``n``. Either
    way the smallest ``n`` is found by bisection (from the closed form when ``f = 0``), so a
    tiny target costs a few dozen bound evaluations, not a walk over the rounding error.
    """
    target = _unit(max_failure_rate, "max_failure_rate", low_open=True, high_open=True)
    level = _level(level)
    f = _count(failures, "failures", 0)

    def bound(n: int) -> float:
        return binomial_bounds(n - f, n, level).failure_upper

    lo, hi = f + 1, 2 * (f + 1)
    if f == 0:  # start from the closed form; the bisection below only corrects its rounding
        guess = max(1, math.ceil(math.log(1.0 - level) / math.log1p(-target) - 1e-9))
        lo, hi = max(1, guess // 2), max(2, guess)
    while hi <= MAX_RUNS and bound(hi) > target:
        lo, hi = hi, hi * 2
    if hi > MAX_RUNS:  # past exact integers in double precision (and any real budget)
        raise StatsInputError("max_failure_rate", f"more than {MAX_RUNS:.3g} runs would be needed")
    if bound(lo) <= target:
        return lo
    while hi - lo > 1:  # bound(lo) > target >= bound(hi)
        mid = (lo + hi) // 2
        if bound(mid) <= target:
            hi = mid
        else:
            lo = mid
    return hi


# --------------------------------------------------------------------------- calculators


def margin_of_error(n: float, p: float = 0.5, level: float = 0.95) -> float:
    """Half-width of the normal interval of a score: ``z·sqrt(p (1 - p) / n)`` (SPEC §8).
    ``n`` may be fractional (an average task count); ±6.92 pp at ``n = 200.5, p = 0.5``."""
    n = _positive(n, "n")
    p = _unit(p, "p")
    return _z(_level(level)) * math.sqrt(p * (1.0 - p) / n)


def tasks_for_margin(margin: float, p: float = 0.5, level: float = 0.95) -> int:
    """Fewest tasks for a margin of at most ``margin``: ``ceil(z² p (1 - p) / margin²)``;
    385 / 1,068 / 2,401 / 9,604 tasks for ±5 / ±3 / ±2 / ±1 pp at ``p = 0.5``."""
    m = _unit(margin, "margin", low_open=True)
    p = _unit(p, "p")
    z = _z(_level(level))
    return max(1, math.ceil(z * z * p * (1.0 - p) / (m * m) * (1.0 - 1e-12)))


def min_significant_gap(n: float, p: float = 0.5, rho: float = 0.0, level: float = 0.95) -> Gap:
    """Smallest score difference significant at ``level`` with ``n`` tasks per system.

    Independent samples: ``z·sqrt(2 p (1 - p) / n)`` (``z·sqrt(0.5 / n)`` at ``p = 0.5``,
    about 9.8 pp at ``n = 200``). Paired on the same tasks with per-task correlation
    ``rho`` the variance of the difference shrinks by ``(1 - rho)``, so the gap by
    ``sqrt(1 - rho)`` (about 6.9 pp at ``rho = 0.5``).
    """
    n = _positive(n, "n")
    p = _unit(p, "p")
    r = float(rho)
    if not math.isfinite(r) or not -1.0 <= r <= 1.0:
        raise StatsInputError("rho", f"must be in [-1, 1], got {rho!r}")
    unpaired = _z(_level(level)) * math.sqrt(2.0 * p * (1.0 - p) / n)
    return Gap(n=n, unpaired=unpaired, paired=unpaired * math.sqrt(1.0 - r))


def tasks_for_paired_difference(
    delta: float,
    power: float = 0.8,
    rho: float = 0.0,
    p: float = 0.5,
    level: float = 0.95,
    sd_diff: float | None = None,
) -> int:
    """Tasks needed to detect a paired difference ``delta`` with the given power.

    Two-sided test at ``alpha = 1 - level`` on the per-task differences, normal
    approximation: ``n = ceil((z_{1-alpha/2} + z_{power})² · sigma_D² / delta²)`` with
    ``sigma_D² = 2 p (1 - p) (1 - rho)`` (two scores of variance ``p (1 - p)`` and
    correlation ``rho``) unless ``sd_diff`` gives ``sigma_D`` directly. At least 2.
    """
    d = _unit(abs(float(delta)), "delta", low_open=True)
    pw = _unit(power, "power", low_open=True, high_open=True)
    level = _level(level)
    if sd_diff is None:
        p = _unit(p, "p")
        r = float(rho)
        if not math.isfinite(r) or not -1.0 <= r <= 1.0:
            raise StatsInputError("rho", f"must be in [-1, 1], got {rho!r}")
        var = 2.0 * p * (1.0 - p) * (1.0 - r)
    else:
        sd = float(sd_diff)
        if not math.isfinite(sd) or sd < 0:
            raise StatsInputError("sd_diff", f"must be a finite number >= 0, got {sd_diff!r}")
        var = sd * sd
    zsum = _z(level) + float(stats.norm.ppf(pw))
    return max(2, math.ceil(zsum * zsum * var / (d * d) * (1.0 - 1e-12)))


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


def _system_index(records: Records, system: str, field: str = "system") -> int:
    try:
        return records.systems.index(system)
    except ValueError:
        known = ", ".join(records.systems[:50])
        if len(records.systems) > 50:
            known += f" ... ({len(records.systems)} in all)"
        raise StatsInputError(field, f"unknown system '{system}'; the systems of this dataset: {known}") from None


def _labels(records: Records, cluster: str | Sequence[str] | None) -> np.ndarray | None:
    if cluster is None or (isinstance(cluster, str) and not cluster.strip()):
        return None
    try:
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
    return float(min(1.0, 2.0 * stats.binom.cdf(min(a, b), n, 0.5)))


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
    ``sum d / number of tasks drawn``. Randomness comes only from ``rng``.
    """
    level = _level(level)
    n_boot = _count(n_boot, "n_boot", 1)
    d = np.asarray(d, dtype=np.float64)
    if d.size == 0:
        raise StatsInputError("d", "no tasks")
    if clusters is None:
        sums, sizes = d, np.ones(d.size)
    else:
        _, g = np.unique(np.asarray(clusters), return_inverse=True)
        sums = np.bincount(g, weights=d)
        sizes = np.bincount(g).astype(np.float64)
    units = sums.size
    means = np.empty(n_boot)
    for start in range(0, n_boot, BOOTSTRAP_BATCH):
        stop = min(n_boot, start + BOOTSTRAP_BATCH)
        idx = rng.integers(0, units, size=(stop - start, units))
        means[start:stop] = sums[idx].sum(axis=1) / sizes[idx].sum(axis=1)
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
      t-test). A zero standard error gives p = 1 when the mean is 0, else p = 0.
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
    if se == 0.0:
        p = 1.0 if cl.mean == 0.0 else 0.0
    else:
        p = float(2.0 * stats.t.sf(abs(cl.mean) / se, cl.n_clusters - 1))
    return name, se, p, cl if labels is not None else None


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
