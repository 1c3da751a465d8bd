"""No lost work (issue 7): faults injected into real servers.

- Redis stopped (every message lost) while a replay is submitted: the replay is stored, the
  failed send clears its dispatch time, and a worker's sweeper sends it once Redis is back.
- Postgres stopped under a running API: readiness and requests answer 503 (never 500), an
  upload made during the outage stores nothing, and the same process serves again once the
  database is back (the pool's pre-ping replaces the dead connections).
- Postgres restarted while a Celery worker runs a replay's chunks: the replay finishes and
  its report equals the engine's.
- A client that disconnects mid-upload stores nothing.
- Chunk results are written once: duplicate deliveries of every chunk change nothing.

The Redis and Postgres servers stopped here are private to the test (``faults.py``).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, func, select, text

from service.auth import keys
from service.config import Settings
from service.db import run_migrations, transaction
from service.jobs import TASKS, TaskContext
from service.main import create_app
from service.replays import repository
from service.replays.models import MetricRow, ReplayChunk
from tests.service import procs
from tests.service.conftest import SMALL_SPEC, make_settings, synth_csv, truncate_all, unique_name, upload, wait_for
from tests.service.faults import OwnPostgres, OwnRedis, postgres_bin_dir, redis_server_binary


@pytest.fixture(scope="module")
def own_redis() -> Iterator[OwnRedis]:
    if redis_server_binary() is None:
        pytest.skip("fault tests need redis-server on PATH to run a private Redis")
    server = OwnRedis()
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def own_pg() -> Iterator[OwnPostgres]:
    if postgres_bin_dir() is None:
        pytest.skip("fault tests need Postgres binaries (/usr/lib/postgresql/*/bin) to run a private cluster")
    server = OwnPostgres()
    try:
        server.init()
        server.start()
        run_migrations(server.url, Settings().migrations_dir)
        yield server
    finally:
        server.destroy()


def test_replay_sent_while_redis_is_down_runs_when_it_returns(
    pg_url: str, own_redis: OwnRedis, tmp_path: Path
) -> None:
    settings = {
        "data_dir": tmp_path / "data", "database_url": pg_url, "broker_url": own_redis.url, "migrate_on_start": False,
        "celery_queue": unique_name("faults"), "chunk_pairs": 5, "heartbeat_seconds": 0.5, "stale_after_seconds": 30,
        "sweep_seconds": 0.5,
    }
    worker = procs.start(["worker", "--loglevel", "warning", "--pool", "solo"], procs.env_for(**settings),
                         tmp_path / "worker.log")
    try:
        with TestClient(create_app(make_settings(**settings))) as client:
            ds = upload(client, synth_csv(seed=3, n_systems=4))
            first = client.post("/v1/replays", json={"dataset_id": ds["id"], **SMALL_SPEC, "seed": 1}).json()["id"]
            assert wait_for(client, first, timeout=60)["status"] == "succeeded"  # the worker is up
            own_redis.stop()
            started = time.monotonic()
            r = client.post("/v1/replays", json={"dataset_id": ds["id"], **SMALL_SPEC})
            assert r.status_code == 202, r.text
            assert time.monotonic() - started < 30
            rid = r.json()["id"]
            ready = client.get("/readyz")
            assert ready.status_code == 503 and ready.json()["detail"]["broker"].startswith("error")
            engine = create_engine(pg_url)
            with engine.connect() as conn:
                stored = conn.execute(text("SELECT status FROM replays WHERE id = :i"), {"i": rid}).scalar_one()
                assert stored == "queued"
            engine.dispose()
            time.sleep(1.5)  # the worker's sweeps fail meanwhile; nothing is lost
            assert client.get(f"/v1/replays/{rid}").json()["status"] == "queued"
            own_redis.start()
            done = wait_for(client, rid, timeout=90)
            log = (tmp_path / "worker.log").read_text()[-3000:]
            assert done["status"] == "succeeded", log
            assert client.get("/readyz").status_code == 200
    finally:
        procs.stop(worker)
        if own_redis.proc is None:
            own_redis.start()
        truncate_all(pg_url)


def test_database_restart_gives_503_then_recovers_in_place(own_pg: OwnPostgres, tmp_path: Path) -> None:
    settings = make_settings(data_dir=tmp_path / "data", database_url=own_pg.url, migrate_on_start=False,
                             auth="required", auth_cache_seconds=3600, db_pool_size=2)
    content = synth_csv(seed=5, n_tasks=20)
    with TestClient(create_app(settings)) as c:
        with transaction(c.app.state.sessionmaker) as session:
            token = keys.create(session, name="ci", scopes="read,submit,decide")[1]
            fresh = keys.create(session, name="late", scopes="read")[1]
        auth = {"Authorization": f"Bearer {token}"}
        assert c.get("/v1/datasets", headers=auth).status_code == 200  # the key is now verified and cached
        assert upload_status(c, synth_csv(seed=6, n_tasks=20), auth) == 201
        assert c.get("/readyz").status_code == 200
        own_pg.stop()
        try:
            r = c.get("/readyz")
            assert r.status_code == 503 and r.json()["detail"]["database"].startswith("error")
            r = c.get("/v1/datasets", headers=auth)
            assert r.status_code == 503 and r.headers["retry-after"] and r.json()["error"] == "unavailable"
            assert upload_status(c, content, auth) == 503
            r = c.post("/v1/sessions", headers=auth, json={"universe": {"task_ids": ["a", "b"]},
                                                           "system_a": "x", "system_b": "y"})
            assert r.status_code == 503
            r = c.get("/v1/datasets", headers={"Authorization": f"Bearer {fresh}"})  # not verified yet
            assert r.status_code == 503 and "key store" in r.json()["detail"]
        finally:
            own_pg.start()
        deadline = time.monotonic() + 30
        while c.get("/readyz").status_code != 200:
            assert time.monotonic() < deadline, "the service did not recover"
            time.sleep(0.2)
        body = c.get("/v1/datasets", headers=auth).json()
        assert body["total"] == 1  # the upload made during the outage stored nothing
        assert upload_status(c, content, auth) == 201
        assert c.get("/v1/datasets", headers={"Authorization": f"Bearer {fresh}"}).status_code == 200


def test_workers_ride_out_a_database_restart_mid_replay(
    own_pg: OwnPostgres, own_redis: OwnRedis, tmp_path: Path
) -> None:
    """Postgres restarts while chunks run on a Celery worker: the tasks' transient-error
    retries and the sweeper finish the replay, and the report equals the engine's."""
    from service.engine.report import report_json
    from tests.service.test_replays import engine_report

    admin = create_engine(own_pg.url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text("CREATE DATABASE jobs"))
    admin.dispose()
    url = own_pg.url.rsplit("/", 1)[0] + "/jobs"
    run_migrations(url, Settings().migrations_dir)
    settings = {
        "data_dir": tmp_path / "data", "database_url": url, "broker_url": own_redis.url, "migrate_on_start": False,
        "celery_queue": unique_name("restart"), "chunk_pairs": 1, "heartbeat_seconds": 0.5,
        "stale_after_seconds": 4, "sweep_seconds": 0.5, "visibility_timeout": 20,
    }
    # enough work that the restart falls mid-replay: 30 chunks of one pair (a chunk of this size
    # takes tens of ms; three of three pairs once finished before the first poll saw one)
    spec = {**SMALL_SPEC, "orders": 600}
    content = synth_csv(seed=12, n_systems=6, n_tasks=200)
    worker = procs.start(["worker", "--loglevel", "warning", "--pool", "solo"], procs.env_for(**settings),
                         tmp_path / "worker.log")
    try:
        with TestClient(create_app(make_settings(**settings))) as client:
            ds = upload(client, content)
            rid = client.post("/v1/replays", json={"dataset_id": ds["id"], **spec}).json()["id"]
            deadline = time.monotonic() + 60
            while client.get(f"/v1/replays/{rid}").json()["chunks_done"] < 1:
                assert time.monotonic() < deadline, (tmp_path / "worker.log").read_text()[-3000:]
                time.sleep(0.05)
            before = client.get(f"/v1/replays/{rid}").json()
            own_pg.stop()
            time.sleep(2.5)  # chunks that finish meanwhile cannot store: their tasks retry
            own_pg.start()
            assert before["chunks_done"] < before["n_chunks"]  # the restart fell mid-replay
            done = wait_for(client, rid, timeout=120)
            assert done["status"] == "succeeded", (tmp_path / "worker.log").read_text()[-3000:]
            assert client.get(f"/v1/replays/{rid}/report").content == report_json(engine_report(content, spec))
    finally:
        procs.stop(worker)


