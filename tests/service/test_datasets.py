"""Dataset upload, validation (SPEC §1) and idempotency through the real app, on both backends."""

from __future__ import annotations

import json

from fastapi.testclient import TestClient

from service.engine.records import parse_records
from tests.service.conftest import make_settings, synth_csv, upload


def _count(client: TestClient) -> int:
    return client.get("/v1/datasets").json()["total"]


def test_upload_csv_summary_and_get(client: TestClient) -> None:
    content = synth_csv(seed=1, trials=2)
    r = client.post("/v1/datasets", files={"file": ("bench.csv", content, "text/csv")}, data={"name": "bench"})
    assert r.status_code == 201, r.text
    body = r.json()
    assert r.headers["location"] == f"/v1/datasets/{body['id']}"
    records = parse_records(content)
    assert body["name"] == "bench" and body["format"] == "csv"
    assert (body["n_systems"], body["n_tasks"], body["n_records"]) == (4, 40, 4 * 40 * 2)
    summary = body["summary"]
    assert [s["name"] for s in summary["systems"]] == list(records.systems)
    assert [round(s["score"], 12) for s in summary["systems"]] == [round(float(x), 12) for x in records.scores()]
    assert {g["name"] for g in summary["group_columns"]} == {"group", "difficulty"}
    assert summary["trials_max"] == 2 and summary["single_trial"] is False
    assert summary["cost_coverage"] == 1.0
    got = client.get(f"/v1/datasets/{body['id']}")
    assert got.status_code == 200 and got.json() == body


def test_reupload_is_idempotent(client: TestClient) -> None:
    content = synth_csv(seed=2)
    first = client.post("/v1/datasets", files={"file": ("a.csv", content, "text/csv")})
    again = client.post("/v1/datasets", files={"file": ("b.csv", content, "text/csv")})
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"] and again.json()["name"] == "a"
    assert first.json()["notice"] is None and f"dataset {first.json()['id']} 'a'" in again.json()["notice"]
    assert _count(client) == 1


def test_json_rows_and_jsonl(client: TestClient) -> None:
    rows = [
        {"system": s, "task_id": f"t{t}", "outcome": (t + i) % 2, "repo": f"r{t % 2}"}
        for i, s in enumerate(("A", "B", "C"))
        for t in range(6)
    ]
    r = client.post("/v1/datasets", json={"name": "rows", "rows": rows})
    assert r.status_code == 201, r.text
    assert r.json()["format"] == "jsonl" and r.json()["n_tasks"] == 6
    again = client.post("/v1/datasets", json={"name": "again", "rows": rows})
    assert again.status_code == 200 and "the name 'again' was not applied" in again.json()["notice"]
    jsonl = "\n".join(json.dumps(x) for x in reversed(rows)).encode()  # same records, other order
    r2 = client.post("/v1/datasets", files={"file": ("x.jsonl", jsonl, "application/x-ndjson")})
    assert r2.status_code == 200 and r2.json()["id"] == r.json()["id"]
    assert _count(client) == 1


def _bad(client: TestClient, content: bytes, name: str = "bad.csv") -> list[dict]:
    before = _count(client)
    r = client.post("/v1/datasets", files={"file": (name, content, "text/csv")})
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["error"] == "invalid_input"
    assert _count(client) == before  # nothing stored
    return body["detail"]


def test_bad_uploads_name_row_and_field(client: TestClient) -> None:
    detail = _bad(client, b"system,task,outcome\nA,t1,1\nB,t1,0\n")
    missing = next(d for d in detail if d["field"] == "task_id")
    assert missing["row"] is None and "required column is missing" in missing["message"]
    assert "columns found: 'system', 'task', 'outcome'" in missing["message"]
    detail = _bad(client, b"system,task_id,outcome\nA,t1,1\nB,t1,yes\n")
    assert detail[0]["row"] == 2 and detail[0]["field"] == "outcome"
    detail = _bad(client, b"system,task_id,outcome\nA,t1,1\nB,t1,0\nA,t1,1\n")
    assert detail[0]["row"] == 3 and detail[0]["field"] == "trial" and "duplicate" in detail[0]["message"]
    assert "empty" in _bad(client, b"")[0]["message"]
    assert "binary" in _bad(client, b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))[0]["message"]
    detail = _bad(client, b"system,task_id,outcome\nA,t1,1\nA,t2,0\n")
    assert detail[0]["field"] == "system"  # fewer than 2 systems


