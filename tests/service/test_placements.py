"""``/v1/placements`` through the real app on SQLite and Postgres (SPEC §8.1): a system held
out of swebench_lite placed live in the recommended order, idempotent appends, bad input
refused naming the field with nothing stored, owners and scopes, the client and its monitor."""

from __future__ import annotations

import csv
import io

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient

from sufficiency_client import ConflictError, InvalidInputError, PlacementMonitor, SufficiencyClient, TransportError
from tests.conftest import shared_dataset
from tests.service.conftest import synth_csv, upload
from tests.service.test_auth import _key, app_client, secured  # noqa: F401  (fixtures)
from tests.service.test_client import relay

HELD_OUT = "20240524_opencsg_starship_gpt4"


def _board_without(name: str, held_out: str) -> tuple[bytes, dict[str, float], dict[str, dict[str, float]]]:
    """The dataset's CSV without ``held_out``, its outcomes, and every board system's."""
    text = shared_dataset(name).read_text()
    rows = list(csv.DictReader(io.StringIO(text)))
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]))
    writer.writeheader()
    entry: dict[str, float] = {}
    board: dict[str, dict[str, float]] = {}
    for r in rows:
        if r["system"] == held_out:
            entry[r["task_id"]] = float(r["outcome"])
        else:
            writer.writerow(r)
            board.setdefault(r["system"], {})[r["task_id"]] = float(r["outcome"])
    return out.getvalue().encode(), entry, board


def _true_rank(entry: dict[str, float], board: dict[str, dict[str, float]]) -> int:
    """1 + board systems at least as good as the entry on their own tasks (full run)."""
    at_least = 0
    for outcomes in board.values():
        tasks = list(outcomes)
        at_least += np.mean([entry[t] for t in tasks]) <= np.mean([outcomes[t] for t in tasks]) + 1e-12
    return 1 + at_least


def test_a_held_out_system_is_placed_live_and_the_interval_holds_its_true_rank(client: TestClient) -> None:
    content, entry, board = _board_without("swebench_lite", HELD_OUT)
    ds = upload(client, content, "board.csv")
    r = client.post("/v1/placements", json={"dataset_id": ds["id"], "system": HELD_OUT, "group": "group", "width": 10})
    assert r.status_code == 201, r.text
    p = r.json()
    assert r.headers["location"] == f"/v1/placements/{p['id']}"
    assert p["status"] == "running" and p["k"] == 0 and (p["rank_low"], p["rank_high"]) == (1, 42)
    assert len(p["board"]) == 41 and sorted(p["order"]) == sorted(entry)
    pid, order = p["id"], p["order"]
    requests = 0
    while p["status"] == "running":  # feed the recommended tasks, a batch per request
        batch = p["next"]["task_ids"]
        assert batch and all(t not in p["observed_task_ids"] for t in batch)
        rows = [{"task_id": t, "outcome": entry[t]} for t in batch]
        p = client.post(f"/v1/placements/{pid}/observations", json={"observations": rows}).json()
        requests += 1
    truth = _true_rank(entry, board)
    assert p["status"] == "concluded" and p["rank_low"] <= truth <= p["rank_high"]
    assert p["width"] == p["rank_high"] - p["rank_low"] + 1 <= 10
    assert set(p["observed_task_ids"]) == set(order[: p["k"]])  # next follows the placement order
    assert p["rank_low"] == 1 + sum(c["decision"] == "reject" for c in p["board"])
    assert p["rank_high"] == 42 - sum(c["decision"] == "accept" for c in p["board"])
    again = client.get(f"/v1/placements/{pid}").json()
    assert again["k"] == p["k"] and again["board"] == p["board"] and again["true_rank_definition"]
    print(
        f"placed {HELD_OUT}: ranks {p['rank_low']}-{p['rank_high']} (true {truth}) after {p['k']} of 300 tasks, "
        f"{requests} requests"
    )