def upload_status(c: TestClient, content: bytes, headers: dict[str, str]) -> int:
    return c.post("/v1/datasets", files={"file": ("b.csv", content, "text/csv")}, headers=headers).status_code


@pytest.fixture
def live(settings: Settings) -> Iterator[str]:
    """The app under uvicorn in a thread of this process (for raw-socket tests)."""
    port = procs.free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    yield f"127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=30)


def test_an_upload_cut_off_midway_stores_nothing(live: str) -> None:
    import httpx

    host, port = live.split(":")
    content = synth_csv(seed=9, n_systems=6, n_tasks=300)
    boundary = "cutoffboundary"
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"b.csv\"\r\n"
            f"Content-Type: text/csv\r\n\r\n").encode() + content + f"\r\n--{boundary}--\r\n".encode()
    for sent in (len(body) // 2, len(body) - 10):
        with socket.create_connection((host, int(port))) as s:
            s.sendall((f"POST /v1/datasets HTTP/1.1\r\nHost: {live}\r\nContent-Length: {len(body)}\r\n"
                       f"Content-Type: multipart/form-data; boundary={boundary}\r\n\r\n").encode() + body[:sent])
            s.shutdown(socket.SHUT_WR)
            s.settimeout(10)
            try:
                while s.recv(65536):
                    pass
            except OSError:
                pass
    assert httpx.get(f"http://{live}/v1/datasets").json()["total"] == 0
    r = httpx.post(f"http://{live}/v1/datasets", files={"file": ("b.csv", content, "text/csv")}, timeout=30)
    assert r.status_code == 201
    assert httpx.get(f"http://{live}/v1/datasets").json()["total"] == 1


def test_duplicate_chunk_deliveries_change_nothing(client: TestClient, settings: Settings) -> None:
    ds = upload(client, synth_csv(seed=4, n_systems=4))
    rid = client.post("/v1/replays", json={"dataset_id": ds["id"], **SMALL_SPEC}).json()["id"]
    assert wait_for(client, rid)["status"] == "succeeded"
    factory = client.app.state.sessionmaker
    report = client.get(f"/v1/replays/{rid}/report")

    def state() -> tuple:
        with factory() as s:
            chunks = s.execute(select(ReplayChunk.chunk_index, ReplayChunk.attempts, ReplayChunk.result)
                               .order_by(ReplayChunk.chunk_index)).all()
            return chunks, s.scalar(select(func.count()).select_from(MetricRow))

    before = state()
    ctx = TaskContext(settings=settings, sessionmaker=factory)
    for index, _attempts, _result in before[0]:
        TASKS["replays.chunk"](ctx, rid, index)  # a redelivery after the replay finished
        with transaction(factory) as s:
            import uuid

            assert repository.store_chunk_result(s, uuid.UUID(rid), index, b"other bytes") is False
    TASKS["replays.sweep"](ctx)
    assert state() == before
    again = client.get(f"/v1/replays/{rid}/report")
    assert again.content == report.content and again.headers["etag"] == report.headers["etag"]


class _BrokerDown:
    def send(self, name: str, *args: object) -> None:
        raise ConnectionError("broker down")

    def ping(self) -> None:
        raise ConnectionError("broker down")

    def close(self) -> None:
        return None


def test_a_send_that_fails_leaves_the_replay_in_the_outbox(client: TestClient, settings: Settings) -> None:
    """On both backends: the failed send clears the dispatch time; the next sweep sends it."""
    import uuid

    from service.db import make_sessionmaker
    from service.jobs import bind_runner
    from service.replays import service as replays
    from service.replays.models import Replay
    from service.replays.schemas import ReplayCreate

    ds = upload(client, synth_csv(seed=8, n_systems=3))
    down = make_sessionmaker(client.app.state.engine)
    bind_runner(down, _BrokerDown())
    with transaction(down) as s:
        rid = replays.create(s, ReplayCreate(dataset_id=uuid.UUID(ds["id"]), **SMALL_SPEC), settings).id
    with client.app.state.sessionmaker() as s:
        replay = s.get(Replay, rid)
        assert replay.status == "queued" and replay.dispatched_at is None
    TASKS["replays.sweep"](TaskContext(settings=settings, sessionmaker=client.app.state.sessionmaker))
    assert wait_for(client, str(rid))["status"] == "succeeded"
