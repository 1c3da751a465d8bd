"""Replays through the API with the in-process runner, on both backends."""

from __future__ import annotations

import hashlib
import json
import uuid

import pytest
from fastapi.testclient import TestClient

from service.engine.records import parse_records
from service.engine.spec import make_spec
from service.replays.schemas import ReplayCreate
from service.replays.service import options_of
from tests.service.conftest import SMALL_SPEC, synth_csv, upload, wait_for


def engine_report(content: bytes, spec: dict, *, per_pair: bool = False) -> dict:
    """The report computed in one piece by the engine, from the options the API derives
    (without per-pair rows, as the service stores it, unless asked)."""
    from service.engine.replay import run_replay

    options = options_of(ReplayCreate(dataset_id="00000000-0000-0000-0000-000000000000", **spec))
    return run_replay(parse_records(content), make_spec(**options), per_pair=per_pair)


def _submit(client: TestClient, dataset_id: str, **spec: object) -> dict:
    r = client.post("/v1/replays", json={"dataset_id": dataset_id, **spec})
    assert r.status_code == 202, r.text
    assert r.headers["location"] == f"/v1/replays/{r.json()['id']}"
    return r.json()


def test_replay_end_to_end_matches_engine(client: TestClient) -> None:
    from service.engine.report import report_json

    content = synth_csv(seed=3)
    ds = upload(client, content)
    created = _submit(client, ds["id"], **SMALL_SPEC)
    assert created["status"] in ("queued", "running", "succeeded") and created["n_chunks"] == 3  # 12 pairs / 4
    done = wait_for(client, created["id"])
    assert done["status"] == "succeeded", done
    assert done["progress"] == 1.0 and done["chunks_done"] == 3
    assert done["started_at"] and done["finished_at"] and done["error"] is None
    # a succeeded replay's reads take its counts without querying its chunks: they say the same
    from service.db import transaction
    from service.replays import repository

    with transaction(client.app.state.sessionmaker, write=False) as session:
        rid = uuid.UUID(created["id"])
        assert repository.done_counts(session, [rid])[rid] == (3, float(done["n_pairs"]))

    report = client.get(f"/v1/replays/{created['id']}/report")
    assert report.status_code == 200 and report.headers["content-type"].startswith("application/json")
    expected = report_json(engine_report(content, SMALL_SPEC))
    assert report.content == expected  # the same bytes as the CLI / engine in one piece
    etag = report.headers["etag"]
    assert etag == f'"{hashlib.sha256(expected).hexdigest()[:32]}"'
    cached = client.get(f"/v1/replays/{created['id']}/report", headers={"If-None-Match": etag})
    assert cached.status_code == 304 and cached.headers["etag"] == etag and cached.content == b""

    csv = client.get(f"/v1/replays/{created['id']}/report.csv")
    assert csv.status_code == 200 and csv.headers["content-type"].startswith("text/csv")
    assert client.get(
        f"/v1/replays/{created['id']}/report.csv", headers={"If-None-Match": csv.headers["etag"]}
    ).status_code == 304


