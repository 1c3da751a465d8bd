"""The hostile requests of issue 12 against a fresh ``sufficiency serve``: status, time, and how
much the server's memory grew for each, with ``/healthz`` timed alongside.

    .venv/bin/python benchmarks/hostile.py [--workers 1]

Starts ``sufficiency serve`` on the embedded default (SQLite, in-process jobs; with ``--workers``
above 1, a Celery worker on Redis database 13 runs the jobs) with
``SUFFICIENCY_AUTH=required`` (rate limit 20/s, burst 40) in a temporary directory, creates a key, uploads a 2 x 1,000
dataset, then sends each row of the issue's table and prints one line per request: the
status, the seconds it took, the server's RSS growth (``/proc/<pid>/status``, all its
processes), and the slowest ``/healthz`` measured while it ran (a thread polls it every
50 ms). Every wait is bounded; the server is stopped at the end. The machine may be shared:
compare the healthz column with the idle one printed first.
"""

from __future__ import annotations

import argparse
import base64
import csv
import io
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from service.engine.synth import generate, to_csv  # noqa: E402
from tests.service import procs  # noqa: E402


def rss_mb(pid: int) -> float:
    total = 0.0
    for p in [pid, *procs.children(pid)]:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) / 1024
        except OSError:
            pass
    return total


class Healthz:
    """Polls /healthz every 50 ms and keeps the slowest answer since ``reset``."""

    def __init__(self, base: str):
        self.base, self.worst, self.stop = base, 0.0, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        with httpx.Client(timeout=30) as c:
            while not self.stop.is_set():
                started = time.monotonic()
                try:
                    c.get(f"{self.base}/healthz")
                    self.worst = max(self.worst, time.monotonic() - started)
                except httpx.HTTPError:
                    self.worst = max(self.worst, 30.0)
                time.sleep(0.05)

    def reset(self) -> None:
        self.worst = 0.0


