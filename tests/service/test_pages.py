"""Report pages, leaderboard page, index forms and figures (SQLite and Postgres).

Real data: a slice of ``swebench_lite`` and ``terminal_bench_1_fractional`` replayed with
few orders; checks read the numbers back from the report JSON the page was made from.
"""

from __future__ import annotations

import csv
import io
import json
import re
import struct
import xml.etree.ElementTree as ET

import pytest
from fastapi.testclient import TestClient

from service.jobs import TASKS
from service.reports import figures, view
from service.reports.pages import HTML_HEADERS
from tests.conftest import shared_dataset
from tests.service.conftest import SMALL_SPEC, synth_csv, upload, wait_for

EVIL = "<script>alert(1)</script>"
EVIL_GROUP = "<img src=x onerror=alert(2)>"


def dataset_slice(name: str, n_systems: int, rename: dict[str, str] | None = None) -> bytes:
    """The first ``n_systems`` systems (by name) of a shared dataset, optionally renamed."""
    text = shared_dataset(name).read_text()
    rows = list(csv.DictReader(io.StringIO(text)))
    keep = sorted({r["system"] for r in rows})[:n_systems]
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
    w.writeheader()
    for r in rows:
        if r["system"] in keep:
            w.writerow({**r, "system": (rename or {}).get(r["system"], r["system"])})
    return out.getvalue().encode()


def run_replay(client: TestClient, content: bytes, name: str = "bench.csv", **spec: object) -> tuple[str, dict]:
    ds = upload(client, content, name)
    body = {"dataset_id": ds["id"], **spec}
    r = client.post("/v1/replays", json=body)
    assert r.status_code == 202, r.text
    rid = r.json()["id"]
    done = wait_for(client, rid, timeout=180)
    assert done["status"] == "succeeded", done
    return rid, ds


def all_pairs(client: TestClient, rid: str, config: int) -> list[dict]:
    page = client.get(f"/v1/replays/{rid}/pairs", params={"config": config, "limit": 1000}).json()
    assert page["matched"] == page["total"] == len(page["items"]), page
    return page["items"]


def assert_html_headers(r) -> None:  # noqa: ANN001
    assert r.headers["content-type"].startswith("text/html")
    for k, v in HTML_HEADERS.items():
        assert r.headers[k] == v
    csp = r.headers["content-security-policy"]
    assert "http" not in csp and "frame-ancestors 'none'" in csp and "'unsafe-inline'" not in csp


def only_own_scripts(html: str) -> None:
    assert re.findall(r"<script\b[^>]*>", html) == ['<script src="/static/report.js" defer>']
    assert "http://" not in html.replace("http://www.w3.org", "") and "https://" not in html


def check_report_page(client: TestClient, rid: str) -> dict:
    report = client.get(f"/v1/replays/{rid}/report").json()
    r = client.get(f"/replays/{rid}")
    assert r.status_code == 200
    assert_html_headers(r)
    html = r.text
    only_own_scripts(html)
    # summary table: one row per configuration, with the minimum sufficient budget
    table = html[html.index('id="summary-table"') : html.index("</table>", html.index('id="summary-table"'))]
    assert table.count("<tr>") == 1 + len(report["configurations"])
    for c in report["configurations"]:
        msb = c["minimum_sufficient_budget"]
        assert (f"{msb * 100:.4g} %" if msb is not None else "none") in table
        assert c["policy"]["name"] in table
    # figures and downloads
    for name in figures.NAMES:
        assert f'src="/v1/replays/{rid}/figures/{name}.svg"' in html
    assert f'href="/v1/replays/{rid}/report"' in html and f'href="/v1/replays/{rid}/report.csv"' in html
    # per-pair view: first page sorted by |Δ_full| ascending
    pairs = all_pairs(client, rid, 0)
    first = min(pairs, key=lambda p: (abs(p["delta_full"]), p["a"], p["b"]))
    body = html[html.index('id="pair-table"') :]
    assert body.index(first["a"]) < body.index("</tbody>")
    unordered = len({frozenset((p["a"], p["b"])) for p in pairs})  # each unordered pair is one row
    assert html.count('<td class="bar">') == min(40, unordered) * len(report["spec"]["budgets"])
    return report


