"""Report page: diagnostics, tasks needed by gap size, class and OC figures, unordered pairs;
the replay list's budgets and the comparison page (both backends)."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient

from service.reports import class_figures
from tests.service.conftest import synth_csv, upload, wait_for
from tests.service.test_pages import all_pairs, dataset_slice, run_replay

SPEC = {
    "policies": ["coverage_bootstrap"],
    "deltas": [0],
    "orders": 6,
    "bootstrap": [50],
    "groups": ["group"],
    "budgets": [0.1, 0.5, 0.95],
    "seed": 1,
}


def test_page_shows_diagnostics_gap_classes_and_their_figures(client: TestClient) -> None:
    rid, _ = run_replay(client, dataset_slice("terminal_bench_core_0.1.1", 4), "tb.csv", **SPEC)
    report = client.get(f"/v1/replays/{rid}/report").json()
    conf = report["configurations"][0]
    html = client.get(f"/replays/{rid}").text
    # diagnostics come before the numbers they qualify
    assert html.index('id="diagnostics"') < html.index('id="summary-table"')
    for d in conf["diagnostics"]:
        assert d["code"] in html
    assert "coverage_infeasible_below" in [d["code"] for d in conf["diagnostics"]]
    assert "70 groups for 80 tasks" in html
    # tasks needed by gap size: one cell per class with its own minimum sufficient budget
    table = html[html.index('id="gap-class-table"') : html.index("</table>", html.index('id="gap-class-table"'))]
    cells = re.findall(r'<td class="num"><span class="strong">([^<]+)</span>', table)
    want = [
        ("none" if g["minimum_sufficient_budget"] is None else f"{g['minimum_sufficient_budget'] * 100:.4g} %")
        for g in conf["gap_classes"]
    ]
    assert cells == want
    for name in class_figures.NAMES:
        assert f'src="/v1/replays/{rid}/figures/{name}.svg?config=0"' in html
        svg = client.get(f"/v1/replays/{rid}/figures/{name}.svg", params={"config": 0})
        assert svg.status_code == 200 and svg.content.startswith(b"<?xml") and b"<script" not in svg.content
        assert client.get(f"/v1/replays/{rid}/figures/{name}.svg", params={"config": 0}).content == svg.content
        again = client.get(
            f"/v1/replays/{rid}/figures/{name}.svg",
            params={"config": 0},
            headers={"If-None-Match": svg.headers["etag"]},
        )
        assert again.status_code == 304
        png = client.get(f"/v1/replays/{rid}/figures/{name}.png")
        assert png.status_code == 200 and png.content.startswith(b"\x89PNG")
        bad = client.get(f"/v1/replays/{rid}/figures/{name}.svg", params={"config": 3})
        assert bad.status_code == 422 and bad.json()["detail"][0]["field"] == "config"


def test_pair_view_shows_each_unordered_pair_once_with_both_directions(client: TestClient) -> None:
    rid, _ = run_replay(client, synth_csv(seed=41, n_systems=5, n_tasks=30), **{**SPEC, "groups": [None]})
    pairs = all_pairs(client, rid, 0)
    assert len(pairs) == 20
    html = client.get(f"/replays/{rid}").text
    body = html[html.index('id="pair-table"') : html.index("</table>", html.index('id="pair-table"'))]
    rows = body.split("<tr>")[2:]
    assert len(rows) == 10 and "10 of 10 unordered pairs" in html
    by_pair = {(p["a"], p["b"]): p for p in pairs}
    seen = set()
    for row in rows:
        a, b = re.findall(r'<td class="sys">([^<]+)</td>', row)
        seen.add(frozenset((a, b)))
        lead, back = by_pair[(a, b)], by_pair[(b, a)]
        assert lead["delta_full"] > 0 or (lead["delta_full"] == 0 and a < b)  # A has the higher full mean
        assert row.count('class="two"') == 3  # two bars per budget
        first = re.search(r"<title>([^<]+)</title>", row).group(1)
        assert f"{a} vs {b}: accept {lead['accept'][0] * 100:.0f} %" in first
        assert f"{b} vs {a}: accept {back['accept'][0] * 100:.0f} %" in first
    assert len(seen) == 10


def test_replay_list_budgets_and_comparison_page(client: TestClient) -> None:
    content = synth_csv(seed=42, n_systems=4, n_tasks=40)
    first, ds = run_replay(client, content, **SPEC)
    second, _ = run_replay(client, content, **{**SPEC, "policies": ["serfling_coverage"], "pairs": "top:3"})
    reports = [client.get(f"/v1/replays/{r}/report").json() for r in (first, second)]
    index = client.get("/").text
    for rep in reports:
        c = rep["configurations"][0]
        msb = "none" if c["minimum_sufficient_budget"] is None else f"{c['minimum_sufficient_budget'] * 100:.4g} %"
        assert f'{c["policy"]["name"]} δ=0 group:</span> <span class="strong">{msb}</span>' in index
    assert f'name="ids" value="{first}"' in index and "(top:3)" in index
    page = client.get("/replays/compare", params=[("ids", first), ("ids", second)])
    assert page.status_code == 200 and page.headers["content-security-policy"]
    html = page.text
    assert first[:8] in html and second[:8] in html and "pairs top:3" in html
    row = html[html.index('<tr class="msb">') : html.index("</tr>", html.index('<tr class="msb">'))]
    got = re.findall(r'<td class="num strong">([^<]+)</td>', row)
    assert got == [
        (
            "none"
            if r["configurations"][0]["minimum_sufficient_budget"] is None
            else f"{r['configurations'][0]['minimum_sufficient_budget'] * 100:.4g} %"
        )
        for r in reports
    ]
    assert html.count('<tr><th class="num">') == 3  # the three budgets, side by side
    # refusals: one replay, an unknown one, replays of two datasets
    assert client.get("/replays/compare", params={"ids": first}).status_code == 422
    unknown = client.get("/replays/compare", params=[("ids", first), ("ids", "00000000-0000-0000-0000-000000000000")])
    assert unknown.status_code == 422 and "no replay" in unknown.text
    other = upload(client, synth_csv(seed=43, n_systems=3, n_tasks=20))
    r = client.post("/v1/replays", json={"dataset_id": other["id"], **SPEC})
    third = wait_for(client, r.json()["id"])["id"]
    mixed = client.get("/replays/compare", params=[("ids", first), ("ids", third)])
    assert mixed.status_code == 422 and "different datasets" in mixed.text
    assert ds["id"] != other["id"]
