"""``sufficiency serve --workers N``: one listening socket per worker (service/serving.py).

Real processes on loopback: connections opened in a burst reach every worker and end up
evenly split (the workers close what the kernel's hash left uneven), a killed
worker is replaced, SIGTERM stops everything, and a port in use is refused with a message.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

from service.serving import reuseport_spreads
from tests.service import procs

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not reuseport_spreads(), reason="one socket per worker is Linux only"),
]


def workers_of(pid: int) -> list[int]:
    """Worker processes of the supervisor: its children that serve (not the resource tracker)."""
    out = []
    for child in procs.children(pid):
        try:
            if "spawn_main" in Path(f"/proc/{child}/cmdline").read_text():
                out.append(child)
        except OSError:
            pass
    return sorted(out)


def connections_per_process(port: int, pids: list[int]) -> Counter[int]:
    """Established server-side connections on ``port``, counted by the process that owns them
    (socket inodes from /proc/net/tcp matched against each process's descriptors)."""
    inode_port: dict[str, int] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local_port = int(fields[1].rsplit(":", 1)[1], 16)
            if fields[3] == "01" and local_port == port:  # ESTABLISHED, our side
                inode_port[fields[9]] = local_port
    counts: Counter[int] = Counter()
    for pid in pids:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:[") and target[8:-1] in inode_port:
                counts[pid] += 1
    return counts


def wait_for(probe, timeout: float = 30.0):  # noqa: ANN001, ANN201
    """The first truthy value ``probe()`` returns within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := probe():
            return value
        time.sleep(0.1)
    raise TimeoutError("condition not met in time")


def one_round(conns: list[socket.socket], port: int) -> int:
    """One ``GET /healthz`` on each connection (every answer a 200); those whose answer said
    ``Connection: close`` are closed by the server and opened again, as an HTTP client must.
    Returns how many were."""
    closes = 0
    for i, c in enumerate(conns):
        c.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = b""
        while not answer.endswith(b'{"status":"ok"}'):
            chunk = c.recv(4096)
            assert chunk, "the connection closed before its answer"
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 200"), answer
        if b"\r\nconnection: close\r\n" in answer.lower():
            assert c.recv(1) == b""  # and the server did close it
            c.close()
            conns[i] = socket.create_connection(("127.0.0.1", port), timeout=10)
            closes += 1
    return closes


def within_one(split: Counter[int], n: int) -> bool:
    return sum(split.values()) == n and len(split) == 2 and max(split.values()) - min(split.values()) <= 1


def even_out(port: int, workers: list[int], n: int, rounds: int, stop_when_even: bool = True
             ) -> tuple[Counter[int], int]:
    """``n`` keep-alive connections opened at once, then ``rounds`` rounds of requests on them
    0.2 s apart (the workers shed only connections a second old, one per 0.1 s: see
    service/connection_share.py), stopping once the split is within one if told so. Returns
    the split and how many connections the server closed."""
    conns = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(n)]
    closed = 0
    try:
        for _ in range(rounds):
            closed += one_round(conns, port)
            if stop_when_even and within_one(connections_per_process(port, workers), n):
                break
            time.sleep(0.2)
        return connections_per_process(port, workers), closed
    finally:
        for c in conns:
            c.close()


def two_workers(pid: int, without: int | None = None) -> list[int] | None:
    """One snapshot of the workers when there are two of them (and ``without`` is not one)."""
    workers = workers_of(pid)
    return workers if len(workers) == 2 and without not in workers else None


def test_workers_share_connections_restart_and_stop(redis_broker: tuple[str, str], tmp_path: Path) -> None:
    broker, queue = redis_broker
    # A fresh SQLite file, migrated on start (the embedded default): by serve, once, before
    # the workers start (each migrating it at once lost a race for its lock, 1 start in 4).
    env = procs.env_for(data_dir=tmp_path / "data", broker_url=broker, celery_queue=queue)
    port = procs.free_port()
    log = tmp_path / "serve.log"
    api = procs.start(["serve", "--port", str(port), "--workers", "2", "--log-level", "warning"], env, log)
    try:
        procs.wait_http(f"http://127.0.0.1:{port}/healthz", timeout=60, proc=api)
        workers = wait_for(lambda: two_workers(api.pid))
        for pid in workers:
            assert b"SUFFICIENCY_MIGRATE_ON_START=false" in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        assert httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=10).json()["checks"]["database"] == "ok"
        # 48 connections at once, kept open: the kernel spreads them over both sockets, and
        # the workers even out what its hash left uneven (service/connection_share.py).
        split, closed = even_out(port, workers, 48, rounds=150)
        assert within_one(split, 48), (split, closed)

        os.kill(workers[0], signal.SIGKILL)
        # One snapshot: the survivor and one new worker (the killed one is gone or a zombie,
        # whose empty command line does not match).
        now = wait_for(lambda: two_workers(api.pid, without=workers[0]))
        (replacement,) = set(now) - set(workers)
        assert "starting another" in log.read_text()
        # Every request is answered, by both the survivor and the replacement.
        wait_for(lambda: all(httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200
                             for _ in range(20)))

        os.kill(api.pid, signal.SIGTERM)  # the supervisor only: it stops its workers
        assert api.wait(timeout=30) == 0
        for pid in (workers[1], replacement):
            assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()
    finally:
        procs.stop(api)


def test_without_balancing_the_kernel_alone_spreads_connections(redis_broker: tuple[str, str],
                                                               tmp_path: Path) -> None:
    """``SUFFICIENCY_BALANCE_CONNECTIONS=false``: no connection is ever closed, and the split
    is the kernel's hash (all 48 on one worker has probability 2^-47)."""
    broker, queue = redis_broker
    env = procs.env_for(data_dir=tmp_path / "data", broker_url=broker, celery_queue=queue,
                        balance_connections="false")
    port = procs.free_port()
    api = procs.start(["serve", "--port", str(port), "--workers", "2", "--log-level", "warning"], env,
                      tmp_path / "serve.log")
    try:
        procs.wait_http(f"http://127.0.0.1:{port}/healthz", timeout=60, proc=api)
        split, closed = even_out(port, wait_for(lambda: two_workers(api.pid)), 48, rounds=10, stop_when_even=False)
        assert closed == 0
        assert sum(split.values()) == 48 and len(split) == 2 and max(split.values()) <= 44, split
    finally:
        procs.stop(api)


def test_a_port_in_use_is_refused(redis_broker: tuple[str, str], tmp_path: Path) -> None:
    broker, queue = redis_broker
    env = procs.env_for(data_dir=tmp_path / "data", broker_url=broker, celery_queue=queue)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        run = subprocess.run([sys.executable, "-c", procs.BOOT, "serve", "--port", str(port), "--workers", "2"],
                             cwd=procs.REPO, env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 1
    assert f"cannot bind 127.0.0.1:{port}" in run.stderr