def test_report_page_swebench_slice(client: TestClient) -> None:
    content = dataset_slice("swebench_lite", 6)
    spec = {"policies": ["coverage_bootstrap", "serfling_coverage"], "deltas": [0, 5], "orders": 10,
            "groups": ["group"], "bootstrap": [50], "seed": 3}
    rid, ds = run_replay(client, content, "swebench_slice.csv", **spec)
    report = check_report_page(client, rid)
    assert report["dataset"]["systems"] == 6
    # sorting by |Δ_full| descending and paging through the second configuration
    top = max(all_pairs(client, rid, 1), key=lambda p: (abs(p["delta_full"]), p["a"], p["b"]))
    html = client.get(f"/replays/{rid}", params={"config": 1, "sort": "abs_delta", "order": "desc"}).text
    rows = html[html.index('id="pair-table"') :].split("<tr>")[2]
    assert top["a"] in rows and top["b"] in rows and f"{abs(top['delta_full']) * 100:+.2f} pp" in rows
    html = client.get(f"/replays/{rid}", params={"q": report["dataset"]["system_names"][0][:12]}).text
    assert re.search(r"(\d+) of 15 unordered pairs", html)
    # the index lists the dataset and the replay; the leaderboard page ranks the six systems
    index = client.get("/")
    assert_html_headers(index)
    assert f'href="/replays/{rid}"' in index.text and ds["name"] == "swebench_slice" and "swebench_slice" in index.text
    lb = client.get(f"/datasets/{ds['id']}/leaderboard", params={"cluster": "group", "ties": "leader"})
    assert lb.status_code == 200
    assert_html_headers(lb)
    board = client.get(f"/v1/datasets/{ds['id']}/leaderboard", params={"cluster": "group", "ties": "leader"}).json()
    assert lb.text.count('<td class="sys">') == 6
    for g in board["tie_groups"]:
        assert g["description"] in lb.text
    leader = board["rows"][0]["stats"]
    assert f"{leader['mean']:.3f}" in lb.text
    assert client.get(f"/datasets/{ds['id']}/leaderboard", params={"level": 1.5}).status_code == 422


def test_report_page_terminal_bench_fractional(client: TestClient) -> None:
    content = shared_dataset("terminal_bench_1_fractional").read_bytes()
    spec = {"policies": ["coverage_bootstrap", "uniform_forced"], "deltas": [0, 10], "orders": 4,
            "groups": ["group"], "bootstrap": [30], "budgets": "0.1:0.9:0.2"}
    rid, _ = run_replay(client, content, "tb1.csv", **spec)
    report = check_report_page(client, rid)
    assert report["dataset"]["binary"] is False
    assert "fractional (lattice 1/" in client.get(f"/replays/{rid}").text


def test_figures_are_valid_deterministic_and_cacheable(client: TestClient) -> None:
    rid, _ = run_replay(client, synth_csv(seed=21, n_systems=4, n_tasks=60), **SMALL_SPEC)
    for name in figures.NAMES:
        svg = client.get(f"/v1/replays/{rid}/figures/{name}.svg")
        assert svg.status_code == 200 and svg.headers["content-type"] == "image/svg+xml"
        assert svg.headers["x-content-type-options"] == "nosniff"
        assert "script-src" not in svg.headers["content-security-policy"]
        root = ET.fromstring(svg.content)
        assert root.tag == "{http://www.w3.org/2000/svg}svg"
        png = client.get(f"/v1/replays/{rid}/figures/{name}.png")
        assert png.status_code == 200 and png.headers["content-type"] == "image/png"
        assert png.content[:8] == b"\x89PNG\r\n\x1a\n" and png.content[12:16] == b"IHDR"
        width, height = struct.unpack(">II", png.content[16:24])
        assert width > 400 and height > 200
        # same report, same bytes; the ETag revalidates without a body
        again = client.get(f"/v1/replays/{rid}/figures/{name}.svg")
        assert again.content == svg.content and again.headers["etag"] == svg.headers["etag"]
        assert png.headers["etag"] != svg.headers["etag"]
        r304 = client.get(f"/v1/replays/{rid}/figures/{name}.svg", headers={"If-None-Match": svg.headers["etag"]})
        assert r304.status_code == 304 and not r304.content
    report = client.get(f"/v1/replays/{rid}/report").json()
    direct = figures.render(report, "unresolved", "svg")
    assert direct == client.get(f"/v1/replays/{rid}/figures/unresolved.svg").content
    one = client.get(f"/v1/replays/{rid}/figures/unresolved.svg", params={"delta": 5})
    assert one.status_code == 200 and one.content != direct
    assert client.get(f"/v1/replays/{rid}/figures/nope.svg").status_code == 422
    assert client.get(f"/v1/replays/{rid}/figures/unresolved.gif").status_code == 422
    missing = client.get("/v1/replays/00000000-0000-0000-0000-000000000000/figures/unresolved.svg")
    assert missing.status_code == 404 and missing.json()["error"] == "not_found"


