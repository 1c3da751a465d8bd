"""Overall error of checkpoint sessions on a tie population, through the sessions API.

    .venv/bin/python benchmarks/session_spending.py [--sessions 300] [--rules bootstrap,paired_normal,anytime]
                                                    [--spendings obrien_fleming,none] [--jobs 2]

The population (SPEC §4.4): 1,000 tasks, A wins 100, B wins 100, the rest tie (Δ_full = 0, so
at δ = 0 every accept is a false accept). Each session declares checkpoints every 2 % of the
tasks up to 50 %, then 100 %, and is fed in the harness's own random order (not the
recommended one), 20 tasks per append, until it concludes or runs out. Sessions run against
the real app (TestClient, embedded SQLite in a temporary directory), in ``--jobs`` processes.
Prints, per rule and spending, the share of sessions that accept (must be <= 0.075 for
schedules that spend a), reject and stay unresolved, and the mean tasks used.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

N, WINS, LOSSES, PER_APPEND = 1000, 100, 100, 20
CHECKPOINTS = [round(0.02 * i, 2) for i in range(1, 26)] + [1.0]


def population() -> tuple[list[str], np.ndarray, np.ndarray]:
    ids = [f"task-{i:04d}" for i in range(N)]
    d = np.r_[np.ones(WINS), -np.ones(LOSSES), np.zeros(N - WINS - LOSSES)]
    ya = np.where(d < 0, 0.0, 1.0)
    ya[WINS + LOSSES + (N - WINS - LOSSES) // 2 :] = 0.0  # half the ties are both-fail
    return ids, ya, ya - d


def run_sessions(rule: str, spending: str | None, seeds: list[int]) -> list[tuple[str, int]]:
    """``(final decision, tasks used)`` per session seed."""
    import logging
    import warnings

    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)
    from fastapi.testclient import TestClient

    from service.config import Settings
    from service.main import create_app

    ids, ya, yb = population()
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        app = create_app(Settings(environment="test", data_dir=Path(tmp) / "data"))
        with TestClient(app) as client:
            for seed in seeds:
                body: dict[str, object] = {
                    "universe": {"task_ids": ids},
                    "system_a": "A",
                    "system_b": "B",
                    "rule": rule,
                    "budgets": CHECKPOINTS,
                    "delta": 0,
                    "a": 0.05,
                }
                if spending is not None:
                    body["spending"] = spending
                r = client.post("/v1/sessions", json=body)
                r.raise_for_status()
                sid = r.json()["id"]
                order = np.random.default_rng([seed, 11]).permutation(N)  # the harness's order
                st: dict = {}
                for start in range(0, N, PER_APPEND):
                    rows = []
                    for i in order[start : start + PER_APPEND].tolist():
                        rows.append({"task_id": ids[i], "system": "A", "outcome": float(ya[i])})
                        rows.append({"task_id": ids[i], "system": "B", "outcome": float(yb[i])})
                    r = client.post(f"/v1/sessions/{sid}/observations", json={"observations": rows})
                    r.raise_for_status()
                    st = r.json()
                    if st["status"] != "running":
                        break
                out.append((st["current"]["decision"], int(st["current"]["k"])))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sessions", type=int, default=300)
    ap.add_argument("--rules", default="bootstrap,paired_normal,anytime")
    ap.add_argument("--spendings", default="obrien_fleming", help="for fixed-sample rules (comma list)")
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    print(
        f"tie population: N={N}, {WINS} A-wins, {LOSSES} B-wins; {len(CHECKPOINTS)} checkpoints "
        f"(2 % .. 50 %, 100 %), {PER_APPEND} tasks per append, {args.sessions} sessions each, a = 0.05"
    )
    print(f"{'rule':<14} {'spending':<15} {'accept':>7} {'reject':>7} {'defer':>7} {'tasks':>7} {'s':>6}")
    for rule in args.rules.split(","):
        for spending in [None] if rule == "anytime" else args.spendings.split(","):
            t0 = time.perf_counter()
            seeds = list(range(args.sessions))
            parts = [seeds[j :: args.jobs] for j in range(args.jobs)]
            with ProcessPoolExecutor(args.jobs) as pool:
                results = [
                    x
                    for part in pool.map(run_sessions, [rule] * len(parts), [spending] * len(parts), parts)
                    for x in part
                ]
            dec = np.array([d for d, _ in results])
            used = np.array([k for _, k in results])
            print(
                f"{rule:<14} {spending or '-':<15} {np.mean(dec == 'accept'):>7.3f} {np.mean(dec == 'reject'):>7.3f} "
                f"{np.mean(dec == 'defer'):>7.3f} {used.mean():>7.1f} {time.perf_counter() - t0:>6.0f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
