"""The docker-compose deployment without Docker: the same commands, started directly.

``sufficiency migrate`` on an empty Postgres database, ``sufficiency serve --workers 2``
and ``sufficiency worker`` on Redis; a replay goes through the HTTP API end to end.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.service import procs
from tests.service.conftest import SMALL_SPEC, create_database, drop_database, synth_csv
from tests.service.test_replays import engine_report

pytestmark = pytest.mark.slow


@pytest.fixture
def fresh_db(pg_admin) -> Iterator[str]:  # noqa: ANN001
    url = create_database(pg_admin)
    yield url
    drop_database(pg_admin, url)


def test_compose_processes_run_a_replay(
    fresh_db: str, redis_broker: tuple[str, str], tmp_path: Path
) -> None:
    broker, queue = redis_broker
    env = procs.env_for(
        environment="production", database_url=fresh_db, broker_url=broker, celery_queue=queue,
        data_dir=tmp_path / "data", chunk_pairs=4,
    )
    migrate = subprocess.run(
        [sys.executable, "-c", procs.BOOT, "migrate"], cwd=procs.REPO, env=env, capture_output=True, text=True,
        timeout=60,
    )
    assert migrate.returncode == 0, migrate.stdout + migrate.stderr
    port = procs.free_port()
    serve = ["serve", "--host", "127.0.0.1", "--port", str(port), "--workers", "2"]
    api = procs.start(serve, env, tmp_path / "api.log")
    alive = tmp_path / "worker-alive"
    worker = procs.start(
        ["worker", "--concurrency", "2", "--loglevel", "warning", "--alive-file", str(alive)], env,
        tmp_path / "worker.log",
    )
    base = f"http://127.0.0.1:{port}"
    try:
        procs.wait_http(f"{base}/readyz", timeout=60, proc=api)
        with httpx.Client(base_url=base, timeout=30) as http:
            assert http.get("/readyz").json()["checks"] == {"database": "ok", "broker": "ok"}
            content = synth_csv(seed=21, n_systems=4)
            ds = http.post("/v1/datasets", files={"file": ("b.csv", content, "text/csv")}).json()
            r = http.post("/v1/replays", json={"dataset_id": ds["id"], **SMALL_SPEC})
            assert r.status_code == 202
            rid = r.json()["id"]
            deadline = time.monotonic() + 90
            while (state := http.get(f"/v1/replays/{rid}").json())["status"] not in ("succeeded", "failed"):
                assert time.monotonic() < deadline, (tmp_path / "worker.log").read_text()[-3000:]
                time.sleep(0.1)
            assert state["status"] == "succeeded", state
            from service.engine.report import report_json

            assert http.get(f"/v1/replays/{rid}/report").content == report_json(engine_report(content, SMALL_SPEC))
        assert alive.exists()  # the worker's healthcheck file
    finally:
        procs.stop(worker)
        procs.stop(api)