def test_figures_draw_a_bounded_number_of_panels_and_lines(client: TestClient) -> None:
    """One panel per δ and one line per configuration: a replay of 2 systems x 20 tasks with
    1,000 δ made one figure take 342 s and 1.4 GB. Without ``?delta=`` a figure draws the first
    ``MAX_PANELS`` and says so in its title; asking for more, or a replay with more lines per
    panel than ``MAX_SERIES``, is a 422 naming the field, before anything is drawn."""
    deltas = list(range(figures.MAX_PANELS + 3))
    rid, _ = run_replay(client, synth_csv(seed=22, n_systems=2, n_tasks=20), policies=["uniform_forced"],
                        deltas=deltas, orders=2, budgets=[0.5, 1.0])
    svg = client.get(f"/v1/replays/{rid}/figures/unresolved.svg")
    assert svg.status_code == 200
    assert svg.content.count(b"<g id=\"axes_") == figures.MAX_PANELS
    report = client.get(f"/v1/replays/{rid}/report").json()
    assert figures.render(report, "unresolved", "svg") == svg.content
    some = client.get(f"/v1/replays/{rid}/figures/errors.png", params={"delta": deltas[:figures.MAX_PANELS]})
    assert some.status_code == 200
    many = client.get(f"/v1/replays/{rid}/figures/errors.png", params={"delta": deltas[:figures.MAX_PANELS + 1]})
    assert many.status_code == 422 and many.json()["detail"][0]["field"] == "delta"
    wide = [{"name": f"p{i}", "order": "uniform", "rule": "forced"} for i in range(figures.MAX_SERIES + 1)]
    rid, _ = run_replay(client, synth_csv(seed=23, n_systems=2, n_tasks=20), policies=wide, deltas=[0],
                        orders=2, budgets=[0.5, 1.0])
    r = client.get(f"/v1/replays/{rid}/figures/coverage.svg")
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "name"
    assert f"{figures.MAX_SERIES + 1} configurations" in r.json()["detail"][0]["message"]


def test_user_supplied_names_are_escaped(client: TestClient) -> None:
    content = dataset_slice("swebench_lite", 4, rename={})
    systems = sorted({line.split(",")[0] for line in content.decode().splitlines()[1:]})
    header, rest = content.decode().split("\n", 1)
    text = header.replace("group", EVIL_GROUP) + "\n" + rest.replace(systems[0], EVIL)
    evil_policy = {"name": "<script>alert(3)</script>", "order": "uniform", "rule": "bootstrap"}
    rid, ds = run_replay(client, text.encode(), "<b>evil</b>.csv", policies=[evil_policy, "uniform_forced"],
                         deltas=[0], orders=6, bootstrap=[30], groups=[EVIL_GROUP], budgets=[0.3, 0.6, 0.9])
    pages = [f"/replays/{rid}", f"/replays/{rid}?q=script", "/", f"/datasets/{ds['id']}/leaderboard"]
    for url in pages:
        r = client.get(url)
        assert r.status_code == 200, url
        html = r.text
        only_own_scripts(html)
        assert "<script>alert" not in html and "<img src=x" not in html and "<b>evil" not in html
    replay_html = client.get(f"/replays/{rid}?q=script").text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in replay_html
    assert "&lt;script&gt;alert(3)&lt;/script&gt;" in replay_html
    assert "&lt;img src=x onerror=alert(2)&gt;" in replay_html
    board_html = client.get(f"/datasets/{ds['id']}/leaderboard").text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in board_html and "&lt;img src=x onerror=alert(2)&gt;" in board_html
    assert ds["name"] == "<b>evil</b>" and "&lt;b&gt;evil&lt;/b&gt;" in client.get("/").text
    for name in figures.NAMES:  # the policy name is drawn in the legends
        svg = client.get(f"/v1/replays/{rid}/figures/{name}.svg").content
        assert b"<script" not in svg and b"alert(3)" in svg  # escaped text, never a tag
        ET.fromstring(svg)