def test_appends_are_idempotent_and_bad_input_stores_nothing(client: TestClient) -> None:
    content = synth_csv(seed=3, n_systems=4, n_tasks=30)
    ds = upload(client, content)
    systems = sorted({line.split(",")[0] for line in content.decode().splitlines()[1:]})
    url = "/v1/placements"
    base = {"dataset_id": ds["id"], "system": "newcomer"}

    def field(r) -> str:
        assert r.status_code == 422, r.text
        return r.json()["detail"][0]["field"]

    assert field(client.post(url, json={**base, "system": systems[0]})) == "system"
    assert field(client.post(url, json={**base, "dataset_id": "00000000-0000-0000-0000-000000000000"})) == "dataset_id"
    assert field(client.post(url, json={**base, "width": 0})) == "width"
    for value in (2**31, 2**70):  # past the table's column on either database: named, not "out of range"
        assert field(client.post(url, json={**base, "width": value})) == "width"
    for value in (-5, 2**63):  # -5 was a 500 (numpy refuses a negative seed)
        assert field(client.post(url, json={**base, "seed": value})) == "seed"
    assert field(client.post(url, json={**base, "rule": "bootstrap"})) == "rule"
    assert field(client.post(url, json={**base, "group": "nope"})) == "group"
    p = client.post(url, json={**base, "trials": 2}).json()
    obs = f"{url}/{p['id']}/observations"
    t0, t1 = p["order"][0], p["order"][1]
    first = client.post(
        obs, json={"observations": [{"task_id": t0, "outcome": 1}, {"task_id": t0, "trial": 1, "outcome": 0.0}]}
    )
    assert first.status_code == 200 and first.json()["added"] == 2 and first.json()["k"] == 1
    same = client.post(obs, json={"observations": [{"task_id": t0, "outcome": 1}]}).json()
    assert same["added"] == 0 and same["duplicates"] == 1
    bad = [
        ([{"task_id": t1, "outcome": 1}, {"task_id": "not-a-task", "outcome": 1}], "observations[1].task_id"),
        ([{"task_id": t1, "outcome": 1}, {"task_id": t1, "trial": 2, "outcome": 1}], "observations[1].trial"),
    ]
    for rows, name in bad:
        assert field(client.post(obs, json={"observations": rows})) == name
    clash = client.post(obs, json={"observations": [{"task_id": t1, "outcome": 1}, {"task_id": t0, "outcome": 0}]})
    assert clash.status_code == 409 and clash.json()["detail"][0]["field"] == "observations[1]"
    inner = client.post(obs, json={"observations": [{"task_id": t1, "outcome": 1}, {"task_id": t1, "outcome": 0}]})
    assert inner.status_code == 409
    assert client.post(obs, json={"observations": [{"task_id": t1, "outcome": 1.5}]}).status_code == 422
    state = client.get(f"{url}/{p['id']}").json()
    assert state["k"] == 1 and state["observed_task_ids"] == [t0]  # nothing of the failed requests was kept
    assert client.get(f"{url}/00000000-0000-0000-0000-000000000000").status_code == 404


def test_client_place_and_monitor(client: TestClient) -> None:
    content = synth_csv(seed=4, n_systems=5, n_tasks=40)
    ds = upload(client, content)
    api = SufficiencyClient(http=client)
    with pytest.raises(InvalidInputError) as err:
        api.place(ds["id"], "x", width=0)
    assert err.value.fields == ["width"]
    monitor = PlacementMonitor(api, dataset_id=ds["id"], system="fresh", width=40)
    assert monitor.should_stop()  # any interval fits in 6 ranks... width 40 concludes at once
    monitor = PlacementMonitor(api, dataset_id=ds["id"], system="fresh2", width=1)
    seen = []
    for task_id in monitor.tasks():
        seen.append(task_id)
        monitor.record(task_id, 1.0)  # a perfect entry: it beats every board system
    assert monitor.placement.status in ("concluded", "exhausted") and seen == monitor.order[: len(seen)]
    assert monitor.placement.rank_low == 1
    with pytest.raises(ConflictError):
        monitor.record(seen[0], 0.0)
    resumed = PlacementMonitor(api, placement_id=monitor.placement_id)
    assert resumed.placement.k == monitor.placement.k and list(resumed.tasks()) == []


def test_monitor_refresh_after_a_lost_answer_skips_what_the_server_stored(client: TestClient) -> None:
    """The server stored the outcome but its answer timed out: ``refresh()`` reads the placement's
    ``observed_task_ids``, so ``tasks()`` moves on."""
    lose: list[bool] = []

    def maybe_lose(request: httpx.Request) -> None:
        if lose and request.method == "POST":
            lose.clear()
            raise httpx.ReadTimeout("the answer was lost", request=request)

    ds = upload(client, synth_csv(seed=4, n_systems=5, n_tasks=40))
    monitor = PlacementMonitor(relay(client, maybe_lose), dataset_id=ds["id"], system="fresh", width=1)
    first = next(monitor.tasks())
    lose.append(True)
    with pytest.raises(TransportError):
        monitor.record(first, 1.0)
    assert monitor.refresh().k == 1 and next(monitor.tasks()) == monitor.order[1]


def test_monitor_refuses_a_non_finite_outcome_before_any_request(client: TestClient) -> None:
    sent: list[httpx.Request] = []
    ds = upload(client, synth_csv(seed=4, n_systems=5, n_tasks=40))
    monitor = PlacementMonitor(relay(client, sent.append), dataset_id=ds["id"], system="fresh", width=1)
    first, sent[:] = monitor.order[0], []
    for bad in (float("nan"), float("inf")):
        with pytest.raises(InvalidInputError) as err:
            monitor.record(first, bad)
        assert err.value.fields == ["outcome"] and first in str(err.value) and str(bad) in str(err.value)
    assert sent == [] and monitor.refresh().k == 0


