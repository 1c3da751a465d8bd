"""Limits (issue 7) on SQLite and Postgres: upload bytes, records and systems x tasks (413,
nothing stored), a replay's cost estimate (422 naming it), and the body cap of decisions and
sessions (413, whether the length is declared or the body is chunked)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import numpy as np
import pytest
from fastapi.testclient import TestClient

from service.engine.records import parse_records
from service.engine.replay import literal_draws, plan_replay, total_cases
from service.engine.spec import make_spec
from service.main import create_app
from tests.service.conftest import SMALL_SPEC, make_settings, synth_csv


@pytest.fixture
def tight(backend: dict[str, object]) -> Iterator[TestClient]:
    settings = make_settings(**backend, max_upload_bytes=20_000, max_upload_rows=150, max_systems_x_tasks=120,
                             max_upload_systems=5, max_request_bytes=2_000, max_replay_cases=1_000)
    app = create_app(settings)
    with TestClient(app) as c:
        yield c
        app.state.runner.wait_idle(timeout=60)


def _upload(c: TestClient, content: bytes):  # noqa: ANN202
    return c.post("/v1/datasets", files={"file": ("b.csv", content, "text/csv")})


def test_upload_limits_store_nothing(tight: TestClient) -> None:
    c = tight
    big = synth_csv(n_systems=4, n_tasks=400)
    assert len(big) > 20_000
    r = _upload(c, big)
    assert r.status_code == 413 and "20000 bytes" in r.json()["detail"]
    r = _upload(c, synth_csv(n_systems=4, n_tasks=40))  # 160 records
    assert r.status_code == 413 and "160 records" in r.json()["detail"] and "150" in r.json()["detail"]
    r = _upload(c, synth_csv(n_systems=5, n_tasks=25))  # 125 records, 5 x 25 = 125 cells
    assert r.status_code == 413 and "5 systems x 25 tasks = 125" in r.json()["detail"]
    r = _upload(c, synth_csv(n_systems=6, n_tasks=3))  # 18 cells, but 6 systems (each listed in the summary)
    assert r.status_code == 413 and "6 systems; the limit is 5" in r.json()["detail"]
    rows = [{"system": s, "task_id": f"t{t}", "outcome": 1} for s in ("a", "b", "c", "d") for t in range(40)]
    r = c.post("/v1/datasets", json={"rows": rows})
    assert r.status_code == 413
    assert c.get("/v1/datasets").json()["total"] == 0
    assert _upload(c, synth_csv(n_systems=4, n_tasks=30)).status_code == 201  # within every limit
    assert c.get("/v1/datasets").json()["total"] == 1


def test_replay_cost_ceiling_names_the_estimate(tight: TestClient) -> None:
    c = tight
    content = synth_csv(n_systems=4, n_tasks=30)
    ds = _upload(c, content).json()
    body = {**SMALL_SPEC, "dataset_id": ds["id"]}  # 12 pairs x 20 orders x 3 budgets x 4 configurations
    options = {k: v for k, v in SMALL_SPEC.items()}
    expected = total_cases(plan_replay(parse_records(content, fmt="csv"), make_spec(**options)))
    assert expected == 12 * 20 * 3 * 4 > 1_000
    r = c.post("/v1/replays", json=body)
    assert r.status_code == 422
    message = r.json()["detail"][0]["message"]
    assert f"{expected:,} cases" in message and "12 pairs x 20 orders x 3 budgets x 4 configurations" in message
    assert c.get("/v1/replays").json()["total"] == 0
    r = c.post("/v1/replays", json={**body, "orders": 5, "deltas": [0]})  # 12 x 5 x 3 x 2 = 360
    assert r.status_code == 202


def test_literal_resampling_is_bounded_by_its_draws(backend: dict[str, object]) -> None:
    """Outcomes off any small lattice: a finite bootstrap resamples task by task, thousands of
    times a lattice case's cost, so its draws have a ceiling of their own (the case count is
    far under its limit here)."""
    rng = np.random.default_rng(5)
    rows = [f"s{s},t{t},g{t % 3},0,{rng.random()!r}" for s in range(4) for t in range(30)]
    content = ("system,task_id,group,trial,outcome\n" + "\n".join(rows) + "\n").encode()
    body = {"policies": ["coverage_bootstrap", "uniform_forced"], "deltas": [0], "budgets": [0.5, 1.0],
            "orders": 20, "bootstrap": [50], "seed": 1}
    draws = literal_draws(plan_replay(parse_records(content, fmt="csv"), make_spec(**body)))
    assert draws == 12 * (15 + 30) * 50 * 20  # 12 pairs x the budgets' tasks x B x orders
    settings = make_settings(**backend, max_replay_resample_draws=draws - 1)
    app = create_app(settings)
    with TestClient(app) as c:
        ds = _upload(c, content).json()
        r = c.post("/v1/replays", json={**body, "dataset_id": ds["id"]})
        assert r.status_code == 422
        [detail] = r.json()["detail"]
        assert detail["field"] == "bootstrap"
        assert f"would draw {draws:,} tasks" in detail["message"] and f"the limit is {draws - 1:,}" in detail["message"]
        assert "no grid of step 1/L" in detail["message"]
        assert c.get("/v1/replays").json()["total"] == 0
        r = c.post("/v1/replays", json={**body, "dataset_id": ds["id"], "orders": 19})  # 19/20 of the draws
        assert r.status_code == 202
        app.state.runner.wait_idle(timeout=60)


def test_decision_and_session_bodies_are_capped(tight: TestClient) -> None:
    c = tight
    obs = [{"task_id": f"task-{i:05d}", "system": "A", "outcome": 1} for i in range(200)]
    body = json.dumps({"observations": obs}).encode()
    assert len(body) > 2_000
    for path in ("/v1/decisions", "/v1/sessions", "/v1/sessions/00000000-0000-0000-0000-000000000000/observations"):
        r = c.post(path, content=body, headers={"content-type": "application/json"})
        assert r.status_code == 413 and r.json()["error"] == "payload_too_large", path

        def chunks():  # noqa: ANN202  (no Content-Length: the cap counts the bytes)
            for i in range(0, len(body), 500):
                yield body[i:i + 500]

        r = c.post(path, content=chunks(), headers={"content-type": "application/json"})
        assert r.status_code == 413, path
    small = {"observations": [{"task_id": "t1", "system": "A", "outcome": 1}], "system_a": "A", "system_b": "B",
             "universe": {"task_ids": ["t1", "t2"]}}
    r = c.post("/v1/decisions", json=small)
    assert r.status_code in (200, 422) and r.status_code != 413


def test_calculators_bound_their_work(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """Inputs the fuzzer found to cost minutes of CPU (or a 500) are answered from a bounded
    amount of work, counted where the work is: exact pass@k coefficients computed (one per
    k asked; none for a refusal), and binomial bounds evaluated by the runs calculator (a
    bisection of a few dozen, where a walk took 1e8 steps)."""
    from service.engine import samplesize
    from service.stats import router

    counted = {"pass_at_k": 0, "binomial_bounds": 0}

    def counting(name: str, module: object):  # noqa: ANN202
        real = getattr(module, name)

        def wrapper(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            counted[name] += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(module, name, wrapper)

    counting("pass_at_k", router)
    counting("binomial_bounds", samplesize)
    cases = [  # body, path, status, (pass@k coefficients, binomial bounds) at most; the first is also at least
        ({"n": 10_000, "c": 3, "k": 5_000}, "/v1/stats/passk", 200, (1, 0)),
        ({"n": 100_000, "c": 3, "k": 5}, "/v1/stats/passk", 422, (0, 0)),  # exact coefficients: n is bounded
        ({"n": 2_000, "c": 3}, "/v1/stats/passk", 422, (0, 0)),  # a whole curve of 2,000 values: give k
        ({"max_failure_rate": 1e-12}, "/v1/stats/runs", 200, (0, 64)),  # was a walk of 1e8 steps
        ({"max_failure_rate": 5e-324}, "/v1/stats/runs", 422, (0, 64)),
        ({"margin": 5e-324}, "/v1/stats/tasks", 422, (0, 0)),
        ({"n": 5e-324}, "/v1/stats/gap", 422, (0, 0)),
        ({"n": 5e-324}, "/v1/stats/margin", 422, (0, 0)),
        ({"successes": 1, "n": 10**20}, "/v1/stats/bound", 422, (0, 0)),
    ]
    for body, path, status, (most_coefficients, most_bounds) in cases:
        counted.update(pass_at_k=0, binomial_bounds=0)
        r = client.post(path, json=body)
        assert r.status_code == status, (path, body, r.text)
        assert counted["pass_at_k"] <= most_coefficients and counted["binomial_bounds"] <= most_bounds, (body, counted)
        if status == 200:  # the counters see the work they bound
            assert counted["pass_at_k"] + counted["binomial_bounds"] >= 1, (body, counted)
    # ceil(ln 0.05 / ln(1 - 1e-12)) in 60-digit arithmetic (this test once held 2,995,632,251,096: the
    # bound's cancellation, test_evalstats.test_failure_bounds_and_runs_keep_their_digits_for_small_rates)
    assert client.post("/v1/stats/runs", json={"max_failure_rate": 1e-12}).json()["runs"] == 2_995_732_273_553
    assert client.get("/v1/datasets", params={"offset": 10**30}).status_code == 422
    r = client.post("/v1/stats/runs", json={"max_failure_rate": 7.6e-159, "failures": 158789, "level": 0.5})
    assert r.status_code == 422 and "runs would be needed" in r.json()["detail"][0]["message"]


def test_both_decision_entry_points_refuse_with_the_same_messages_naming_their_field() -> None:
    """``check_decision`` (an inline universe) and ``check_loaded_universe`` (a dataset's) share
    one check: too many tasks names the universe's field, too much work names ``body``, and
    both say the same numbers."""
    from types import SimpleNamespace

    from service import limits
    from service.errors import Unprocessable

    settings = make_settings(max_universe_tasks=1_000, max_decision_work=5_000)

    def body(n_tasks: int, groups: list[str] | None, rule: str | None, coverage_aware: bool | None = None,
             outcomes: dict | None = None) -> SimpleNamespace:
        universe = SimpleNamespace(task_ids=[f"t{i}" for i in range(n_tasks)], groups=groups)
        return SimpleNamespace(universe=universe, observations=None, outcomes=outcomes, rule=rule, policy=None,
                               coverage_aware=coverage_aware, bootstrap="exact")

    def refusal(fn, *args) -> dict:  # noqa: ANN001
        with pytest.raises(Unprocessable) as info:
            fn(*args, settings)
        [detail] = info.value.detail
        return detail

    big = body(1_001, None, "anytime")
    inline, loaded = refusal(limits.check_decision, big), refusal(limits.check_loaded_universe, 1_001, 1, big)
    assert inline == {"field": "universe.task_ids", "message": "1,001 tasks; the limit is 1,000"}
    assert loaded == {"field": "dataset_id", "message": inline["message"]}

    # anytime's coverage path: 900 tasks + 900 observations + 900 x 4 groups = 5,400 cells > 5,000
    obs = {"A": {f"t{i}": 1 for i in range(450)}, "B": {f"t{i}": 0 for i in range(450)}}
    heavy = body(900, [f"g{i % 4}" for i in range(900)], "anytime", outcomes=obs)
    inline, loaded = refusal(limits.check_decision, heavy), refusal(limits.check_loaded_universe, 900, 4, heavy)
    assert inline["field"] == "body" and "about 5,400 cells" in inline["message"]
    assert "the limit is 5,000" in inline["message"] and loaded == inline

    # without the coverage path (another rule, or coverage off) the groups are not counted: 1,800 cells
    for light in (body(900, heavy.universe.groups, "serfling", outcomes=obs),
                  body(900, heavy.universe.groups, "anytime", coverage_aware=False, outcomes=obs)):
        assert limits.check_decision(light, settings) == 1_800
        assert limits.check_loaded_universe(900, 4, light, settings) is None
    # a dataset universe is checked once loaded: the inline check counts only the observations
    assert limits.check_decision(SimpleNamespace(**{**vars(heavy), "universe": None}), settings) == 900
