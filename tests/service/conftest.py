"""Service fixtures: real app (httpx via TestClient), databases built by the migrations.

Backends: SQLite (a fresh file per test) and Postgres (one database per test session,
named uniquely because other runs share the server, truncated after each test, dropped at
the end). Postgres tests skip, saying why, when the server is not reachable.
"""

from __future__ import annotations

import os
import random
import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, inspect, text
from sqlalchemy.engine import make_url

from service.config import Settings
from service.db import run_migrations
from service.engine.synth import generate, to_csv
from service.main import create_app

PG_ADMIN_URL = os.environ.get("SUFFICIENCY_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("SUFFICIENCY_TEST_REDIS_URL", "redis://127.0.0.1:6379")


def unique_name(prefix: str) -> str:
    return f"{prefix}_{os.getpid()}_{secrets.token_hex(4)}"


def _pg_admin_engine():
    return create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT", pool_pre_ping=True)


def create_database(admin) -> str:  # noqa: ANN001
    """Create a uniquely named database and return its URL."""
    name = unique_name("sufficiency_test")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    return make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)


def drop_database(admin, url: str) -> None:  # noqa: ANN001
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{make_url(url).database}" WITH (FORCE)'))


@pytest.fixture(scope="session")
def pg_admin() -> Iterator[object]:
    """An AUTOCOMMIT engine on the shared server (skips when Postgres is not reachable)."""
    admin = _pg_admin_engine()
    try:
        with admin.connect() as conn:
            conn.execute(text("SELECT 1"))
    except Exception as exc:  # noqa: BLE001
        admin.dispose()
        pytest.skip(f"Postgres not reachable at {PG_ADMIN_URL}: {type(exc).__name__}")
    yield admin
    admin.dispose()


@pytest.fixture(scope="session")
def pg_url(pg_admin) -> Iterator[str]:  # noqa: ANN001
    """A private Postgres database for this test session, migrated to head."""
    url = create_database(pg_admin)
    try:
        run_migrations(url, Settings().migrations_dir)
        yield url
    finally:
        drop_database(pg_admin, url)


def truncate_all(url: str) -> None:
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            tables = [t for t in inspect(conn).get_table_names() if t != "alembic_version"]
            if tables:
                conn.execute(text(f"TRUNCATE {', '.join(tables)} RESTART IDENTITY CASCADE"))
    finally:
        engine.dispose()


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, object]]:
    """Settings keyword arguments for one database backend (clean for each test)."""
    if request.param == "sqlite":
        yield {"data_dir": tmp_path / "data"}
        return
    url = request.getfixturevalue("pg_url")
    yield {"data_dir": tmp_path / "data", "database_url": url, "migrate_on_start": False}
    truncate_all(url)


def make_settings(**overrides: object) -> Settings:
    base: dict[str, object] = {"environment": "test", "chunk_pairs": 4, "heartbeat_seconds": 0.5}
    base.update(overrides)
    return Settings(**base)


@pytest.fixture
def settings(backend: dict[str, object]) -> Settings:
    return make_settings(**backend)


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    """httpx client against the real app (lifespan run: migrations, engine, job runner)."""
    app = create_app(settings)
    with TestClient(app) as c:
        yield c
        runner = app.state.runner
        if hasattr(runner, "wait_idle"):
            runner.wait_idle(timeout=60)


def synth_csv(seed: int = 0, n_systems: int = 4, n_tasks: int = 40, **options: object) -> bytes:
    return to_csv(generate(n_systems=n_systems, n_tasks=n_tasks, n_groups=3, seed=seed, **options)).encode()


SMALL_SPEC: dict[str, object] = {
    "policies": ["coverage_bootstrap", "uniform_forced"],
    "deltas": [0, 5],
    "budgets": [0.25, 0.5, 0.75],
    "orders": 20,
    "bootstrap": [50],
    "groups": ["group"],
    "seed": 7,
}


def upload(client: TestClient, content: bytes, name: str = "bench.csv") -> dict:
    r = client.post("/v1/datasets", files={"file": (name, content, "text/csv")})
    assert r.status_code in (200, 201), r.text
    return r.json()


FINISHED = ("succeeded", "failed", "cancelled")


def wait_for(client: TestClient, replay_id: str, statuses=FINISHED, timeout=90.0) -> dict:
    """The replay once its status is one of ``statuses``. Waiting for its end, each read is a
    long poll (``?wait=``), as a client waits: every replay test goes through it, on each
    backend and runner."""
    deadline = time.monotonic() + timeout
    params = {"wait": 2.0} if set(statuses) <= set(FINISHED) else {}
    while True:
        r = client.get(f"/v1/replays/{replay_id}", params=params)
        assert r.status_code == 200, r.text
        body = r.json()
        if body["status"] in statuses:
            return body
        if time.monotonic() > deadline:
            raise AssertionError(f"replay {replay_id} still {body['status']} after {timeout}s: {body}")
        time.sleep(0.05)


@pytest.fixture(scope="session")
def redis_broker() -> Iterator[tuple[str, str]]:
    """``(broker_url, queue)`` private to this test session."""
    db = random.Random().randint(1, 15)
    url = f"{REDIS_URL}/{db}"
    client = redis.Redis.from_url(url)
    try:
        client.ping()
    except redis.RedisError as exc:
        pytest.skip(f"Redis not reachable at {REDIS_URL}: {type(exc).__name__}")
    queue = unique_name("sufficiency_test")
    yield url, queue
    client.delete(queue)
    client.close()
