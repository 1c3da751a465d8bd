"""``sufficiency replay RECORDS``: replay partial runs and print the minimum sufficient budgets.

Options carry the SPEC names. Repeating ``--policy``, ``--delta``, ``--a``, ``--floor``,
``--group`` or ``--bootstrap`` sweeps them in one run.
"""

from __future__ import annotations

import argparse
import sys
import time

from service.engine.classes import parse_edges
from service.engine.errors import FieldError
from service.engine.malloc import keep_freed_memory
from service.engine.records import RecordsError, load_records
from service.engine.replay import MAX_THREADS, plan_replay, run_replay, threads_error, total_cases
from service.engine.report import report_csv, report_json, summary_table
from service.engine.spec import NAMED_POLICIES, SpecError, make_spec, parse_budgets


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "replay",
        help="replay partial runs over completed records (SPEC §2-§6)",
        description="Replay partial runs over task-level records and report, per policy and threshold, "
        "the minimum sufficient task budget and why smaller budgets fail.",
    )
    p.add_argument("records", help="CSV or JSONL task-level records (SPEC §1)")
    p.add_argument("--policy", action="append", metavar="NAME",
                   help=f"named policy ({', '.join(NAMED_POLICIES)}) or custom "
                   "'order=stratified,rule=serfling,coverage=yes'; repeatable (default coverage_bootstrap)")
    p.add_argument("--delta", action="append", type=float, metavar="PP",
                   help="threshold δ in percentage points; repeatable (default 0)")
    p.add_argument("--budgets", default="0.05:0.95:0.05", help="start:stop:step or a comma list of fractions")
    p.add_argument("--orders", type=int, default=500, help="sampled orders R per pair (default 500)")
    p.add_argument("--checkpoints", metavar="FRACTIONS",
                   help="a schedule for the fixed-sample policies (SPEC §4.4): fractions or start:stop:step ranges, "
                   "e.g. 0.02:0.5:0.02,1; at budget k a case ends at its first conclusive checkpoint <= k")
    p.add_argument("--spending", metavar="NAME", help="the schedule's spending: obrien_fleming (default), pocock, none")
    p.add_argument("--bootstrap", action="append", metavar="B|exact",
                   help="bootstrap resamples B or 'exact'; repeatable (default 200)")
    p.add_argument("--a", action="append", type=float, metavar="LEVEL", help="rule level a; repeatable (default 0.05)")
    p.add_argument("--floor", action="append", metavar="FLOOR",
                   help="coverage floor: proportional, slack, one_per_group, none; repeatable (default proportional)")
    p.add_argument("--group", action="append", metavar="COLS",
                   help="grouping key: a metadata column or 'col1,col2'; 'none' for one group; repeatable")
    p.add_argument("--orientation", default="directed", choices=("directed", "one_per_pair"))
    p.add_argument("--pairs", default="all", metavar="SELECTION",
                   help="which pairs count (SPEC §5.1): all, involving:S1,S2, adjacent, top:K, min_gap:X (pp), "
                   "joined by '+' (intersection), e.g. top:10+min_gap:2")
    p.add_argument("--gap-classes", default=None, metavar="EDGES",
                   help="|Δ_full| class edges in pp, a comma list (default 0,1,2,5,10,100)")
    p.add_argument("--min-task-coverage", type=float, default=0.95)
    p.add_argument("--alpha", type=float, default=0.05, help="target for false accept / reject rates")
    p.add_argument("--gamma", type=float, default=0.05, help="target for coverage failure")
    p.add_argument("--eta", type=float, default=0.25, help="target for the share of unresolved comparisons")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--seeds", type=int, default=1, help="repeat over S seeds and report 2.5-97.5%% intervals")
    p.add_argument("--jobs", type=int, default=1, help="worker processes (the report does not depend on it)")
    p.add_argument("--threads", type=int, default=None,
                   help=f"threads of a one-process replay (--jobs 1), 1 to {MAX_THREADS}; default: the cores this "
                   f"process may use, up to {MAX_THREADS} (the report does not depend on it)")
    p.add_argument("--per-pair", action=argparse.BooleanOptionalAction, default=True,
                   help="include each configuration's per-pair rows in the JSON report (default yes; the "
                   "service serves them by page instead: its report is --no-per-pair)")
    p.add_argument("--format", choices=("table", "json", "csv"), default="table")
    p.add_argument("--out", help="write the report here instead of stdout")
    p.set_defaults(func=run)


