"""``GET /v1/replays/{id}?wait=S``: the answer comes when the replay finishes, or after S.

The replays here are sent to a Redis queue that no worker reads, so they stay ``queued`` until
the test cancels them: when a wait ends is decided by the test, not by a replay's speed. (The
waits on replays that run to their end, on each backend and both runners, are every other
replay test's: ``conftest.wait_for`` waits this way.)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient

from service.main import create_app
from service.replays.waiting import MAX_WAIT_S
from tests.service.conftest import SMALL_SPEC, make_settings, synth_csv, unique_name, upload
from tests.service.test_auth import _key


@contextmanager
def _client(backend: dict[str, object], redis_broker: tuple[str, str], **extra: object) -> Iterator[TestClient]:
    broker, _ = redis_broker
    queue = unique_name("sufficiency_wait")  # its own queue: no test's worker takes these jobs
    app = create_app(make_settings(**backend, broker_url=broker, celery_queue=queue, **extra))
    try:
        with TestClient(app) as c:
            yield c
    finally:
        redis.Redis.from_url(broker).delete(queue)


@pytest.fixture
def held(backend: dict[str, object], redis_broker: tuple[str, str]) -> Iterator[TestClient]:
    """A client whose replays stay queued (their jobs go to a queue without a worker)."""
    with _client(backend, redis_broker) as c:
        yield c


def _queued(c: TestClient, headers: dict[str, str] | None = None) -> str:
    ds = upload(c, synth_csv(n_tasks=20)) if headers is None else c.post(
        "/v1/datasets", files={"file": ("b.csv", synth_csv(n_tasks=20), "text/csv")}, headers=headers).json()
    r = c.post("/v1/replays", json={**SMALL_SPEC, "dataset_id": ds["id"], "orders": 5}, headers=headers)
    assert r.status_code == 202, r.text
    return r.json()["id"]


def _wait_in_thread(c: TestClient, rid: str, wait: float, out: dict[str, Any], **kw: Any) -> threading.Thread:
    def run() -> None:
        t0 = time.monotonic()
        r = c.get(f"/v1/replays/{rid}", params={"wait": wait}, **kw)
        out["seconds"], out["status_code"], out["body"] = time.monotonic() - t0, r.status_code, r.json()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def _until_waiting(c: TestClient, n: int) -> None:
    deadline = time.monotonic() + 10
    while getattr(c.app.state, "finish_watch", None) is None or c.app.state.finish_watch.waiting() < n:
        assert time.monotonic() < deadline, "the wait never started"
        time.sleep(0.01)


def test_a_wait_ends_when_the_replay_does(held: TestClient) -> None:
    rid, other = _queued(held), _queued(held)
    out: dict[str, Any] = {}
    out_other: dict[str, Any] = {}
    thread = _wait_in_thread(held, rid, MAX_WAIT_S, out)
    thread_other = _wait_in_thread(held, other, 1.0, out_other)
    _until_waiting(held, 2)
    assert held.delete(f"/v1/replays/{rid}").json()["status"] == "cancelled"
    thread.join(timeout=MAX_WAIT_S + 5)
    thread_other.join(timeout=MAX_WAIT_S + 5)
    assert out["status_code"] == 200 and out["body"]["status"] == "cancelled"
    assert out["seconds"] < MAX_WAIT_S / 2  # woken by the end, not by the time running out
    # the other replay did not end: its wait ran its full second and answered the state then
    assert out_other["status_code"] == 200 and out_other["body"]["status"] == "queued"
    assert out_other["seconds"] >= 1.0
    assert held.app.state.finish_watch.waiting() == 0


def test_a_wait_on_a_finished_or_unknown_replay_answers_at_once(held: TestClient) -> None:
    rid = _queued(held)
    held.delete(f"/v1/replays/{rid}")
    t0 = time.monotonic()
    assert held.get(f"/v1/replays/{rid}", params={"wait": MAX_WAIT_S}).json()["status"] == "cancelled"
    r = held.get("/v1/replays/00000000-0000-0000-0000-000000000000", params={"wait": MAX_WAIT_S})
    assert r.status_code == 404
    assert time.monotonic() - t0 < MAX_WAIT_S / 2
    assert getattr(held.app.state, "finish_watch", None) is None  # nothing waited


def test_a_replay_deleted_while_waited_on_answers_404(held: TestClient) -> None:
    rid = _queued(held)
    out: dict[str, Any] = {}
    thread = _wait_in_thread(held, rid, MAX_WAIT_S, out)
    _until_waiting(held, 1)
    held.delete(f"/v1/replays/{rid}")
    held.delete(f"/v1/replays/{rid}")  # cancelled, then deleted
    thread.join(timeout=MAX_WAIT_S + 5)
    assert out["status_code"] in (200, 404)  # woken by the cancel or by the deletion
    if out["status_code"] == 200:
        assert out["body"]["status"] == "cancelled"
    assert held.get(f"/v1/replays/{rid}", params={"wait": 1}).status_code == 404


@pytest.mark.parametrize("wait", ["-1", str(MAX_WAIT_S + 0.5), "soon", "nan"])
def test_a_bad_wait_is_a_422_naming_it(held: TestClient, wait: str) -> None:
    rid = _queued(held)
    r = held.get(f"/v1/replays/{rid}", params={"wait": wait})
    assert r.status_code == 422, r.text
    assert "wait" in r.text


def test_waits_keep_to_their_owner(backend: dict[str, object], redis_broker: tuple[str, str]) -> None:
    """The watcher is started by one owner's request and must still see the other owners'
    replays: bob's wait starts it, alice's replay is held until its time runs out (not woken
    early as if gone), and bob cannot wait on alice's replay at all."""
    with _client(backend, redis_broker, auth="required", auth_cache_seconds=0) as c:
        alice, bob = _key(c, "alice", "read,submit"), _key(c, "bob", "read,submit")
        mine, theirs = _queued(c, alice), _queued(c, bob)
        out_bob: dict[str, Any] = {}
        thread = _wait_in_thread(c, theirs, 2.0, out_bob, headers=bob)
        _until_waiting(c, 1)
        t0 = time.monotonic()
        r = c.get(f"/v1/replays/{mine}", params={"wait": 0.6}, headers=alice)
        assert r.status_code == 200 and r.json()["status"] == "queued"
        assert time.monotonic() - t0 >= 0.6
        assert c.get(f"/v1/replays/{mine}", params={"wait": 0.6}, headers=bob).status_code == 404
        thread.join(timeout=10)
        assert out_bob["status_code"] == 200 and out_bob["body"]["status"] == "queued"
