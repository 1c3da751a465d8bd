"""Time a full replay of a real benchmark through the HTTP API with 1 and 2 Celery workers.

    .venv/bin/python benchmarks/service_replay.py [../shared/data/swebench_lite/records.csv]

Starts `sufficiency serve` and `sufficiency worker` processes against a private Postgres
database and Redis queue (created and removed here), uploads the records, submits a replay
(two policies x two thresholds, 19 budgets, 500 orders, grouped by `group`), and reports the
wall time from submission to a stored report, plus whether the report equals the CLI's bytes.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from tests.service import procs  # noqa: E402

PG = os.environ.get("SUFFICIENCY_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
REDIS = os.environ.get("SUFFICIENCY_TEST_REDIS_URL", "redis://127.0.0.1:6379")
SPEC = {"policies": ["coverage_bootstrap", "serfling_coverage"], "deltas": [0, 5], "groups": ["group"]}
CLI = ["--group", "group", "--policy", "coverage_bootstrap", "--policy", "serfling_coverage",
       "--delta", "0", "--delta", "5"]


def run_once(records: Path, workers: int, cli_bytes: bytes, tmp: Path) -> float:
    admin = create_engine(PG, isolation_level="AUTOCOMMIT")
    name = f"sufficiency_bench_{os.getpid()}_{secrets.token_hex(3)}"
    with admin.connect() as c:
        c.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(PG).set(database=name).render_as_string(hide_password=False)
    env = procs.env_for(database_url=url, broker_url=f"{REDIS}/{secrets.randbelow(15) + 1}",
                        celery_queue=name, data_dir=tmp / "data")
    started: list[subprocess.Popen] = []
    try:
        subprocess.run([sys.executable, "-m", "service.cli", "migrate"], cwd=REPO, env=env, check=True,
                       capture_output=True)
        port = procs.free_port()
        started.append(procs.start(["serve", "--port", str(port)], env, tmp / f"api{workers}.log"))
        for i in range(workers):
            started.append(procs.start(["worker", "--concurrency", "1", "--loglevel", "warning"], env,
                                       tmp / f"worker{workers}_{i}.log"))
        base = f"http://127.0.0.1:{port}"
        procs.wait_http(f"{base}/readyz", timeout=60)
        time.sleep(3)  # let the workers connect before timing
        with httpx.Client(base_url=base, timeout=60) as http:
            ds = http.post("/v1/datasets", files={"file": ("records.csv", records.read_bytes(), "text/csv")}).json()
            t0 = time.monotonic()
            rid = http.post("/v1/replays", json={"dataset_id": ds["id"], **SPEC}).json()["id"]
            while (state := http.get(f"/v1/replays/{rid}").json())["status"] not in ("succeeded", "failed"):
                time.sleep(0.05)
            elapsed = time.monotonic() - t0
            same = http.get(f"/v1/replays/{rid}/report").content == cli_bytes
        print(f"{workers} worker(s): {state['status']} in {elapsed:.1f} s, {state['n_pairs']} pairs in "
              f"{state['n_chunks']} chunks; report == CLI bytes: {same}")
        return elapsed
    finally:
        for p in reversed(started):
            procs.stop(p)
        with admin.connect() as c:
            c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def main() -> int:
    records = Path(sys.argv[1] if len(sys.argv) > 1 else REPO.parent / "shared/data/swebench_lite/records.csv")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        out = tmp / "cli.json"
        t0 = time.monotonic()
        subprocess.run([sys.executable, "-m", "service.cli", "replay", str(records), *CLI, "--format", "json",
                        "--out", str(out)], cwd=REPO, check=True, capture_output=True)
        print(f"CLI (1 process): {time.monotonic() - t0:.1f} s")
        for workers in (1, 2):
            run_once(records, workers, out.read_bytes(), tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
