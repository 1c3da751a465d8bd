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
    assert again.json()["id"] == first.json()["id"] and again.json()["name"] == "a.csv"
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
    assert client.post("/v1/datasets", json={"name": "again", "rows": rows}).status_code == 200
    jsonl = "\n".join(json.dumps(x) for x in reversed(rows)).encode()
    r2 = client.post("/v1/datasets", files={"file": ("x.jsonl", jsonl, "application/x-ndjson")})
    assert r2.status_code == 201 and r2.json()["format"] == "jsonl"
    assert _count(client) == 2


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
    assert {"row": None, "field": "task_id", "message": "required column is missing"} in detail
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