def test_bad_json_rows(client: TestClient) -> None:
    r = client.post("/v1/datasets", json={"rows": [{"system": "A", "task_id": "t", "outcome": 2}]})
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "outcome"
    r = client.post("/v1/datasets", json={"rowz": []})
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "rows"
    r = client.post("/v1/datasets", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 422
    r = client.post("/v1/datasets", content=b"a,b", headers={"content-type": "text/plain"})
    assert r.status_code == 415 and r.json()["error"] == "unsupported_media_type"
    r = client.post("/v1/datasets", files={"other": ("x.csv", b"a", "text/csv")})
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "file"


def test_50mb_upload_is_413(client: TestClient) -> None:
    big = b"system,task_id,outcome\n" + b"A,t,1\n" * (50 * 1024 * 1024 // 6)
    r = client.post("/v1/datasets", files={"file": ("big.csv", big, "text/csv")})
    assert r.status_code == 413 and r.json()["error"] == "payload_too_large"
    assert _count(client) == 0


def test_size_limit_without_content_length(backend: dict) -> None:
    """A streamed (chunked) upload is cut off as soon as it passes the limit."""
    from service.main import create_app

    app = create_app(make_settings(**backend, max_upload_bytes=1000))
    with TestClient(app) as c:

        def chunks():
            for _ in range(100):
                yield b"x" * 100

        r = c.post("/v1/datasets", content=chunks(), headers={"content-type": "multipart/form-data; boundary=b"})
        assert r.status_code == 413


def test_pagination_and_404(client: TestClient) -> None:
    ids = [upload(client, synth_csv(seed=10 + i))["id"] for i in range(3)]
    page = client.get("/v1/datasets", params={"limit": 2}).json()
    assert page["total"] == 3 and len(page["items"]) == 2
    rest = client.get("/v1/datasets", params={"limit": 2, "offset": 2}).json()
    assert {d["id"] for d in page["items"] + rest["items"]} == set(ids)
    assert client.get("/v1/datasets", params={"limit": 0}).status_code == 422
    missing = client.get("/v1/datasets/00000000-0000-0000-0000-000000000000")
    assert missing.status_code == 404 and missing.json()["error"] == "not_found"
    assert client.get("/v1/datasets/not-a-uuid").status_code == 422


def test_malformed_multipart_is_400_not_500(client: TestClient) -> None:
    r = client.post(
        "/v1/datasets", content=b"--x\r\nnot a part", headers={"content-type": "multipart/form-data; boundary=x"}
    )
    assert 400 <= r.status_code < 500 and "error" in r.json()
    r = client.post("/v1/datasets", content=b"abc", headers={"content-type": "multipart/form-data"})
    assert 400 <= r.status_code < 500 and "error" in r.json()


def test_concurrent_identical_uploads_store_one_dataset(client: TestClient) -> None:
    from concurrent.futures import ThreadPoolExecutor

    content = synth_csv(seed=30, n_systems=6, n_tasks=150)

    def post(_: int) -> tuple[int, str]:
        r = client.post("/v1/datasets", files={"file": ("c.csv", content, "text/csv")})
        return r.status_code, r.json()["id"]

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(post, range(4)))
    assert len({rid for _, rid in results}) == 1
    assert sorted(code for code, _ in results).count(201) == 1
    assert _count(client) == 1


def _csv_and_jsonl_of_the_same_records() -> tuple[bytes, bytes]:
    rows = [(s, f"t{t}", tr, (t + tr + i) % 2, f"r{t % 3}") for i, s in enumerate("ABC") for t in range(9)
            for tr in range(2)]
    csv_body = "system,task_id,trial,outcome,repo\n" + "".join(f"{s},{t},{tr},{o},{g}\n" for s, t, tr, o, g in rows)
    jsonl_body = "\n".join(  # other row order, booleans, floats, other key order
        json.dumps({"repo": g, "outcome": bool(o), "trial": tr, "task_id": t, "system": s})
        for s, t, tr, o, g in reversed(rows)
    )
    return csv_body.encode(), jsonl_body.encode()


def test_the_same_records_as_csv_and_jsonl_are_one_dataset(client: TestClient) -> None:
    csv_body, jsonl_body = _csv_and_jsonl_of_the_same_records()
    first = client.post("/v1/datasets", files={"file": ("bench.csv", csv_body, "text/csv")})
    again = client.post("/v1/datasets", files={"file": ("bench.jsonl", jsonl_body, "application/x-ndjson")},
                        data={"name": "other name"})
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"] and again.json()["name"] == "bench"
    notice = again.json()["notice"]
    assert "uploaded as csv; the same records as jsonl are the same dataset" in notice
    assert "the name 'other name' was not applied" in notice and "PATCH" in notice
    different = csv_body.replace(b"C,t8,1,1,r2", b"C,t8,1,0,r2")
    assert different != csv_body
    assert client.post("/v1/datasets", files={"file": ("bench.csv", different, "text/csv")}).status_code == 201


def test_default_names_tell_generic_files_apart(client: TestClient) -> None:
    a, b = synth_csv(seed=31), synth_csv(seed=32)
    ra = client.post("/v1/datasets", files={"file": ("records.csv", a, "text/csv")}).json()
    rb = client.post("/v1/datasets", files={"file": ("records.csv", b, "text/csv")}).json()
    assert ra["name"] == f"records-{ra['content_hash'][:8]}" and rb["name"] == f"records-{rb['content_hash'][:8]}"
    assert ra["name"] != rb["name"]
    c1 = client.post("/v1/datasets", files={"file": ("swe_lite.csv", synth_csv(seed=33), "text/csv")}).json()
    c2 = client.post("/v1/datasets", files={"file": ("swe_lite.csv", synth_csv(seed=34), "text/csv")}).json()
    assert c1["name"] == "swe_lite" and c2["name"] == f"swe_lite-{c2['content_hash'][:8]}"  # taken: suffixed
    rows = [{"system": s, "task_id": "t", "outcome": 1} for s in "AB"]
    r = client.post("/v1/datasets", json={"rows": rows}).json()
    assert r["name"] == f"dataset-{r['content_hash'][:8]}"


def test_rename(client: TestClient) -> None:
    ds = upload(client, synth_csv(seed=35))
    r = client.patch(f"/v1/datasets/{ds['id']}", json={"name": "  SWE-bench Lite, October  "})
    assert r.status_code == 200 and r.json()["name"] == "SWE-bench Lite, October"
    assert client.get(f"/v1/datasets/{ds['id']}").json()["name"] == "SWE-bench Lite, October"
    for bad in ({"name": ""}, {"name": "   "}, {"name": "x" * 201}, {"nom": "x"}, {"name": "x", "extra": 1}):
        assert client.patch(f"/v1/datasets/{ds['id']}", json=bad).status_code == 422, bad
    assert client.patch("/v1/datasets/00000000-0000-0000-0000-000000000000", json={"name": "x"}).status_code == 404


def test_delete_refuses_while_a_replay_runs_and_keeps_finished_ones_unless_asked(backend: dict) -> None:
    import threading

    import service.engine.replay as engine
    from service.main import create_app
    from tests.service.conftest import SMALL_SPEC, wait_for

    app = create_app(make_settings(**backend, heartbeat_seconds=0.1))
    gate = threading.Event()
    original = engine.run_chunk

    def held(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        gate.wait(30)
        return original(*args, **kwargs)

    engine.run_chunk = held
    try:
        with TestClient(app) as client:
            ds = upload(client, synth_csv(seed=36))
            rid = client.post("/v1/replays", json={"dataset_id": ds["id"], **SMALL_SPEC}).json()["id"]
            r = client.delete(f"/v1/datasets/{ds['id']}")
            assert r.status_code == 409 and rid in r.json()["detail"] and "cancel" in r.json()["detail"]
            gate.set()
            assert wait_for(client, rid)["status"] == "succeeded"
            r = client.delete(f"/v1/datasets/{ds['id']}")
            assert r.status_code == 409 and "with_replays=true" in r.json()["detail"] and rid in r.json()["detail"]
            assert client.get(f"/v1/replays/{rid}/report").status_code == 200  # nothing lost by the refusal
            r = client.delete(f"/v1/datasets/{ds['id']}", params={"with_replays": "true"})
            assert r.status_code == 200 and r.json() == {"id": ds["id"], "deleted_replays": [rid]}
            assert client.get(f"/v1/datasets/{ds['id']}").status_code == 404
            assert client.get(f"/v1/replays/{rid}").status_code == 404
            assert client.delete(f"/v1/datasets/{ds['id']}").status_code == 404
            lone = upload(client, synth_csv(seed=37))
            r = client.delete(f"/v1/datasets/{lone['id']}")
            assert r.status_code == 200 and r.json()["deleted_replays"] == []
            again = upload(client, synth_csv(seed=36))  # the same records can be uploaded anew
            assert again["id"] != ds["id"]
    finally:
        engine.run_chunk = original
        gate.set()


def test_an_upload_with_12600_bad_rows_states_the_total(client: TestClient) -> None:
    body = "system,task_id,group,trial,outcome,cost\n" + "".join(
        f"S{i % 42},t{i // 42},g,0,True?,\n" for i in range(12_600)
    )
    detail = _bad(client, body.encode(), "records.csv")
    assert len(detail) == 21 and all(d["row"] is not None for d in detail[:20])
    assert detail[0]["row"] == 1 and detail[19]["row"] == 20
    assert detail[-1] == {"row": None, "field": None, "message": (
        "12,600 problems on 12,600 data rows in all (rows count data records from 1, the CSV header not "
        "included); the first 20 are listed")}


def _same_records(a, b) -> bool:
    import numpy as np

    arrays = ("y", "cost", "trials", "raw_system", "raw_task", "raw_trial", "raw_outcome")
    return (a.systems, a.tasks, a.metadata) == (b.systems, b.tasks, b.metadata) and all(
        getattr(a, f).dtype == getattr(b, f).dtype and np.array_equal(getattr(a, f), getattr(b, f), equal_nan=True)
        for f in arrays
    )


def test_a_process_meeting_a_stored_dataset_reads_its_parsed_records(client: TestClient, monkeypatch) -> None:
    """Uploads store the parsed records beside the bytes: another process (its cache empty)
    reads those instead of parsing the content again; a dataset stored before them (null),
    bytes of another layout version or damaged bytes are parsed from the content, to the same
    records."""
    import uuid

    from sqlalchemy import text

    from service.datasets import service as datasets
    from service.db import transaction
    from service.engine import records_blob

    content = synth_csv(seed=44, trials=2)
    ds = upload(client, content)
    want = parse_records(content)
    factory = client.app.state.sessionmaker

    def fresh_load(forbid_parse: bool):
        datasets._CACHE.pop(uuid.UUID(ds["id"]))
        if forbid_parse:
            monkeypatch.setattr(datasets, "parse_records", lambda *a, **k: (_ for _ in ()).throw(AssertionError))
        try:
            with transaction(factory) as session:
                return datasets.load_records(session, uuid.UUID(ds["id"]))
        finally:
            monkeypatch.setattr(datasets, "parse_records", parse_records)

    assert _same_records(fresh_load(forbid_parse=True), want)  # from the stored arrays alone
    monkeypatch.setattr(records_blob, "VERSION", records_blob.VERSION + 1)
    assert _same_records(fresh_load(forbid_parse=False), want)  # another version: parsed
    monkeypatch.setattr(records_blob, "VERSION", records_blob.VERSION - 1)
    for damaged in (b"not an npz", b"PK\x03\x04" + b"\x00" * 40):
        with transaction(factory) as session:
            session.execute(text("UPDATE datasets SET parsed = :b"), {"b": damaged})
        assert _same_records(fresh_load(forbid_parse=False), want)  # unreadable: parsed
    with transaction(factory) as session:
        session.execute(text("UPDATE datasets SET parsed = NULL"))
    assert _same_records(fresh_load(forbid_parse=False), want)  # stored before: parsed


def test_parsed_datasets_are_kept_by_their_bytes(client: TestClient, monkeypatch) -> None:
    """The process keeps parsed datasets within ``CACHED_DATASET_BYTES`` of ``held_bytes``: a
    cache that fits one of them keeps the newest only, and a later read parses again, to the
    same records."""
    import uuid

    from service.datasets import service as datasets
    from service.db import transaction

    factory = client.app.state.sessionmaker
    ids = [uuid.UUID(upload(client, synth_csv(seed=60 + i))["id"]) for i in range(2)]
    datasets._CACHE.clear()

    def load(i):
        with transaction(factory) as session:
            return datasets.load_records(session, ids[i])

    first = load(0)
    assert datasets._CACHE.max_weight == datasets.CACHED_DATASET_BYTES
    assert datasets._CACHE.weight == first.held_bytes() > 0
    monkeypatch.setattr(datasets._CACHE, "max_weight", first.held_bytes() + 1)
    second = load(1)
    assert ids[0] not in datasets._CACHE and ids[1] in datasets._CACHE
    assert datasets._CACHE.weight == second.held_bytes()
    again = load(0)
    assert again is not first and _same_records(again, first)


def test_json_rows_are_read_off_the_event_loop(client: TestClient, monkeypatch) -> None:
    """Decoding, validating and re-encoding JSON rows is Python work proportional to the body:
    a 17.7 MB body held the event loop for 1.03 s (a concurrent /healthz waited that long);
    in a thread, 0.28 s."""
    import asyncio

    from service.datasets import router

    where = []
    real = router._json_rows

    def spy(body: bytes):
        try:
            asyncio.get_running_loop()
            where.append("event loop")
        except RuntimeError:
            where.append("thread")
        return real(body)

    monkeypatch.setattr(router, "_json_rows", spy)
    rows = [{"system": s, "task_id": f"t{i}", "outcome": i % 2} for i in range(20) for s in ("a", "b")]
    r = client.post("/v1/datasets", json={"name": "rows", "rows": rows})
    assert r.status_code == 201, r.text
    assert where == ["thread"]


def test_a_page_of_datasets_stops_before_its_summaries_list_too_many_systems(client: TestClient, monkeypatch) -> None:
    """Each summary lists its dataset's systems: a page holds datasets until their systems pass
    ``LIST_SYSTEMS`` (one at least), says the size it used, and paging by it sees every one."""
    from service.datasets import repository

    ids = [upload(client, synth_csv(seed=70 + i, n_systems=4))["id"] for i in range(5)]
    monkeypatch.setattr(repository, "LIST_SYSTEMS", 9)  # two datasets of 4 systems a page
    seen, offset = [], 0
    while True:
        page = client.get("/v1/datasets", params={"limit": 500, "offset": offset}).json()
        assert page["total"] == 5 and len(page["items"]) == min(page["limit"], 5 - offset)
        seen += [d["id"] for d in page["items"]]
        offset += page["limit"]
        if offset >= page["total"]:
            break
        assert page["limit"] == 2
    assert sorted(seen) == sorted(ids)
    monkeypatch.setattr(repository, "LIST_SYSTEMS", 1)  # smaller than one dataset: that one alone
    page = client.get("/v1/datasets", params={"limit": 3}).json()
    assert page["limit"] == 1 and len(page["items"]) == 1