def test_metric_rows_are_queryable(client: TestClient) -> None:
    from service.engine.report import metric_rows

    content = synth_csv(seed=4)
    ds = upload(client, content)
    rid = _submit(client, ds["id"], **SMALL_SPEC)["id"]
    assert wait_for(client, rid)["status"] == "succeeded"
    report = json.loads(client.get(f"/v1/replays/{rid}/report").content)
    expected = metric_rows(engine_report(content, SMALL_SPEC))
    allrows = client.get(f"/v1/replays/{rid}/metrics", params={"limit": 10000}).json()
    assert allrows["total"] == len(expected) > 0
    assert report  # parsed
    one = client.get(
        f"/v1/replays/{rid}/metrics", params={"policy": "uniform_forced", "metric": "defer_rate", "delta": 5}
    ).json()
    want = [
        r for r in expected if r["policy"] == "uniform_forced" and r["metric"] == "defer_rate" and r["delta"] == 5
    ]
    assert one["total"] == len(want) > 0
    assert {(r["budget"], r["value"]) for r in one["items"]} == {(float(r["budget"]), r["value"]) for r in want}
    page = client.get(f"/v1/replays/{rid}/metrics", params={"limit": 2, "offset": 1}).json()
    assert len(page["items"]) == 2 and page["total"] == len(expected)
    # a filter value the replay does not have is a 422 naming it and listing what there is
    known = {"policy": "uniform_forced", "metric": "defer_rate", "delta": 5, "budget": 0.5, "floor": "proportional",
             "a": 0.05}
    for name, value in known.items():
        assert client.get(f"/v1/replays/{rid}/metrics", params={name: value}).json()["total"] > 0, name
    unknown = {"policy": "nope", "metric": "nope", "delta": 7, "budget": 0.33, "floor": "slack", "group": "nope",
               "a": 0.2, "bootstrap": "7"}
    for name, value in unknown.items():
        r = client.get(f"/v1/replays/{rid}/metrics", params={name: value})
        assert r.status_code == 422, (name, r.text)
        (problem,) = r.json()["detail"]
        shown = f"{value:g}" if isinstance(value, float | int) else repr(value)
        assert problem["field"] == name and f"{name}={shown} matches nothing" in problem["message"], problem
    r = client.get(f"/v1/replays/{rid}/metrics", params={"policy": "nope", "delta": 5})
    assert "uniform_forced" in r.json()["detail"][0]["message"]  # the values it has
    r = client.get(f"/v1/replays/{rid}/pairs", params={"system": ["nope"]})
    assert r.status_code == 422 and "system='nope' matches nothing" in r.text
    some = report["dataset"]["system_names"][0]
    assert client.get(f"/v1/replays/{rid}/pairs", params={"system": [some]}).json()["matched"] > 0
    r = client.get("/v1/replays", params={"dataset_id": "00000000-0000-0000-0000-000000000000"})
    assert r.status_code == 422 and "matches no dataset" in r.text
    assert client.get("/v1/replays", params={"dataset_id": ds["id"]}).json()["total"] == 1
    # a combination of existing values that selects nothing is an honest empty page
    r = client.get(f"/v1/replays/{rid}/metrics", params={"metric": "minimum_sufficient_budget", "budget": 0.5})
    assert r.status_code == 200 and r.json()["total"] == 0
    for name in ("errors.png", "unresolved.svg"):
        r = client.get(f"/v1/replays/{rid}/figures/{name}", params={"delta": 7})
        assert r.status_code == 422 and "delta=7" in r.text and "0, 5" in r.text, r.text
        assert client.get(f"/v1/replays/{rid}/figures/{name}", params={"delta": 5}).status_code == 200


def test_result_does_not_depend_on_chunking(backend: dict) -> None:
    from service.main import create_app
    from tests.service.conftest import make_settings

    content = synth_csv(seed=5)
    bodies = []
    for chunk_pairs in (1, 5, 100):
        app = create_app(make_settings(**backend, chunk_pairs=chunk_pairs, runner_threads=2))
        with TestClient(app) as c:
            ds = upload(c, content)
            rid = _submit(c, ds["id"], **SMALL_SPEC)["id"]
            assert wait_for(c, rid)["status"] == "succeeded"
            bodies.append(c.get(f"/v1/replays/{rid}/report").content)
    assert bodies[0] == bodies[1] == bodies[2]


def test_spec_errors_are_422_naming_the_field(client: TestClient) -> None:
    ds = upload(client, synth_csv(seed=6))

    def bad(**spec: object) -> list[dict]:
        r = client.post("/v1/replays", json={"dataset_id": ds["id"], **spec})
        assert r.status_code == 422, r.text
        assert r.json()["error"] == "invalid_input"
        return r.json()["detail"]

    assert bad(policies=["nope"])[0]["field"] == "policy"
    assert bad(budgets=[0.5, 1.5])[0]["field"] == "budgets"
    assert bad(budgets="a:b")[0]["field"] == "budgets"
    assert bad(orders=0)[0]["field"] == "orders"
    assert bad(floors=["weird"])[0]["field"].startswith("floors")
    assert bad(groups=["no_such_column"])[0]["field"] == "groups"
    assert bad(unknown_option=1)[0]["field"] == "unknown_option"
    r = client.post("/v1/replays", json={"dataset_id": "00000000-0000-0000-0000-000000000000"})
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "dataset_id"
    assert client.get("/v1/replays").json()["total"] == 0


