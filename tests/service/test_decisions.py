"""``POST /v1/decisions`` on both backends: the engine's answer, validation, calibration."""

from __future__ import annotations

import json

import numpy as np
import pytest
from fastapi.testclient import TestClient

from service.decisions.schemas import DecisionRead
from service.engine.live import live_from_arrays
from service.engine.records import parse_records
from tests.service.conftest import synth_csv, upload, wait_for

IDS = [f"t{i:02d}" for i in range(40)]
GROUPS = [f"g{i % 4}" for i in range(40)]


def _case(seed: int = 0, k: int = 22) -> tuple[list[str], list[float], list[float]]:
    rng = np.random.default_rng(seed)
    seq = [IDS[i] for i in rng.permutation(40)[:k]]
    return seq, (rng.random(k) < 0.7).astype(float).tolist(), (rng.random(k) < 0.4).astype(float).tolist()


def _compact(seq: list[str], ya: list[float], yb: list[float], **extra: object) -> dict:
    return {"universe": {"task_ids": IDS, "groups": GROUPS},
            "outcomes": {"A": dict(zip(seq, ya, strict=True)), "B": dict(zip(seq, yb, strict=True))}, **extra}


@pytest.mark.parametrize("rule", ["bootstrap", "anytime", "paired_normal", "serfling"])
def test_decision_is_the_engine_answer_and_deterministic(client: TestClient, rule: str) -> None:
    seq, ya, yb = _case()
    body = _compact(seq, ya, yb, rule=rule)
    first = client.post("/v1/decisions", json=body)
    assert first.status_code == 200, first.text
    expected = live_from_arrays(IDS, GROUPS, ya, yb, seq, rule=rule)
    got = first.json()
    assert DecisionRead.model_validate(got).model_dump(mode="json") == got  # the documented shape, exactly
    assert got.pop("calibration") is None
    assert json.dumps(got, sort_keys=True) == json.dumps(expected, sort_keys=True)
    assert client.post("/v1/decisions", json=body).content == first.content  # byte for byte
    rows = [{"task_id": t, "system": s, "outcome": y} for t, a, b in zip(seq, ya, yb, strict=True)
            for s, y in (("A", a), ("B", b))]
    listed = client.post("/v1/decisions", json={"universe": {"task_ids": IDS, "groups": GROUPS},
                                                "observations": rows, "rule": rule})
    assert listed.content == first.content


def test_decision_answers_every_part_of_spec_7(client: TestClient) -> None:
    seq, ya, yb = _case(3, k=9)
    out = client.post("/v1/decisions", json=_compact(seq, ya, yb)).json()
    assert out["rule"] == "bootstrap" and out["k"] == 9 and out["N"] == 40
    assert set(out["counts"]) >= {"a_wins", "b_wins", "ties", "unobserved"}
    assert {"p_low", "p_high"} <= set(out["statistic"])
    assert out["reason"] in ("coverage_unmet", "insufficient_evidence", "decided")
    assert [g["group"] for g in out["coverage"]["groups"]] == ["g0", "g1", "g2", "g3"]
    assert out["warning"] and "anytime" in out["warning"]
    if out["decision"] == "defer":
        assert out["next"]["k"] > 9 and set(out["next"]["task_ids"]).isdisjoint(seq)


def _field(r) -> str:  # noqa: ANN001
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["error"] == "invalid_input"
    return body["detail"][0]["field"]


def test_bad_input_is_422_naming_the_field(client: TestClient) -> None:
    seq, ya, yb = _case()
    ok = _compact(seq, ya, yb)
    post = lambda body: client.post("/v1/decisions", json=body)  # noqa: E731
    assert _field(post({**ok, "rule": "majority"})) == "rule"
    assert _field(post({**ok, "rule": "mcnemar", "delta": 5})) == "delta"
    frac = _compact(seq, [0.5] * len(seq), yb, rule="mcnemar")
    assert _field(post(frac)) == "observations"
    bad = _compact(seq, [1.5] + ya[1:], yb)
    assert _field(post(bad)) == f"outcomes.A.{seq[0]}.outcome"
    rows = [{"task_id": "t00", "system": "A", "outcome": -0.1}]
    assert _field(post({"universe": {"task_ids": IDS}, "observations": rows})) == "observations[0].outcome"
    assert _field(post({**ok, "universe": {"task_ids": [*IDS, "t03"]}})) == "universe.task_ids[40]"
    assert _field(post({**ok, "system_b": "A"})) == "system_b"
    rows = [{"task_id": "t99", "system": "A", "outcome": 1}]
    assert _field(post({"universe": {"task_ids": IDS}, "observations": rows})) == "observations[0].task_id"
    assert _field(post({"universe": {"task_ids": []}, "outcomes": {}})) == "universe"
    assert _field(post({"outcomes": {}})) == "universe"
    assert _field(post({**ok, "floor": "most"})) == "floor"
    assert _field(post({**ok, "policy": "nope"})) == "policy"
    assert _field(post({**ok, "outcomes": {"C": {"t00": 1}}})) == "outcomes.C"
    r = post({**ok, "a": "x"})
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "a"


