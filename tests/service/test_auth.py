"""API keys (issue 7) on SQLite and Postgres: 401/403, scopes per route, owners, the
rate limit, Basic auth for the pages, the admin endpoint and the ``sufficiency keys`` CLI."""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from service.auth import keys
from service.auth.scopes import required_scope
from service.cli import main as cli
from service.config import Settings
from service.db import transaction
from service.main import create_app
from tests.service.conftest import SMALL_SPEC, make_settings, synth_csv, wait_for

SESSION = {"universe": {"task_ids": [f"t{i}" for i in range(20)]}, "system_a": "new", "system_b": "old"}


@pytest.fixture
def secured(backend: dict[str, object]) -> Settings:
    return make_settings(**backend, auth="required", auth_cache_seconds=0)


@pytest.fixture
def app_client(secured: Settings) -> Iterator[TestClient]:
    app = create_app(secured)
    with TestClient(app) as c:
        yield c
        app.state.runner.wait_idle(timeout=60)


def _key(client: TestClient, name: str, scopes: str, owner: str | None = None) -> dict[str, str]:
    with transaction(client.app.state.sessionmaker) as session:
        _row, token = keys.create(session, name=name, scopes=scopes, owner=owner)
    return {"Authorization": f"Bearer {token}"}


def test_requests_need_a_valid_unrevoked_key(app_client: TestClient) -> None:
    c = app_client
    r = c.get("/v1/datasets")
    assert r.status_code == 401 and r.json()["error"] == "unauthorized"
    assert r.headers["www-authenticate"].startswith("Bearer")
    for bad in ("Bearer nope", "Bearer suf_000000000000_x", "Basic !!!", "Token abc"):
        r = c.get("/v1/datasets", headers={"Authorization": bad})
        assert r.status_code == 401, bad
    assert c.post("/v1/replays", json={"bogus": 1}).status_code == 401  # before any validation
    for public in ("/healthz", "/readyz", "/openapi.json", "/docs", "/static/report.css"):
        assert c.get(public).status_code == 200, public
    good = _key(c, "alice", "read")
    assert c.get("/v1/datasets", headers=good).status_code == 200
    assert c.get("/v1/datasets", headers={"X-API-Key": good["Authorization"][7:]}).status_code == 200
    with transaction(c.app.state.sessionmaker) as session:
        [row] = keys.find(session, "alice")
        keys.revoke(session, row)
    r = c.get("/v1/datasets", headers=good)
    assert r.status_code == 401 and 'error="invalid_token"' in r.headers["www-authenticate"]


def test_each_scope_opens_its_routes_only(app_client: TestClient) -> None:
    c = app_client
    read, submit, decide = _key(c, "r", "read"), _key(c, "s", "submit"), _key(c, "d", "decide")
    csv = synth_csv(n_tasks=20)
    files = {"file": ("b.csv", csv, "text/csv")}
    assert c.post("/v1/datasets", files=files, headers=read).status_code == 403
    r = c.post("/v1/datasets", files=files, headers=submit)
    assert r.status_code == 201
    ds = r.json()["id"]
    assert c.get(f"/v1/datasets/{ds}", headers=submit).status_code == 403
    assert c.get(f"/v1/datasets/{ds}", headers=read).status_code == 200
    assert c.get(f"/v1/datasets/{ds}/leaderboard", headers=read).status_code == 200
    assert c.post("/v1/stats/bound", json={"successes": 5, "n": 5}, headers=read).status_code == 200
    assert c.post("/v1/decisions", json={"observations": []}, headers=read).status_code == 403
    assert c.post("/v1/sessions", json=SESSION, headers=submit).status_code == 403
    assert c.post("/v1/sessions", json=SESSION, headers=decide).status_code == 201
    r = c.get("/v1/keys", headers=read)
    assert r.status_code == 403 and "admin" in r.json()["detail"]


