"""Leaderboards: systems ranked by score, which leads are real, and tie groups (SPEC §8, §8.1).

Built on the per-system and paired statistics of :mod:`service.engine.evalstats`; every
pair is compared on the tasks both systems ran, with the paired test of
:func:`~service.engine.evalstats._paired_test`, and a family of tests is corrected with
:func:`adjust_pvalues`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from service.engine.evalstats import SystemStats, _binary_single, _labels, _pair_arrays, _paired_test, _system_stats
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


def _compare(
    records: Records, hi: int, lo: int, ranks: dict[int, int], labels: np.ndarray | None, level: float
) -> dict:
    """The paired test of ``hi`` against ``lo`` on their common tasks, with the interval
    ``diff ± t_{df}·se`` at ``level`` (``df = G - 1`` clusters, or tasks - 1 without a key)."""
    mask, ya, yb = _pair_arrays(records, hi, lo)
    n = int(mask.sum())
    out = {
        "higher": records.systems[hi],
        "lower": records.systems[lo],
        "rank_higher": ranks[hi],
        "rank_lower": ranks[lo],
        "n_tasks": n,
    }
    if n == 0:
        return {**out, "diff": math.nan, "se": math.nan, "test": "none", "p_value": math.nan}
    d = ya - yb
    binary = _binary_single(records, hi, mask) and _binary_single(records, lo, mask)
    task_labels = None if labels is None else labels[mask]
    test, se, p, _ = _paired_test(d, task_labels, binary)
    m = float(d.mean())
    df = (np.unique(task_labels).size if task_labels is not None else n) - 1
    low = high = math.nan
    if df >= 1 and math.isfinite(se):
        low, high = t_interval(m, se, df, level)
    method = "paired_t_clustered" if labels is not None else "paired_t"
    return {**out, "diff": m, "se": se, "test": test, "p_value": p, "ci_low": low, "ci_high": high, "ci_method": method}


def _comparisons(raw: list[dict], correction: str, alpha: float) -> tuple[Comparison, ...]:
    adj = adjust_pvalues([r["p_value"] for r in raw], correction)
    return tuple(
        Comparison(**r, p_adjusted=float(q), distinguishable=bool(q <= alpha)) for r, q in zip(raw, adj, strict=True)
    )


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
    ranks = {s: r + 1 for r, s in enumerate(order)}
    alpha = 1.0 - level
    n = len(order)
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    raw = {(i, j): _compare(records, order[i], order[j], ranks, labels, level) for i, j in pairs}
    full = _comparisons([raw[ij] for ij in pairs], correction, alpha)
    adjacent = _comparisons([raw[(i, i + 1)] for i in range(n - 1)], correction, alpha)
    better = np.zeros((n, n), dtype=bool)
    for (i, j), c in zip(pairs, full, strict=True):
        if c.distinguishable and c.diff != 0:
            better[(i, j) if c.diff > 0 else (j, i)] = True
    low, high = rank_bounds(better)
    means = [all_stats[s].mean for s in order]
    blocks = _score_blocks(means)
    separated = better | better.T
    for b in blocks:
        separated[b.start : b.stop, b.start : b.stop] = False
    letters: tuple[tuple[str, ...], ...] | None
    note = None
    try:
        letters = compact_letters(separated)
    except TooManyLetters as exc:
        letters, note = None, f"letters not shown: {exc}"
    ranked_names = [records.systems[s] for s in order]
    if ties == "cliques":
        groups = clique_tie_groups(ranked_names, ~separated, blocks)
    elif ties == "adjacent":
        groups = tie_groups(ranked_names, adjacent)
    else:
        groups = leader_tie_groups(ranked_names, full)
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
        matrix=full if matrix or ties == "leader" else None,
        ties=ties,
        tie_groups=groups,
        definition=TIE_DEFINITIONS[ties],
        unequal_task_sets=unequal_task_sets(records, order),
        rank_definition=RANK_DEFINITION,
        letters_note=note,
    )
