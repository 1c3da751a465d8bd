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

from service.engine.evalstats import (
    StatsInputError,
    SystemStats,
    _binary_single,
    _labels,
    _level,
    _pair_arrays,
    _paired_test,
    _system_stats,
)
from service.engine.records import Records, parse_group_key

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


@dataclass(frozen=True)
class TieGroup:
    """Consecutive ranks ``first_rank..last_rank`` that the leaderboard calls tied."""

    first_rank: int
    last_rank: int
    systems: tuple[str, ...]
    description: str


@dataclass(frozen=True)
class LeaderboardRow:
    rank: int
    stats: SystemStats


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


TIE_RULES = ("adjacent", "leader")
TIE_DEFINITIONS = {
    "adjacent": (
        "A tie group is a maximal run of consecutive ranks in which every adjacent lead is not "
        "distinguishable (adjusted p-value above 1 - level). Groups partition the ranking; with many "
        "systems the runs chain, so two members of one group may still differ (see the matrix)."
    ),
    "leader": (
        "Tie groups are built from the top: a group starts at the best unassigned rank (its leader) and "
        "extends over the following ranks as long as each is not distinguishable from the leader in the "
        "pairwise matrix (adjusted over all pairs). Groups partition the ranking; every member is tied "
        "with its leader."
    ),
}


def _compare(
    records: Records, hi: int, lo: int, ranks: dict[int, int], labels: np.ndarray | None
) -> tuple[str, str, int, int, int, float, float, str, float]:
    mask, ya, yb = _pair_arrays(records, hi, lo)
    n = int(mask.sum())
    if n == 0:
        return (records.systems[hi], records.systems[lo], ranks[hi], ranks[lo], 0, math.nan, math.nan, "none", math.nan)
    d = ya - yb
    binary = _binary_single(records, hi, mask) and _binary_single(records, lo, mask)
    test, se, p, _ = _paired_test(d, None if labels is None else labels[mask], binary)
    return (records.systems[hi], records.systems[lo], ranks[hi], ranks[lo], n, float(d.mean()), se, test, p)


def _comparisons(raw: list[tuple], correction: str, alpha: float) -> tuple[Comparison, ...]:
    adj = adjust_pvalues([r[-1] for r in raw], correction)
    return tuple(
        Comparison(*r, p_adjusted=float(q), distinguishable=bool(q <= alpha)) for r, q in zip(raw, adj, strict=True)
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


def leaderboard(
    records: Records,
    level: float = 0.95,
    cluster: str | Sequence[str] | None = None,
    correction: str = "holm",
    matrix: bool = False,
    ties: str = "leader",
) -> Leaderboard:
    """Systems ranked by mean score with intervals, which leads are real, and tie groups.

    Ranking: mean score over each system's tasks, descending (ties by name). Every
    adjacent pair (rank ``i`` vs ``i + 1``) is compared on the tasks both ran with the
    paired test of :func:`_paired_test` (exact McNemar for single-trial 0/1 outcomes
    without a cluster key; a paired t-test with CR1 cluster-robust errors otherwise).
    Adjacent p-values are adjusted together (``holm`` | ``bh`` | ``none``); a lead is
    ``distinguishable`` iff its adjusted p-value is at most ``1 - level``. With ``matrix``
    every pair is compared and adjusted as one family of ``S(S-1)/2`` tests. Tie groups by
    ``ties``: ``adjacent`` (runs of non-significant adjacent leads) or ``leader`` (from the
    matrix: ranks not distinguishable from the group's top); see :data:`TIE_DEFINITIONS`.
    Means equal to 12 decimals count as equal, and are ranked by name.
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
    adjacent = _comparisons(
        [_compare(records, order[i], order[i + 1], ranks, labels) for i in range(len(order) - 1)],
        correction,
        alpha,
    )
    full = None
    if matrix or ties == "leader":
        full = _comparisons(
            [
                _compare(records, order[i], order[j], ranks, labels)
                for i in range(len(order))
                for j in range(i + 1, len(order))
            ],
            correction,
            alpha,
        )
    ranked_names = [records.systems[s] for s in order]
    key = None if labels is None else ",".join(parse_group_key(cluster))
    return Leaderboard(
        level=level,
        cluster=key,
        correction=correction,
        n_clusters=None if labels is None else int(np.unique(labels).size),
        rows=tuple(LeaderboardRow(ranks[s], all_stats[s]) for s in order),
        adjacent=adjacent,
        matrix=full,
        ties=ties,
        tie_groups=tie_groups(ranked_names, adjacent) if ties == "adjacent" else leader_tie_groups(ranked_names, full),
        definition=TIE_DEFINITIONS[ties],
    )
