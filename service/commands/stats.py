"""``sufficiency stats``: the SPEC §8 calculators, one system's statistics and one pair's."""

from __future__ import annotations

import argparse
import json
import math
import sys

import numpy as np

from service.engine import evalstats as E
from service.engine.intervals import binomial_bounds
from service.engine.passk import pass_at_k, pass_hat_k
from service.engine.records import RecordsError, load_records
from service.engine.samplesize import (
    margin_of_error,
    min_significant_gap,
    runs_for_bound,
    tasks_for_margin,
    tasks_for_paired_difference,
)
from service.engine.statbase import StatsInputError, to_dict


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "stats",
        help="evaluation-statistics calculators: pass@k, exact bounds, margins, sample sizes (SPEC §8)",
        description="Calculators and per-system / per-pair statistics of SPEC §8. Output is JSON.",
    )
    sub = p.add_subparsers(dest="calculator", metavar="CALCULATOR", required=True)

    c = sub.add_parser("passk", help="pass@k and pass^k of one task from c passes in n trials")
    c.add_argument("--n", type=int, required=True, help="trials")
    c.add_argument("--c", type=int, required=True, help="passes")
    c.add_argument("--k", type=int, default=None, help="k (default: every k from 1 to n)")
    c.set_defaults(func=_passk)

    c = sub.add_parser("bound", help="exact one-sided binomial bounds (Clopper–Pearson)")
    c.add_argument("--successes", type=int, required=True)
    c.add_argument("--n", type=int, required=True, help="runs")
    c.add_argument("--level", type=float, default=0.95)
    c.set_defaults(func=_bound)

    c = sub.add_parser("runs", help="fewest runs for an upper failure-rate bound at most a target")
    c.add_argument("--max-failure-rate", type=float, required=True)
    c.add_argument("--failures", type=int, default=0, help="failures allowed among the runs (default 0)")
    c.add_argument("--level", type=float, default=0.95)
    c.set_defaults(func=_runs)

    c = sub.add_parser("margin", help="margin of error of a score over n tasks")
    c.add_argument("--n", type=float, required=True, help="tasks")
    c.add_argument("--p", type=float, default=0.5, help="score (default 0.5, the worst case)")
    c.add_argument("--level", type=float, default=0.95)
    c.set_defaults(func=_margin)

    c = sub.add_parser("tasks", help="tasks needed for a target margin of error")
    c.add_argument("--margin", type=float, required=True, help="half-width as a fraction, e.g. 0.03")
    c.add_argument("--p", type=float, default=0.5)
    c.add_argument("--level", type=float, default=0.95)
    c.set_defaults(func=_tasks)

    c = sub.add_parser("gap", help="minimum significant gap, unpaired vs paired, at n tasks")
    c.add_argument("--n", type=float, required=True)
    c.add_argument("--p", type=float, default=0.5)
    c.add_argument("--rho", type=float, default=0.0, help="per-task score correlation (default 0)")
    c.add_argument("--level", type=float, default=0.95)
    c.set_defaults(func=_gap)

    c = sub.add_parser("power", help="tasks needed to detect a paired difference")
    c.add_argument("--delta", type=float, required=True, help="difference to detect, as a fraction")
    c.add_argument("--power", type=float, default=0.8)
    c.add_argument("--rho", type=float, default=0.0)
    c.add_argument("--p", type=float, default=0.5)
    c.add_argument("--sd-diff", type=float, default=None, help="sd of per-task differences (overrides p, rho)")
    c.add_argument("--level", type=float, default=0.95)
    c.set_defaults(func=_power)

    c = sub.add_parser("system", help="one system on a records file: score, intervals, clustering, pass@k")
    c.add_argument("records", metavar="RECORDS")
    c.add_argument("system", metavar="SYSTEM")
    c.add_argument("--level", type=float, default=0.95)
    c.add_argument("--cluster", metavar="COL", default=None)
    c.set_defaults(func=_system)

    c = sub.add_parser("pair", help="paired comparison of two systems (difference, SE, McNemar, bootstrap)")
    c.add_argument("records", metavar="RECORDS")
    c.add_argument("a", metavar="A")
    c.add_argument("b", metavar="B")
    c.add_argument("--level", type=float, default=0.95)
    c.add_argument("--cluster", metavar="COL", default=None)
    c.add_argument("--boot", type=int, default=2000, help="bootstrap resamples (default 2000)")
    c.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    c.set_defaults(func=_pair)


def _emit(value: object) -> int:
    sys.stdout.write(json.dumps(to_dict(value), indent=2) + "\n")
    return 0


POSITIONAL = {"a": "A", "b": "B", "system": "SYSTEM", "records": "RECORDS"}


def _arg_of(field: str) -> str:
    """The argument as the user typed it: a positional's name or the flag (errors must name a real one)."""
    return POSITIONAL.get(field, f"--{field.replace('_', '-')}")


def _guard(fn):
    def run(args: argparse.Namespace) -> int:
        try:
            return fn(args)
        except StatsInputError as exc:
            print(f"error: {_arg_of(exc.field)}: {exc.message}", file=sys.stderr)
            return 2
        except RecordsError as exc:
            print("error: invalid records:", file=sys.stderr)
            for e in exc.errors:
                print(f"  {e}", file=sys.stderr)
            if exc.summary:
                print(f"  {exc.summary}", file=sys.stderr)
            return 2
        except OSError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        except ArithmeticError:  # an input at the edge of floating point (say 1e-170): as the API's 422
            print("error: these inputs have no finite answer in floating point (a value too near 0, or too "
                  "large)", file=sys.stderr)
            return 2

    return run


@_guard
def _passk(args):
    ks = [args.k] if args.k is not None else list(range(1, max(args.n, 1) + 1))
    return _emit(
        [{"n": args.n, "c": args.c, "k": k, "pass_at_k": pass_at_k(args.n, args.c, k),
          "pass_hat_k": pass_hat_k(args.n, args.c, k)} for k in ks]
    )


@_guard
def _bound(args):
    return _emit(binomial_bounds(args.successes, args.n, args.level))


@_guard
def _runs(args):
    n = runs_for_bound(args.max_failure_rate, args.level, args.failures)
    return _emit({"runs": n, "max_failure_rate": args.max_failure_rate, "failures": args.failures,
                  "level": args.level})


@_guard
def _margin(args):
    return _emit({"n": args.n, "p": args.p, "level": args.level,
                  "margin": _finite(margin_of_error(args.n, args.p, args.level))})


@_guard
def _tasks(args):
    return _emit({"margin": args.margin, "p": args.p, "level": args.level,
                  "tasks": tasks_for_margin(args.margin, args.p, args.level)})


@_guard
def _gap(args):
    gap = min_significant_gap(args.n, args.p, args.rho, args.level)
    for value in (gap.unpaired, gap.paired):
        _finite(value)
    return _emit(gap)


def _finite(value: float) -> float:
    """``value``, or the guard's error where it is not finite (as the API's 422, not a null)."""
    if not math.isfinite(value):
        raise FloatingPointError(value)
    return value


@_guard
def _power(args):
    n = tasks_for_paired_difference(args.delta, args.power, args.rho, args.p, args.level, args.sd_diff)
    return _emit({"tasks": n, "delta": args.delta, "power": args.power, "rho": args.rho, "level": args.level})


@_guard
def _system(args):
    return _emit(E.system_stats(load_records(args.records), args.system, args.level, args.cluster))


@_guard
def _pair(args):
    rng = np.random.default_rng(args.seed)
    return _emit(E.pair_stats(load_records(args.records), args.a, args.b, args.level, args.cluster, rng, args.boot))
