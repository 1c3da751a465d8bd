"""``/v1/stats/*`` calculators and the dataset leaderboard through the real app (SPEC §8)."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from service.engine import leaderboard as L
from service.engine.records import parse_records
from service.engine.statbase import to_dict
from tests.conftest import shared_dataset
from tests.service.conftest import synth_csv, upload


def _fields(response) -> list[str]:
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["error"] == "invalid_input"
    return [d["field"] for d in body["detail"]]


def test_calculators_give_the_spec_values(client: TestClient) -> None:
    r = client.post("/v1/stats/passk", json={"n": 5, "c": 2, "k": 2})
    assert r.status_code == 200, r.text
    v = r.json()["values"][0]
    assert v["pass_at_k"] == pytest.approx(0.7) and v["pass_hat_k"] == pytest.approx(0.1)
    assert len(client.post("/v1/stats/passk", json={"n": 4, "c": 1}).json()["values"]) == 4
    assert round(client.post("/v1/stats/bound", json={"successes": 20, "n": 20}).json()["failure_upper"], 4) == 0.1391
    assert client.post("/v1/stats/runs", json={"max_failure_rate": 0.05}).json()["runs"] == 59
    assert round(client.post("/v1/stats/margin", json={"n": 914}).json()["margin"], 4) == 0.0324
    assert client.post("/v1/stats/tasks", json={"margin": 0.01}).json()["tasks"] == 9604
    gap = client.post("/v1/stats/gap", json={"n": 200, "rho": 0.5}).json()
    assert round(gap["unpaired"], 3) == 0.098 and round(gap["paired"], 3) == 0.069
    assert client.post("/v1/stats/power", json={"delta": 0.05, "rho": 0.5}).json()["tasks"] == 785


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/stats/passk", {"n": 3, "c": 1, "k": 4}, "k"),
        ("/v1/stats/passk", {"n": 3, "c": 5, "k": 1}, "c"),
        ("/v1/stats/passk", {"n": 3, "c": -1}, "c"),
        ("/v1/stats/passk", {"n": 1_001, "c": 2}, "k"),  # a curve of 1,001 values: give k (was named "")
        ("/v1/stats/bound", {"successes": -2, "n": 5}, "successes"),
        ("/v1/stats/bound", {"successes": 6, "n": 5}, "n"),
        ("/v1/stats/bound", {"successes": 1, "n": 5, "level": 1.0}, "level"),
        ("/v1/stats/runs", {"max_failure_rate": 0.05, "failures": -1}, "failures"),
        ("/v1/stats/runs", {"max_failure_rate": 0.05, "failures": 10**30}, "failures"),
        ("/v1/stats/margin", {"n": 100, "level": 0}, "level"),
        ("/v1/stats/tasks", {"margin": -0.1}, "margin"),
        ("/v1/stats/gap", {"n": 100, "rho": 2}, "rho"),
        ("/v1/stats/power", {"delta": 0.05, "power": 1.2}, "power"),
    ],
)
def test_calculators_reject_bad_input_naming_the_field(client: TestClient, path, body, field) -> None:
    assert _fields(client.post(path, json=body)) == [field]


def test_leaderboard_matches_the_engine(client: TestClient) -> None:
    content = synth_csv(seed=5, n_systems=5, n_tasks=60, trials=3)
    ds = upload(client, content)
    url = f"/v1/datasets/{ds['id']}/leaderboard"
    r = client.get(url, params={"cluster": "group", "correction": "bh", "matrix": "true"})
    assert r.status_code == 200, r.text
    expected = to_dict(L.leaderboard(parse_records(content), 0.95, "group", "bh", True))
    assert r.json() == json.loads(json.dumps(expected))
    body = r.json()
    assert len(body["rows"]) == 5 and len(body["matrix"]) == 10 and body["n_clusters"] == 3
    assert [len(row["stats"]["pass_k"]) for row in body["rows"]] == [3] * 5
    leader = client.get(url, params={"ties": "leader", "level": 0.9}).json()
    assert leader["ties"] == "leader" and leader["level"] == 0.9


def test_a_leaderboard_is_computed_once_per_dataset_and_parameters(client: TestClient, monkeypatch) -> None:
    """Datasets never change: the API and the page answer the same parameters from one
    computation (``stats/boards.py``), the same JSON; another level, cluster or tie rule is
    another entry; the all-pairs matrix is computed each time; a deleted dataset's are dropped."""
    calls: list[tuple] = []
    compute = L.leaderboard

    def counted(records, level=0.95, cluster=None, correction="holm", matrix=False, ties="cliques"):  # noqa: ANN001
        calls.append((level, cluster, correction, matrix, ties))
        return compute(records, level, cluster, correction, matrix, ties)

    monkeypatch.setattr(L, "leaderboard", counted)
    content = synth_csv(seed=8, n_systems=5, n_tasks=60)
    ds = upload(client, content)
    url = f"/v1/datasets/{ds['id']}/leaderboard"
    first = client.get(url, params={"cluster": "group", "ties": "leader"})
    again = client.get(url, params={"cluster": "group", "ties": "leader"})
    assert first.status_code == 200 and again.json() == first.json() and len(calls) == 1
    expected = to_dict(compute(parse_records(content), 0.95, "group", "holm", False, "leader"))
    assert first.json() == json.loads(json.dumps(expected))
    # the page's ties default to "leader": the API's entry; then (no cluster, cliques), which
    # the API's defaults find
    assert client.get(f"/datasets/{ds['id']}/leaderboard", params={"cluster": "group"}).status_code == 200
    assert client.get(f"/datasets/{ds['id']}/leaderboard", params={"ties": "cliques"}).status_code == 200
    assert client.get(url).status_code == 200
    assert calls == [(0.95, "group", "holm", False, "leader"), (0.95, None, "holm", False, "cliques")]
    client.get(url, params={"level": 0.9})
    client.get(url, params={"matrix": "true"})
    client.get(url, params={"matrix": "true"})
    assert len(calls) == 5 and calls[-1][3] is True
    assert client.delete(f"/v1/datasets/{ds['id']}").status_code in (200, 204)
    assert client.get(url).status_code == 404
    from service.stats import boards

    assert not [k for k in boards._BOARDS.keys() if str(k[0]) == ds["id"]]


