"""Tasks a live placement uses, and whether its final rank interval holds the true rank, on
real boards: every system held out in turn and placed against the others in the placement
order (SPEC §8.1).

    .venv/bin/python benchmarks/placement_tasks.py [records.csv ...] [--group group] [--width 3 --width 10]

Per dataset, width and correction: systems whose final interval holds their true rank, and
the tasks used (mean / median / min / max) against the full run (the ratio is the share of
the run a placement saves). The state depends on the observed prefix only and concludes
monotonically, so the stop is found by bisection over k.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from service.engine import placement as P  # noqa: E402
from service.engine.live import make_live_spec, make_universe  # noqa: E402
from service.engine.records import group_labels, load_records  # noqa: E402

DEFAULT = [
    str(REPO.parent / "shared" / "data" / n / "records.csv") for n in ("swebench_lite", "terminal_bench_core_0.1.1")
]  # noqa: E501


def place(universe, board, y_entry, spec, correction, width, seed=0):
    order = P.placement_order(universe, board, spec.floor, seed)
    rank = np.empty(universe.n, dtype=np.int64)
    rank[order] = np.arange(universe.n)

    def state(k):
        seq = np.asarray(order[:k], dtype=np.intp)
        y = np.full(universe.n, np.nan)
        y[seq] = y_entry[seq]
        trials = np.zeros(universe.n, dtype=np.int64)
        trials[seq] = 1
        return P.placement_state(universe, board, P.Entry(y, trials, seq), spec, correction, width, rank)

    lo, hi = 1, universe.n
    while lo < hi:
        mid = (lo + hi) // 2
        if state(mid).status == "concluded":
            hi = mid
        else:
            lo = mid + 1
    return state(lo)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("records", nargs="*", default=DEFAULT)
    ap.add_argument("--group", default="group")
    ap.add_argument("--width", type=int, action="append")
    ap.add_argument("--a", type=float, default=0.05)
    args = ap.parse_args()
    spec = make_live_spec(rule="anytime", a=args.a, floor="proportional", coverage_aware=True)
    for path in args.records:
        rec = load_records(path)
        labels, names = group_labels(rec, args.group or None)
        universe = make_universe(rec.tasks, [names[i] for i in labels.tolist()])
        y = np.where(rec.observed, rec.y, np.nan)
        for width in args.width or [1, 3, 5, 10]:
            for correction in ("holm", "bonferroni"):
                t0 = time.perf_counter()
                used, held = [], 0
                for h in range(rec.n_systems):
                    keep = [i for i in range(rec.n_systems) if i != h]
                    board = P.Board(tuple(rec.systems[i] for i in keep), y[keep])
                    final = place(universe, board, y[h], spec, correction, width)
                    held += final.rank_low <= P.true_rank(y[h], board) <= final.rank_high
                    used.append(final.k)
                u = np.asarray(used)
                print(
                    f"{Path(path).parent.name} width {width} {correction}: held {held}/{rec.n_systems}; tasks used "
                    f"mean {u.mean():.1f} median {int(np.median(u))} min {u.min()} max {u.max()} of {universe.n} "
                    f"(ratio to the full run {u.mean() / universe.n:.2f}); {time.perf_counter() - t0:.1f} s"
                )


if __name__ == "__main__":
    main()