def test_dataset_universe_and_calibration_from_a_finished_replay(client: TestClient) -> None:
    content = synth_csv(seed=5)
    ds = upload(client, content)
    records = parse_records(content)
    a, b = records.systems[0], records.systems[1]
    tasks = list(records.tasks[:20])
    outcomes = {s: {t: float(records.y[i, records.tasks.index(t)]) for t in tasks} for i, s in ((0, a), (1, b))}
    body = {"dataset_id": ds["id"], "group": "group", "system_a": a, "system_b": b, "outcomes": outcomes,
            "policy": "coverage_bootstrap"}
    before = client.post("/v1/decisions", json=body)
    assert before.status_code == 200, before.text
    assert before.json()["N"] == records.n_tasks and before.json()["calibration"] is None
    groups = {g["group"] for g in before.json()["coverage"]["groups"]}
    assert groups == set(records.metadata["group"])

    spec = {"policies": ["coverage_bootstrap"], "deltas": [0, 5], "budgets": [0.25, 0.5, 0.75], "orders": 10,
            "groups": ["group"], "bootstrap": [50], "seed": 1}
    replay = client.post("/v1/replays", json={"dataset_id": ds["id"], **spec}).json()
    assert wait_for(client, replay["id"])["status"] == "succeeded"
    report = client.get(f"/v1/replays/{replay['id']}/report").json()
    conf = next(c for c in report["configurations"] if c["delta"] == 0)
    at_half = next(x for x in conf["budgets"] if x["budget"] == 0.5)  # k/N = 20/40

    calibrated = client.post("/v1/decisions", json=body).json()
    assert DecisionRead.model_validate(calibrated).model_dump(mode="json") == calibrated
    cal = calibrated["calibration"]
    assert cal["replay_id"] == replay["id"] and cal["policy"] == "coverage_bootstrap" and cal["budget"] == 0.5
    assert cal["bootstrap"] == "50" and cal["group"] == "group"
    for m in ("false_accept_rate", "false_reject_rate", "defer_rate"):
        assert cal[m] == at_half[m]
    assert cal["minimum_sufficient_budget"] == conf["minimum_sufficient_budget"]
    # the same rule by name, another floor or δ: no replay matches
    assert client.post("/v1/decisions", json={**body, "policy": None, "rule": "bootstrap"}).json()["calibration"]
    assert client.post("/v1/decisions", json={**body, "floor": "slack"}).json()["calibration"] is None
    assert client.post("/v1/decisions", json={**body, "delta": 10}).json()["calibration"] is None

    assert _field(client.post("/v1/decisions", json={**body, "group": "nope"})) == "group"
    missing = client.post("/v1/decisions", json={**body, "dataset_id": "00000000-0000-0000-0000-000000000000"})
    assert missing.status_code == 404
    both = {**body, "universe": {"task_ids": IDS}}
    assert _field(client.post("/v1/decisions", json=both)) == "universe"


def test_a_deleted_dataset_answers_no_more_decisions(client: TestClient) -> None:
    """The universe and calibration of a dataset are cached per process (fast path included);
    deleting the dataset drops them, so the next decision is a 404, not an answer from memory."""
    content = synth_csv(seed=6)
    ds = upload(client, content)
    records = parse_records(content)
    a, b = records.systems[0], records.systems[1]
    body = {"dataset_id": ds["id"], "group": "group", "system_a": a, "system_b": b,
            "outcomes": {a: {records.tasks[0]: 1}, b: {records.tasks[0]: 0}}}
    for _ in range(2):  # the second answer comes from the caches
        assert client.post("/v1/decisions", json=body).status_code == 200
    assert client.delete(f"/v1/datasets/{ds['id']}").status_code == 200
    gone = client.post("/v1/decisions", json=body)
    assert gone.status_code == 404, gone.text


