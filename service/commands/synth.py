"""``sufficiency synth``: write a realistic synthetic benchmark (SPEC §1 records) as CSV or JSONL."""

from __future__ import annotations

import argparse
import sys

from service.engine.synth import generate, to_csv, to_jsonl


def _count(minimum: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{text}' is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    return parse


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "synth",
        help="generate a realistic synthetic benchmark (records per SPEC §1)",
        description=(
            "Generate task-level records: systems of graded ability (some near-ties, some far apart), "
            "task groups of uneven size, heterogeneous task difficulty, lognormal per-attempt costs "
            "and optional repeated trials. The same arguments and seed give the same bytes."
        ),
    )
    p.add_argument("--systems", type=_count(2), default=12, help="number of systems (default 12)")
    p.add_argument("--tasks", type=_count(1), default=300, help="number of tasks (default 300)")
    p.add_argument("--groups", type=_count(1), default=8, help="number of task groups (default 8)")
    p.add_argument("--trials", type=_count(1), default=1, help="trials per (system, task) (default 1)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--no-cost", dest="cost", action="store_false", help="leave out the cost column")
    p.add_argument(
        "--fractional",
        action="store_true",
        help="outcomes are the share of 5 attempts passed (like terminal-bench aggregates)",
    )
    p.add_argument(
        "--format",
        choices=("csv", "jsonl"),
        default=None,
        help="output format (default: from --out's extension, else csv)",
    )
    p.add_argument("--out", metavar="FILE", default=None, help="write to FILE instead of stdout")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    fmt = args.format
    if fmt is None:
        fmt = "jsonl" if args.out and args.out.lower().endswith((".jsonl", ".ndjson")) else "csv"
    try:
        rows = generate(
            n_systems=args.systems,
            n_tasks=args.tasks,
            n_groups=args.groups,
            trials=args.trials,
            seed=args.seed,
            cost=args.cost,
            fractional=args.fractional,
        )
    except ValueError as exc:
        print(f"sufficiency synth: {exc}", file=sys.stderr)
        return 2
    text = to_jsonl(rows) if fmt == "jsonl" else to_csv(rows)
    if args.out:
        with open(args.out, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
        print(
            f"wrote {len(rows)} rows ({args.systems} systems x {args.tasks} tasks x {args.trials} trials) "
            f"to {args.out}",
            file=sys.stderr,
        )
    else:
        sys.stdout.write(text)
    return 0
