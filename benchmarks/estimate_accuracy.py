"""How near a replay's submission estimate comes to its time, and what the estimate's sample costs.

    python benchmarks/estimate_accuracy.py [--pairs 200 64] [--board 134x500x12] [--records FILE ...]

The service says how long a replay will take when it is submitted; without history it times a
sample of the replay's first chunk (``service/replays/estimate.py``, ``from_sample``: ``pairs``
pairs at 1/k of the orders, run twice), for one worker. For each record file (by default
``swebench_lite``, ``terminal_bench_1_fractional`` and ``terminal_bench_core_0.1.1`` from
``../shared/data``; ``--board`` adds a synthetic board grouped by its ``group`` column), this
prints, each measured in a fresh process:

- per ``--pairs`` value, the estimate and the CPU the sample took (a fresh API process meets
  the sample's tails cold, as here);
- the replay's CPU on one worker: every chunk of the service's split (``chunk_bounds``,
  ``Settings().chunk_pairs``) on one thread, numpy's BLAS on one thread, the compiled kernels
  loaded before the clock, as a Celery worker has them;
- the estimate over that CPU (the docstring of ``estimate.py`` aims above 1: high rather
  than low).

No timed assertion: the numbers are for choosing the sample, on the host they are taken on.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DATA = ROOT.parent / "shared" / "data"
DATASETS = ("swebench_lite", "terminal_bench_1_fractional", "terminal_bench_core_0.1.1")


def _plan(records_file: str, policy: str, delta: float, group: str | None):
    from service.engine.records import load_records
    from service.engine.replay import plan_replay
    from service.engine.spec import make_spec

    spec = make_spec(policies=[policy], deltas=[delta], groups=[group])
    return plan_replay(load_records(records_file), spec)


def child_estimate(records_file: str, policy: str, delta: float, group: str | None, pairs: int) -> None:
    """The estimate as a fresh API process takes it (its usual imports first, off the clock)."""
    import scipy.stats  # noqa: F401

    import service.engine.pairs  # noqa: F401
    import service.engine.report  # noqa: F401
    from service.replays.estimate import from_sample

    plan = _plan(records_file, policy, delta, group)
    c0 = time.process_time()
    seconds = from_sample(plan, pairs)
    print(json.dumps({"estimate": seconds, "sample_cpu": time.process_time() - c0}))


def child_replay(records_file: str, policy: str, delta: float, group: str | None) -> None:
    """The replay's CPU on one worker: every chunk in turn, one thread."""
    import service.engine.lattice_kernel  # noqa: F401  (a worker loads it at start)
    from service.config import Settings
    from service.engine.blas import blas_single_thread
    from service.engine.malloc import keep_freed_memory
    from service.engine.replay import run_chunk
    from service.replays.service import chunk_bounds

    keep_freed_memory()
    plan = _plan(records_file, policy, delta, group)
    c0 = time.process_time()
    with blas_single_thread():
        for lo, hi in chunk_bounds(plan.n_pairs, Settings().chunk_pairs):
            run_chunk(plan, lo, hi)
    print(json.dumps({"cpu": time.process_time() - c0, "pairs": plan.n_pairs}))


def _run(*args: str) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", *args], cwd=ROOT, check=True, capture_output=True,
                         text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, nargs="+", default=[200], help="sample sizes (pairs) to compare")
    parser.add_argument("--records", nargs="*", default=None, help="record files instead of the three datasets")
    parser.add_argument("--board", metavar="SxTxG", help="also a synthetic board, grouped by its 'group' column")
    parser.add_argument("--policy", default="coverage_bootstrap")
    parser.add_argument("--delta", type=float, default=0.0)
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, records_file, policy, delta, group, *rest = args.child
        grp = None if group == "-" else group
        if kind == "estimate":
            child_estimate(records_file, policy, float(delta), grp, int(rest[0]))
        else:
            child_replay(records_file, policy, float(delta), grp)
        return
    files = [(f, "-") for f in (args.records or [str(DATA / d / "records.csv") for d in DATASETS])]
    with tempfile.TemporaryDirectory() as tmp:
        if args.board:
            systems, tasks, groups = (int(x) for x in args.board.lower().split("x"))
            board = str(Path(tmp) / "board.csv")
            subprocess.run([sys.executable, "-m", "service.cli", "synth", "--systems", str(systems), "--tasks",
                            str(tasks), "--groups", str(groups), "--out", board], cwd=ROOT, check=True,
                           capture_output=True)
            files.append((board, "group"))
        print(f"policy {args.policy}, delta {args.delta:g}; estimate / CPU on one worker (sample CPU)")
        for f, group in files:
            common = (f, args.policy, str(args.delta), group)
            replay = _run("replay", *common)
            cells = []
            for pairs in args.pairs:
                est = _run("estimate", *common, str(pairs))
                cells.append(f"{pairs} pairs: {est['estimate']:.1f} s = {est['estimate'] / replay['cpu']:.2f}x "
                             f"({est['sample_cpu']:.2f} s)")
            name = Path(f).parent.name if Path(f).name == "records.csv" else Path(f).name
            print(f"{name:30} {replay['pairs']:>6} pairs, replay {replay['cpu']:.1f} s CPU; " + "; ".join(cells),
                  flush=True)


if __name__ == "__main__":
    main()
