"""A cold leaderboard: the per-pair path it had against the all-pairs pass, in the same run.

    python benchmarks/leaderboard_speed.py [--boards 134x500x12,300x500x12] [--missing 0.05] [--repeat 3]

For each synthetic board (systems x tasks x groups, ``service.engine.synth.generate``, seed 1)
and each cluster key (none, ``group``), times ``leaderboard()`` as the reference computes it
(``tests/engine/leaderboard_reference.py``: one ``_compare`` per pair, as before) and as the
engine does now (``evalstats.paired_tests`` for all pairs at once), and the pairs alone (the
reference's dict of ``_compare`` results against ``paired_tests`` plus the intervals). Prints
the least of ``--repeat`` runs of each, the ratios, and whether the two boards are the same
to the bit (``differences``). ``--missing`` also times each board with that share of cells
dropped (unequal task sets). No cache is involved: every call computes its board. Then the
letters alone, on each board's separation matrix: ``letter_columns`` with its columns found by
the insert-and-absorb (as before) and by the direct search (``letters._maximal_sets``), and
whether both give the same columns or both refuse.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from service.engine import evalstats as E  # noqa: E402
from service.engine import leaderboard as L  # noqa: E402
from service.engine import letters as LT  # noqa: E402
from service.engine.records import Records, from_rows  # noqa: E402
from service.engine.synth import generate  # noqa: E402
from tests.engine.leaderboard_reference import _compare, differences, reference_leaderboard  # noqa: E402


def best(repeat: int, fn, *args, **kwargs) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn(*args, **kwargs)
        times.append(time.perf_counter() - start)
    return min(times)


def order_of(records: Records, labels: np.ndarray | None) -> list[int]:
    stats = [E._system_stats(records, s, 0.95, labels) for s in range(records.n_systems)]
    return sorted(range(records.n_systems), key=lambda s: (-round(stats[s].mean, 12), records.systems[s]))


def pairs_before(records: Records, order: list[int], labels: np.ndarray | None) -> dict:
    ranks = {s: r + 1 for r, s in enumerate(order)}
    n = len(order)
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    return {(i, j): _compare(records, order[i], order[j], ranks, labels, 0.95) for i, j in pairs}


def pairs_now(records: Records, order: list[int], labels: np.ndarray | None) -> None:
    i, j = np.triu_indices(len(order), 1)
    ranked = np.asarray(order, dtype=np.intp)
    L._intervals(E.paired_tests(records, ranked[i], ranked[j], labels), 0.95)


def time_board(records: Records, cluster: str | None, repeat: int) -> tuple[float, float, float, float, bool]:
    """Least seconds of the board before and now, of its pairs before and now; same bits?"""
    labels = E._labels(records, cluster)
    order = order_of(records, labels)
    new, old = L.leaderboard(records, cluster=cluster), reference_leaderboard(records, cluster=cluster)
    same = not differences(new, old)  # (and both are warm: scipy's imports, the t quantiles)
    return (
        best(repeat, reference_leaderboard, records, cluster=cluster),
        best(repeat, L.leaderboard, records, cluster=cluster),
        best(repeat, pairs_before, records, order, labels),
        best(repeat, pairs_now, records, order, labels),
        same,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--boards", default="134x500x12,300x500x12")
    ap.add_argument("--missing", type=float, default=0.05, help="also time boards with this share of cells dropped")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    print(f"{'board':<22} {'cluster':<7} {'pairs':>6} | {'board before':>12} {'now':>7} {'ratio':>6} | "
          f"{'pairs before':>12} {'now':>7} {'ratio':>6} | same bits")
    letters = []
    for spec in args.boards.split(","):
        s, t, g = (int(x) for x in spec.split("x"))
        for missing in (0.0, args.missing) if args.missing else (0.0,):
            records = from_rows(generate(n_systems=s, n_tasks=t, n_groups=g, seed=1, missing=missing))
            name = spec + (f" -{missing:.0%} cells" if missing else "")
            for cluster in (None, "group"):
                before, now, p_before, p_now, same = time_board(records, cluster, args.repeat)
                print(f"{name:<22} {cluster or '-':<7} {s * (s - 1) // 2:>6} | {before:>11.3f}s {now:>6.3f}s "
                      f"{before / now:>5.1f}x | {p_before:>11.3f}s {p_now:>6.3f}s {p_before / p_now:>5.1f}x | {same}")
                letters.append((name, cluster, separation(records, cluster)))
    print(f"\n{'board':<22} {'cluster':<7} | {'letters by insert':>17} {'by search':>9} {'ratio':>6} | columns")
    for name, cluster, sep in letters:
        (by_insert, cols_insert), (by_search, cols_search) = (time_letters(sep, search, args.repeat)
                                                              for search in (False, True))
        same = "same" if cols_insert == cols_search else "DIFFERENT"
        shown = cols_search if isinstance(cols_search, str) else len(cols_search)
        print(f"{name:<22} {cluster or '-':<7} | {by_insert:>16.3f}s {by_search:>8.3f}s "
              f"{by_insert / by_search:>5.1f}x | {shown} ({same})")


def separation(records: Records, cluster: str | None) -> np.ndarray:
    """The separation matrix ``leaderboard()`` hands to the letters."""
    seen = []
    real = L.compact_letters
    L.compact_letters = lambda sep: seen.append(np.array(sep)) or real(sep)
    try:
        L.leaderboard(records, cluster=cluster)
    finally:
        L.compact_letters = real
    return seen[0]


def time_letters(sep: np.ndarray, search: bool, repeat: int) -> tuple[float, list[int] | str]:
    """Least seconds of ``letter_columns`` with or without the direct search, and its columns
    (or the refusal's message)."""
    real = LT._maximal_sets
    if not search:
        LT._maximal_sets = lambda _sep: None  # the insert-and-absorb, as before
    try:
        try:
            cols: list[int] | str = LT.letter_columns(sep)
        except LT.TooManyLetters as exc:
            cols = str(exc)
        return best(repeat, _letters_or_refusal, sep), cols
    finally:
        LT._maximal_sets = real


def _letters_or_refusal(sep: np.ndarray) -> None:
    try:
        LT.letter_columns(sep)
    except LT.TooManyLetters:
        pass


if __name__ == "__main__":
    main()
