"""``sufficiency leaderboard``: systems ranked with intervals, which leads are real, tie groups (SPEC §8)."""

from __future__ import annotations

import argparse
import json
import sys

from service.engine.leaderboard import CORRECTIONS, TIE_DEFINITIONS, TIE_RULES, Leaderboard, leaderboard
from service.engine.records import RecordsError, load_records
from service.engine.statbase import StatsInputError, to_dict


def _level(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a number") from None
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"must be in (0, 1), got {text}")
    return value


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "leaderboard",
        help="rank systems with intervals and say which leads are statistical ties (SPEC §8)",
        description=(
            "Rank the systems of a records file by mean score, with confidence intervals, and test every "
            "pair with a paired test (exact McNemar for single-trial 0/1 records, else a paired t-test; "
            "cluster-robust by --cluster), corrected as one family. Each row gets a simultaneous rank "
            "interval and compact letters (systems sharing a letter are not significantly different); "
            "tie groups never join two systems that differ (SPEC §8.1)."
        ),
    )
    p.add_argument("records", metavar="RECORDS", help="CSV or JSONL records (SPEC §1)")
    p.add_argument("--level", type=_level, default=0.95, help="confidence level in (0, 1) (default 0.95)")
    p.add_argument("--cluster", metavar="COL", default=None,
                   help="metadata column(s) to cluster standard errors by, e.g. 'group' or 'repo,difficulty'")
    p.add_argument("--correction", choices=CORRECTIONS, default="holm",
                   help="multiple-comparison correction over the compared pairs (default holm)")
    p.add_argument("--matrix", action="store_true", help="also compare every pair (one corrected family)")
    p.add_argument("--ties", choices=TIE_RULES, default="cliques",
                   help="tie groups: runs of mutually tied systems (default; SPEC §8.1), or the older "
                        "adjacent / leader views kept for comparison")
    p.add_argument("--format", choices=("table", "json"), default="table", help="output format (default table)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        records = load_records(args.records)
    except OSError as exc:
        print(f"error: cannot read {args.records}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except RecordsError as exc:
        print(f"error: {args.records} is not valid records:", file=sys.stderr)
        for e in exc.errors:
            print(f"  {e}", file=sys.stderr)
        if exc.summary:
            print(f"  {exc.summary}", file=sys.stderr)
        return 2
    try:
        board = leaderboard(records, args.level, args.cluster, args.correction, args.matrix, args.ties)
    except StatsInputError as exc:
        print(f"error: --{exc.field}: {exc.message}", file=sys.stderr)
        return 2
    if args.format == "json":
        sys.stdout.write(json.dumps(to_dict(board), indent=2) + "\n")
    else:
        sys.stdout.write(format_table(board))
    return 0


def _pct(x: float | None) -> str:
    return "—" if x is None or x != x else f"{100 * x:.1f}"


def _signed(x: float | None) -> str:
    """A lead in points with its sign, never "-0.0" (a float sum can land at -1e-17)."""
    if x is None or x != x:
        return "—"
    v = round(100 * x, 1)
    return f"{v + 0.0:+.1f}"


def format_table(board: Leaderboard) -> str:
    """Plain-text leaderboard: one row per system, then the tie groups (and the matrix)."""
    lines = []
    lvl = f"{100 * board.level:g}%"
    tests = sorted({c.test for c in board.adjacent}) or ["—"]
    head = f"{len(board.rows)} systems · level {lvl} · paired test {', '.join(tests)} · correction {board.correction}"
    if board.cluster:
        head += f" · clustered by {board.cluster} ({board.n_clusters} clusters)"
    lines.append(head)
    if board.unequal_task_sets is not None:
        lines.append(f"warning (unequal_task_sets): {board.unequal_task_sets.message}")
    kmax = max((len(r.stats.pass_k) for r in board.rows), default=1)
    width = max([len(r.stats.system) for r in board.rows] + [6])
    lw = max([len("".join(r.letters or ())) for r in board.rows] + [7])
    cols = f"{'rank':>4}  {'ranks':>7}  {'letters':<{lw}}  {'system':<{width}}  {'tasks':>5}  {'score%':>6}"
    cols += f"  {lvl + ' interval':>18}  {'method':<15}"
    if kmax > 1:
        cols += f"  {f'pass@{kmax}':>7}  {f'pass^{kmax}':>7}"
    cols += f"  {'lead':>6}  {lvl + ' CI':>15}  {'p adj':>6}  vs next"
    lines.append(cols)
    for i, row in enumerate(board.rows):
        s = row.stats
        iv = f"[{_pct(s.interval.low)}, {_pct(s.interval.high)}]"
        ranks = f"{row.rank_low}–{row.rank_high}"
        letters = "".join(row.letters) if row.letters is not None else "—"
        line = f"{row.rank:>4}  {ranks:>7}  {letters:<{lw}}  {s.system:<{width}}  {s.n_tasks:>5}  {_pct(s.mean):>6}"
        line += f"  {iv:>18}  {s.interval.method:<15}"
        if kmax > 1:
            last = s.pass_k[-1] if len(s.pass_k) == kmax else None
            line += f"  {_pct(last.pass_at_k if last else None):>7}  {_pct(last.pass_hat_k if last else None):>7}"
        if i < len(board.adjacent):
            c = board.adjacent[i]
            p = "—" if c.p_adjusted != c.p_adjusted else f"{c.p_adjusted:.3f}"
            ci = f"[{_signed(c.ci_low)}, {_signed(c.ci_high)}]"
            line += f"  {_signed(c.diff):>6}  {ci:>15}  {p:>6}  {'distinct' if c.distinguishable else 'tie'}"
            if board.unequal_task_sets is not None:
                line += f" (on {c.n_tasks} common tasks)"
        lines.append(line)
    lines.append("")
    lines.append(f"Rank intervals: {board.rank_definition}")
    lines.append("Letters: two systems share a letter iff not significantly different (equal scores always do).")
    if board.letters_note:
        lines.append(f"  {board.letters_note}")
    lines.append("")
    lines.append(f"Tie groups ({board.ties}): {TIE_DEFINITIONS[board.ties]}")
    for g in board.tie_groups:
        lines.append(f"  {g.description}")
    if board.matrix is not None:
        n = len(board.rows)
        grid = [["·"] * n for _ in range(n)]
        for c in board.matrix:
            mark = "*" if c.distinguishable else "="
            grid[c.rank_higher - 1][c.rank_lower - 1] = mark
            grid[c.rank_lower - 1][c.rank_higher - 1] = mark
        lines.append("")
        lines.append("Pairwise matrix by rank ('=' tie, '*' distinguishable; corrected over all pairs):")
        for r in range(n):
            lines.append(f"  {r + 1:>4}  {''.join(grid[r])}")
    return "\n".join(lines) + "\n"
