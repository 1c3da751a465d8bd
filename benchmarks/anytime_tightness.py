"""Mean tasks used and error of the anytime rules on real records: ``anytime`` (betting) vs
the baseline ``anytime_eb`` (empirical Bernstein), on the same orders.

    .venv/bin/python benchmarks/anytime_tightness.py [records.csv ...] [--orders 20] [--delta 0 --delta 5]

Every directed pair, ``--orders`` uniform orders each (the same for both rules), decided after
every task, no coverage gating, budget 100 % (SPEC §4.2). Prints, per dataset and δ, the mean
tasks used, the pooled error (wrong conclusions / cases), the worst pair's error, the ratio
new / baseline and the seconds each rule took.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from service.engine import rules as R  # noqa: E402
from service.engine.betting import betting_paths  # noqa: E402
from service.engine.records import filter_systems, load_records  # noqa: E402

DEFAULT = sorted(str(p) for p in (REPO.parent / "shared" / "data").glob("*/records.csv"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("records", nargs="*", default=DEFAULT)
    ap.add_argument("--orders", type=int, default=20)
    ap.add_argument("--delta", type=float, action="append")
    ap.add_argument("--a", type=float, default=0.05)
    ap.add_argument("--min-task-coverage", type=float, default=0.0, help="system filter (pairs use shared tasks)")
    args = ap.parse_args()
    deltas = args.delta or [0.0, 5.0]
    print(
        f"{'dataset':<32} {'δ':>4} {'pairs':>6} {'N':>5} {'tasks eb':>9} {'tasks new':>9} {'ratio':>6} "
        f"{'err eb':>7} {'err new':>7} {'worst new':>9} {'s eb':>6} {'s new':>6}"
    )
    for path in args.records:
        try:
            rec, _ = filter_systems(load_records(path), args.min_task_coverage)
        except ValueError as exc:  # e.g. a single system
            print(f"{Path(path).parent.name:<32} skipped: {exc}")
            continue
        lat = R.find_lattice(rec.y[rec.observed])
        name = Path(path).parent.name
        pairs = [(a, b) for a in range(rec.n_systems) for b in range(rec.n_systems) if a != b]
        for delta in deltas:
            theta = delta / 100.0
            used = {"eb": [], "new": []}
            err = {"eb": [], "new": []}
            secs = {"eb": 0.0, "new": 0.0}
            n_tasks = []
            for p, (a, b) in enumerate(pairs):
                t = rec.observed[a] & rec.observed[b]
                d = rec.y[a, t] - rec.y[b, t]
                n = len(d)
                if n == 0:
                    continue
                v = np.round(d * lat).astype(np.int64) if lat else d
                full = R.ACCEPT if R.above(np.array(v.sum()), np.array(n), theta, lat) else R.REJECT
                rng = np.random.default_rng([p, 2024])
                vv = np.stack([v[rng.permutation(n)] for _ in range(args.orders)])
                n_tasks.append(n)
                for key, kernel in (("eb", R.anytime_paths), ("new", betting_paths)):
                    t0 = time.perf_counter()
                    dec, stop = kernel(vv, lat, n, theta, args.a, n)
                    secs[key] += time.perf_counter() - t0
                    used[key].append(float(np.minimum(stop, n).mean()))
                    err[key].append(float(np.mean((dec != R.DEFER) & (dec != full))))
            if not n_tasks:
                print(f"{name:<32} {delta:>4g}  no pair shares a task")
                continue
            ue, un = np.mean(used["eb"]), np.mean(used["new"])
            print(
                f"{name:<32} {delta:>4g} {len(n_tasks):>6} {int(np.median(n_tasks)):>5} {ue:>9.1f} {un:>9.1f} "
                f"{un / ue:>6.3f} {np.mean(err['eb']):>7.4f} {np.mean(err['new']):>7.4f} {max(err['new']):>9.3f} "
                f"{secs['eb']:>6.1f} {secs['new']:>6.1f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
