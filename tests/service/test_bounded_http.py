"""Bounded by design (issue 12), at the HTTP layer: ``sufficiency serve`` run for real (a
subprocess, its memory read from /proc), hostile headers, slow headers, many connections,
concurrent uploads held open, proxies, and the offline ``/docs``."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from service.main import create_app
from tests.service import procs
from tests.service.conftest import make_settings, synth_csv


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, int]]:
    """``sufficiency serve`` (one process) with short header and keep-alive timers."""
    port = procs.free_port()
    env = procs.env_for(
        data_dir=tmp_path / "data",
        header_timeout_seconds=2,
        keep_alive_seconds=2,
        max_connections=60,
        max_upload_bytes=4 * 1024 * 1024,
        max_concurrent_uploads=2,
        upload_slot_wait_seconds=600,  # 16 parses two at a time can pass 30 s on a slow, busy host
    )
    proc = procs.start(["serve", "--port", str(port), "--log-level", "warning"], env, tmp_path / "serve.log")
    try:
        procs.wait_http(f"http://127.0.0.1:{port}/healthz", proc=proc)
        yield f"http://127.0.0.1:{port}", proc.pid
    finally:
        procs.stop(proc)


def healthz_answers(base: str) -> bool:
    """``/healthz`` answers 200 (the timeout only guards against a hang: speed is measured in
    benchmarks/, not here)."""
    return httpx.get(f"{base}/healthz", timeout=30).status_code == 200


def _recv_all(s: socket.socket) -> bytes:
    out = b""
    try:
        while chunk := s.recv(65536):
            out += chunk
    except OSError:
        pass
    return out


def test_headers_are_bounded_in_size_and_time(served: tuple[str, int]) -> None:
    base, pid = served
    port = int(base.rsplit(":", 1)[1])
    before = rss_mb(pid)
    # a 16 MB header (no key needed): refused with 431 once it passes 64 KiB
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        try:
            for _ in range(256):
                s.sendall(b"X-Big: " + b"a" * 65_536 + b"\r\n")
        except OSError:  # the server closed on us mid-send
            pass
        assert _recv_all(s).startswith(b"HTTP/1.1 431")
    # eight unfinished 32 MB headers, held open: cut off at 64 KiB each
    held = []
    for _ in range(8):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ")
        try:
            for _ in range(512):
                s.sendall(b"a" * 65_536)
        except OSError:
            pass
        held.append(s)
    assert rss_mb(pid) - before < 50, (before, rss_mb(pid))  # was +380 MB
    for s in held:
        s.close()
    # slow headers: a byte every half second from 40 connections. The header timeout (2 s) is
    # for the whole header, so the trickle cannot keep one open: the server closes every one
    # while it still trickles (were each byte to restart the timer, none would ever close),
    # and answers /healthz meanwhile. 40 rounds (20 s) only guard against that hang.
    slow = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(40)]
    open_ones = list(slow)
    rounds = 0
    while open_ones and rounds < 40:
        for s in list(open_ones):
            try:
                s.sendall(b"G")
            except OSError:
                open_ones.remove(s)
        time.sleep(0.5)
        rounds += 1
        assert healthz_answers(base)
    assert not open_ones, f"{len(open_ones)} of 40 trickling connections still open after {rounds} rounds"
    for s in slow:
        s.close()
    assert healthz_answers(base)


def test_connections_past_the_limit_get_503_not_a_queue(served: tuple[str, int]) -> None:
    base, _ = served
    port = int(base.rsplit(":", 1)[1])
    idle = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(70)]
    try:
        time.sleep(0.2)
        r = httpx.get(f"{base}/healthz", timeout=10)
        assert r.status_code == 503
    finally:
        for s in idle:
            s.close()
    deadline = time.monotonic() + 10
    while httpx.get(f"{base}/healthz", timeout=10).status_code != 200:
        assert time.monotonic() < deadline
        time.sleep(0.1)


def test_concurrent_uploads_held_open_hold_disk_not_memory(served: tuple[str, int]) -> None:
    """16 uploads of 3.5 MB, each sent but its last bytes held back: received into temporary
    files (memory grew 460 MB with 30 MB ones before), then parsed two at a time."""
    base, pid = served
    port = int(base.rsplit(":", 1)[1])
    content = synth_csv(n_systems=32, n_tasks=2000)
    assert 3_000_000 < len(content) < 4_000_000
    boundary = "heldopen"
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="b.csv"\r\n'
            "Content-Type: text/csv\r\n\r\n"
        ).encode()
        + content
        + f"\r\n--{boundary}--\r\n".encode()
    )
    before = rss_mb(pid)
    held = []
    for _ in range(16):
        s = socket.create_connection(("127.0.0.1", port), timeout=30)
        s.sendall(
            (
                f"POST /v1/datasets HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
                f"Content-Type: multipart/form-data; boundary={boundary}\r\n\r\n"
            ).encode()
            + body[:-100]
        )
        held.append(s)
    time.sleep(1.0)
    grown = rss_mb(pid) - before
    assert grown < 60, grown
    assert healthz_answers(base)  # the held uploads take no connection slot or loop time from it
    for s in held:
        s.sendall(body[-100:])
    codes = []
    for s in held:
        head = _recv_all_until_header(s)
        codes.append(int(head.split(b" ", 2)[1]))
        s.close()
    assert codes.count(201) == 1 and codes.count(200) == 15, codes  # one stored, the same bytes again 15 times


def _recv_all_until_header(s: socket.socket) -> bytes:
    s.settimeout(300)
    out = b""
    while b"\r\n\r\n" not in out:
        chunk = s.recv(65536)
        if not chunk:
            break
        out += chunk
    return out


def test_an_upload_that_waits_too_long_for_a_parsing_slot_is_told_to_retry(tmp_path: Path) -> None:
    """One parsing slot and a wait of 0.05 s: of two 3.5 MB uploads released together, one is
    parsed and stored, the other answers 503 with ``Retry-After`` (its bytes are not lost: the
    client sends them again), and a retry is stored as the same dataset."""
    port = procs.free_port()
    env = procs.env_for(data_dir=tmp_path / "data", max_upload_bytes=4 * 1024 * 1024, max_concurrent_uploads=1,
                        upload_slot_wait_seconds=0.05)
    proc = procs.start(["serve", "--port", str(port), "--log-level", "warning"], env, tmp_path / "serve.log")
    try:
        base = f"http://127.0.0.1:{port}"
        procs.wait_http(f"{base}/healthz", proc=proc)
        content = synth_csv(n_systems=32, n_tasks=2000)
        boundary = "slot"
        body = (
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="b.csv"\r\n'
            "Content-Type: text/csv\r\n\r\n"
        ).encode() + content + f"\r\n--{boundary}--\r\n".encode()
        held = []
        for _ in range(2):
            s = socket.create_connection(("127.0.0.1", port), timeout=30)
            s.sendall((f"POST /v1/datasets HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
                       f"Content-Type: multipart/form-data; boundary={boundary}\r\n\r\n").encode() + body[:-100])
            held.append(s)
        time.sleep(0.5)
        for s in held:
            s.sendall(body[-100:])
        heads = [_recv_all_until_header(s) for s in held]
        for s in held:
            s.close()
        codes = sorted(int(h.split(b" ", 2)[1]) for h in heads)
        assert codes == [201, 503], codes
        assert b"retry-after: 5" in next(h for h in heads if b" 503 " in h).lower()
        retry = httpx.post(f"{base}/v1/datasets", files={"file": ("b.csv", content, "text/csv")}, timeout=120)
        assert retry.status_code == 200  # the same bytes as the stored one: the same dataset
    finally:
        procs.stop(proc)


def test_x_forwarded_for_is_trusted_only_when_configured(tmp_path: Path) -> None:
    """Rotating X-Forwarded-For from loopback does not give a client fresh rate-limit buckets."""
    port = procs.free_port()
    env = procs.env_for(data_dir=tmp_path / "data", auth="required", rate_limit_per_second=1, rate_limit_burst=3)
    proc = procs.start(["serve", "--port", str(port), "--log-level", "warning"], env, tmp_path / "serve.log")
    try:
        base = f"http://127.0.0.1:{port}"
        procs.wait_http(f"{base}/healthz", proc=proc)
        codes = [
            httpx.get(
                f"{base}/v1/datasets", headers={"Authorization": "Bearer nope", "X-Forwarded-For": f"10.0.0.{i}"}
            ).status_code
            for i in range(6)
        ]
        assert codes[:3] == [401, 401, 401] and codes[3:] == [429, 429, 429], codes
    finally:
        procs.stop(proc)


def test_rate_limit_buckets_are_bounded(tmp_path: Path) -> None:
    from service.auth.middleware import TokenBuckets

    buckets = TokenBuckets(rate=1, burst=2, max_keys=100)
    for i in range(10_000):
        buckets.take((f"10.0.{i // 256}.{i % 256}", None), now=0.0)
    assert len(buckets) == 100
    assert buckets.take(("10.0.39.15", None), now=0.0, spend=False) == 0  # recent: kept, one token left
    buckets.take(("10.0.39.15", None), now=0.0)
    assert buckets.take(("10.0.39.15", None), now=0.0) > 0


def test_docs_need_no_cdn(tmp_path: Path) -> None:
    with TestClient(create_app(make_settings(data_dir=tmp_path, auth="required"))) as c:
        for page in ("/docs", "/redoc"):
            html = c.get(page)
            assert html.status_code == 200
            assert "http://" not in html.text and "https://" not in html.text, page
        for asset in ("swagger-ui-bundle.js", "swagger-ui.css", "redoc.standalone.js"):
            r = c.get(f"/docs/assets/{asset}")
            assert r.status_code == 200 and len(r.content) > 100_000, asset
        assert c.get("/docs/assets/%2E%2E%2Fpyproject.toml").status_code == 404  # only the listed files
        assert c.get("/docs/assets/nope.js").status_code == 404


def test_the_event_loop_stays_free_during_large_decisions(served: tuple[str, int]) -> None:
    """Four clients sending 100,000-task anytime decisions (2.3 MB each): ``/healthz`` keeps
    being answered while they are in flight. They are parsed and decided in the decision
    process; with the work only in threads, pydantic's parser and the decision held the GIL
    and each /healthz waited 1.6 s, so only a handful were answered in the meantime.

    Counted in answers, not seconds: probes are sent back to back while the decisions are in
    flight; a loop held by the work answers about one per decision (between two of them), a
    free one answers them as fast as they come (hundreds here)."""
    base, _ = served
    n = 100_000
    half = {f"t{i}": i % 2 for i in range(n // 2)}
    body = {
        "universe": {"task_ids": [f"t{i}" for i in range(n)]},
        "rule": "anytime",
        "outcomes": {"A": half, "B": {t: 1 - v for t, v in half.items()}},
    }
    raw = httpx.Request("POST", "/", json=body).content  # encoded once
    headers = {"content-type": "application/json"}
    assert httpx.post(f"{base}/v1/decisions", content=raw, headers=headers, timeout=120).status_code == 200  # warm
    codes: list[int] = []

    def client() -> None:
        with httpx.Client(timeout=120) as h:
            for _ in range(1):
                codes.append(h.post(f"{base}/v1/decisions", content=raw, headers=headers).status_code)

    threads = [threading.Thread(target=client) for _ in range(4)]
    for t in threads:
        t.start()
    answered = 0
    with httpx.Client(timeout=30) as probe:  # probe after probe, no pause: their count is not paced by a clock
        while any(t.is_alive() for t in threads):
            assert probe.get(f"{base}/healthz").status_code == 200
            answered += 1
    for t in threads:
        t.join()
    assert codes == [200] * 4
    assert answered >= 3 * len(threads), answered
    print(f"healthz answered {answered} times during 4 large decisions")
