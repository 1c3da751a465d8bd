"""Leaderboards: systems ranked by score, which leads are real, and tie groups (SPEC §8, §8.1).

Built on the per-system and paired statistics of :mod:`service.engine.evalstats`; every
pair is compared on the tasks both systems ran, with the paired test of
:func:`~service.engine.evalstats._paired_test` (run for all pairs at once by
:func:`~service.engine.evalstats.paired_tests`), and a family of tests is corrected with
:func:`adjust_pvalues`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from service.engine.evalstats import (
    PAIR_TESTS,
    SAME_SCORE,
    PairedTests,
    SystemStats,
    _labels,
    _system_stats,
    paired_tests,
)
from service.engine.intervals import t_interval
from service.engine.letters import TooManyLetters, compact_letters, rank_bounds
from service.engine.records import Records, parse_group_key
from service.engine.statbase import StatsInputError, _level

CORRECTIONS = ("holm", "bh", "none")

# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class Comparison:
    """Leaderboard comparison of a higher-ranked and a lower-ranked system."""

    higher: str
    lower: str
    rank_higher: int
    rank_lower: int
    n_tasks: int
    diff: float
    se: float
    test: str
    p_value: float
    p_adjusted: float
    distinguishable: bool
    ci_low: float = math.nan
    ci_high: float = math.nan
    ci_method: str = "none"


@dataclass(frozen=True)
class TieGroup:
    """Consecutive ranks ``first_rank..last_rank`` that the leaderboard calls tied."""

    first_rank: int
    last_rank: int
    systems: tuple[str, ...]
    description: str


@dataclass(frozen=True)
class LeaderboardRow:
    """One ranked system; ``rank_low..rank_high`` is its simultaneous rank interval and
    ``letters`` its compact letters (see :func:`leaderboard`)."""

    rank: int
    stats: SystemStats
    rank_low: int = 0
    rank_high: int = 0
    letters: tuple[str, ...] | None = None


@dataclass(frozen=True)
class UnequalTaskSets:
    """The systems were not all run on the same tasks (SPEC §8.1, §6 diagnostics)."""

    code: str
    message: str
    smallest_overlap: int
    pair: tuple[str, str]
    min_tasks: int
    max_tasks: int


@dataclass(frozen=True)
class Leaderboard:
    """Systems ranked by mean score, adjacent comparisons, optional matrix, tie groups."""

    level: float
    cluster: str | None
    correction: str
    n_clusters: int | None
    rows: tuple[LeaderboardRow, ...]
    adjacent: tuple[Comparison, ...]
    matrix: tuple[Comparison, ...] | None
    ties: str
    tie_groups: tuple[TieGroup, ...]
    definition: str
    unequal_task_sets: UnequalTaskSets | None = None
    rank_definition: str = ""
    letters_note: str | None = None


# --------------------------------------------------------------------------- corrections


def adjust_pvalues(p: Sequence[float] | np.ndarray, method: str = "holm") -> np.ndarray:
    """Multiple-comparison adjusted p-values; NaN entries stay NaN and are not counted.

    * ``holm`` (family-wise error): sort ascending ``p_(1..m)``;
      ``adj_(i) = max_{j <= i} min(1, (m - j + 1) p_(j))``.
    * ``bh`` (false discovery rate, Benjamini–Hochberg):
      ``adj_(i) = min_{j >= i} min(1, m p_(j) / j)``.
    * ``none``: unchanged.
    """
    if method not in CORRECTIONS:
        raise StatsInputError("correction", f"must be one of {', '.join(CORRECTIONS)}, got {method!r}")
    p = np.asarray(p, dtype=np.float64)
    out = p.copy()
    ok = np.nonzero(~np.isnan(p))[0]
    m = ok.size
    if method == "none" or m == 0:
        return out
    order = ok[np.argsort(p[ok], kind="stable")]
    ps = p[order]
    ranks = np.arange(1, m + 1)
    if method == "holm":
        adj = np.maximum.accumulate(np.minimum(1.0, (m - ranks + 1) * ps))
    else:
        adj = np.minimum.accumulate(np.minimum(1.0, m * ps / ranks)[::-1])[::-1]
    out[order] = adj
    return out


TIE_RULES = ("cliques", "adjacent", "leader")
TIE_DEFINITIONS = {
    "cliques": (
        "A tie group is a run of consecutive ranks in which every two members are not significantly "
        "different in the pairwise matrix (corrected over all pairs), systems with equal scores are never "
        "split, and a group closes only when the next system differs from one of its members. So no group "
        "joins two systems that differ; two systems in different groups may still be tied (see the letters)."
    ),
    "adjacent": (
        "A tie group is a maximal run of consecutive ranks in which every adjacent lead is not "
        "distinguishable (adjusted p-value above 1 - level). Groups partition the ranking; with many "
        "systems the runs chain, so two members of one group may still differ (see the matrix). Kept for "
        "comparison: it does not meet SPEC §8.1."
    ),
    "leader": (
        "Tie groups are built from the top: a group starts at the best unassigned rank (its leader) and "
        "extends over the following ranks as long as each is not distinguishable from the leader in the "
        "pairwise matrix (adjusted over all pairs). Groups partition the ranking; every member is tied "
        "with its leader, but two members may differ. Kept for comparison: it does not meet SPEC §8.1."
    ),
}


def _intervals(tests: PairedTests, level: float) -> tuple[np.ndarray, np.ndarray]:
    """``diff ± t_{df}·se`` at ``level`` where ``df >= 1`` and ``se`` is finite (else NaN):
    :func:`t_interval` once per distinct ``df``, as one pair at a time asked it."""
    low, high = np.full(tests.diff.size, np.nan), np.full(tests.diff.size, np.nan)
    ok = (tests.df >= 1) & np.isfinite(tests.se)
    for df in np.unique(tests.df[ok]):
        at = ok & (tests.df == df)
        low[at], high[at] = t_interval(tests.diff[at], tests.se[at], int(df), level)
    return low, high


def _comparisons(
    names: Sequence[str],
    pairs: tuple[np.ndarray, np.ndarray],
    tests: PairedTests,
    bounds: tuple[np.ndarray, np.ndarray],
    picked: np.ndarray,
    adjusted: np.ndarray,
    alpha: float,
    method: str,
) -> tuple[Comparison, ...]:
    """The comparisons of the ``picked`` pairs (ranks ``i < j``, ``names`` in rank order), with
    their ``adjusted`` p-values; a pair without common tasks has no test and no interval."""
    out = []
    for k, q in zip(picked.tolist(), adjusted.tolist(), strict=True):
        i, j = int(pairs[0][k]), int(pairs[1][k])
        n = int(tests.n_tasks[k])
        common = dict(higher=names[i], lower=names[j], rank_higher=i + 1, rank_lower=j + 1, n_tasks=n)
        decided = dict(p_adjusted=q, distinguishable=q <= alpha)
        if n == 0:
            out.append(Comparison(**common, diff=math.nan, se=math.nan, test="none", p_value=math.nan, **decided))
            continue
        out.append(
            Comparison(
                **common,
                diff=float(tests.diff[k]),
                se=float(tests.se[k]),
                test=PAIR_TESTS[tests.test[k]],
                p_value=float(tests.p_value[k]),
                **decided,
                ci_low=float(bounds[0][k]),
                ci_high=float(bounds[1][k]),
                ci_method=method,
            )
        )
    return tuple(out)


def _describe(first: int, last: int) -> str:
    if first == last:
        return f"rank {first} forms a group of its own"
    return f"ranks {first}–{last} are statistically tied"


def tie_groups(ranked: Sequence[str], adjacent: Sequence[Comparison]) -> tuple[TieGroup, ...]:
    """Partition the ranking into maximal runs linked by non-distinguishable adjacent leads."""
    starts = [0] + [i + 1 for i, c in enumerate(adjacent) if c.distinguishable]
    ends = [*starts[1:], len(ranked)]
    return tuple(
        TieGroup(a + 1, b, tuple(ranked[a:b]), _describe(a + 1, b)) for a, b in zip(starts, ends, strict=True) if b > a
    )


def leader_tie_groups(ranked: Sequence[str], matrix: Sequence[Comparison]) -> tuple[TieGroup, ...]:
    """Partition the ranking from the top: each group is its leader and the following ranks
    not distinguishable from the leader (a run, stopping at the first distinguishable one)."""
    distinct = {(c.rank_higher, c.rank_lower): c.distinguishable for c in matrix}
    out = []
    first, n = 1, len(ranked)
    while first <= n:
        last = first
        while last < n and not distinct[(first, last + 1)]:
            last += 1
        out.append(TieGroup(first, last, tuple(ranked[first - 1 : last]), _describe(first, last)))
        first = last + 1
    return tuple(out)


def clique_tie_groups(ranked: Sequence[str], tied: np.ndarray, blocks: Sequence[range]) -> tuple[TieGroup, ...]:
    """Runs of ranks in which every two members are tied (``tied`` in rank order).

    Built from the top over ``blocks`` (runs of equal scores, never split): a block joins
    the current group when each of its systems is tied with each member; otherwise the group
    closes. No group then holds two systems that differ (SPEC §8.1).
    """
    out = []
    current: list[int] = []
    for block in blocks:
        members = list(block)
        if current and not tied[np.ix_(current, members)].all():
            out.append(current)
            current = []
        current += members
    if current:
        out.append(current)
    return tuple(
        TieGroup(g[0] + 1, g[-1] + 1, tuple(ranked[g[0] : g[-1] + 1]), _describe(g[0] + 1, g[-1] + 1)) for g in out
    )


def unequal_task_sets(records: Records, order: Sequence[int]) -> UnequalTaskSets | None:
    """``None`` when every system ran the same tasks; else the smallest pairwise overlap."""
    obs = records.observed[list(order)].astype(np.int64)
    if obs.shape[0] < 2 or (obs == obs[:1]).all():
        return None
    common = obs @ obs.T
    np.fill_diagonal(common, np.iinfo(np.int64).max)
    i, j = np.unravel_index(int(np.argmin(common)), common.shape)
    i, j = sorted((int(i), int(j)))
    counts = obs.sum(axis=1)
    a, b = records.systems[order[i]], records.systems[order[j]]
    n = int(common[i, j])
    return UnequalTaskSets(
        code="unequal_task_sets",
        message=(
            f"Systems ran different task sets ({int(counts.min())} to {int(counts.max())} tasks): each pair is "
            f"compared on the tasks both ran (as few as {n}, for {a} and {b}), and the ranking uses each "
            "system's mean over its own tasks, so ranks are not on a common footing."
        ),
        smallest_overlap=n,
        pair=(a, b),
        min_tasks=int(counts.min()),
        max_tasks=int(counts.max()),
    )


RANK_DEFINITION = (
    "rank_low = 1 + the number of systems significantly better, rank_high = S - the number significantly "
    "worse, from the family of all S(S-1)/2 paired tests with the chosen correction; with holm the "
    "intervals hold simultaneously at the chosen level (with bh or none they do not)."
)


def _score_blocks(means: Sequence[float]) -> list[range]:
    """Runs of equal scores (to 12 decimals) in rank order."""
    blocks: list[range] = []
    start = 0
    for k in range(1, len(means) + 1):
        if k == len(means) or round(means[k], 12) != round(means[start], 12):
            blocks.append(range(start, k))
            start = k
    return blocks


def leaderboard(
    records: Records,
    level: float = 0.95,
    cluster: str | Sequence[str] | None = None,
    correction: str = "holm",
    matrix: bool = False,
    ties: str = "cliques",
) -> Leaderboard:
    """Systems ranked by mean score with intervals, which leads are real, rank intervals,
    letters and tie groups (SPEC §8, §8.1).

    Ranking: mean score over each system's tasks, descending (ties by name). Every pair is
    compared on the tasks both ran with the paired test of :func:`_paired_test` (exact
    McNemar for single-trial 0/1 outcomes without a cluster key; a paired t-test with CR1
    cluster-robust errors otherwise), and all ``S(S-1)/2`` p-values are adjusted as one
    family (``holm`` | ``bh`` | ``none``); a pair is distinguishable iff its adjusted p-value
    is at most ``a = 1 - level``. From that family: the rank interval of each row
    (:func:`~service.engine.letters.rank_bounds`, "better" = distinguishable with a positive
    mean paired difference on the common tasks), its letters
    (:func:`~service.engine.letters.compact_letters`; equal scores are never separated) and,
    with ``ties = "cliques"``, the tie groups (:func:`clique_tie_groups`). ``adjacent`` keeps
    the leads of rank ``i`` over ``i + 1`` as their own family of ``S - 1`` tests (and the
    ``adjacent`` / ``leader`` tie rules of earlier versions read them), each with a paired
    interval at ``level``. ``matrix`` says whether the full family is returned (always with ``leader``).
    """
    level = _level(level)
    if correction not in CORRECTIONS:
        raise StatsInputError("correction", f"must be one of {', '.join(CORRECTIONS)}, got {correction!r}")
    if ties not in TIE_RULES:
        raise StatsInputError("ties", f"must be one of {', '.join(TIE_RULES)}, got {ties!r}")
    labels = _labels(records, cluster)
    all_stats = [_system_stats(records, s, level, labels) for s in range(records.n_systems)]
    order = sorted(range(records.n_systems), key=lambda s: (-round(all_stats[s].mean, 12), records.systems[s]))
    alpha = 1.0 - level
    n = len(order)
    ranked_names = [records.systems[s] for s in order]
    pairs = np.triu_indices(n, 1)  # (i, j), i < j in rank order, row by row
    ranked = np.asarray(order, dtype=np.intp)
    tests = paired_tests(records, ranked[pairs[0]], ranked[pairs[1]], labels)
    bounds = _intervals(tests, level)
    method = "paired_t_clustered" if labels is not None else "paired_t"
    p_full = adjust_pvalues(tests.p_value, correction)
    steps = np.flatnonzero(pairs[1] == pairs[0] + 1)
    adjacent = _comparisons(
        ranked_names, pairs, tests, bounds, steps, adjust_pvalues(tests.p_value[steps], correction), alpha, method
    )
    full = None
    if matrix or ties == "leader":
        every = np.arange(tests.p_value.size)
        full = _comparisons(ranked_names, pairs, tests, bounds, every, p_full, alpha, method)
    real = (p_full <= alpha) & (np.abs(tests.diff) > SAME_SCORE)  # NaN p-values are never distinguishable
    up = real & (tests.diff > 0)
    better = np.zeros((n, n), dtype=bool)
    better[pairs[0][up], pairs[1][up]] = True
    better[pairs[1][real & ~up], pairs[0][real & ~up]] = True
    means = [all_stats[s].mean for s in order]
    blocks = _score_blocks(means)
    for b in blocks:  # equal scores share a rank: a lead between them (on their common tasks) moves no bound
        better[b.start : b.stop, b.start : b.stop] = False
    low, high = rank_bounds(better)
    separated = better | better.T
    letters: tuple[tuple[str, ...], ...] | None
    note = None
    try:
        letters = compact_letters(separated)
    except TooManyLetters as exc:
        letters, note = None, f"letters not shown: {exc}"
    if ties == "cliques":
        groups = clique_tie_groups(ranked_names, ~separated, blocks)
    elif ties == "adjacent":
        groups = tie_groups(ranked_names, adjacent)
    else:
        groups = leader_tie_groups(ranked_names, full or ())
    key = None if labels is None else ",".join(parse_group_key(cluster))
    return Leaderboard(
        level=level,
        cluster=key,
        correction=correction,
        n_clusters=None if labels is None else int(np.unique(labels).size),
        rows=tuple(
            LeaderboardRow(k + 1, all_stats[s], int(low[k]), int(high[k]), None if letters is None else letters[k])
            for k, s in enumerate(order)
        ),
        adjacent=adjacent,
        matrix=full,
        ties=ties,
        tie_groups=groups,
        definition=TIE_DEFINITIONS[ties],
        unequal_task_sets=unequal_task_sets(records, order),
        rank_definition=RANK_DEFINITION,
        letters_note=note,
    )