def test_cancel(client: TestClient) -> None:
    # seconds of work, so the replay is still running when the cancel arrives (it starts as
    # soon as it is stored, before the submission's estimate is sampled and answered)
    ds = upload(client, synth_csv(seed=8, n_systems=16, n_tasks=200))  # 240 pairs: about 1.5 s
    spec = {**SMALL_SPEC, "orders": 2000, "budgets": "0.05:0.95:0.05"}
    rid = _submit(client, ds["id"], **spec)["id"]
    r = client.delete(f"/v1/replays/{rid}")
    assert r.status_code == 200 and r.json()["status"] == "cancelled"
    assert r.json()["finished_at"] is not None
    assert client.get(f"/v1/replays/{rid}/report").status_code == 409
    client.app.state.runner.wait_idle(timeout=60)
    assert client.get(f"/v1/replays/{rid}").json()["status"] == "cancelled"  # kept: its end can be read
    again = client.delete(f"/v1/replays/{rid}")  # a cancelled replay is finished: this deletes it
    assert again.status_code == 204 and again.content == b""
    assert client.get(f"/v1/replays/{rid}").status_code == 404
    assert client.delete(f"/v1/replays/{rid}").status_code == 404
    assert client.delete("/v1/replays/00000000-0000-0000-0000-000000000000").status_code == 404
    assert client.delete("/v1/replays/not-a-uuid").status_code == 422


def _stored_rows(client: TestClient) -> dict[str, dict[str, int]]:
    """Rows per replay id in every table that holds something of a replay."""
    from sqlalchemy import func, select

    from service.replays.models import MetricRow, Replay, ReplayChunk, ReplayPairTable

    out: dict[str, dict[str, int]] = {}
    with client.app.state.sessionmaker() as s:
        for model, col in ((Replay, Replay.id), (ReplayChunk, ReplayChunk.replay_id),
                           (MetricRow, MetricRow.replay_id), (ReplayPairTable, ReplayPairTable.replay_id)):
            for rid, n in s.execute(select(col, func.count()).group_by(col)).all():
                out.setdefault(str(rid), {})[model.__tablename__] = n
    return out


