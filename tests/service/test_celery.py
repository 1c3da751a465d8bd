"""Replays on real Celery workers (Redis broker, Postgres), started by the fixtures.

Each test session uses its own Redis database number and queue name and its own Postgres
database, so concurrent runs on this machine do not see each other's jobs.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text

from service.main import create_app
from tests.service import procs
from tests.service.conftest import (
    SMALL_SPEC,
    make_settings,
    synth_csv,
    truncate_all,
    upload,
    wait_for,
)
from tests.service.test_replays import engine_report

pytestmark = pytest.mark.slow


@pytest.fixture
def job_settings(pg_url: str, redis_broker: tuple[str, str], tmp_path: Path) -> Iterator[dict[str, object]]:
    broker, queue = redis_broker
    yield {
        "data_dir": tmp_path / "data",
        "database_url": pg_url,
        "broker_url": broker,
        "celery_queue": queue,
        "migrate_on_start": False,
        "chunk_pairs": 5,
        "heartbeat_seconds": 0.5,
        "stale_after_seconds": 3,
        "sweep_seconds": 1,
        "visibility_timeout": 15,
    }
    truncate_all(pg_url)


def _worker(settings: dict[str, object], tmp_path: Path, name: str, *args: str):
    environ = procs.env_for(**settings)
    return procs.start(["worker", "--loglevel", "warning", *args], environ, tmp_path / f"{name}.log")


def _logs(tmp_path: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(tmp_path.glob("*.log")))


def test_celery_replay_equals_engine(job_settings: dict[str, object], tmp_path: Path) -> None:
    """Also: the pool's processes share the 0/1 tails they compute (engine/tail_tables.py) in the
    directory the settings name, and the report is still the engine's, byte for byte."""
    content = synth_csv(seed=11, n_systems=5)
    job_settings = {**job_settings, "shared_tails_dir": tmp_path / "tails"}
    worker = _worker(job_settings, tmp_path, "worker", "--pool", "prefork", "--concurrency", "2")
    try:
        with TestClient(create_app(make_settings(**job_settings))) as client:
            assert client.get("/readyz").json()["checks"] == {"database": "ok", "broker": "ok"}
            ds = upload(client, content)
            rid = client.post("/v1/replays", json={"dataset_id": ds["id"], **SMALL_SPEC}).json()["id"]
            done = wait_for(client, rid, timeout=60)
            assert done["status"] == "succeeded", _logs(tmp_path)
            assert done["n_chunks"] == 4  # 20 pairs, 5 per chunk
            (versions,) = (tmp_path / "tails").iterdir()  # one engine version
            assert any(versions.iterdir()), "the workers wrote no shared tail table"  # (before this process replays)
            from service.engine.report import report_json

            assert client.get(f"/v1/replays/{rid}/report").content == report_json(engine_report(content, SMALL_SPEC))
    finally:
        procs.stop(worker)


def _chunks(url: str, rid: str) -> list[tuple[int, str, int]]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                text("SELECT chunk_index, status, attempts FROM replay_chunks WHERE replay_id = :r ORDER BY 1"),
                {"r": rid},
            ).all()
        return [tuple(r) for r in rows]
    finally:
        engine.dispose()


def test_worker_killed_mid_job_is_recovered(job_settings: dict[str, object], tmp_path: Path) -> None:
    """kill -9 a worker while it runs a chunk: another worker finishes the replay, and the
    report equals an uninterrupted run (nothing lost, nothing counted twice)."""
    content = synth_csv(seed=12, n_systems=4, n_tasks=200)
    spec = {**SMALL_SPEC, "orders": 5000, "bootstrap": [500], "budgets": "0.05:0.95:0.05"}  # ~0.05 s per pair
    job_settings = {**job_settings, "chunk_pairs": 4}  # 12 pairs -> 3 chunks of about a second
    victim = _worker(job_settings, tmp_path, "victim", "--pool", "solo", "--no-sweeper")
    rescuer = None
    try:
        with TestClient(create_app(make_settings(**job_settings))) as client:
            ds = upload(client, content)
            rid = client.post("/v1/replays", json={"dataset_id": ds["id"], **spec}).json()["id"]
            url = str(job_settings["database_url"])
            deadline = time.monotonic() + 60
            while not any(status == "running" for _, status, _ in _chunks(url, rid)):
                assert time.monotonic() < deadline, _logs(tmp_path)
                time.sleep(0.02)
            procs.kill9(victim)
            killed_during = [c for c in _chunks(url, rid) if c[1] == "running"]
            assert killed_during, "the chunk finished before the kill; make it slower"
            rescuer = _worker(job_settings, tmp_path, "rescuer", "--pool", "solo")
            done = wait_for(client, rid, timeout=90)
            assert done["status"] == "succeeded", _logs(tmp_path)
            chunks = _chunks(url, rid)
            assert all(status == "done" for _, status, _ in chunks)
            assert sum(attempts for *_, attempts in chunks) > len(chunks)  # the killed chunk ran again
            from service.engine.report import metric_rows, report_json

            expected = engine_report(content, spec)
            assert client.get(f"/v1/replays/{rid}/report").content == report_json(expected)
            metrics = client.get(f"/v1/replays/{rid}/metrics", params={"limit": 10000}).json()
            assert metrics["total"] == len(metric_rows(expected))  # stored once, not per delivery
    finally:
        procs.kill9(victim)
        if rescuer is not None:
            procs.stop(rescuer)
