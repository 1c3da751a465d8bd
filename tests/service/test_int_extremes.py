"""Every integer a request body carries at its extremes, and strings that are not Unicode
text, on SQLite and Postgres.

An integer past what numpy or a table's column holds used to reach them: a placement seed of
-5 was a 500 (numpy refuses a negative seed), a trial of 2**70 a bare OverflowError, a
session B of 2**70 stored on SQLite and refused by Postgres. Here each integer field of each
request, in an otherwise valid body, is sent as -1, 2**31, 2**63 and 2**70: the answer is
never a 5xx, and a 422 names a field, never the catch-all ``request`` of a value the
database refused (which is also how a value one database stores and the other refuses
shows).
"""

from __future__ import annotations

import copy
import json
from typing import Any

from fastapi.testclient import TestClient

from tests.service.conftest import synth_csv, upload, wait_for

EXTREMES = (-1, 2**31, 2**63, 2**70)


def _set(body: dict, path: str, value: int) -> dict:
    """``body`` with the field at ``path`` (``a.b``, ``a[0].b``) set to ``value``."""
    out = copy.deepcopy(body)
    node: Any = out
    parts = path.replace("[", ".[").split(".")
    for i, part in enumerate(parts):
        key: Any = int(part[1:-1]) if part.startswith("[") else part
        if i == len(parts) - 1:
            node[key] = value
        else:
            node = node[key]
    return out


def _cases(client: TestClient) -> list[tuple[str, str, dict, str]]:
    ds = upload(client, synth_csv(seed=5, n_systems=3, n_tasks=20))
    ids = [f"t{i}" for i in range(20)]
    universe = {"task_ids": ids}
    session = client.post("/v1/sessions", json={"universe": universe}).json()["id"]
    placement = client.post("/v1/placements", json={"dataset_id": ds["id"], "system": "newcomer"})
    assert placement.status_code == 201, placement.text
    pid, first = placement.json()["id"], placement.json()["order"][0]
    decision = {"system_a": "A", "system_b": "B", "universe": universe, "rule": "bootstrap", "bootstrap": 200,
                "observations": [{"system": "A", "task_id": "t0", "trial": 0, "outcome": 1.0}], "seed": 0}
    cases = [("/v1/decisions", decision, f) for f in ("seed", "bootstrap", "observations[0].trial")]
    cases += [("/v1/sessions", {"universe": universe, "bootstrap": 200, "trials": 1, "seed": 0}, f)
              for f in ("bootstrap", "trials", "seed")]
    cases += [(f"/v1/sessions/{session}/observations",
               {"observations": [{"system": "A", "task_id": "t0", "trial": 0, "outcome": 1.0}]},
               "observations[0].trial")]
    cases += [("/v1/placements", {"dataset_id": ds["id"], "system": "another", "width": 1, "trials": 1, "seed": 0}, f)
              for f in ("width", "trials", "seed")]
    cases += [(f"/v1/placements/{pid}/observations", {"observations": [{"task_id": first, "trial": 0, "outcome": 1.0}]},
               "observations[0].trial")]
    cases += [("/v1/replays", {"dataset_id": ds["id"], "orders": 10, "seed": 0, "seeds": 1}, f)
              for f in ("orders", "seed", "seeds")]
    rows = [{"system": s, "task_id": t, "trial": 0, "outcome": 1.0} for s in ("a", "b") for t in ("t0", "t1")]
    cases += [("/v1/datasets", {"rows": rows}, "rows[0].trial")]
    cases += [("/v1/stats/passk", {"n": 10, "c": 3, "k": 2}, f) for f in ("n", "c", "k")]
    cases += [("/v1/stats/bound", {"successes": 3, "n": 10}, f) for f in ("successes", "n")]
    cases += [("/v1/stats/runs", {"max_failure_rate": 0.1, "failures": 0}, "failures")]
    return cases


def test_offsets_at_their_extremes(client: TestClient) -> None:
    """Listing offsets past a bigint were the database's error ("out of range for the
    database", on no field); now they are refused by name, and the largest is an empty page."""
    ds = upload(client, synth_csv(seed=5, n_systems=3, n_tasks=20))
    rid = client.post("/v1/replays", json={"dataset_id": ds["id"], "orders": 4, "deltas": [0], "bootstrap": [20],
                                           "policies": ["coverage_bootstrap"]}).json()["id"]
    wait_for(client, rid)
    for url in ("/v1/datasets", "/v1/replays", f"/v1/replays/{rid}/metrics"):
        r = client.get(url, params={"offset": 2**63 - 1})
        assert r.status_code == 200, (url, r.text[:300])
        for value in (2**63, 2**70):
            r = client.get(url, params={"offset": value})
            assert r.status_code == 422 and r.json()["detail"][0]["field"] == "query.offset", (url, r.text[:300])