def test_replays_and_sessions_belong_to_their_owner(app_client: TestClient) -> None:
    c = app_client
    alice = _key(c, "alice", "read,submit,decide")
    alice2 = _key(c, "alice-ci", "read,submit,decide", owner="alice")
    bob = _key(c, "bob", "read,submit,decide")
    ds = c.post("/v1/datasets", files={"file": ("b.csv", synth_csv(n_tasks=20), "text/csv")}, headers=alice).json()
    r = c.post("/v1/replays", json={**SMALL_SPEC, "dataset_id": ds["id"], "orders": 5}, headers=alice)
    assert r.status_code == 202
    rid = r.json()["id"]
    c.app.state.runner.wait_idle(timeout=60)
    c.headers.update(alice2)  # a second key of the same owner sees it
    assert wait_for(c, rid)["status"] == "succeeded"
    del c.headers["authorization"]
    for path in (f"/v1/replays/{rid}", f"/v1/replays/{rid}/report", f"/v1/replays/{rid}/report.csv",
                 f"/v1/replays/{rid}/metrics", f"/v1/replays/{rid}/figures/errors.svg", f"/v1/replays/{rid}/pairs"):
        assert c.get(path, headers=alice).status_code == 200, path
        assert c.get(path, headers=bob).status_code == 404, path
    assert c.delete(f"/v1/replays/{rid}", headers=bob).status_code == 404
    assert c.get(f"/v1/replays/{rid}", headers=alice).status_code == 200  # bob's DELETE touched nothing
    assert [x["id"] for x in c.get("/v1/replays", headers=alice).json()["items"]] == [rid]
    assert c.get("/v1/replays", headers=bob).json() == {"items": [], "total": 0, "limit": 50, "offset": 0}
    page = c.get(f"/replays/{rid}", headers=bob)
    assert page.status_code == 404 and rid not in c.get("/", headers=bob).text
    assert rid in c.get("/", headers=alice).text
    sid = c.post("/v1/sessions", json=SESSION, headers=alice).json()["id"]
    assert c.get(f"/v1/sessions/{sid}", headers=alice2).status_code == 200
    assert c.get(f"/v1/sessions/{sid}", headers=bob).status_code == 404
    obs = {"observations": [{"task_id": "t0", "system": "new", "outcome": 1}]}
    assert c.post(f"/v1/sessions/{sid}/observations", json=obs, headers=bob).status_code == 404
    assert c.post(f"/v1/sessions/{sid}/observations", json=obs, headers=alice).status_code == 200
    reader = _key(c, "alice-read", "read", owner="alice")  # deleting needs submit, like submitting
    assert c.delete(f"/v1/replays/{rid}", headers=reader).status_code == 403
    assert c.delete(f"/v1/replays/{rid}", headers=alice2).status_code == 204  # another key of the owner
    assert c.get(f"/v1/replays/{rid}", headers=alice).status_code == 404


def test_rate_limit_answers_429_with_retry_after(backend: dict[str, object]) -> None:
    settings = make_settings(**backend, auth="required", rate_limit_per_second=2, rate_limit_burst=3)
    with TestClient(create_app(settings)) as c:
        alice, bob = _key(c, "alice", "read"), _key(c, "bob", "read")
        codes = [c.get("/v1/datasets", headers=alice).status_code for _ in range(4)]
        assert codes == [200, 200, 200, 429]
        r = c.get("/v1/datasets", headers=alice)
        assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1 and r.json()["error"] == "rate_limited"
        assert c.get("/v1/datasets", headers=bob).status_code == 200  # per key
        assert c.get("/healthz").status_code == 200  # probes are not limited
        for _ in range(3):  # requests without a valid key are limited per client address (and key prefix)
            assert c.get("/v1/datasets", headers={"Authorization": "Bearer guess"}).status_code == 401
        r = c.get("/v1/datasets", headers={"Authorization": "Bearer guess"})
        assert r.status_code == 429 and r.headers["retry-after"]
        time.sleep(0.6)
        assert c.get("/v1/datasets", headers=bob).status_code == 200  # a flood of bad keys holds back no valid key
        guess = {"Authorization": bob["Authorization"][:-4] + "XXXX"}  # guessing bob's secret: throttled
        assert [c.get("/v1/datasets", headers=guess).status_code for _ in range(4)] == [401, 401, 401, 429]
        assert c.get("/v1/datasets", headers=bob).status_code == 200  # bob himself, known good, is not


def test_pages_take_the_key_as_basic_auth_and_refuse_cross_site_posts(app_client: TestClient) -> None:
    c = app_client
    token = _key(c, "alice", "read,submit")["Authorization"][7:]
    r = c.get("/")
    assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Basic")
    basic = {"Authorization": "Basic " + base64.b64encode(f"me:{token}".encode()).decode()}
    assert c.get("/", headers=basic).status_code == 200
    files = {"file": ("b.csv", synth_csv(n_tasks=20), "text/csv")}
    evil = c.post("/datasets", files=files, headers={**basic, "Origin": "https://evil.example"})
    assert evil.status_code == 403
    ok = c.post("/datasets", files=files, headers={**basic, "Origin": "http://testserver"}, follow_redirects=False)
    assert ok.status_code == 303


