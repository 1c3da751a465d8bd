"""Replay speed on multi-trial and fractional records against binary records, per rule.

    python benchmarks/multitrial_speed.py [--orders 500] [--rules bootstrap_200,bootstrap_exact,...] [--repeat 3]

For each rule, replays the same spec (δ = 0, no grouping, the 19-point budget grid, one
process) on ``swebench_lite`` (binary, single trial: the baseline), ``terminal_bench_1_fractional``
(shares of five attempts) and ``terminal_bench_core_0.1.1`` (five trials per task), each in a
fresh process, and prints wall and CPU time, µs per case and peak RSS, and the per-case ratio
to ``swebench_lite`` measured in the same run. CPU time is the steadier number on a shared
machine; ``mcnemar`` runs on binary records only (the others refuse it, as SPEC §4.2 says).
A multi-trial or fractional bootstrap replay runs as in a Celery worker, which loads the
compiled stages (``lattice_kernel``) at start and then uses them for every such replay
(``lattice.kernel_loaded``): the child imports them before the clock starts, as it does the
other imports, and prints that one-time cost per process (``jit s``: numba's import and the
kernels' load, about 0.3 s from numba's cache, some 9 s when they compile). ``--cold`` leaves
it out, as a one-off CLI replay does below ``lattice.COMPILED_FROM`` cases (numpy's stages).
``--cli`` times ``sufficiency replay`` end to end instead (a fresh process: the interpreter,
the imports, reading the CSV, the replay and writing its JSON report), as a user runs it once.
``--also FILE ...`` adds record files of other shapes (``sufficiency synth --trials 10``, say)
after the three, each against ``swebench_lite`` in the same run: the goal is for records in
general, not only these. ``--repeat N`` runs each replay N times (each in a fresh process, the three datasets in turn)
and keeps the least wall and CPU time of each: on a shared host, the other tenants only ever
add time.
"""

from __future__ import annotations

import argparse
import functools
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from service.engine.chunk import lattice_valued  # noqa: E402
from service.engine.lattice_decisions import compiled_stages  # noqa: E402
from service.engine.malloc import keep_freed_memory  # noqa: E402
from service.engine.records import load_records  # noqa: E402
from service.engine.replay import plan_replay, run_replay, total_cases  # noqa: E402
from service.engine.spec import SpecError, make_spec  # noqa: E402

DATA = ROOT.parent / "shared" / "data"
DATASETS = ("swebench_lite", "terminal_bench_1_fractional", "terminal_bench_core_0.1.1")


def records_path(dataset: str) -> Path:
    """A dataset of ``../shared/data`` by name, or a record file given by its path (``--also``)."""
    path = Path(dataset)
    return path if path.suffix in (".csv", ".jsonl") else DATA / dataset / "records.csv"
RULES = {
    "bootstrap_200": ("coverage_bootstrap", 200),
    "bootstrap_exact": ("coverage_bootstrap", "exact"),
    "paired_normal": ("coverage_paired_normal", 200),
    "serfling": ("serfling_coverage", 200),
    "anytime": ("anytime_coverage", 200),
    "forced": ("uniform_forced", 200),
    "mcnemar": ("coverage_mcnemar", 200),
}


def child(dataset: str, rule: str, orders: int, cold: bool) -> None:
    """Replay one (dataset, rule) in this fresh process; print time, cases and peak RSS as JSON."""
    keep_freed_memory()  # as `sufficiency replay` and a Celery worker do (service/engine/malloc.py)
    policy, resamples = RULES[rule]
    records = load_records(str(records_path(dataset)))
    spec = make_spec(policies=[policy], deltas=[0], orders=orders, groups=[None], bootstrap=[resamples])
    try:
        plan = plan_replay(records, spec)
    except SpecError as exc:
        print(json.dumps({"refused": exc.message}))
        return
    cases = total_cases(plan)
    jit = 0.0
    lattice_bootstrap = policy == "coverage_bootstrap" and lattice_valued(plan)
    if lattice_bootstrap and not cold:  # as a worker at start
        t = time.perf_counter()
        import service.engine.lattice_kernel  # noqa: F401  (numba's import and the kernel's load)

        jit = time.perf_counter() - t
    sums = ("compiled" if compiled_stages(plan) else "numpy") if lattice_bootstrap else "-"
    t0, c0 = time.perf_counter(), time.process_time()
    report = run_replay(records, spec, jobs=1)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    msb = report["configurations"][0]["minimum_sufficient_budget"]
    print(json.dumps({"wall": wall, "cpu": cpu, "cases": cases, "peak_mb": peak_mb, "msb": msb, "jit": jit,
                      "sums": sums}))


_CLI_CHILD = """
import atexit, resource, sys
atexit.register(lambda: print("peak_kb", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr))
from service.cli import main
sys.argv = sys.argv[1:]
rc = main()
sys.exit(rc)
"""
"""``sufficiency replay`` as the console script runs it, printing its peak RSS when it exits."""


