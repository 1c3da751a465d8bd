"""The report page in a real browser: headless Chromium (Debian's ``chromium``) driven over
the DevTools protocol opens pages served by a live uvicorn on 127.0.0.1, finds the figures
and the summary table, sees no console errors, and saves screenshots under ``test-artifacts/``.

Nothing is downloaded: the browser is the system package, spoken to over a websocket.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import REPO
from tests.service.conftest import make_settings
from tests.service.test_pages import EVIL, dataset_slice

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = REPO / "test-artifacts"

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="browser test: /usr/bin/chromium is absent (apt-get install -y chromium)"
)


class CDP:
    """A minimal DevTools protocol client: one browser websocket, one attached page session."""

    def __init__(self, ws: Any):
        self.ws = ws
        self.ids = itertools.count(1)
        self.events: list[dict[str, Any]] = []
        self.session: str | None = None

    def send(self, method: str, params: dict[str, Any] | None = None, timeout: float = 30.0) -> dict[str, Any]:
        msg_id = next(self.ids)
        msg: dict[str, Any] = {"id": msg_id, "method": method, "params": params or {}}
        if self.session and not method.startswith("Target."):
            msg["sessionId"] = self.session
        self.ws.send(json.dumps(msg))
        deadline = time.monotonic() + timeout
        while True:
            reply = json.loads(self.ws.recv(timeout=max(0.1, deadline - time.monotonic())))
            if reply.get("id") == msg_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            if "method" in reply:
                self.events.append(reply)

    def wait_event(self, method: str, timeout: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            for i, ev in enumerate(self.events):
                if ev["method"] == method:
                    return self.events.pop(i)
            reply = json.loads(self.ws.recv(timeout=max(0.1, deadline - time.monotonic())))
            if "method" in reply:
                self.events.append(reply)

    def open_page(self) -> None:
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.send(f"{domain}.enable")
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": 1400, "height": 1000, "deviceScaleFactor": 1, "mobile": False})

    def navigate(self, url: str) -> None:
        self.events = [e for e in self.events if e["method"] != "Page.loadEventFired"]
        result = self.send("Page.navigate", {"url": url})
        assert not result.get("errorText"), result
        self.wait_event("Page.loadEventFired")

    def evaluate(self, expression: str) -> Any:
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in result:
            raise RuntimeError(result["exceptionDetails"])
        return result["result"].get("value")

    def screenshot(self, path: Path) -> None:
        size = self.send("Page.getLayoutMetrics")["cssContentSize"]
        clip = {"x": 0, "y": 0, "width": size["width"], "height": min(size["height"], 12000), "scale": 1}
        data = self.send("Page.captureScreenshot", {"format": "png", "clip": clip, "captureBeyondViewport": True})
        path.write_bytes(base64.b64decode(data["data"]))

    def problems(self) -> list[str]:
        """Console errors, uncaught exceptions, failed loads and CSP reports seen so far."""
        out = []
        for ev in self.events:
            p = ev.get("params", {})
            if ev["method"] == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append("console: " + " ".join(str(a.get("value", a.get("description"))) for a in p["args"]))
            elif ev["method"] == "Runtime.exceptionThrown":
                out.append("exception: " + json.dumps(p.get("exceptionDetails", {}))[:500])
            elif ev["method"] == "Log.entryAdded" and p["entry"].get("level") == "error":
                out.append(f"log: {p['entry'].get('text')} {p['entry'].get('url', '')}")
            elif ev["method"] == "Page.javascriptDialogOpening":
                out.append(f"dialog: {p.get('message')}")
        return out

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout=5)
        except Exception:  # noqa: BLE001  (the browser may close the socket first)
            pass


def _free_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


@pytest.fixture
def live_server(tmp_path: Path) -> Iterator[str]:
    """The real app under uvicorn on 127.0.0.1 (random free port), embedded SQLite."""
    import uvicorn

    from service.main import create_app

    app = create_app(make_settings(data_dir=tmp_path / "data", chunk_pairs=20))
    sock = _free_socket()
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    host, port = sock.getsockname()
    yield f"http://{host}:{port}"
    server.should_exit = True
    thread.join(timeout=30)
    sock.close()


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[CDP]:
    from websockets.sync.client import connect

    profile = Path(tempfile.mkdtemp(prefix="chromium-", dir=tmp_path))
    proc = subprocess.Popen(
        [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run",
         "--no-default-browser-check", "--disable-extensions", "--disable-default-apps", "--mute-audio",
         "--hide-scrollbars", f"--user-data-dir={profile}", "--remote-debugging-port=0", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not (port_file.exists() and len(port_file.read_text().splitlines()) >= 2):
            assert proc.poll() is None, f"chromium exited with {proc.returncode}"
            assert time.monotonic() < deadline, "chromium did not open its DevTools port"
            time.sleep(0.1)
        port, path = port_file.read_text().splitlines()[:2]
        with connect(f"ws://127.0.0.1:{port}{path}", max_size=None, open_timeout=20) as ws:
            cdp = CDP(ws)
            cdp.open_page()
            yield cdp
            cdp.close()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(profile, ignore_errors=True)


def _submit(base: str, orders: int) -> tuple[str, str]:
    content = dataset_slice("swebench_lite", 6, rename={"20231010_rag_claude2": EVIL})
    with httpx.Client(base_url=base, timeout=60) as http:
        r = http.post("/v1/datasets", files={"file": ("swebench_slice.csv", content, "text/csv")})
        assert r.status_code in (200, 201), r.text
        dataset_id = r.json()["id"]
        spec = {"dataset_id": dataset_id, "policies": ["coverage_bootstrap", "serfling_coverage"],
                "deltas": [0, 5], "orders": orders, "bootstrap": [50], "groups": ["group"]}
        r = http.post("/v1/replays", json=spec)
        assert r.status_code == 202, r.text
        return r.json()["id"], dataset_id


def _finished_replay(base: str) -> tuple[str, str]:
    rid, dataset_id = _submit(base, orders=10)
    with httpx.Client(base_url=base, timeout=60) as http:
        deadline = time.monotonic() + 180
        while (state := http.get(f"/v1/replays/{rid}").json())["status"] in ("queued", "running"):
            assert time.monotonic() < deadline, state
            time.sleep(0.2)
        assert state["status"] == "succeeded", state
    return rid, dataset_id


def test_report_page_in_chromium(live_server: str, browser: CDP) -> None:
    rid, dataset_id = _finished_replay(live_server)
    ARTIFACTS.mkdir(exist_ok=True)

    browser.navigate(f"{live_server}/replays/{rid}")
    images = browser.evaluate("""
        Promise.all(Array.from(document.querySelectorAll('#figures img')).map(img =>
            img.complete ? img : new Promise(done => { img.onload = img.onerror = () => done(img); })))
        .then(imgs => imgs.map(img => ({src: img.getAttribute('src'), w: img.naturalWidth, h: img.naturalHeight})))
    """)
    assert [i["src"].rsplit("/", 1)[1] for i in images] == ["unresolved.svg", "errors.svg", "coverage.svg"]
    assert all(i["w"] > 300 and i["h"] > 150 for i in images), images
    table = browser.evaluate("""(() => {
        const t = document.querySelector('#summary-table');
        const rows = t ? t.tBodies[0].rows : [];
        return t && {rows: rows.length, cells: Array.from(rows[0].cells).map(c => c.innerText)};
    })()""")
    assert table and table["rows"] == 4, table
    assert table["cells"][0] == "coverage_bootstrap" and ("%" in table["cells"][2] or table["cells"][2] == "none")
    pairs = browser.evaluate("document.querySelectorAll('#pair-table tbody tr').length")
    assert pairs == 15  # 30 directed pairs, each unordered pair shown once with both directions
    class_images = browser.evaluate("""
        Promise.all(Array.from(document.querySelectorAll('#gap-classes img')).map(img =>
            img.complete ? img : new Promise(done => { img.onload = img.onerror = () => done(img); })))
        .then(imgs => imgs.map(img => ({src: img.getAttribute('src'), w: img.naturalWidth})))
    """)
    assert [i["src"].rsplit("/", 1)[1] for i in class_images] == ["classes.svg?config=0", "oc.svg?config=0"]
    assert all(i["w"] > 300 for i in class_images), class_images
    # the system named like a script tag is text on the page, and no such element exists
    browser.navigate(f"{live_server}/replays/{rid}?q=alert#pairs")
    found = browser.evaluate("""(() => ({
        text: Array.from(document.querySelectorAll('#pair-table td.sys')).map(td => td.textContent),
        scripts: Array.from(document.scripts).map(s => s.getAttribute('src')),
    }))()""")
    assert EVIL in found["text"] and found["scripts"] == ["/static/report.js"], found
    browser.navigate(f"{live_server}/replays/{rid}")
    browser.evaluate("new Promise(r => setTimeout(r, 300))")
    browser.screenshot(ARTIFACTS / "report-page.png")

    browser.navigate(f"{live_server}/datasets/{dataset_id}/leaderboard?cluster=group")
    rows = browser.evaluate("document.querySelectorAll('#leaderboard-table tbody tr').length")
    assert rows == 6
    browser.screenshot(ARTIFACTS / "leaderboard-page.png")
    browser.navigate(f"{live_server}/")
    assert browser.evaluate("document.querySelectorAll('#replays tbody tr').length") == 1
    assert browser.evaluate("!!document.querySelector('#upload-form input[type=file]')")
    browser.screenshot(ARTIFACTS / "index-page.png")

    assert browser.problems() == []
    assert (ARTIFACTS / "report-page.png").stat().st_size > 10_000
    if os.environ.get("SUFFICIENCY_KEEP_BROWSER_EVENTS"):
        (ARTIFACTS / "browser-events.json").write_text(json.dumps(browser.events, indent=1))


def test_running_replay_page_fills_in(live_server: str, browser: CDP) -> None:
    """Opened while the replay runs, the page polls its status and shows the report when done."""
    rid, _ = _submit(live_server, orders=400)
    browser.navigate(f"{live_server}/replays/{rid}")
    first = browser.evaluate("document.querySelector('#status').textContent")
    deadline = time.monotonic() + 240
    while not _has(browser, "#summary-table"):
        assert time.monotonic() < deadline, "the page did not fill in"
        time.sleep(0.5)
    print(f"status when the page opened: {first}")
    assert first in ("queued", "running", "succeeded")
    assert browser.evaluate("document.querySelector('#status').textContent") == "succeeded"
    assert browser.evaluate("document.querySelectorAll('#figures img').length") == 3
    assert browser.problems() == []


def _has(browser: CDP, selector: str) -> bool:
    try:
        return bool(browser.evaluate(f"!!document.querySelector({json.dumps(selector)})"))
    except RuntimeError:  # the page is reloading: its context went away mid-call
        return False
