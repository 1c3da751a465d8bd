"""What gap classes, the operating characteristic and diagnostics cost a replay (SPEC §5.1, §6).

    python benchmarks/replay_classes.py [--data ../shared/data/swebench_lite/records.csv] [--orders 500] [--repeat 3]

Replays the issue's workload (``coverage_bootstrap``, δ = 0, the 19-point grid, B = 200,
grouped by ``group``) in one process, alternately with the three additions switched off
(``gap_classes``, ``operating_characteristic`` and ``diagnostics`` replaced by empty ones:
the report as it was before them) and on; prints the best wall time of each and their ratio.
The pair tallies are computed once per run in both cases; only ``build_report`` differs.
"""

from __future__ import annotations

import argparse
import sys
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from service.engine import classes, diagnostics, metrics  # noqa: E402
from service.engine import replay as engine  # noqa: E402
from service.engine.records import load_records  # noqa: E402
from service.engine.report import report_json  # noqa: E402
from service.engine.spec import make_spec  # noqa: E402

DEFAULT_DATA = ROOT.parent / "shared" / "data" / "swebench_lite" / "records.csv"


@contextmanager
def without_additions():
    saved = (classes.gap_classes, metrics._operating_characteristic, diagnostics.configuration, diagnostics.report)
    classes.gap_classes = lambda *a, **k: ([], 0)
    metrics._operating_characteristic = lambda *a, **k: {}
    diagnostics.configuration = lambda *a, **k: []
    diagnostics.report = lambda *a, **k: []
    try:
        yield
    finally:
        (classes.gap_classes, metrics._operating_characteristic, diagnostics.configuration, diagnostics.report) = saved


def timed(records, spec) -> tuple[float, float, int]:
    """(whole replay seconds, build_report seconds, report bytes)."""
    t0 = time.perf_counter()
    plan = engine.plan_replay(records, spec)
    chunks = [engine.run_chunk(plan, a, b) for a, b in engine._chunk_bounds(plan.n_pairs, 4)]
    t1 = time.perf_counter()
    report = engine.build_report(plan, chunks)
    body = report_json(report)
    t2 = time.perf_counter()
    return t2 - t0, t2 - t1, len(body)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--orders", type=int, default=500)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    records = load_records(str(args.data))
    spec = make_spec(policies=["coverage_bootstrap"], deltas=[0], orders=args.orders, groups=["group"], bootstrap=[200])
    base, full = [], []
    for _ in range(args.repeat):
        with without_additions():
            base.append(timed(records, spec))
        full.append(timed(records, spec))
    b, f = min(base), min(full)
    print(f"data: {args.data}; {args.orders} orders, {len(spec.budgets)} budgets, best of {args.repeat}")
    print(f"without classes/OC/diagnostics: {b[0]:.2f} s (report built in {b[1] * 1000:.0f} ms, {b[2]:,} bytes)")
    print(f"with them:                      {f[0]:.2f} s (report built in {f[1] * 1000:.0f} ms, {f[2]:,} bytes)")
    print(f"ratio with / without: {f[0] / b[0]:.3f} (build_report alone: {f[1] / b[1]:.2f})")
    # The replay itself is the same code in both; its noise on a shared machine dwarfs the
    # difference, so also give the added report-building time as a share of the whole run.
    print(f"added report time / whole run: {(f[1] - b[1]) / b[0]:.3%}")


if __name__ == "__main__":
    main()