def test_deleting_a_finished_replay_removes_it_and_everything_stored_for_it_only(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    import service.engine.replay as engine

    ds1, ds2 = upload(client, synth_csv(seed=50)), upload(client, synth_csv(seed=51))
    gone, kept, other = (_submit(client, d, **{**SMALL_SPEC, "seed": s})["id"] for d, s in
                         ((ds1["id"], 1), (ds1["id"], 2), (ds2["id"], 1)))
    assert all(wait_for(client, rid)["status"] == "succeeded" for rid in (gone, kept, other))
    routes = ("", "/report", "/report.csv", "/metrics", "/pairs")
    for path in routes:  # served once: whatever this process caches of it must go too
        assert client.get(f"/v1/replays/{gone}{path}").status_code == 200, path
    before = _stored_rows(client)
    assert set(before[gone]) == {"replays", "replay_chunks", "metric_rows", "replay_pair_tables"}
    reports = {rid: client.get(f"/v1/replays/{rid}/report").content for rid in (kept, other)}

    r = client.delete(f"/v1/replays/{gone}")
    assert r.status_code == 204 and r.content == b""
    for path in routes:
        assert client.get(f"/v1/replays/{gone}{path}").status_code == 404, path
    after = _stored_rows(client)
    assert gone not in after and after == {k: v for k, v in before.items() if k != gone}
    assert {x["id"] for x in client.get("/v1/replays").json()["items"]} == {kept, other}
    assert {rid: client.get(f"/v1/replays/{rid}/report").content for rid in (kept, other)} == reports
    assert client.get("/v1/datasets").json()["total"] == 2
    assert client.delete(f"/v1/replays/{gone}").status_code == 404

    def broken(*_args, **_kwargs):  # noqa: ANN002, ANN003, ANN202
        raise RuntimeError("engine exploded")

    monkeypatch.setattr(engine, "run_chunk", broken)
    failed = _submit(client, ds1["id"], **{**SMALL_SPEC, "seed": 3})["id"]
    assert wait_for(client, failed)["status"] == "failed"
    assert client.delete(f"/v1/replays/{failed}").status_code == 204
    assert client.get(f"/v1/replays/{failed}").status_code == 404
    # with its replays deleted one by one, the dataset goes without ?with_replays=true
    assert client.delete(f"/v1/replays/{kept}").status_code == 204
    r = client.delete(f"/v1/datasets/{ds1['id']}")
    assert r.status_code == 200 and r.json()["deleted_replays"] == []
    assert set(_stored_rows(client)) == {other}


def test_list_and_filter(client: TestClient) -> None:
    ds = upload(client, synth_csv(seed=9))
    ids = {_submit(client, ds["id"], **SMALL_SPEC)["id"] for _ in range(2)}
    for rid in ids:
        wait_for(client, rid)
    page = client.get("/v1/replays", params={"dataset_id": ds["id"], "status": "succeeded"}).json()
    assert page["total"] == 2 and {r["id"] for r in page["items"]} == ids
    assert client.get("/v1/replays", params={"status": "failed"}).json()["total"] == 0


def test_health(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    r = client.get("/readyz")
    assert r.status_code == 200 and r.json()["checks"] == {"database": "ok"}


CLI_ARGS = [
    "--policy", "coverage_bootstrap", "--policy", "uniform_forced", "--delta", "0", "--delta", "5",
    "--budgets", "0.25,0.5,0.75", "--orders", "20", "--bootstrap", "50", "--group", "group", "--seed", "7",
]


def test_cli_and_api_reports_are_byte_identical(client: TestClient, tmp_path) -> None:  # noqa: ANN001
    from service.cli import main
    from service.engine.report import report_json

    content = synth_csv(seed=13, n_systems=5)
    path = tmp_path / "bench.csv"
    path.write_bytes(content)
    out = tmp_path / "cli.json"
    assert main(["replay", str(path), *CLI_ARGS, "--no-per-pair", "--format", "json", "--out", str(out)]) == 0
    rid = _submit(client, upload(client, content)["id"], **SMALL_SPEC)["id"]
    assert wait_for(client, rid)["status"] == "succeeded"
    assert client.get(f"/v1/replays/{rid}/report").content == out.read_bytes()
    # the per-pair rows the CLI report carries by default are the service's pages, in order
    full = tmp_path / "full.json"
    assert main(["replay", str(path), *CLI_ARGS, "--format", "json", "--out", str(full)]) == 0
    cli = json.loads(full.read_bytes())
    for c, conf in enumerate(cli["configurations"]):
        rows = []
        for offset in range(0, 20, 7):
            page = client.get(f"/v1/replays/{rid}/pairs", params={"config": c, "limit": 7, "offset": offset}).json()
            assert page["total"] == page["matched"] == 20 and page["budgets"] == cli["spec"]["budgets"]
            rows += page["items"]
        assert rows == conf["per_pair"]
        conf.pop("per_pair")
    assert report_json(cli) == out.read_bytes()  # nothing else differs
    csv_out = tmp_path / "cli.csv"
    assert main(["replay", str(path), *CLI_ARGS, "--format", "csv", "--out", str(csv_out)]) == 0
    assert client.get(f"/v1/replays/{rid}/report.csv").content == csv_out.read_bytes()


@pytest.mark.parametrize(("name", "shape"), [("tau2_airline", (5, 50)), ("swebench_java_verified", (5, 91))])
def test_real_dataset_through_the_api(client: TestClient, tmp_path, name: str, shape: tuple) -> None:  # noqa: ANN001
    """A real benchmark (the shipped one always; ../shared/data when present), few orders:
    API report == CLI report."""
    from service.cli import main
    from tests.conftest import shared_dataset

    path = shared_dataset(name)
    out = tmp_path / "cli.json"
    args = ["--policy", "coverage_bootstrap", "--delta", "0", "--orders", "10", "--group", "group", "--seed", "3"]
    assert main(["replay", str(path), *args, "--no-per-pair", "--format", "json", "--out", str(out)]) == 0
    ds = client.post("/v1/datasets", files={"file": ("records.csv", path.read_bytes(), "text/csv")}).json()
    assert (ds["n_systems"], ds["n_tasks"]) == shape
    spec = {"policies": ["coverage_bootstrap"], "deltas": [0], "orders": 10, "groups": ["group"], "seed": 3}
    rid = _submit(client, ds["id"], **spec)["id"]
    assert wait_for(client, rid)["status"] == "succeeded"
    assert client.get(f"/v1/replays/{rid}/report").content == out.read_bytes()


def test_engine_failure_marks_the_replay_failed(client: TestClient, monkeypatch) -> None:  # noqa: ANN001
    import service.engine.replay as engine

    def broken(*_args, **_kwargs):  # noqa: ANN002, ANN003, ANN202
        raise RuntimeError("engine exploded")

    monkeypatch.setattr(engine, "run_chunk", broken)
    ds = upload(client, synth_csv(seed=14))
    rid = _submit(client, ds["id"], **SMALL_SPEC)["id"]
    done = wait_for(client, rid)
    assert done["status"] == "failed" and "engine exploded" in done["error"] and done["finished_at"]
    assert client.get(f"/v1/replays/{rid}/report").status_code == 409
    assert client.get(f"/v1/replays/{rid}/metrics").status_code == 409


def test_progress_is_reported_while_running(backend: dict) -> None:
    """A running replay reports partial progress (from stored chunks and the heartbeats of
    running ones)."""
    import time

    from service.main import create_app
    from tests.service.conftest import make_settings

    app = create_app(make_settings(**backend, chunk_pairs=3, heartbeat_seconds=0.1))
    with TestClient(app) as c:
        # seconds of work: the replay starts as soon as it is stored, before the submission's
        # estimate is sampled and answered, so a short one could be done before the first poll
        ds = upload(c, synth_csv(seed=15, n_systems=8, n_tasks=200))
        spec = {**SMALL_SPEC, "orders": 1500, "bootstrap": [400], "budgets": "0.05:0.95:0.05"}
        rid = _submit(c, ds["id"], **spec)["id"]
        seen = set()
        while (state := c.get(f"/v1/replays/{rid}").json())["status"] in ("queued", "running"):
            seen.add(state["progress"])
            time.sleep(0.02)
        assert state["status"] == "succeeded" and state["progress"] == 1.0
        assert any(0 < p < 1 for p in seen), seen


def test_embedded_restart_resumes_unfinished_replays(backend: dict) -> None:
    """The in-process runner dies with its process; the next start finishes the job and
    the report equals an uninterrupted run."""
    import time

    from service.engine.report import report_json
    from service.main import create_app
    from tests.service.conftest import make_settings

    content = synth_csv(seed=16, n_systems=4, n_tasks=200)
    spec = {**SMALL_SPEC, "orders": 500, "bootstrap": [200], "budgets": "0.05:0.95:0.05"}
    settings = make_settings(**backend, chunk_pairs=3, heartbeat_seconds=0.1)
    with TestClient(create_app(settings)) as c:
        rid = _submit(c, upload(c, content)["id"], **spec)["id"]
        while c.get(f"/v1/replays/{rid}").json()["status"] == "queued":
            time.sleep(0.01)
    # the app stopped mid-replay (its runner was shut down): checked in the database, so that
    # the second start has something to resume (a replay finished by then would test a read)
    from sqlalchemy import text

    from service.db import engine_for

    engine = engine_for(settings)
    key = {"id": rid.replace("-", "") if engine.dialect.name == "sqlite" else rid}  # how each stores a UUID
    with engine.connect() as conn:
        status = conn.execute(text("SELECT status FROM replays WHERE id = :id"), key).scalar_one()
        undone = conn.execute(
            text("SELECT count(*) FROM replay_chunks WHERE replay_id = :id AND status != 'done'"), key
        ).scalar_one()
    engine.dispose()
    assert status == "running" and undone > 0, (status, undone)
    with TestClient(create_app(settings)) as c:
        done = wait_for(c, rid)
        assert done["status"] == "succeeded"
        assert c.get(f"/v1/replays/{rid}/report").content == report_json(engine_report(content, spec))


def test_sweep_resends_jobs_whose_message_was_lost(backend: dict) -> None:
    """The broker was down when the replay was submitted: the request still succeeds (the
    rows are committed) and a later sweep sends the job again."""
    import time

    from service.main import create_app
    from service.replays.tasks import sweep
    from tests.service.conftest import make_settings

    app = create_app(make_settings(**backend, stale_after_seconds=0.2))
    with TestClient(app) as c:
        runner = app.state.runner
        real_send = runner.send

        def broker_down(name: str, *args: object) -> None:
            raise ConnectionError("broker unreachable")

        runner.send = broker_down
        rid = _submit(c, upload(c, synth_csv(seed=17))["id"], **SMALL_SPEC)["id"]
        time.sleep(0.3)
        assert c.get(f"/v1/replays/{rid}").json()["status"] == "queued"
        runner.send = real_send
        sweep(runner.ctx)
        assert wait_for(c, rid)["status"] == "succeeded"


def test_reports_are_served_from_memory_until_deleted(client: TestClient, monkeypatch) -> None:  # noqa: ANN001
    """A finished report is kept per process and answered without the database; deleting its
    replay here stops that at once, a deletion the cache did not see stops it after the TTL."""
    from service.replays.models import Replay
    from service.replays.report_cache import CACHE

    content = synth_csv(seed=42)
    ds = upload(client, content)
    rid = _submit(client, ds["id"], **SMALL_SPEC)["id"]
    assert wait_for(client, rid)["status"] == "succeeded"
    first = client.get(f"/v1/replays/{rid}/report")
    csv = client.get(f"/v1/replays/{rid}/report.csv")
    factory = client.app.state.sessionmaker
    with factory.begin() as session:  # behind the cache's back: the cached bytes are still served
        session.get(Replay, uuid.UUID(rid)).report_json = b"{}"
    again = client.get(f"/v1/replays/{rid}/report")
    assert again.content == first.content and again.headers["etag"] == first.headers["etag"]
    assert client.get(f"/v1/replays/{rid}/report.csv").content == csv.content
    r = client.get(f"/v1/replays/{rid}/report", headers={"If-None-Match": first.headers["etag"]})
    assert r.status_code == 304 and r.headers["etag"] == first.headers["etag"]
    monkeypatch.setattr(CACHE, "ttl", 0.0)  # entries expire: the database is asked again
    CACHE.forget([uuid.UUID(rid)])
    assert client.get(f"/v1/replays/{rid}/report").content == b"{}"
    monkeypatch.undo()
    assert client.get(f"/v1/replays/{rid}/report").content == b"{}"  # cached again, now with what is stored
    assert client.delete(f"/v1/datasets/{ds['id']}", params={"with_replays": "true"}).status_code == 200
    assert client.get(f"/v1/replays/{rid}/report").status_code == 404
    assert client.get(f"/v1/replays/{rid}/report.csv").status_code == 404


def test_eta_formula() -> None:
    from service.replays.estimate import eta_seconds

    assert eta_seconds("queued", 0.0, None, 12.5) == 12.5
    assert eta_seconds("running", 0.25, 30.0, 12.5) == 90.0  # 30 s for a quarter: 90 s left
    assert eta_seconds("running", 0.0, 4.0, 12.5) == 8.5  # no progress yet: the estimate, less the time spent
    assert eta_seconds("running", 0.0, 20.0, 12.5) == 0.0
    assert eta_seconds("running", 0.0, None, None) is None
    for done in ("succeeded", "failed", "cancelled"):
        assert eta_seconds(done, 1.0, 30.0, 12.5) is None


def test_submission_states_cases_and_an_estimate(client: TestClient) -> None:
    from service.engine.replay import plan_replay, total_cases
    from service.replays.estimate import MIN_CASES_TO_MEASURE

    content = synth_csv(seed=41, trials=3)  # multi-trial: fractional outcomes on a lattice
    ds = upload(client, content)
    spec = {"policies": ["coverage_bootstrap"], "deltas": [0], "orders": 1000, "groups": ["group"], "seed": 1}
    body = _submit(client, ds["id"], **spec)
    cases = total_cases(plan_replay(parse_records(content), make_spec(**spec)))
    assert cases >= MIN_CASES_TO_MEASURE and body["n_cases"] == cases
    assert body["estimated_seconds"] > 0 and body["eta_seconds"] == body["estimated_seconds"]  # queued
    done = wait_for(client, body["id"])
    assert done["status"] == "succeeded" and done["eta_seconds"] is None
    # the next replay of the same kind is timed by this one: its seconds per (case x task)
    from datetime import datetime

    took = (datetime.fromisoformat(done["finished_at"]) - datetime.fromisoformat(done["started_at"])).total_seconds()
    bigger = _submit(client, ds["id"], **{**spec, "orders": 2000})
    assert bigger["n_cases"] == 2 * cases
    assert bigger["estimated_seconds"] == pytest.approx(round(took * 2, 1), abs=0.11)
    assert client.delete(f"/v1/replays/{bigger['id']}").status_code == 200
    small = _submit(client, ds["id"], **{**spec, "orders": 5})
    assert small["estimated_seconds"] is None and small["n_cases"] < MIN_CASES_TO_MEASURE
    wait_for(client, small["id"])
