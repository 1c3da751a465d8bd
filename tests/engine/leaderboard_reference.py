"""The leaderboard as it was computed before the all-pairs pass: one ``_compare`` per pair.

``_compare``, ``_comparisons`` and ``leaderboard`` below are verbatim copies of
``service.engine.leaderboard`` at commit 18992cd (only ``leaderboard`` renamed to
``reference_leaderboard``). They call the engine's live per-pair functions (``_pair_arrays``,
``_binary_single``, ``_paired_test``, ``t_interval``), so the reference follows any change
to the paired test of one pair, which the all-pairs pass must then follow too.
:func:`differences` compares two boards field by field, floats by their bits. Used by
``tests/engine/test_leaderboard_pairs.py`` and ``benchmarks/leaderboard_speed.py``.
"""

from __future__ import annotations

import dataclasses
import math
import struct
from collections.abc import Sequence

import numpy as np

from service.engine.evalstats import SAME_SCORE, _binary_single, _labels, _pair_arrays, _paired_test, _system_stats
from service.engine.intervals import t_interval
from service.engine.leaderboard import (
    CORRECTIONS,
    RANK_DEFINITION,
    TIE_DEFINITIONS,
    TIE_RULES,
    Comparison,
    Leaderboard,
    LeaderboardRow,
    _score_blocks,
    adjust_pvalues,
    clique_tie_groups,
    leader_tie_groups,
    tie_groups,
    unequal_task_sets,
)
from service.engine.letters import TooManyLetters, compact_letters, rank_bounds
from service.engine.records import Records, parse_group_key
from service.engine.statbase import StatsInputError, _level


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



def reference_leaderboard(
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
        if c.distinguishable and abs(c.diff) > SAME_SCORE:
            better[(i, j) if c.diff > 0 else (j, i)] = True
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


def differences(new: object, old: object, path: str = "board") -> list[str]:
    """Where ``new`` differs from ``old``: types, values, float bits (any two NaNs agree)."""
    if type(new) is not type(old):
        return [f"{path}: {type(new).__name__} != {type(old).__name__}"]
    if dataclasses.is_dataclass(old):
        pairs = ((getattr(new, f.name), getattr(old, f.name), f"{path}.{f.name}") for f in dataclasses.fields(old))
        return [d for x, y, where in pairs for d in differences(x, y, where)]
    if isinstance(old, tuple | list):
        if len(new) != len(old):
            return [f"{path}: {len(new)} items != {len(old)}"]
        return [d for k, (x, y) in enumerate(zip(new, old, strict=True)) for d in differences(x, y, f"{path}[{k}]")]
    if isinstance(old, float):
        if math.isnan(old) and math.isnan(new):
            return []
        if struct.pack("<d", new) == struct.pack("<d", old):
            return []
        rel = abs(new - old) / max(abs(old), abs(new)) if math.isfinite(old) and math.isfinite(new) else math.inf
        return [f"{path}: {new!r} != {old!r} (relative {rel:.3g})"]
    return [] if new == old else [f"{path}: {new!r} != {old!r}"]