def raw_socket(port: int, send: Callable[[socket.socket], None], timeout: float = 60) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        try:
            send(s)
        except OSError:
            pass
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
        except OSError:
            pass
        return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, default=1)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="hostile-"))
    port = procs.free_port()
    base = f"http://127.0.0.1:{port}"
    # More than one API worker needs a broker (replays must not run in every worker): Redis
    # database 13, a queue of this run's own, and a Celery worker started below.
    broker = queue = None
    if args.workers > 1:
        broker = os.environ.get("SUFFICIENCY_TEST_REDIS_URL", "redis://127.0.0.1:6379") + "/13"
        queue = f"hostile_{os.getpid()}"
    env = procs.env_for(data_dir=tmp / "data", auth="required", rate_limit_per_second=20, rate_limit_burst=40,
                        broker_url=broker, celery_queue=queue)
    key = subprocess.run(
        [sys.executable, "-c", procs.BOOT, "keys", "create", "--name", "bench", "--scopes", "read,submit,decide,admin"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout.strip()
    worker = server = None
    try:
        if broker:
            worker = procs.start(["worker", "--pool", "solo", "--loglevel", "warning"], env, tmp / "worker.log")
        server = procs.start(
            ["serve", "--port", str(port), "--workers", str(args.workers), "--log-level", "warning"], env,
            tmp / "serve.log",
        )
        procs.wait_http(f"{base}/healthz", proc=server)
        auth = {"Authorization": f"Bearer {key}"}
        h = httpx.Client(base_url=base, headers=auth, timeout=120)
        content = to_csv(generate(n_systems=2, n_tasks=1000, n_groups=3, seed=1)).encode()
        ds = h.post("/v1/datasets", files={"file": ("b.csv", content, "text/csv")}).json()["id"]
        health = Healthz(base)
        time.sleep(1)
        print(f"idle: healthz worst {health.worst * 1000:.0f} ms, server RSS {rss_mb(server.pid):.0f} MB")
        n = 100_000
        half = {f"t{i}": i % 2 for i in range(n // 2)}
        decision = {
            "universe": {"task_ids": [f"t{i}" for i in range(n)]},
            "rule": "anytime",
            "outcomes": {"A": half, "B": {t: 1 - v for t, v in half.items()}},
        }
        grouped = {**decision, "universe": {**decision["universe"], "groups": [f"g{i % 1000}" for i in range(n)]}}
        basic = {"Authorization": "Basic " + base64.b64encode(f"me:{key}".encode()).decode()}

        def many_headers(s: socket.socket) -> None:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            for _ in range(256):
                s.sendall(b"X-Big: " + b"a" * 65_536 + b"\r\n")

        def slow_headers() -> str:
            conns = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(300)]
            started = time.monotonic()
            alive = list(conns)
            while alive and time.monotonic() - started < 60:
                for s in list(alive):
                    try:
                        s.sendall(b"G")
                    except OSError:
                        alive.remove(s)
                time.sleep(1)
            for s in conns:
                s.close()
            return (
                f"300 slow-header connections all closed after {time.monotonic() - started:.1f} s"
                if not alive
                else f"{len(alive)} still open after 60 s"
            )

        def bad_keys() -> str:
            with httpx.Client(base_url=base, timeout=30) as flood:  # keep-alive: as fast as the server answers
                codes = [
                    flood.get(
                        "/v1/datasets",
                        headers={
                            "Authorization": "Bearer suf_000000000000_x",
                            "X-Forwarded-For": f"10.0.{i // 256}.{i % 256}",
                        },
                    ).status_code
                    for i in range(300)
                ]
            valid = h.get("/v1/datasets").status_code
            return f"300 bad keys with rotating X-Forwarded-For: {codes.count(429)} x 429; then a valid key: {valid}"

        def held_uploads() -> str:
            before = rss_mb(server.pid)
            big = to_csv(generate(n_systems=200, n_tasks=2000, n_groups=3, seed=2)).encode()[: 30 * 2**20]
            body = (
                b'--b\r\nContent-Disposition: form-data; name="file"; filename="b.csv"\r\n'
                b"Content-Type: text/csv\r\n\r\n" + big + b"\r\n--b--\r\n"
            )
            conns = []
            for _ in range(16):
                s = socket.create_connection(("127.0.0.1", port), timeout=60)
                s.sendall(
                    (
                        f"POST /v1/datasets HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n"
                        f"Content-Length: {len(body)}\r\nContent-Type: multipart/form-data; boundary=b\r\n\r\n"
                    ).encode()
                    + body[:-100]
                )
                conns.append(s)
            time.sleep(2)
            held = rss_mb(server.pid) - before
            for s in conns:
                s.close()
            return f"16 x {len(body) / 2**20:.0f} MB uploads held open: server RSS {held:+.0f} MB while held"

        def valid_upload() -> httpx.Response:
            data = to_csv(generate(n_systems=250, n_tasks=2000, n_groups=3, seed=3)).encode()
            return h.post("/v1/datasets", files={"file": ("v.csv", data, "text/csv")})

        def checkpoints() -> httpx.Response:
            return h.post(
                "/v1/sessions",
                json={
                    "universe": {"task_ids": [f"t{i}" for i in range(4000)]},
                    "budgets": [(i + 1) / 4000 for i in range(4000)],
                },
            )

        def policy_csv() -> str:
            spec = {
                "dataset_id": ds,
                "orders": 5,
                "budgets": [0.5, 1.0],
                "seed": 1,
                "policies": [{"name": '=HYPERLINK("http://x","y")', "order": "uniform", "rule": "forced"}],
            }
            rid = h.post("/v1/replays", json=spec).json()["id"]
            deadline = time.monotonic() + 120
            while h.get(f"/v1/replays/{rid}").json()["status"] not in ("succeeded", "failed"):
                assert time.monotonic() < deadline
                time.sleep(0.2)
            text = h.get(f"/v1/replays/{rid}/report.csv").text
            cells = [c for row in csv.reader(io.StringIO(text)) for c in row]
            bad = [c for c in cells if c[:1] in ("=", "+", "@") or (c[:1] == "-" and not c[1:2].isdigit())]
            return f"report.csv cells starting a formula: {len(bad)}"

        rows: list[tuple[str, Callable[[], object]]] = [
            (
                "1 budgets 0.5:1:1e-300",
                lambda: h.post("/v1/replays", json={"dataset_id": ds, "budgets": "0.5:1:1e-300"}),
            ),
            ("1 budgets 0.5:1:1e-6", lambda: h.post("/v1/replays", json={"dataset_id": ds, "budgets": "0.5:1:1e-6"})),
            (
                "2 upload 8,000 x s{i},t{i}",
                lambda: h.post(
                    "/v1/datasets",
                    files={
                        "file": (
                            "x.csv",
                            ("system,task_id,outcome\n" + "".join(f"s{i},t{i},1\n" for i in range(8000))).encode(),
                            "text/csv",
                        )
                    },
                ),
            ),
            ("3 inline 100,000-task anytime", lambda: h.post("/v1/decisions", json=decision)),
            ("3 ... again (process started)", lambda: h.post("/v1/decisions", json=decision)),
            ("3 ... with 1,000 groups", lambda: h.post("/v1/decisions", json=grouped)),
            (
                "4 CSV header of 40,000 columns",
                lambda: h.post(
                    "/v1/datasets",
                    files={
                        "file": (
                            "w.csv",
                            (
                                ",".join(["system", "task_id", "outcome", *(f"c{i}" for i in range(40_000))]) + "\n"
                            ).encode(),
                            "text/csv",
                        )
                    },
                ),
            ),
            ("5 2 x 1,000, orders 100,000", lambda: h.post("/v1/replays", json={"dataset_id": ds, "orders": 100_000})),
            ("6 session, 4,000 checkpoints", checkpoints),
            ("7 16 MB request header", lambda: raw_socket(port, many_headers)[:12]),
            ("7 slow headers", slow_headers),
            ("8 16 concurrent uploads held open", held_uploads),
            ("8 a valid 26 MB upload", valid_upload),
            (
                "9 JSONL nesting bomb",
                lambda: h.post(
                    "/v1/datasets",
                    files={
                        "file": (
                            "b.jsonl",
                            b'{"system":' + b"[" * 100_000 + b"]" * 100_000 + b"}\n",
                            "application/json",
                        )
                    },
                ),
            ),  # noqa: E501
            (
                "9 5,000-digit integer",
                lambda: h.post(
                    "/v1/datasets",
                    content=b'{"rows":[{"outcome":' + b"1" * 5000 + b"}]}",
                    headers={"content-type": "application/json"},
                ),
            ),  # noqa: E501
            (
                "9 non-UTF-8 JSON",
                lambda: h.post(
                    "/v1/datasets",
                    content=b'{"rows":[{"system":"\xff"}]}',
                    headers={"content-type": "application/json"},
                ),
            ),
            (
                "9 seed -1 (decision)",
                lambda: h.post("/v1/decisions", json={"universe": {"task_ids": ["a", "b"]}, "seed": -1}),
            ),
            (
                "9 seed -1 (session)",
                lambda: h.post("/v1/sessions", json={"universe": {"task_ids": ["a", "b"]}, "seed": -1}),
            ),
            ("10 policy =HYPERLINK", policy_csv),
            (
                "11 policy name of 201",
                lambda: h.post(
                    "/v1/replays",
                    json={"dataset_id": ds, "policies": [{"name": "p" * 201, "order": "uniform", "rule": "forced"}]},
                ),
            ),
            ("11 session task id of 501", lambda: h.post("/v1/sessions", json={"universe": {"task_ids": ["t" * 501]}})),
            ("12 bad-key flood", bad_keys),
            (
                "14 Basic form post, no origin",
                lambda: h.post("/datasets", headers=basic, files={"file": ("b.csv", content, "text/csv")}),
            ),
            ("15 /docs (CDN-free?)", lambda: "no CDN" if "https://" not in h.get("/docs").text else "CDN"),
        ]
        for name, send in rows:
            before = rss_mb(server.pid)
            health.reset()
            started = time.monotonic()
            out = send()
            took = time.monotonic() - started
            time.sleep(0.2)
            grown = rss_mb(server.pid) - before
            if isinstance(out, httpx.Response):
                result = f"{out.status_code} {json.dumps(out.json().get('detail'))[:90] if out.text[:1] == '{' else ''}"
            else:
                result = str(out)[:110]
            print(
                f"{name:34} {took:6.2f} s  RSS {grown:+7.1f} MB  healthz max {health.worst * 1000:5.0f} ms  {result}",
                flush=True,
            )
        health.stop.set()
        h.close()
    finally:
        for proc in (server, worker):
            if proc is not None:
                procs.stop(proc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
