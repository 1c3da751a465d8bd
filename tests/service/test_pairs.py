"""``GET /v1/replays/{id}/pairs`` on both backends: the report's per-pair rows by page,
filtered by system and sorted; replays stored before the pair tables still answer."""

from __future__ import annotations

import uuid

from fastapi.testclient import TestClient

from service.engine.report import report_json
from tests.service.conftest import SMALL_SPEC, synth_csv, upload, wait_for
from tests.service.test_replays import engine_report


def _pairs(client: TestClient, rid: str, **params: object) -> dict:
    r = client.get(f"/v1/replays/{rid}/pairs", params=params)
    assert r.status_code == 200, r.text
    return r.json()


def test_pages_filters_and_errors(client: TestClient) -> None:
    content = synth_csv(seed=31, n_systems=5)
    ds = upload(client, content)
    r = client.post("/v1/replays", json={"dataset_id": ds["id"], **SMALL_SPEC})
    rid = r.json()["id"]
    assert r.json()["links"]["pairs"] == f"/v1/replays/{rid}/pairs"
    assert wait_for(client, rid)["status"] == "succeeded"
    expected = engine_report(content, SMALL_SPEC, per_pair=True)
    names = expected["dataset"]["system_names"]
    for c, conf in enumerate(expected["configurations"]):
        rows = conf["per_pair"]
        assert _pairs(client, rid, config=c, limit=1000)["items"] == rows
        page = _pairs(client, rid, config=c, limit=3, offset=6)
        assert page["items"] == rows[6:9] and page["total"] == page["matched"] == len(rows) == 20
        mine = _pairs(client, rid, config=c, system=names[1], limit=1000)
        assert mine["items"] == [p for p in rows if names[1] in (p["a"], p["b"])] and mine["matched"] == 8
        two = _pairs(client, rid, config=c, system=[names[0], names[4]], sort="abs_delta", order="desc")
        want = sorted(
            (p for p in rows if {names[0], names[4]} & {p["a"], p["b"]}),
            key=lambda p: (abs(p["delta_full"]), p["a"], p["b"]),
            reverse=True,
        )
        assert two["items"] == want and two["matched"] == 14
    nobody = client.get(f"/v1/replays/{rid}/pairs", params={"system": ["nobody"]})  # a filter that cannot match
    assert nobody.status_code == 422 and "system='nobody' matches nothing" in nobody.text
    assert _pairs(client, rid, offset=100)["items"] == []
    n = len(expected["configurations"])
    bad = client.get(f"/v1/replays/{rid}/pairs", params={"config": n})
    assert bad.status_code == 422 and bad.json()["detail"][0]["field"] == "config"
    assert client.get(f"/v1/replays/{rid}/pairs", params={"sort": "nope"}).status_code == 422
    assert client.get(f"/v1/replays/{rid}/pairs", params={"limit": 0}).status_code == 422
    missing = "00000000-0000-0000-0000-000000000000"
    assert client.get(f"/v1/replays/{missing}/pairs").status_code == 404


def test_a_replay_stored_with_rows_in_its_report_is_served_from_them(client: TestClient) -> None:
    """Replays finished before the pair tables existed keep their rows inside the report."""
    from service.replays import pairs
    from service.replays.models import Replay, ReplayPairTable

    content = synth_csv(seed=32, n_systems=4)
    rid = client.post("/v1/replays", json={"dataset_id": upload(client, content)["id"], **SMALL_SPEC}).json()["id"]
    assert wait_for(client, rid)["status"] == "succeeded"
    full = engine_report(content, SMALL_SPEC, per_pair=True)
    full.pop("diagnostics")  # nor had reports then gap classes, operating characteristics or diagnostics
    for conf in full["configurations"]:
        for key in ("gap_classes", "pairs_outside_gap_classes", "operating_characteristic", "diagnostics"):
            conf.pop(key)
    factory = client.app.state.sessionmaker
    with factory.begin() as session:
        session.query(ReplayPairTable).filter_by(replay_id=uuid.UUID(rid)).delete()
        replay = session.get(Replay, uuid.UUID(rid))
        replay.report_json = report_json(full)
        replay.report_etag = '"old-style"'
    pairs._TABLES.clear()
    for c, conf in enumerate(full["configurations"]):
        assert _pairs(client, rid, config=c, limit=1000)["items"] == conf["per_pair"]
    assert client.get(f"/v1/replays/{rid}/pairs", params={"config": len(full["configurations"])}).status_code == 422
    page = client.get(f"/replays/{rid}", params={"sort": "a"})
    # 12 directed pairs of 4 systems: each unordered pair is one row
    assert page.status_code == 200 and page.text.count('<td class="bar">') == 6 * len(full["spec"]["budgets"])
    assert 'id="diagnostics"' not in page.text and 'id="gap-class-table"' not in page.text
    assert client.get(f"/v1/replays/{rid}/figures/classes.svg").status_code == 200


def test_pairs_of_an_unfinished_replay_are_a_conflict(client: TestClient, monkeypatch) -> None:  # noqa: ANN001
    import threading

    import service.engine.replay as engine

    gate, real = threading.Event(), engine.run_chunk

    def held(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        gate.wait(30)  # the replay cannot finish before it is cancelled (a DELETE then would delete it)
        return real(*args, **kwargs)

    monkeypatch.setattr(engine, "run_chunk", held)
    ds = upload(client, synth_csv(seed=33))
    rid = client.post("/v1/replays", json={"dataset_id": ds["id"], **SMALL_SPEC, "orders": 400}).json()["id"]
    try:
        assert client.delete(f"/v1/replays/{rid}").json()["status"] == "cancelled"
    finally:
        gate.set()
    r = client.get(f"/v1/replays/{rid}/pairs")
    assert r.status_code == 409 and "cancelled" in r.json()["detail"]