def test_integer_fields_at_their_extremes(client: TestClient) -> None:
    cases = _cases(client)
    for url, body, _ in cases:  # each base body is valid: the field sent is what a 422 is about
        r = client.post(url, json=body)
        assert r.status_code in (200, 201, 202), (url, r.text[:300])
    for url, body, field in cases:
        for value in EXTREMES:
            r = client.post(url, json=_set(body, field, value))
            assert r.status_code < 500, (url, field, value, r.status_code, r.text[:300])
            if r.status_code == 422:  # named; a value one database would store and the other refuse is not
                named = [d.get("field") for d in r.json()["detail"]]
                assert "request" not in named, (url, field, value, r.text[:300])


def test_strings_that_are_not_text_are_422s(client: TestClient) -> None:
    """JSON may spell half of a UTF-16 surrogate pair (``"\\ud800"``): a session on such a task
    id, or a JSONL upload with such a system, was a 500 (the first UTF-8 encoding of the
    string failed). Every route refuses it and says which string; a whole pair is one
    character and is accepted. A NUL (``"\\u0000"``) is text, but a name kept in a text
    column (a session's system) was stored by SQLite and refused by PostgreSQL with "out of
    range for the database": such fields refuse it on both, by name."""
    ds = upload(client, synth_csv(seed=5, n_systems=3, n_tasks=20))
    half = "t\ud800x"  # json.dumps escapes it as \ud800
    bodies = [
        ("/v1/sessions", {"universe": {"task_ids": ["a", "b", half]}}, "universe.task_ids[2]"),
        ("/v1/sessions", {"universe": {"task_ids": ["a", "b"]}, "system_a": half}, "system_a"),
        ("/v1/placements", {"dataset_id": ds["id"], "system": half}, "system"),
        ("/v1/replays", {"dataset_id": ds["id"], "policies": [half]}, "policies[0]"),
        ("/v1/datasets", {"rows": [{"system": half, "task_id": "x", "outcome": 1}]}, "rows[0].system"),
        ("/v1/decisions", {"system_a": "A", "system_b": "B", "universe": {"task_ids": [half]}}, None),
    ]
    for url, body, where in bodies:
        raw = json.dumps(body).encode()
        assert b"\\ud800" in raw
        r = client.post(url, content=raw, headers={"content-type": "application/json"})
        assert r.status_code == 422, (url, r.status_code, r.text[:300])
        detail = r.json()["detail"][0]
        assert detail["field"] == "body" and "not valid JSON" in detail["message"], (url, r.text[:300])
        if where is not None:  # (pydantic's parser, on the decision routes, says where in the text)
            assert detail["message"].startswith(f"not valid JSON: {where} holds half of a UTF-16"), r.text[:300]
    lines = [json.dumps({"system": s, "task_id": t, "outcome": 1}) for s in ("a", half) for t in ("x", "y")]
    r = client.post("/v1/datasets", files={"file": ("r.jsonl", "\n".join(lines).encode(), "application/json")})
    assert r.status_code == 422 and r.json()["detail"][0]["row"] == 3, r.text[:300]
    nul = "a\x00b"  # a NUL is text: in task ids and records it round-trips (test_hostile) ...
    assert client.post("/v1/sessions", json={"universe": {"task_ids": ["a", nul]}}).status_code == 201
    kept = [("/v1/sessions", {"universe": {"task_ids": ["a", "b"]}, "system_a": nul}, "system_a"),
            ("/v1/placements", {"dataset_id": ds["id"], "system": nul}, "system"),
            ("/v1/datasets", {"name": nul, "rows": [{"system": s, "task_id": "x", "outcome": 1} for s in "ab"]},
             "name"),
            ("/v1/keys", {"name": nul, "scopes": "read"}, "name")]
    for url, body, field in kept:  # ... but not in a text column: SQLite stored it, PostgreSQL refused it
        r = client.post(url, json=body)
        assert r.status_code == 422 and r.json()["detail"][0]["field"] == field, (url, r.text[:300])
        assert "NUL" in r.json()["detail"][0]["message"]
    r = client.post("/v1/datasets", files={"file": ("n.csv", synth_csv(seed=9), "text/csv")}, data={"name": nul})
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "name", r.text[:300]
    assert client.patch(f"/v1/datasets/{ds['id']}", json={"name": nul}).status_code == 422
    pair = json.dumps({"universe": {"task_ids": ["a", "b", "t\U0001f600"]}}).encode()  # a whole pair: one character
    assert b"\\ud83d\\ude00" in pair
    r = client.post("/v1/sessions", content=pair, headers={"content-type": "application/json"})
    assert r.status_code == 201, r.text[:300]
