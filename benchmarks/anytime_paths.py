"""The anytime replay's path kernel, segmented against one pass over every step, in one run.

    .venv/bin/python benchmarks/anytime_paths.py [RECORDS] [--orders 500] [--pairs 40] [--repeat 3]

``betting.betting_paths`` advances the paths ``SEGMENT`` steps at a time and drops those
that have concluded at every threshold; with ``SEGMENT`` set past the longest path it is the
one-pass kernel it replaced (every step of every path, the same arithmetic). Both run here on
the cases of a replay: ``--pairs`` ordered pairs of ``RECORDS`` (default
``../shared/data/swebench_lite/records.csv``) drawn at random, ``--orders`` uniform orders
each, δ = 0 and 5, coverage met from the step that meets the proportional floor of ``--group``
(default: one group, as ``multitrial_speed.py`` replays). Prints
each kernel's least time of ``--repeat`` runs, the ratio, the share of steps after a path's
first conclusion, and whether the decisions and stops are identical (they must be).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from service.engine import betting  # noqa: E402
from service.engine.coverage import required  # noqa: E402
from service.engine.records import group_labels, load_records  # noqa: E402
from service.engine.replay import plan_replay  # noqa: E402
from service.engine.spec import make_spec  # noqa: E402


def cases(records_path: Path, orders: int, pairs: int, group: str | None) -> tuple[np.ndarray, np.ndarray, int, int]:
    """``(v [cases, N], coverage [cases, N], N, lattice)`` for ``pairs`` ordered pairs drawn at
    random (seeded), on the tasks every system observed."""
    rec = load_records(str(records_path))
    lattice = plan_replay(rec, make_spec(policies=["anytime_coverage"])).lattice
    if lattice is None:
        raise SystemExit("these records have no outcome lattice (the replay's anytime runs on raw differences)")
    rng = np.random.default_rng(0)
    labels = group_labels(rec, group)[0]
    obs = rec.observed.all(axis=0)
    tasks = np.flatnonzero(obs)
    n = len(tasks)
    lab = np.unique(labels[tasks], return_inverse=True)[1]
    n_g = np.bincount(lab)
    steps = np.arange(1, n + 1)
    req = required("proportional", steps, n_g)
    order = np.argsort(rng.random((orders, n)), axis=1)
    counts = np.cumsum(np.eye(len(n_g), dtype=np.int32)[lab[order]], axis=1)
    cov = np.all(counts >= req[None], axis=2) & (req.sum(axis=1) <= steps)[None, :]
    every = [(a, b) for a in range(rec.n_systems) for b in range(rec.n_systems) if a != b]
    chosen = rng.choice(len(every), size=min(pairs, len(every)), replace=False)
    vs = []
    for i in chosen.tolist():
        a, b = every[i]
        vs.append(np.round((rec.y[a, tasks] - rec.y[b, tasks]) * lattice).astype(np.int64)[order])
    return np.concatenate(vs), np.tile(cov, (len(vs), 1)), n, lattice


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("records", nargs="?", type=Path, default=ROOT.parent / "shared/data/swebench_lite/records.csv")
    ap.add_argument("--orders", type=int, default=500)
    ap.add_argument("--pairs", type=int, default=40)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--group", default=None, help="grouping column for the coverage floor (default: one group)")
    args = ap.parse_args()
    v, cov, n, lattice = cases(args.records, args.orders, args.pairs, args.group)
    thetas = [0.0, 0.05]
    segment = betting.SEGMENT
    results, times = {}, {}
    for name, seg in (("one pass", n + 1), ("segmented", segment)):
        betting.SEGMENT = seg
        best = float("inf")
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            results[name] = betting.betting_paths(v, lattice, n, thetas, 0.05, n, cov)
            best = min(best, time.perf_counter() - t0)
        times[name] = best
    betting.SEGMENT = segment
    (d1, s1), (d2, s2) = results["one pass"], results["segmented"]
    useful = np.minimum(s2, n).sum() / s2.size / n
    print(f"{v.shape[0]:,} paths x {n} steps x {len(thetas)} thresholds (lattice {lattice}), least of {args.repeat}")
    print(f"one pass   {times['one pass']:7.2f} s")
    print(f"segmented  {times['segmented']:7.2f} s  ({segment} steps a segment)")
    same = np.array_equal(d1, d2) and np.array_equal(s1, s2)
    print(f"ratio segmented / one pass: {times['segmented'] / times['one pass']:.2f}; steps up to the first "
          f"conclusion: {useful:.0%}; identical decisions and stops: {same}")


if __name__ == "__main__":
    main()
