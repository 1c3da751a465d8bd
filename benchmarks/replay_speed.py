"""Replay speed and memory against a straightforward one-case-at-a-time implementation.

    python benchmarks/replay_speed.py [--data ../shared/data/swebench_lite/records.csv] [--all-policies]

Measures, in one run on this machine:
1. the fast engine on the issue's workload (``coverage_bootstrap``, δ = 0, 500 orders, the
   19-point grid, B = 200, grouped by ``group``) with 1 and 2 processes: wall time and peak RSS;
2. a straightforward implementation (per case: take the order's first k tasks, check
   coverage, draw B resamples with numpy, decide) on a slice of pairs and orders, giving its
   time per case, and the ratio of the two per case;
3. with ``--all-policies``: the eleven named policies × δ in {0, 5, 10}.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from service.engine.coverage import budget_k  # noqa: E402
from service.engine.records import load_records  # noqa: E402
from service.engine.replay import plan_replay, run_replay, total_cases  # noqa: E402
from service.engine.spec import NAMED_POLICIES, SpecError, make_spec  # noqa: E402

DEFAULT_DATA = ROOT.parent / "shared" / "data" / "swebench_lite" / "records.csv"


def straightforward_case(d: np.ndarray, labels: np.ndarray, n_g: np.ndarray, order: np.ndarray, k: int,
                         theta: float, a: float, big_b: int, rng: np.random.Generator) -> int:
    """One case the plain way: SPEC §3 coverage, then a literal bootstrap with B resamples."""
    seen = order[:k]
    big_n = len(d)
    req = [max(1, min(int(n), (k * int(n)) // big_n)) for n in n_g]
    counts = np.bincount(labels[seen], minlength=len(n_g))
    if sum(req) > k or any(counts[g] < req[g] for g in range(len(n_g))):
        return 0
    obs = d[seen]
    m = obs.mean()
    means = obs[rng.integers(0, k, size=(big_b, k))].mean(axis=1)
    if m > theta:
        return 1 if np.mean(means <= theta) <= a else 0
    return -1 if np.mean(means > theta) <= a else 0


def measure_straightforward(records, spec, n_pairs: int, n_orders: int) -> tuple[float, int]:
    plan = plan_replay(records, spec)
    cfg = plan.configs[0]
    rng = np.random.default_rng(0)
    cases = 0
    t0 = time.perf_counter()
    for p in range(n_pairs):
        d = plan.pair_values(p) / (plan.lattice or 1)
        labels = plan.labels(p, cfg.group)
        n_g = np.bincount(labels)
        order = plan.case_order(p, 0, 0)
        for r in range(n_orders):
            for b in spec.budgets:
                straightforward_case(d, labels, n_g, order[r], budget_k(b, len(d)), cfg.delta / 100, cfg.a,
                                     int(cfg.bootstrap), rng)
                cases += 1
    return time.perf_counter() - t0, cases


def child(data: str, jobs: int, orders: int) -> None:
    """Run the workload in a fresh process and print its time and peak RSS as JSON."""
    records = load_records(data)
    spec = make_spec(policies=["coverage_bootstrap"], deltas=[0], orders=orders, groups=["group"], bootstrap=[200])
    t0 = time.perf_counter()
    report = run_replay(records, spec, jobs=jobs)
    wall = time.perf_counter() - t0
    usage = resource.getrusage
    peak_kb = usage(resource.RUSAGE_SELF).ru_maxrss + usage(resource.RUSAGE_CHILDREN).ru_maxrss
    conf = report["configurations"][0]
    print(json.dumps({"wall": wall, "peak_mb": peak_kb / 1024, "cases": total_cases(plan_replay(records, spec)),
                      "msb": conf["minimum_sufficient_budget"]}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--orders", type=int, default=500)
    ap.add_argument("--slice-pairs", type=int, default=6)
    ap.add_argument("--slice-orders", type=int, default=10)
    ap.add_argument("--all-policies", action="store_true")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        child(args.data, args.child, args.orders)
        return
    print(f"data: {args.data}")
    fast = {}
    for jobs in (1, 2):
        out = subprocess.run([sys.executable, __file__, "--data", args.data, "--orders", str(args.orders),
                              "--child", str(jobs)], capture_output=True, text=True, check=True)
        fast[jobs] = json.loads(out.stdout.strip().splitlines()[-1])
        f = fast[jobs]
        print(f"fast engine, jobs={jobs}: {f['cases']:,} cases in {f['wall']:.2f} s wall, "
              f"peak RSS {f['peak_mb']:.0f} MB (parent + children), minimum sufficient budget {f['msb']}")
    records = load_records(args.data)
    spec = make_spec(policies=["coverage_bootstrap"], deltas=[0], orders=args.orders, groups=["group"],
                     bootstrap=[200])
    slow_t, slow_cases = measure_straightforward(records, spec, args.slice_pairs, args.slice_orders)
    per_case_slow = slow_t / slow_cases
    best = min(f["wall"] for f in fast.values())
    per_case_fast = best / fast[1]["cases"]
    print(f"straightforward: {slow_cases:,} cases in {slow_t:.2f} s = {per_case_slow * 1e6:.1f} µs/case "
          f"(whole workload would take ~{per_case_slow * fast[1]['cases'] / 3600:.1f} h)")
    print(f"fast: {per_case_fast * 1e9:.0f} ns/case; ratio {per_case_slow / per_case_fast:,.0f}x")
    if args.all_policies:
        t0 = time.perf_counter()
        for name, pol in NAMED_POLICIES.items():
            if pol.rule == "mcnemar" and not records.binary_single_trial:
                continue
            deltas = [0] if pol.rule == "mcnemar" else [0, 5, 10]
            t1 = time.perf_counter()
            try:
                rep = run_replay(records, make_spec(policies=[name], deltas=deltas, orders=args.orders,
                                                    groups=["group"]), jobs=2)
            except SpecError as exc:  # e.g. cost_forced on records without costs
                print(f"  {name:28s} not applicable: {exc.message}")
                continue
            msb = [(c["delta"], c["minimum_sufficient_budget"]) for c in rep["configurations"]]
            print(f"  {name:28s} {time.perf_counter() - t1:7.1f} s  {msb}")
        print(f"all named policies x deltas: {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
