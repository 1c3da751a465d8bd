"""Hostile input (issue 7) on SQLite and Postgres: names that are SQL, HTML, very long,
unicode (RTL override, zero-width, astral) or carry a NUL travel as systems and tasks through
upload -> dataset -> leaderboard -> replay report (JSON, CSV, HTML) and live sessions, and come
back byte for byte; in HTML they are escaped; security headers are set; CORS is closed unless
an origin is configured."""

from __future__ import annotations

import csv
import io
import json

from fastapi.testclient import TestClient

from service.main import create_app
from tests.service.conftest import make_settings, wait_for

HOSTILE = [
    "'; DROP TABLE datasets; --",
    "Robert'); DELETE FROM replays WHERE ('1'='1",
    "<script>alert(1)</script>",
    "\"><img src=x onerror=alert(document.cookie)>",
    "{{7*7}} ${7*7} %s %n",
    "系统 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 🙂 \u202egnp.exe \u200b e\u0301",
    "nul\x00byte",
    "L" * 3000,
]
SCRIPT = "<script>alert(1)</script>"


def _rows() -> list[dict]:
    systems = HOSTILE[:6] + ["plain"]
    tasks = [*HOSTILE, *(f"t{i}" for i in range(24))]
    rows = []
    for s_i, system in enumerate(systems):
        for t_i, task in enumerate(tasks):
            outcome = int((s_i * 7 + t_i * 3) % (s_i + 2) == 0)
            rows.append({"system": system, "task_id": task, "outcome": outcome, "group": HOSTILE[t_i % 3]})
    return rows


def _strings(value: object):  # noqa: ANN202
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def test_hostile_names_round_trip_everywhere(client: TestClient) -> None:
    c = client
    r = c.post("/v1/datasets", json={"name": SCRIPT + " '--", "rows": _rows()})
    assert r.status_code == 201, r.text
    ds = r.json()
    assert ds["name"] == SCRIPT + " '--"
    systems = {s["name"] for s in c.get(f"/v1/datasets/{ds['id']}").json()["summary"]["systems"]}
    assert systems == set(HOSTILE[:6]) | {"plain"}
    assert ds["n_tasks"] == len(HOSTILE) + 24
    board = c.get(f"/v1/datasets/{ds['id']}/leaderboard", params={"cluster": "group"})
    assert board.status_code == 200
    assert {row["stats"]["system"] for row in board.json()["rows"]} == systems
    pair = c.get(f"/v1/datasets/{ds['id']}/pairs", params={"a": HOSTILE[0], "b": HOSTILE[5], "boot": 100})
    assert pair.status_code == 200, pair.text
    spec = {"dataset_id": ds["id"], "policies": ["coverage_bootstrap"], "deltas": [0], "budgets": [0.5, 1.0],
            "orders": 4, "bootstrap": [20], "groups": ["group"], "seed": 1}
    rid = c.post("/v1/replays", json=spec).json()["id"]
    assert wait_for(c, rid)["status"] == "succeeded"
    strings = set(_strings(c.get(f"/v1/replays/{rid}/report").json()))
    assert systems <= strings  # every system name, exactly as uploaded, in the per-pair breakdown
    table = list(csv.reader(io.StringIO(c.get(f"/v1/replays/{rid}/report.csv").text)))
    assert len(table) > 1 and all(len(row) == len(table[0]) for row in table)
    html = [c.get(f"/datasets/{ds['id']}/leaderboard"), c.get(f"/replays/{rid}"), c.get("/")]
    for page in html:
        assert page.status_code == 200
        assert SCRIPT not in page.text
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text
        assert "\"><img" not in page.text
        assert page.headers["x-frame-options"] == "DENY" and page.headers["x-content-type-options"] == "nosniff"
        csp = page.headers["content-security-policy"]
        assert "default-src 'none'" in csp and "script-src 'self'" in csp and "unsafe-inline" not in csp
    assert c.get("/v1/datasets").json()["total"] == 1  # every table is still there
    assert c.get("/v1/replays").json()["total"] == 1


def test_hostile_names_in_live_sessions(client: TestClient) -> None:
    c = client
    tasks = [h for h in HOSTILE if len(h) <= 500] + [f"t{i}" for i in range(10)]
    r = c.post("/v1/sessions", json={"universe": {"task_ids": tasks}, "system_a": HOSTILE[0], "system_b": SCRIPT})
    assert r.status_code == 201, r.text
    session = r.json()
    assert sorted(session["order"]) == sorted(tasks)
    obs = [{"task_id": t, "system": s, "outcome": 1 if s == HOSTILE[0] else 0}
           for t in tasks[:6] for s in (HOSTILE[0], SCRIPT)]
    r = c.post(f"/v1/sessions/{session['id']}/observations", json={"observations": obs})
    assert r.status_code == 200, r.text
    back = c.get(f"/v1/sessions/{session['id']}").json()
    assert back["k"] == 6
    text = json.dumps(back)
    assert json.dumps(HOSTILE[0])[1:-1] in text
    r = c.post("/v1/sessions", json={"universe": {"task_ids": tasks}, "system_a": "L" * 3000, "system_b": "b"})
    assert r.status_code == 422  # longer than a stored name may be: refused, not truncated or a 500


def test_cors_is_closed_by_default_and_opens_only_to_configured_origins(backend: dict[str, object]) -> None:
    preflight = {"Origin": "https://evil.example", "Access-Control-Request-Method": "POST",
                 "Access-Control-Request-Headers": "authorization,content-type"}
    with TestClient(create_app(make_settings(**backend))) as c:
        r = c.options("/v1/datasets", headers=preflight)
        assert "access-control-allow-origin" not in r.headers
        r = c.get("/v1/datasets", headers={"Origin": "https://evil.example"})
        assert r.status_code == 200 and "access-control-allow-origin" not in r.headers
    settings = make_settings(**backend, cors_origins="https://dash.example, https://ops.example")
    with TestClient(create_app(settings)) as c:
        r = c.options("/v1/datasets", headers={**preflight, "Origin": "https://dash.example"})
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "https://dash.example"
        r = c.options("/v1/datasets", headers=preflight)
        assert r.headers.get("access-control-allow-origin") is None
        r = c.get("/v1/datasets", headers={"Origin": "https://ops.example"})
        assert r.headers["access-control-allow-origin"] == "https://ops.example"


def test_nul_in_a_stored_name_is_refused_or_kept_never_a_500(client: TestClient) -> None:
    c = client
    nul = "nul\x00byte"
    r = c.post("/v1/sessions", json={"universe": {"task_ids": [nul, "t1", "t2"]}, "system_a": nul, "system_b": "b"})
    assert r.status_code in (201, 422), r.text
    if r.status_code == 201:  # SQLite keeps it
        sid = r.json()["id"]
        obs = [{"task_id": nul, "system": nul, "outcome": 1}, {"task_id": nul, "system": "b", "outcome": 0}]
        r = c.post(f"/v1/sessions/{sid}/observations", json={"observations": obs})
        assert r.status_code == 200 and c.get(f"/v1/sessions/{sid}").json()["system_a"] == nul