def test_the_options_cache_keeps_equal_values_of_different_types_apart() -> None:
    """``live_spec`` keeps checked options by value *and* type: ``bootstrap=True`` must still
    be refused after ``bootstrap=1`` was accepted (1 == True in Python)."""
    from service.decisions import service
    from service.decisions.schemas import DecisionCreate
    from service.engine.live import LiveError

    ok = DecisionCreate(bootstrap=1)
    choice = service.resolve_rule(ok, "bootstrap")
    assert service.live_spec(ok, choice, budgets=None, budget=None, seed=0).bootstrap == 1
    bad = DecisionCreate.model_construct(**{**ok.model_dump(), "bootstrap": True})
    with pytest.raises(LiveError, match="bootstrap"):
        service.live_spec(bad, choice, budgets=None, budget=None, seed=0)
    assert service.live_spec(ok, choice, budgets=[0.5, 1], budget=None, seed=0).budgets == (0.5, 1.0)


def test_the_fast_path_answers_byte_for_byte_as_the_route(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    """``service.decisions.fastpath`` answers inline decisions before routing; for every kind
    of request (decisions, errors, a dataset, a chunked body) the status, headers and bytes
    equal those of the FastAPI route alone, and the route sees only what the fast path left."""
    from service.decisions import router
    from service.main import create_app
    from tests.service.conftest import make_settings

    routed = []
    parse = router.decision_body

    async def counting(request):  # noqa: ANN001, ANN202
        routed.append(request.url.path)
        return await parse(request)

    monkeypatch.setattr(router, "decision_body", counting)
    seq, ya, yb = _case(5)
    valid = [_compact(seq, ya, yb, rule=r) for r in ("bootstrap", "anytime", "paired_normal", "serfling")]
    rows = [{"task_id": t, "system": s, "outcome": y} for t, a, b in zip(seq, ya, yb, strict=True)
            for s, y in (("A", a), ("B", b))]
    valid += [_compact(seq[:3], ya[:3], yb[:3]), _compact(seq, ya, yb, rule="mcnemar"),
              _compact(seq, ya, yb, bootstrap=50, seed=3), _compact(seq, ya, yb, order=seq[::-1], rule="anytime"),
              {"universe": {"task_ids": IDS, "groups": GROUPS}, "observations": rows, "budgets": [0.5, 1]}]
    invalid = [{**valid[0], "rule": "majority"}, {**valid[0], "system_b": "A"}, {"outcomes": {}},
               _compact(seq, [1.5] + ya[1:], yb), {**valid[0], "a": "x"},
               {"dataset_id": "6f1c2a34-0000-4000-8000-000000000000", "outcomes": {}}]
    requests = [json.dumps(b).encode() for b in valid + invalid] + [b"{", b"", b"[1, 2]"]
    answers = {}
    for fast in (True, False):
        app = create_app(make_settings(data_dir=tmp_path / f"data-{fast}", decision_fast_path=fast))
        with TestClient(app) as c:
            got = [c.post("/v1/decisions", content=r, headers={"content-type": "application/json"})
                   for r in requests]
            half = len(requests[0]) // 2
            got.append(c.post("/v1/decisions", content=iter([requests[0][:half], requests[0][half:]])))
            got.append(c.post("/v1/decisions/", content=requests[0], follow_redirects=False))
        answers[fast] = [(r.status_code, r.headers.multi_items(), r.content) for r in got]
        if fast:  # only what the fast path left reached the route: the invalid bodies
            assert len(routed) == len(invalid) + 3
            routed.clear()
    assert [a[0] for a in answers[True]][: len(valid)] == [200] * len(valid)
    assert {a[0] for a in answers[True][len(valid): len(valid) + len(invalid) + 3]} == {404, 422}
    assert answers[True] == answers[False]


def test_the_fast_path_is_behind_authentication(tmp_path) -> None:  # noqa: ANN001
    from service.main import create_app
    from tests.service.conftest import make_settings

    seq, ya, yb = _case(5)
    app = create_app(make_settings(data_dir=tmp_path / "data", auth="required"))
    with TestClient(app) as c:
        r = c.post("/v1/decisions", json=_compact(seq, ya, yb))
    assert r.status_code == 401 and r.headers["x-content-type-options"] == "nosniff"


def replayed_dataset_decision(client: TestClient, seed: int) -> tuple[dict, str]:
    """A dataset uploaded and replayed (one policy, grouped), and a decision body on it for
    its first two systems: ``(body, replay id)``."""
    content = synth_csv(seed=seed)
    ds = upload(client, content)
    records = parse_records(content)
    a, b = records.systems[0], records.systems[1]
    outcomes = {s: {t: float(records.y[i, j]) for j, t in enumerate(records.tasks[:20])}
                for i, s in ((0, a), (1, b))}  # fmt: skip
    body = {"dataset_id": ds["id"], "group": "group", "system_a": a, "system_b": b, "outcomes": outcomes}
    spec = {"policies": ["coverage_bootstrap"], "deltas": [0], "orders": 5, "groups": ["group"], "bootstrap": [20]}
    rid = client.post("/v1/replays", json={"dataset_id": ds["id"], **spec}).json()["id"]
    assert wait_for(client, rid)["status"] == "succeeded"
    return body, rid


def spy_on_routes(monkeypatch) -> list[bool]:  # noqa: ANN001
    """Records, per call of ``decision_json``, whether it came from the fast path (``True``:
    cached look-ups only) or from the route."""
    from service.decisions import service

    routed: list[bool] = []
    real = service.decision_json

    def spy(factory, body, **kw):  # noqa: ANN001, ANN003, ANN202
        routed.append(kw.get("cached_only", False))
        return real(factory, body, **kw)

    monkeypatch.setattr(service, "decision_json", spy)
    return routed


def test_dataset_decisions_reuse_calibration_for_its_ttl_and_take_the_fast_path(backend: dict, monkeypatch) -> None:  # noqa: ANN001
    """Calibration rows are kept ``calibration_cache_seconds`` per process (a replay finished in
    this process drops them at once, see above); a change made elsewhere shows after the TTL.
    Once cached, the fast path answers with the route's bytes."""
    import time
    from types import SimpleNamespace

    from service.decisions import service
    from service.main import create_app
    from service.replays.models import MetricRow
    from tests.service.conftest import make_settings

    settings = make_settings(**backend, calibration_cache_seconds=60.0)
    with TestClient(create_app(settings)) as client:
        body, rid = replayed_dataset_decision(client, seed=41)
        routed = spy_on_routes(monkeypatch)
        first = client.post("/v1/decisions", json=body)
        second = client.post("/v1/decisions", json=body)
        monkeypatch.undo()
        assert first.status_code == second.status_code == 200
        assert first.content == second.content and first.json()["calibration"]["replay_id"] == rid
        assert routed == [True, False, True]  # cold: fast path declines, the route looks up; warm: fast path
        with client.app.state.sessionmaker.begin() as session:  # as if another process changed the rows
            session.query(MetricRow).delete()
        assert client.post("/v1/decisions", json=body).json()["calibration"] is not None  # within the TTL
        later = time.monotonic() + 61  # past the TTL, without sleeping (a loaded runner may be slow)
        monkeypatch.setattr(service, "time", SimpleNamespace(monotonic=lambda: later))
        assert client.post("/v1/decisions", json=body).json()["calibration"] is None


def test_calibration_rows_near_their_expiry_are_read_again_in_the_background(backend: dict, monkeypatch) -> None:  # noqa: ANN001
    """In the last fifth of its TTL an entry is still served by the fast path, and read again
    in the background: a steady stream of dataset decisions never meets an expired entry (each
    such miss went to the route, a thread and the database while the others queued)."""
    import time
    from types import SimpleNamespace

    from service.decisions import service
    from service.main import create_app
    from service.replays.models import MetricRow
    from tests.service.conftest import make_settings

    with TestClient(create_app(make_settings(**backend, calibration_cache_seconds=60.0))) as client:
        body, rid = replayed_dataset_decision(client, seed=43)
        start = time.monotonic()
        monkeypatch.setattr(service, "time", SimpleNamespace(monotonic=lambda: start))
        assert client.post("/v1/decisions", json=body).json()["calibration"]["replay_id"] == rid  # read, kept 60 s
        with client.app.state.sessionmaker.begin() as session:  # as if another process changed the rows
            session.query(MetricRow).delete()
        routed = spy_on_routes(monkeypatch)
        monkeypatch.setattr(service, "time", SimpleNamespace(monotonic=lambda: start + 55))  # its last fifth
        assert client.post("/v1/decisions", json=body).json()["calibration"] is not None  # served as it was
        service._REFRESHER.submit(lambda: None).result(timeout=60)  # the refresh, queued before it, is done
        monkeypatch.setattr(service, "time", SimpleNamespace(monotonic=lambda: start + 61))  # past the first read's TTL
        assert client.post("/v1/decisions", json=body).json()["calibration"] is None  # the rows read at 55 s
        assert routed == [True, True]  # both answered by the fast path: no expired entry met