def test_leaderboard_errors(client: TestClient) -> None:
    ds = upload(client, synth_csv(seed=6))
    url = f"/v1/datasets/{ds['id']}/leaderboard"
    assert _fields(client.get(url, params={"cluster": "nope"})) == ["cluster"]
    assert _fields(client.get(url, params={"level": 1.5}))[0].endswith("level")
    assert _fields(client.get(url, params={"correction": "bonferroni"}))[0].endswith("correction")
    missing = client.get("/v1/datasets/00000000-0000-0000-0000-000000000000/leaderboard")
    assert missing.status_code == 404 and missing.json()["error"] == "not_found"


def test_pair_endpoint_is_seeded(client: TestClient) -> None:
    content = synth_csv(seed=7, trials=2)
    ds = upload(client, content)
    systems = parse_records(content).systems
    params = {"a": systems[0], "b": systems[1], "seed": 11, "boot": 500}
    first = client.get(f"/v1/datasets/{ds['id']}/pairs", params=params)
    assert first.status_code == 200, first.text
    assert client.get(f"/v1/datasets/{ds['id']}/pairs", params=params).json() == first.json()
    assert first.json()["bootstrap"]["method"] == "paired_cluster_bootstrap"
    assert _fields(client.get(f"/v1/datasets/{ds['id']}/pairs", params={**params, "b": "ghost"})) == ["b"]


def test_a_pair_s_bootstrap_is_held_to_its_draw_limit(backend) -> None:
    """``boot x tasks`` draws are counted before the records are read: 2 x 500,000 tasks at
    boot = 20,000 took 88.6 s of CPU. The default allows boot = 2,000 on 100,000 tasks."""
    from service.main import create_app
    from tests.service.conftest import make_settings

    assert make_settings(**backend).max_pair_bootstrap_draws >= 2_000 * 100_000
    with TestClient(create_app(make_settings(**backend, max_pair_bootstrap_draws=60 * 1_000))) as c:
        content = synth_csv(seed=8, n_systems=3, n_tasks=60)
        ds = upload(c, content)
        systems = parse_records(content).systems
        url = f"/v1/datasets/{ds['id']}/pairs"
        r = c.get(url, params={"a": systems[0], "b": systems[1], "boot": 1_001})
        assert r.status_code == 422 and _fields(r) == ["boot"] and "use boot <= 1,000" in r.text
        assert c.get(url, params={"a": systems[0], "b": systems[1], "boot": 1_000}).status_code == 200
        gone = c.get("/v1/datasets/00000000-0000-0000-0000-000000000000/pairs", params={"a": "x", "b": "y"})
        assert gone.status_code == 404


def test_swebench_lite_leaderboard_over_http(client: TestClient) -> None:
    content = shared_dataset("swebench_lite").read_bytes()
    ds = upload(client, content, "swebench_lite.csv")
    body = client.get(f"/v1/datasets/{ds['id']}/leaderboard", params={"cluster": "group"}).json()
    groups = body["tie_groups"]
    assert sum(len(g["systems"]) for g in groups) == 42 and groups[0]["first_rank"] == 1
    assert body["n_clusters"] == 12


def test_leaderboard_says_unequal_task_sets_and_gives_rank_intervals(client: TestClient) -> None:
    ds = upload(client, shared_dataset("tau2_bench").read_bytes(), "tau2.csv")
    body = client.get(f"/v1/datasets/{ds['id']}/leaderboard").json()
    u = body["unequal_task_sets"]
    assert u["code"] == "unequal_task_sets" and u["smallest_overlap"] == 20 and len(u["pair"]) == 2
    assert body["ties"] == "cliques"
    for row in body["rows"]:
        assert row["rank_low"] <= row["rank"] <= row["rank_high"] and row["letters"]
    assert all(c["ci_low"] <= c["diff"] <= c["ci_high"] for c in body["adjacent"])