def test_placements_belong_to_their_owner_and_need_decide(app_client: TestClient) -> None:  # noqa: F811
    c = app_client
    alice = _key(c, "alice", "read,submit,decide")
    bob = _key(c, "bob", "read,submit,decide")
    reader = _key(c, "reader", "read,submit", owner="alice")
    ds = c.post("/v1/datasets", files={"file": ("b.csv", synth_csv(n_tasks=20), "text/csv")}, headers=alice).json()
    body = {"dataset_id": ds["id"], "system": "newcomer"}
    assert c.post("/v1/placements", json=body, headers=reader).status_code == 403
    pid = c.post("/v1/placements", json=body, headers=alice).json()["id"]
    assert c.get(f"/v1/placements/{pid}", headers=alice).status_code == 200
    assert c.get(f"/v1/placements/{pid}", headers=bob).status_code == 404
    obs = {
        "observations": [{"task_id": c.get(f"/v1/placements/{pid}", headers=alice).json()["order"][0], "outcome": 1}]
    }
    assert c.post(f"/v1/placements/{pid}/observations", json=obs, headers=bob).status_code == 404
    assert c.post(f"/v1/placements/{pid}/observations", json=obs, headers=alice).status_code == 200


def test_a_board_too_large_for_one_answer_is_refused_before_anything_is_stored(backend) -> None:
    from service.main import create_app
    from tests.service.conftest import make_settings

    with TestClient(create_app(make_settings(**backend, max_decision_work=1_000))) as c:
        ds = upload(c, synth_csv(seed=9, n_systems=6, n_tasks=60))
        r = c.post("/v1/placements", json={"dataset_id": ds["id"], "system": "newcomer", "group": "group"})
        assert r.status_code == 422 and r.json()["detail"][0]["field"] == "dataset_id"
        assert "limit" in r.json()["detail"][0]["message"]


def test_a_board_of_more_systems_than_the_limit_is_refused_before_it_is_built(backend, monkeypatch) -> None:
    """Each read runs the rule per board system, which the work's cells do not count: a board
    of 500,000 systems x 2 tasks took 185 s to create. The systems are counted from the stored
    dataset before its records are loaded."""
    from service.datasets import service as datasets
    from service.main import create_app
    from tests.service.conftest import make_settings

    with TestClient(create_app(make_settings(**backend, max_leaderboard_systems=5))) as c:
        big = upload(c, synth_csv(seed=9, n_systems=6, n_tasks=60))
        small = upload(c, synth_csv(seed=10, n_systems=5, n_tasks=60))
        datasets._CACHE.clear()
        loads = []
        real = datasets.load_records
        monkeypatch.setattr(datasets, "load_records", lambda *a, **k: loads.append(1) or real(*a, **k))
        r = c.post("/v1/placements", json={"dataset_id": big["id"], "system": "newcomer"})
        assert r.status_code == 422 and r.json()["detail"][0]["field"] == "dataset_id"
        assert "6 systems" in r.json()["detail"][0]["message"] and not loads
        assert c.post("/v1/placements", json={"dataset_id": small["id"], "system": "newcomer"}).status_code == 201


def _placement(client: TestClient) -> tuple[dict, dict]:
    ds = upload(client, synth_csv(seed=5, n_systems=4, n_tasks=60))
    r = client.post("/v1/placements", json={"dataset_id": ds["id"], "system": "newcomer"})
    assert r.status_code == 201, r.text
    return ds, r.json()


def test_a_batch_is_observed_in_the_order_it_was_sent(client: TestClient) -> None:
    """One append's outcomes keep their order (the store once sorted them by task id): the
    same state as one task per append."""
    _, p = _placement(client)
    _, q = _placement(client)
    order = list(reversed(sorted(p["order"])))[:40]
    outcome = {t: float(i % 3 == 0) for i, t in enumerate(order)}
    batched = client.post(f"/v1/placements/{p['id']}/observations",
                          json={"observations": [{"task_id": t, "outcome": outcome[t]} for t in order]})
    assert batched.status_code == 200, batched.text
    for t in order:
        one = client.post(f"/v1/placements/{q['id']}/observations",
                          json={"observations": [{"task_id": t, "outcome": outcome[t]}]}).json()
    assert batched.json()["observed_task_ids"] == order == one["observed_task_ids"]
    assert batched.json()["board"] == one["board"]
    assert (batched.json()["rank_low"], batched.json()["rank_high"]) == (one["rank_low"], one["rank_high"])


def test_an_append_during_the_delete_of_its_dataset_is_a_404(client: TestClient) -> None:
    """An append that comes while the board's dataset is being deleted waits for the delete
    and answers 404 (on Postgres it was a 500: its rows' foreign key met the deleted placement)."""
    import concurrent.futures as cf
    import uuid

    from service.datasets import service as datasets
    from service.db import transaction

    ds, p = _placement(client)
    pool = cf.ThreadPoolExecutor(1)
    try:
        with transaction(client.app.state.sessionmaker) as db:
            datasets.delete(db, uuid.UUID(ds["id"]), with_replays=True)
            appending = pool.submit(client.post, f"/v1/placements/{p['id']}/observations",
                                    json={"observations": [{"task_id": p["order"][0], "outcome": 1}]})
            done, _ = cf.wait([appending], timeout=1.0)
            assert not done, "an append went ahead while its placement was being deleted"
        assert appending.result(timeout=60).status_code == 404, appending.result().text
    finally:
        pool.shutdown(wait=True)
