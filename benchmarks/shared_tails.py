"""What sharing the 0/1 tail tables between worker processes saves (engine/tail_tables.py).

    python benchmarks/shared_tails.py [--board 134x500x12] [--workers 2] [--repeat 3]

Replays the board's primary configuration (``coverage_bootstrap``, δ = 0, grouped) as the
service's workers do, without the service around it: the pairs cut into the service's chunks,
``--workers`` processes each running every ``workers``-th chunk at the same time, one BLAS
thread each. Each round runs it twice, once with each process keeping its own tables (as
before) and once with the processes sharing a fresh directory, in alternating order, and
prints per mode the CPU seconds of each process (after its imports and plan), the wall time of
the slowest, and how many tails the processes computed between them. A fresh directory is the
first replay of a deployment; a deployment that has replayed the board before reads them all.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CHILD = """
import json, sys, time
from service.engine import tail_tables, tails as T
from service.engine.blas import one_blas_thread
from service.engine.records import load_records
from service.engine.replay import plan_replay, run_chunk
from service.engine.spec import make_spec
from service.replays.service import chunk_bounds
records, shared, me, workers = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
start_at = float(sys.argv[5])
one_blas_thread()
tail_tables.share(None if shared == "-" else shared)
plan = plan_replay(load_records(records), make_spec(policies=["coverage_bootstrap"], deltas=[0.0], groups=["group"]))
chunks = chunk_bounds(plan.n_pairs, 200, 800)[me::workers]
computed = [0]
now = T._tails_now
def counted(*x):
    computed[0] += len(x[0])
    return now(*x)
T._tails_now = counted
while time.time() < start_at:  # every process starts its chunks at the same moment
    time.sleep(0.001)
c0, w0 = time.process_time(), time.perf_counter()
for lo, hi in chunks:
    run_chunk(plan, lo, hi)
print(json.dumps({"cpu": time.process_time() - c0, "wall": time.perf_counter() - w0, "tails": computed[0]}))
"""


def run(records: Path, shared: str, workers: int) -> dict:
    start_at = time.time() + 6.0  # time enough for every process's imports and plan
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, str(records), shared, str(i), str(workers), str(start_at)],
                              cwd=REPO, stdout=subprocess.PIPE, text=True) for i in range(workers)]
    outs = [json.loads(p.communicate(timeout=600)[0]) for p in procs]
    if any(p.returncode for p in procs):
        raise RuntimeError("a replay process failed")
    if time.time() - start_at < max(o["wall"] for o in outs):
        raise RuntimeError("a process started late: raise the 6 s head start")
    return {"cpu": [round(o["cpu"], 2) for o in outs], "wall": round(max(o["wall"] for o in outs), 2),
            "tails": sum(o["tails"] for o in outs)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--board", default="134x500x12", metavar="SxTxG")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", default="/dev/shm" if Path("/dev/shm").is_dir() else None,
                        help="where the shared tables go (default /dev/shm: memory)")
    args = parser.parse_args()
    systems, tasks, groups = (int(x) for x in args.board.lower().split("x"))
    with tempfile.TemporaryDirectory() as d, tempfile.TemporaryDirectory(dir=args.dir) as s:
        tmp, shm = Path(d), Path(s)
        records = tmp / "board.csv"
        subprocess.run([sys.executable, "-m", "service.cli", "synth", "--systems", str(systems), "--tasks", str(tasks),
                        "--groups", str(groups), "--out", str(records)], cwd=REPO, check=True, capture_output=True)
        print(f"board {args.board}, coverage_bootstrap, delta 0, grouped; {args.workers} processes at once")
        print(f"{'round':>5} {'mode':<7} {'CPU s per process':<24} {'wall s':>7} {'tails computed':>15}")
        rows = []
        for r in range(args.repeat):
            modes = ("own", "shared") if r % 2 == 0 else ("shared", "own")
            for mode in modes:
                shared = "-" if mode == "own" else str(shm / f"tails{r}")
                got = run(records, shared, args.workers)
                rows.append({"round": r, "mode": mode, **got})
                print(f"{r:>5} {mode:<7} {', '.join(map(str, got['cpu'])):<24} {got['wall']:>7} {got['tails']:>15,}",
                      flush=True)
        for mode in ("own", "shared"):
            mine = [x for x in rows if x["mode"] == mode]
            cpu = sorted(sum(x["cpu"]) for x in mine)
            wall = sorted(x["wall"] for x in mine)
            print(f"{mode:<7} CPU of all processes, median {cpu[len(cpu) // 2]:.2f} s; "
                  f"wall median {wall[len(wall) // 2]:.2f} s")
        print(json.dumps(rows))


if __name__ == "__main__":
    main()