def test_admin_endpoint_manages_keys(app_client: TestClient) -> None:
    c = app_client
    admin = _key(c, "root", "admin")
    r = c.post("/v1/keys", json={"name": "ci", "scopes": ["read"]}, headers=admin)
    assert r.status_code == 201
    made = r.json()
    assert made["token"].startswith("suf_") and made["owner"] == "ci"
    ci = {"Authorization": f"Bearer {made['token']}"}
    assert c.get("/v1/datasets", headers=ci).status_code == 200
    listed = c.get("/v1/keys", headers=admin).json()
    assert {k["name"] for k in listed} == {"root", "ci"} and all("token" not in k for k in listed)
    assert c.post("/v1/keys", json={"name": "x", "scopes": ["root"]}, headers=admin).status_code == 422
    assert c.delete(f"/v1/keys/{made['id']}", headers=admin).json()["revoked_at"] is not None
    assert c.get("/v1/datasets", headers=ci).status_code == 401


def test_auth_off_is_the_embedded_default(client: TestClient, caplog: pytest.LogCaptureFixture) -> None:
    assert client.app.state.settings.auth == "off"
    assert client.get("/v1/datasets").status_code == 200
    assert client.get("/v1/keys").status_code == 403  # keys are managed by the CLI until auth is on
    with caplog.at_level("WARNING"), TestClient(create_app(client.app.state.settings)):
        pass
    assert any("authentication is OFF" in r.getMessage() for r in caplog.records)
    from service.auth.middleware import exposure_warning

    off, on = Settings(environment="test"), Settings(environment="test", auth="required")
    assert exposure_warning("127.0.0.1", off) is None and exposure_warning("0.0.0.0", on) is None
    assert "authentication off" in exposure_warning("0.0.0.0", off)


def test_every_route_has_the_scope_it_should() -> None:
    app = create_app(Settings(environment="test"))
    routes = [(m.upper(), p) for p, ops in app.openapi()["paths"].items() for m in ops]
    routes += [("GET", "/"), ("POST", "/datasets"), ("POST", "/replays"), ("GET", "/replays/{replay_id}"),
               ("POST", "/replays/{replay_id}/cancel"),
               ("GET", "/datasets/{dataset_id}/leaderboard"), ("GET", "/static/{name}")]
    expected = {"/v1/keys": "admin", "/v1/decisions": "decide", "/v1/sessions": "decide", "/v1/placements": "decide"}
    for method, template in routes:
        path = template.replace("{", "x").replace("}", "")  # a concrete path
        scope = required_scope(method, path)
        prefix = next((v for k, v in expected.items() if template.startswith(k)), None)
        if template in ("/healthz", "/readyz", "/static/{name}"):
            assert scope is None, template
        elif prefix:
            assert scope == prefix, template
        elif method == "GET" or template.startswith("/v1/stats/"):
            assert scope == "read", (method, template)
        else:
            assert scope == "submit", (method, template)
    assert required_scope("PUT", "/v1/datasets") == "admin"  # an unmapped write fails closed
    assert required_scope("DELETE", "/v1/replays/x/report") == "admin"


def test_keys_cli(tmp_path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: ANN001
    monkeypatch.setenv("SUFFICIENCY_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("SUFFICIENCY_DATABASE_URL", raising=False)
    assert cli(["keys", "create", "--name", "ci", "--scopes", "read,decide", "--owner", "team"]) == 0
    out = capsys.readouterr()
    token = out.out.strip()
    assert token.startswith("suf_") and "shown only now" in out.err
    assert cli(["keys", "create", "--name", "x", "--scopes", "read,root"]) == 2
    assert "unknown scope" in capsys.readouterr().err
    assert cli(["keys", "list"]) == 0
    listing = capsys.readouterr().out
    assert "ci" in listing and "team" in listing and "read,decide" in listing and token not in listing
    settings = Settings(data_dir=tmp_path, auth="required", auth_cache_seconds=0)
    with TestClient(create_app(settings)) as c:
        assert c.get("/v1/datasets", headers={"Authorization": f"Bearer {token}"}).status_code == 200
        assert cli(["keys", "revoke", token[4:16]]) == 0
        assert c.get("/v1/datasets", headers={"Authorization": f"Bearer {token}"}).status_code == 401
    assert cli(["keys", "revoke", "nobody"]) == 2