@functools.lru_cache
def _cases(dataset: str, rule: str, orders: int) -> int:
    """The case count of a replay (planned here once, not in the timed process)."""
    policy, resamples = RULES[rule]
    spec = make_spec(policies=[policy], deltas=[0], orders=orders, groups=[None], bootstrap=[resamples])
    return total_cases(plan_replay(load_records(str(records_path(dataset))), spec))


def cli_run(dataset: str, rule: str, orders: int) -> dict:
    """``sufficiency replay`` on ``dataset`` under ``rule`` in a fresh process: wall and CPU
    time (user + system of the child), peak RSS, and the replay's case count."""
    policy, resamples = RULES[rule]
    records = records_path(dataset)
    out = Path(f"/tmp/multitrial_speed_{records.parent.name}_{records.stem}_{rule}.json")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    argv = ["sufficiency", "replay", str(records), "--policy", policy, "--delta", "0", "--orders", str(orders),
            "--group", "none", "--bootstrap", str(resamples), "--format", "json", "--out", str(out)]
    done = subprocess.run(
        [sys.executable, "-c", _CLI_CHILD, *argv], cwd=ROOT, capture_output=True, text=True,
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    said = [line for line in done.stderr.strip().splitlines() if not line.startswith("peak_kb")]
    if done.returncode != 0:
        return {"refused": said[-1] if said else "failed"}
    out.unlink(missing_ok=True)
    cases = _cases(dataset, rule, orders)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    peak_mb = float(done.stderr.strip().splitlines()[-1].split()[-1]) / 1024  # the child's own, at exit
    return {"wall": wall, "cpu": cpu, "cases": cases, "peak_mb": peak_mb, "jit": 0.0, "sums": "cli"}


def _label(path: Path) -> str:
    """A record file's name, or its folder's where it is named ``records.csv`` as in ../shared/data."""
    return path.parent.name if path.stem == "records" else path.name


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--orders", type=int, default=500)
    ap.add_argument("--rules", default=",".join(RULES), help="comma-separated subset of " + ", ".join(RULES))
    ap.add_argument("--repeat", type=int, default=1, help="runs per replay; the least times are kept")
    ap.add_argument("--cold", action="store_true", help="no kernel loaded before a replay (a one-off CLI run)")
    ap.add_argument("--cli", action="store_true", help="time `sufficiency replay` end to end, a fresh process each")
    ap.add_argument("--also", nargs="+", default=[], metavar="FILE",
                    help="more record files (.csv or .jsonl), each compared with swebench_lite")
    ap.add_argument("--child", nargs=2, metavar=("DATASET", "RULE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child[0], args.child[1], args.orders, args.cold)
        return
    print(f"orders {args.orders}, delta 0, no grouping, 19 budgets, one process per replay"
          + (", `sufficiency replay` end to end" if args.cli else ", kernel not preloaded" if args.cold
             else ", kernel preloaded as in a worker"))
    print(
        f"{'rule':16s} {'dataset':28s} {'cases':>10s} {'wall s':>8s} {'cpu s':>8s} {'us/case':>8s} "
        f"{'cpu us/case':>11s} {'x lite cpu (wall)':>17s} {'peak MB':>8s} {'jit s':>6s} sums"
    )
    datasets = (*DATASETS, *(str(Path(f).resolve()) for f in args.also))
    for rule in args.rules.split(","):
        base = None
        runs: dict[str, dict] = {}
        for _ in range(max(1, args.repeat)):
            for dataset in datasets:
                if args.cli:
                    r = cli_run(dataset, rule, args.orders)
                else:
                    out = subprocess.run(
                        [sys.executable, __file__, "--orders", str(args.orders), "--child", dataset, rule]
                        + (["--cold"] if args.cold else []),
                        capture_output=True,
                        text=True,
                        check=True,
                    )
                    r = json.loads(out.stdout.strip().splitlines()[-1])
                if dataset in runs and "refused" not in r:
                    best = runs[dataset]
                    r = {**r, "wall": min(r["wall"], best["wall"]), "cpu": min(r["cpu"], best["cpu"]),
                         "peak_mb": max(r["peak_mb"], best["peak_mb"]), "jit": max(r["jit"], best["jit"])}
                runs[dataset] = r
        for dataset in datasets:
            r = runs[dataset]
            name = dataset if dataset in DATASETS else _label(Path(dataset))
            if "refused" in r:
                print(f"{rule:16s} {name:28s} refused: {r['refused']}")
                continue
            per_wall, per_cpu = r["wall"] / r["cases"] * 1e6, r["cpu"] / r["cases"] * 1e6
            if dataset == DATASETS[0]:
                base = (per_wall, per_cpu)
            ratio = f"{per_cpu / base[1]:.1f} ({per_wall / base[0]:.1f})" if base else "-"
            print(
                f"{rule:16s} {name:28s} {r['cases']:10,d} {r['wall']:8.2f} {r['cpu']:8.2f} {per_wall:8.3f} "
                f"{per_cpu:11.3f} {ratio:>17s} {r['peak_mb']:8.0f} {r['jit']:6.2f} {r['sums']}",
                flush=True,
            )


if __name__ == "__main__":
    main()
