"""Load test of ``POST /v1/decisions`` against a trivial endpoint of the same app.

    .venv/bin/python benchmarks/decisions_load.py [--requests 10000] [--concurrency 32] [--clients 2] [--rounds 3]
        [--server serve|uvicorn] [--no-fast-path]

Starts ``sufficiency serve --workers 2`` on 127.0.0.1 (uvicorn workers, each with its own
listening socket; ``--server uvicorn`` runs ``uvicorn --workers 2`` instead, whose workers
share one socket), on embedded SQLite in a temporary directory migrated once before the
workers start (``serve`` also needs a Redis broker to start several workers), then sends ``--requests`` requests over
``--concurrency`` keep-alive connections (split over ``--clients`` load processes, plain
HTTP/1.1 on asyncio streams) to ``GET /healthz`` and then to ``POST /v1/decisions`` with a
500-task universe in 12 groups, about half of it observed for A and B (stratified, coverage
met; bootstrap, exact). The two phases alternate for ``--rounds`` rounds, so both endpoints
see the same machine: on a shared host the throughput of either moves by ±30 % from minute
to minute, and only the ratio within a round means much.

``--no-fast-path`` turns off ``service.decisions.fastpath`` (inline decisions answered before
FastAPI's routing), to measure the FastAPI route alone.

Reports, per round and endpoint: throughput, p50 / p99 / max latency, errors, and the CPU
time the uvicorn workers spent per request (from /proc: a measure that the load generator
and other tenants of the host disturb far less than throughput). The summary gives the
median ratio decisions / healthz over rounds. Every loop is bounded; the server is stopped
at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from tests.service import procs  # noqa: E402


def decision_body(n_tasks: int = 500, n_groups: int = 12, observed: float = 0.5, seed: int = 0) -> dict:
    from service.engine.live import make_universe, recommended_order

    rng = np.random.default_rng(seed)
    ids = [f"task-{i:04d}" for i in range(n_tasks)]
    sizes = rng.dirichlet(np.ones(n_groups) * 2) * (n_tasks - n_groups)
    groups = [f"repo-{g:02d}" for g in range(n_groups)]
    labels = list(range(n_groups)) + rng.choice(n_groups, n_tasks - n_groups, p=sizes / sizes.sum()).tolist()
    group_of = [groups[g] for g in labels]
    order = recommended_order(make_universe(ids, group_of), "proportional", seed)[: int(observed * n_tasks)]
    a = {t: float(rng.random() < 0.62) for t in order}
    b = {t: float(rng.random() < 0.55) for t in order}
    return {"system_a": "A", "system_b": "B", "universe": {"task_ids": ids, "groups": group_of},
            "outcomes": {"A": a, "B": b}, "delta": 0, "rule": "bootstrap", "floor": "proportional"}


async def _load(host: str, port: int, method: str, path: str, body: bytes | None, n: int,
                conc: int) -> tuple[list[float], int]:
    """``n`` requests over ``conc`` keep-alive connections. HTTP/1.1 is spoken directly on
    asyncio streams: the load generator shares the 2 cores with the server, so it should
    spend as little CPU per request as possible (httpx costs several times more)."""
    head = f"{method} {path} HTTP/1.1\r\nHost: {host}:{port}\r\n"
    if body is not None:
        head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    request = (head + "\r\n").encode() + (body or b"")
    latencies: list[float] = []
    errors = 0
    left = n

    async def worker() -> None:
        nonlocal left, errors
        reader = writer = None
        while left > 0:
            left -= 1
            t0 = time.perf_counter()
            ok = False
            try:
                if writer is None:
                    reader, writer = await asyncio.open_connection(host, port)
                writer.write(request)
                header = await reader.readuntil(b"\r\n\r\n")
                length, close = 0, False
                for line in header.split(b"\r\n"):
                    if line[:15].lower() == b"content-length:":
                        length = int(line[15:])
                    elif line.lower() == b"connection: close":
                        close = True
                await reader.readexactly(length)
                ok = header[9:12] == b"200"
                if close:  # the server ends the connection: open another, as any HTTP/1.1 client
                    writer.close()
                    reader = writer = None
            except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
                if writer is not None:
                    writer.close()
                reader = writer = None
            latencies.append(time.perf_counter() - t0)
            errors += not ok
        if writer is not None:
            writer.close()

    await asyncio.gather(*(worker() for _ in range(conc)))
    return latencies, errors


def _client_proc(args: tuple) -> tuple[list[float], int]:
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    return asyncio.run(_load(*args))


def run_phase(pool: mp.pool.Pool, port: int, method: str, path: str, body: bytes | None, n: int, conc: int,
              clients: int) -> dict:
    per = [n // clients + (i < n % clients) for i in range(clients)]
    conc_per = [conc // clients + (i < conc % clients) for i in range(clients)]
    t0 = time.perf_counter()
    results = pool.map(_client_proc, [("127.0.0.1", port, method, path, body, per[i], conc_per[i])
                                            for i in range(clients)])
    wall = time.perf_counter() - t0
    lat = np.array([x for r in results for x in r[0]]) * 1000
    errors = sum(r[1] for r in results)
    return {"requests": int(len(lat)), "errors": int(errors), "seconds": round(wall, 2),
            "throughput_rps": round(len(lat) / wall, 1), "p50_ms": round(float(np.percentile(lat, 50)), 2),
            "p99_ms": round(float(np.percentile(lat, 99)), 2), "max_ms": round(float(lat.max()), 2)}


def server_cpu_seconds(server_pid: int) -> float:
    """User + system CPU of the uvicorn worker processes (the supervisor's children)."""
    return procs.cpu_seconds(procs.children(server_pid))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=10_000, help="per endpoint and round")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--clients", type=int, default=2, help="load-generating processes")
    parser.add_argument("--workers", type=int, default=2, help="uvicorn workers")
    parser.add_argument("--rounds", type=int, default=3, help="healthz / decisions phase pairs")
    parser.add_argument("--server", choices=("serve", "uvicorn"), default="serve",
                        help="`sufficiency serve` (uvicorn workers with a listening socket each) or "
                             "`uvicorn --workers` (one socket shared by the workers)")
    parser.add_argument("--broker", default="redis://127.0.0.1:6379/14", help="for --server serve")
    parser.add_argument("--fast-path", action=argparse.BooleanOptionalAction, default=True,
                        help="answer inline decisions before FastAPI's routing (the default; "
                             "--no-fast-path measures the FastAPI route alone)")
    parser.add_argument("--event-loop", choices=("asyncio", "uvloop"), default="asyncio",
                        help="SUFFICIENCY_EVENT_LOOP of the API (for --server serve; service/http_limits.py)")
    args = parser.parse_args(argv)

    body = json.dumps(decision_body()).encode()
    phases = (("GET /healthz", "GET", "/healthz", None), ("POST /v1/decisions", "POST", "/v1/decisions", body))
    rounds: list[dict[str, dict]] = []
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        # serve --workers > 1 wants a broker (replays must not run in every worker); nothing
        # is submitted here, so Redis only has to answer.
        env = procs.env_for(data_dir=tmp / "data", migrate_on_start="false", decision_fast_path=args.fast_path,
                            broker_url=args.broker if args.server == "serve" else None, event_loop=args.event_loop)
        subprocess.run([sys.executable, "-c", procs.BOOT, "migrate"], cwd=REPO, env=env, check=True,
                       capture_output=True, timeout=120)
        port = procs.free_port()
        base = f"http://127.0.0.1:{port}"
        log = tmp / "server.log"
        if args.server == "serve":
            command = [sys.executable, "-c", procs.BOOT, "serve", "--host", "127.0.0.1", "--port", str(port),
                       "--workers", str(args.workers), "--log-level", "warning"]
        else:
            command = [sys.executable, "-m", "uvicorn", "service.main:create_app", "--factory", "--host",
                       "127.0.0.1", "--port", str(port), "--workers", str(args.workers), "--log-level", "warning",
                       "--no-access-log"]
        with open(log, "ab") as fh:
            server = subprocess.Popen(command, cwd=REPO, env=env, stdout=fh, stderr=subprocess.STDOUT,
                                      start_new_session=True)
        try:
            procs.wait_http(f"{base}/healthz", timeout=60, proc=server)
            first = httpx.post(f"{base}/v1/decisions", content=body, headers={"content-type": "application/json"},
                               timeout=30)
            first.raise_for_status()
            answer = first.json()
            ctx = mp.get_context("spawn")
            with ctx.Pool(args.clients) as pool:
                warm = min(1000, args.requests // 5)
                for _, method, path, payload in phases:
                    run_phase(pool, port, method, path, payload, warm, args.concurrency, args.clients)
                for _ in range(args.rounds):
                    this: dict[str, dict] = {}
                    for name, method, path, payload in phases:
                        cpu0 = server_cpu_seconds(server.pid)
                        r = run_phase(pool, port, method, path, payload, args.requests, args.concurrency,
                                      args.clients)
                        r["server_cpu_us_per_request"] = round((server_cpu_seconds(server.pid) - cpu0)
                                                               / r["requests"] * 1e6)
                        this[name] = r
                    rounds.append(this)
        finally:
            procs.stop(server)
    server_name = "sufficiency serve" if args.server == "serve" else "uvicorn"
    print(f"{server_name} --workers {args.workers} on 127.0.0.1; {args.concurrency} connections over {args.clients} "
          f"client process(es); {args.requests} requests per endpoint and round, {args.rounds} rounds; "
          f"fast path {'on' if args.fast_path else 'off'}")
    print(f"decision: N={answer['N']} groups={len(answer['coverage']['groups'])} k={answer['k']} "
          f"rule={answer['rule']} -> {answer['decision']} ({answer['reason']}); body {len(body)} bytes, "
          f"response {len(first.content)} bytes")
    print(f"{'round':>5} {'endpoint':18} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'errors':>7} "
          f"{'cpu us/req':>10}")
    ratios = []
    for i, this in enumerate(rounds, 1):
        for name, r in this.items():
            print(f"{i:>5} {name:18} {r['throughput_rps']:>9} {r['p50_ms']:>8} {r['p99_ms']:>8} {r['max_ms']:>8} "
                  f"{r['errors']:>7} {r['server_cpu_us_per_request']:>10}")
        ratios.append(this[phases[1][0]]["throughput_rps"] / this[phases[0][0]]["throughput_rps"])
    ratio = float(np.median(ratios))
    errors = sum(r["errors"] for this in rounds for r in this.values())
    print(f"throughput ratio decisions / healthz per round: {', '.join(f'{x:.2f}' for x in ratios)}; "
          f"median {ratio:.2f}; errors {errors}")
    print(json.dumps({"rounds": rounds, "ratios": [round(x, 3) for x in ratios], "ratio": round(ratio, 3),
                      "errors": errors}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