def test_running_replay_page_shows_progress(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """A replay held at half a chunk: the page shows the progress and polls the status."""
    from service.db import transaction
    from service.replays import repository
    from service.replays.models import RUNNING

    def half_done(ctx, replay_id: str) -> None:  # noqa: ANN001
        import uuid

        with transaction(ctx.sessionmaker) as session:
            replay = repository.get(session, uuid.UUID(replay_id), lock=True)
            replay.status = RUNNING
            chunk = repository.get_chunk(session, replay.id, 0)
            repository.claim_chunk(session, chunk)
            repository.heartbeat(session, chunk.id, 0.5)

    monkeypatch.setitem(TASKS, "replays.run", half_done)
    ds = upload(client, synth_csv(seed=22, n_systems=3, n_tasks=40))
    rid = client.post("/v1/replays", json={"dataset_id": ds["id"], **SMALL_SPEC}).json()["id"]
    client.app.state.runner.wait_idle(timeout=30)
    state = client.get(f"/v1/replays/{rid}").json()
    assert state["status"] == "running" and 0 < state["progress"] < 1
    r = client.get(f"/replays/{rid}")
    assert r.status_code == 200
    assert_html_headers(r)
    html = r.text
    assert f'data-status-url="/v1/replays/{rid}"' in html and 'data-status="running"' in html
    assert f'<progress id="progress-bar" max="1" value="{state["progress"]}">' in html
    assert f"{state['progress'] * 100:.1f} %" in html
    assert '<noscript><meta http-equiv="refresh" content="5"></noscript>' in html
    assert 'id="summary-table"' not in html
    assert client.get(f"/v1/replays/{rid}/figures/unresolved.svg").status_code == 409
    js = client.get("/static/report.js")
    assert js.status_code == 200 and "data-status-url" in js.text and js.headers["content-type"].startswith(
        "text/javascript")
    assert 'id="progress-eta"' in html and "eta_seconds" in js.text
    # the cancel button posts to the page route, which cancels like DELETE /v1/replays/{id}
    assert f'<form method="post" action="/replays/{rid}/cancel" id="cancel-form">' in html
    r = client.post(f"/replays/{rid}/cancel", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == f"/replays/{rid}"
    assert client.get(f"/v1/replays/{rid}").json()["status"] == "cancelled"
    page = client.get(f"/replays/{rid}").text
    assert "The replay was cancelled" in page and 'id="cancel-form"' not in page
    assert client.post(f"/replays/{rid}/cancel", follow_redirects=False).status_code == 303  # finished: no error
    assert client.post("/replays/nope/cancel").status_code == 404


def test_index_forms_upload_and_start(client: TestClient) -> None:
    empty = client.get("/")
    assert empty.status_code == 200 and "No dataset yet" in empty.text
    bad = client.post("/datasets", files={"file": ("bad.csv", b"system,task_id\nA,t1\n", "text/csv")})
    assert bad.status_code == 422 and 'id="form-errors"' in bad.text
    assert_html_headers(bad)
    ok = client.post("/datasets", files={"file": ("good.csv", synth_csv(seed=23, n_systems=3, n_tasks=30),
                                                  "text/csv")}, data={"name": "my bench"}, follow_redirects=False)
    assert ok.status_code == 303 and ok.headers["location"].startswith("/?dataset=")
    dataset_id = ok.headers["location"].split("=", 1)[1].split("#")[0]
    shown = client.get(ok.headers["location"])
    assert "my bench" in shown.text and "is stored" in shown.text
    assert 'name="orders" min="1" value="500"' in shown.text  # the CLI's and the API's default
    same = client.post("/datasets", files={"file": ("good.csv", synth_csv(seed=23, n_systems=3, n_tasks=30),
                                                    "text/csv")}, data={"name": "renamed?"})
    assert same.status_code == 200 and "already stored as dataset" in same.text
    assert "the name &#39;renamed?&#39; was not applied" in same.text
    form = {"dataset_id": dataset_id, "policies": ["coverage_bootstrap", "uniform_forced"], "deltas": "0, 5",
            "orders": "8", "budgets": "0.25,0.5,0.75", "group": "group", "seed": "1"}
    wrong = client.post("/replays", data={**form, "deltas": "zero"})
    assert wrong.status_code == 422 and "deltas" in wrong.text
    wrong = client.post("/replays", data={**form, "policies": ["no_such_policy"]})
    assert wrong.status_code == 422 and "no_such_policy" in wrong.text
    started = client.post("/replays", data=form, follow_redirects=False)
    assert started.status_code == 303 and started.headers["location"].startswith("/replays/")
    rid = started.headers["location"].rsplit("/", 1)[1]
    done = wait_for(client, rid)
    assert done["status"] == "succeeded"
    assert done["spec"]["deltas"] == [0.0, 5.0] and done["spec"]["orders"] == 8
    assert [p["name"] for p in done["spec"]["policies"]] == ["coverage_bootstrap", "uniform_forced"]
    check_report_page(client, rid)


def test_unknown_pages_are_html_404(client: TestClient) -> None:
    for url in ("/replays/00000000-0000-0000-0000-000000000000", "/replays/not-a-uuid",
                "/datasets/00000000-0000-0000-0000-000000000000/leaderboard"):
        r = client.get(url)
        assert r.status_code == 404 and "There is no" in r.text
        assert_html_headers(r)
    assert client.get("/static/../main.py").status_code == 404
    assert client.get("/static/nope.css").status_code == 404
    css = client.get("/static/report.css")
    assert css.status_code == 200 and css.headers["etag"]
    assert client.get("/static/report.css", headers={"If-None-Match": css.headers["etag"]}).status_code == 304


def test_report_page_reads_the_same_numbers_as_the_json(client: TestClient) -> None:
    rid, _ = run_replay(client, synth_csv(seed=24, n_systems=4, n_tasks=50), **{**SMALL_SPEC, "seeds": 2})
    report = client.get(f"/v1/replays/{rid}/report").json()
    html = client.get(f"/replays/{rid}").text
    for c in report["configurations"]:
        for b in c["budgets"]:
            assert f"{b['defer_rate']:.3f}" in html
    assert json.loads(client.get(f"/v1/replays/{rid}/report").content) == report
    assert client.get(f"/v1/replays/{rid}/figures/errors.png").status_code == 200


def test_leaderboard_page_rank_intervals_letters_pass_k_and_task_sets(client: TestClient) -> None:
    ds = upload(client, shared_dataset("terminal_bench_core_0.1.1").read_bytes(), "tb.csv")
    html = client.get(f"/datasets/{ds['id']}/leaderboard", params={"cluster": "group"}).text
    board = client.get(f"/v1/datasets/{ds['id']}/leaderboard", params={"cluster": "group"}).json()
    assert "pass@5" in html and "pass^5" in html and "-0.000" not in html
    table = html[html.index('id="leaderboard-table"') :]
    for row in board["rows"]:
        assert f"{row['rank_low']}–{row['rank_high']}" in table
        assert f'<td class="letters">{"".join(row["letters"])}</td>' in table
        assert f"{row['stats']['pass_k'][-1]['pass_hat_k']:.3f}" in table
    lead = board["adjacent"][0]
    assert f"[{view.signed(lead['ci_low'])}, {view.signed(lead['ci_high'])}]" in table
    assert "unequal-task-sets" not in html
    tau = upload(client, shared_dataset("tau2_bench").read_bytes(), "tau2.csv")
    tau_html = client.get(f"/datasets/{tau['id']}/leaderboard").text
    assert 'id="unequal-task-sets"' in tau_html and "as few as 20" in tau_html and "on 20 tasks" in tau_html


def test_signed_never_shows_negative_zero() -> None:
    assert view.signed(-1e-17) == "0.000" and view.signed(-0.0) == "0.000"
    assert view.signed(0.0125) == "+0.013" and view.signed(-0.25) == "-0.250" and view.signed(None) == "–"
