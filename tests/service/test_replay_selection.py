"""Pair selections, gap classes and diagnostics through the API and the forms (both backends)."""

from __future__ import annotations

import json

from fastapi.testclient import TestClient

from service.engine.report import report_json
from tests.service.conftest import SMALL_SPEC, synth_csv, upload, wait_for
from tests.service.test_pages import dataset_slice
from tests.service.test_replays import engine_report


def test_api_pairs_and_gap_classes_give_the_engine_report(client: TestClient) -> None:
    content = synth_csv(seed=31, n_systems=5)
    ds = upload(client, content)
    system = ds["summary"]["systems"][2]["name"]
    spec = {**SMALL_SPEC, "pairs": f"involving:{system}", "gap_classes": [0, 5, 100]}
    r = client.post("/v1/replays", json={"dataset_id": ds["id"], **spec})
    assert r.status_code == 202, r.text
    assert r.json()["spec"]["pairs"] == f"involving:{system}" and r.json()["n_pairs"] == 8
    done = wait_for(client, r.json()["id"])
    assert done["status"] == "succeeded", done
    body = client.get(f"/v1/replays/{done['id']}/report").content
    assert body == report_json(engine_report(content, spec))  # chunked in the service, in one piece here
    rep = json.loads(body)
    for i, conf in enumerate(rep["configurations"]):
        rows = client.get(f"/v1/replays/{done['id']}/pairs", params={"config": i}).json()["items"]
        assert len(rows) == 8 and all(system in (p["a"], p["b"]) for p in rows)
        assert [(c["low"], c["high"]) for c in conf["gap_classes"]] == [(0.0, 5.0), (5.0, 100.0)]
        assert sum(c["pairs"] for c in conf["gap_classes"]) == conf["n_pairs"] == 8


def test_api_bad_selection_and_edges_are_422_naming_the_field(client: TestClient) -> None:
    ds = upload(client, synth_csv(seed=32))
    for extra, field, words in (
        ({"pairs": "top:zero"}, "pairs", "top:K"),
        ({"pairs": "involving:nobody"}, "pairs", "nobody"),
        ({"pairs": "top:1"}, "pairs", "keeps none"),
        ({"gap_classes": [5, 1]}, "gap_classes", "increasing"),
    ):
        r = client.post("/v1/replays", json={"dataset_id": ds["id"], **SMALL_SPEC, **extra})
        assert r.status_code == 422, (extra, r.text)
        detail = r.json()["detail"]
        assert detail[0]["field"] == field and words in detail[0]["message"], detail


def test_form_does_not_preselect_an_infeasible_grouping_and_says_why(client: TestClient) -> None:
    small = upload(client, synth_csv(seed=33, n_systems=3, n_tasks=30), "three-groups.csv")
    page = client.get("/", params={"dataset": small["id"]}).text
    assert '<option value="group" selected>' in page and "Not preselected" not in page
    # terminal-bench core: 70 task families for 80 tasks; coverage fits only from 73 tasks
    tb = upload(client, dataset_slice("terminal_bench_core_0.1.1", 3), "tb.csv")
    assert [c["coverage_from_k"] for c in tb["summary"]["group_columns"]] == [73]
    page = client.get("/", params={"dataset": tb["id"]}).text
    assert '<option value="group" selected>' not in page
    assert "Not preselected: grouping by group gives 70 groups for 80 tasks" in page
    assert "first fits at 73 of 80 tasks (91%)" in page


def test_form_passes_the_pair_selection(client: TestClient) -> None:
    ds = upload(client, synth_csv(seed=34, n_systems=4, n_tasks=30))
    form = {
        "dataset_id": ds["id"],
        "policies": ["uniform_forced"],
        "deltas": "0",
        "orders": "4",
        "budgets": "0.5",
        "group": "",
        "seed": "0",
        "pairs": "top:3",
    }
    bad = client.post("/replays", data={**form, "pairs": "best:3"})
    assert bad.status_code == 422 and "unknown selection term" in bad.text
    started = client.post("/replays", data=form, follow_redirects=False)
    assert started.status_code == 303, started.text
    done = wait_for(client, started.headers["location"].rsplit("/", 1)[1])
    assert done["status"] == "succeeded" and done["spec"]["pairs"] == "top:3" and done["n_pairs"] == 6
