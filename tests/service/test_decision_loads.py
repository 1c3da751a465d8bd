"""A dataset decision's universe and calibration rows are read once per process however many
requests miss the cache at the same moment (the first second of a worker under load): the
others wait for that read instead of each going to the database."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from service.decisions import service
from service.engine.records import from_rows
from service.engine.spec import NAMED_POLICIES

WAITERS = 6


def _records():
    return from_rows([{"system": s, "task_id": f"t{i}", "outcome": float((i + j) % 2), "repo": f"r{i % 3}"}
                      for j, s in enumerate("AB") for i in range(12)])


def _race(monkeypatch: pytest.MonkeyPatch, read_at: tuple[object, str], look_at: tuple[object, str], checks: int,
          call: Callable[[], Any]) -> tuple[int, list[Any]]:
    """Run ``call`` in ``1 + WAITERS`` threads while the first database read (``read_at``,
    patched) is held until the cache has been looked at (``look_at``) ``checks`` times in all;
    returns how many reads ran and what each thread got."""
    reads = looked = 0
    cond = threading.Condition()
    release = threading.Event()
    real_read, real_look = getattr(*read_at), getattr(*look_at)

    def read(*args: Any, **kwargs: Any) -> Any:
        nonlocal reads
        with cond:
            reads += 1
        assert release.wait(30)
        return real_read(*args, **kwargs)

    def look(*args: Any, **kwargs: Any) -> Any:
        nonlocal looked
        with cond:
            looked += 1
            cond.notify_all()
        return real_look(*args, **kwargs)

    monkeypatch.setattr(*read_at, read)
    monkeypatch.setattr(*look_at, look)
    results: list[Any] = [None] * (1 + WAITERS)

    def run(j: int) -> None:
        results[j] = call()

    threads = [threading.Thread(target=run, args=(j,)) for j in range(1 + WAITERS)]
    for th in threads:
        th.start()
    with cond:
        waited = cond.wait_for(lambda: looked >= checks, timeout=30)
    release.set()
    for th in threads:
        th.join(30)
    assert waited, "the requests never all looked at the cache"
    return reads, results


def test_concurrent_misses_read_the_dataset_once(monkeypatch: pytest.MonkeyPatch) -> None:
    records = _records()
    dataset_id = uuid.uuid4()
    monkeypatch.setattr(service.datasets, "load_records", lambda session, did: records)
    # every thread looks at the cache before it waits, and the one that reads looks again
    # under the lock: release the read only when they all wait
    reads, got = _race(monkeypatch, (service.datasets, "load_records"), (service, "cached_universe"), 2 + WAITERS,
                       lambda: service.dataset_universe(None, dataset_id, "repo"))  # type: ignore[arg-type]
    assert reads == 1
    assert all(u is got[0] for u in got) and got[0].group_names == ("r0", "r1", "r2")


def test_concurrent_misses_read_the_calibration_once(monkeypatch: pytest.MonkeyPatch) -> None:
    rows = [{"id": uuid.uuid4(), "policy": "coverage_bootstrap", "bootstrap": "exact", "budget": 0.5,
             "metric": "false_accept_rate", "value": 0.01}]
    monkeypatch.setattr(service.repository, "calibration_rows", lambda session, dataset_id, **kw: rows)
    choice = service.RuleChoice("bootstrap", True, (NAMED_POLICIES["coverage_bootstrap"].name,))
    spec = service.make_live_spec(rule="bootstrap")
    dataset_id = uuid.uuid4()
    opened = []

    def call() -> list[dict[str, Any]]:
        return service._calibration_rows(lambda: opened.append(1) or None, dataset_id, choice, spec, None,  # type: ignore[arg-type, func-returns-value]
                                         60.0, False)

    # the thread that reads asks for the generation three times before it reads (the check, the
    # check under the lock, and the stamp of what it reads), every other thread once before it waits
    reads, got = _race(monkeypatch, (service.repository, "calibration_rows"), (service.replays, "finished_generation"),
                       3 + WAITERS, call)
    assert reads == 1 and len(opened) == 1
    assert all(r is rows for r in got)


def test_a_large_dataset_decision_is_parsed_once(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    """Past ``decision_inline_bytes`` the decision process parses the body; one that names a
    dataset comes back parsed and is decided in a thread without being parsed again, with the
    answer a small body gets."""
    from fastapi.testclient import TestClient

    from service.decisions import router
    from service.main import create_app
    from tests.service.conftest import make_settings, synth_csv, upload

    parses = []
    real_parse = router.parse_decision
    monkeypatch.setattr(router, "parse_decision", lambda raw: parses.append(len(raw)) or real_parse(raw))
    answers = []
    for limit in (10**9, 1024):
        with TestClient(create_app(make_settings(data_dir=tmp_path / str(limit), decision_inline_bytes=limit,
                                                 decision_fast_path=False))) as c:
            content = synth_csv(n_systems=2, n_tasks=120)
            ds = upload(c, content)
            systems = [s["name"] for s in ds["summary"]["systems"]]
            tasks = sorted({line.split(",")[1] for line in content.decode().splitlines()[1:]})
            outcomes = {systems[0]: {t: float(i % 3 > 0) for i, t in enumerate(tasks)},
                        systems[1]: {t: float(i % 2) for i, t in enumerate(tasks)}}
            raw = json.dumps({"dataset_id": ds["id"], "system_a": systems[0], "system_b": systems[1],
                              "outcomes": outcomes}).encode()
            assert len(raw) > 1024
            parses.clear()
            r = c.post("/v1/decisions", content=raw, headers={"content-type": "application/json"})
            assert r.status_code == 200, r.text
            answers.append((r.content, len(parses), getattr(c.app.state, "decision_pool", None) is not None))
    (small, small_parses, small_pool), (large, large_parses, large_pool) = answers
    assert small == large
    assert (small_parses, small_pool) == (1, False)  # parsed by the route
    assert (large_parses, large_pool) == (0, True)  # parsed in the decision process only