FLAGS = {"policies": "--policy", "policy": "--policy", "deltas": "--delta", "floors": "--floor",
         "groups": "--group", "group": "--group"}
"""Spec fields whose flag is singular (repeated to sweep); the others are the field's name."""


def flag_of(field: str) -> str:
    """The command-line flag that sets spec field ``field`` (errors must name a real flag)."""
    return FLAGS.get(field, f"--{field.replace('_', '-')}")


def _bootstrap_values(values: list[str] | None) -> list[int | str] | None:
    if not values:
        return None
    out: list[int | str] = []
    for v in values:
        for item in v.split(","):
            item = item.strip()
            if item == "exact":
                out.append("exact")
            else:
                try:
                    out.append(int(item))
                except ValueError:
                    raise SpecError("bootstrap", f"must be an integer or 'exact', got '{item}'") from None
    return out


def spec_from_args(args: argparse.Namespace):
    groups = None
    if args.group:
        groups = [None if g.strip().lower() in ("none", "") else g for g in args.group]
    return make_spec(
        policies=args.policy or None,
        deltas=args.delta or None,
        budgets=parse_budgets(args.budgets),
        checkpoints=args.checkpoints,
        spending=args.spending,
        orders=args.orders,
        bootstrap=_bootstrap_values(args.bootstrap),
        a=args.a or None,
        floors=args.floor or None,
        groups=groups,
        orientation=args.orientation,
        min_task_coverage=args.min_task_coverage,
        alpha=args.alpha,
        gamma=args.gamma,
        eta=args.eta,
        seed=args.seed,
        seeds=args.seeds,
        pairs=args.pairs,
        gap_classes=parse_edges(args.gap_classes) if args.gap_classes is not None else None,
    )


class ProgressBar:
    """A text bar on stderr, shown only once a run has taken more than a second."""

    def __init__(self, total: int, stream=None):
        self.total = max(total, 1)
        self.done = 0
        self.start = time.monotonic()
        self.stream = stream or sys.stderr  # looked up now: tests and callers may swap sys.stderr
        self.shown = False

    def __call__(self, n: int) -> None:
        self.done += n
        if time.monotonic() - self.start < 1.0:
            return
        self.shown = True
        frac = min(1.0, self.done / self.total)
        bar = "#" * int(30 * frac)
        elapsed = time.monotonic() - self.start
        left = f", about {elapsed * (1 - frac) / frac:.0f} s left" if 0 < frac < 1 else ""
        self.stream.write(f"\rreplay [{bar:<30}] {frac:6.1%} of {self.total:,} cases{left}   ")
        self.stream.flush()

    def close(self) -> None:
        if self.shown:
            self.stream.write(f"\rreplay done: {self.total:,} cases in {time.monotonic() - self.start:.1f}s\n")
            self.stream.flush()


def run(args: argparse.Namespace) -> int:
    keep_freed_memory()  # this process exists to replay (see service/engine/malloc.py)
    if args.jobs < 1:
        print("error: --jobs must be at least 1", file=sys.stderr)
        return 2
    if why := threads_error(args.threads, args.jobs):
        print(f"error: --{why}", file=sys.stderr)  # the message names the parameter: here, the flag
        return 2
    try:
        records = load_records(args.records)
    except FileNotFoundError:
        print(f"error: no such file: {args.records}", file=sys.stderr)
        return 2
    except RecordsError as exc:
        print(f"error: {args.records} is not valid:", file=sys.stderr)
        for e in exc.errors:
            print(f"  {e}", file=sys.stderr)
        if exc.summary:
            print(f"  {exc.summary}", file=sys.stderr)
        return 2
    try:
        spec = spec_from_args(args)
        plan = plan_replay(records, spec)
    except FieldError as exc:  # SpecError, or an edge list that could not be read
        print(f"error: {flag_of(exc.field)}: {exc.message}", file=sys.stderr)
        return 2
    bar = ProgressBar(total_cases(plan))
    report = run_replay(records, spec, jobs=args.jobs, progress=bar, per_pair=args.per_pair, threads=args.threads)
    bar.close()
    if args.format == "json":
        data = report_json(report)
    elif args.format == "csv":
        data = report_csv(report).encode("utf-8")
    else:
        data = summary_table(report).encode("utf-8")
    if args.out:
        with open(args.out, "wb") as fh:
            fh.write(data)
    else:
        sys.stdout.buffer.write(data)
        if args.format == "json":
            sys.stdout.buffer.write(b"\n")
        sys.stdout.flush()
    return 0
