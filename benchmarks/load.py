"""Load test of the whole production stack with auth on: 10,000 decisions and 200 report fetches.

    .venv/bin/python benchmarks/load.py [--decisions 10000] [--reports 200] [--concurrency 32] [--clients 2]

Creates its own Postgres database (on the server of ``SUFFICIENCY_TEST_PG_URL``, default
``postgresql+psycopg://postgres@127.0.0.1:5432/test``) and uses its own Redis database number
and queue, migrates, creates an API key, starts a Celery worker and ``sufficiency serve
--workers 2`` on 127.0.0.1 with ``SUFFICIENCY_AUTH=required``, uploads a synthetic benchmark
(12 systems x 300 tasks) and replays it. It sends every distinct request over 16 fresh
connections, so that each API worker has looked up the dataset and the report once (steady
state is what is measured). Then it sends the decisions (nine in ten with an
inline 500-task universe, one in ten against the stored dataset, which reads Postgres) and
the report fetches, shuffled together, over ``--concurrency`` keep-alive connections split
over ``--clients`` processes, every request with the key. Before and after that mixed phase
it sends as many ``GET /healthz`` over as many connections (each phase opens its own) and
prints the ratio of the decision throughput to the mean healthz throughput: on a shared host
absolute numbers move by tens of percent from minute to minute, a ratio within one run much
less. It also prints the CPU time the API workers spent per request in each phase (from
/proc). Every response must be a 200 with the expected body length: any other outcome is an
error, and the exit status is 1 if there was one. Prints throughput and latency percentiles
per kind (the decisions also split into inline ones and those against the stored dataset).
``--profile DIR`` records each API worker with py-spy (``pip install py-spy``) during the mixed
phase, as collapsed stacks. ``--latencies FILE`` writes every request of the mixed phase (kind,
start, latency), to see when the slow ones happened. Every wait is bounded; the servers are
stopped and the database dropped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import random
import secrets
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from tests.service import procs  # noqa: E402

PG_ADMIN_URL = os.environ.get("SUFFICIENCY_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("SUFFICIENCY_TEST_REDIS_URL", "redis://127.0.0.1:6379")


def inline_decision(seed: int, n_tasks: int = 500, n_groups: int = 12) -> dict:
    """A harness mid-run: a 500-task universe in groups, a seeded share of it observed."""
    rng = np.random.default_rng(seed)
    ids = [f"task-{i:04d}" for i in range(n_tasks)]
    groups = [f"repo-{g:02d}" for g in (list(range(n_groups)) + rng.integers(0, n_groups, n_tasks - n_groups).tolist())]
    seen = rng.permutation(n_tasks)[: int(rng.uniform(0.1, 0.8) * n_tasks)]
    outcomes = {s: {ids[i]: float(rng.random() < p) for i in seen} for s, p in (("A", 0.62), ("B", 0.55))}
    rule = ("bootstrap", "anytime", "paired_normal", "serfling")[seed % 4]
    return {"system_a": "A", "system_b": "B", "universe": {"task_ids": ids, "groups": groups},
            "outcomes": outcomes, "delta": float(seed % 3), "rule": rule}


def dataset_decision(dataset_id: str, systems: list[str], tasks: list[str], seed: int) -> dict:
    rng = np.random.default_rng(seed)
    seen = [tasks[i] for i in rng.permutation(len(tasks))[: len(tasks) // 2]]
    a, b = rng.choice(len(systems), 2, replace=False)
    outcomes = {systems[a]: {t: float(rng.random() < 0.6) for t in seen},
                systems[b]: {t: float(rng.random() < 0.5) for t in seen}}
    return {"dataset_id": dataset_id, "group": "group", "system_a": systems[a], "system_b": systems[b],
            "outcomes": outcomes, "rule": "bootstrap"}


def _request(method: str, path: str, host: str, token: str, body: bytes | None) -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n"
    if body is not None:
        head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    return (head + "\r\n").encode() + (body or b"")


Row = tuple[str, float, bool, float, bool]
"""A request's ``(kind, seconds, ok, start, closed)``."""


async def _drive(port: int, work: list[tuple[str, bytes, int]], conc: int) -> list[Row]:
    """Send ``(kind, raw request, expected body length or -1)`` items over ``conc`` keep-alive
    connections (HTTP/1.1 on asyncio streams: the client shares the cores with the server).
    Returns ``(kind, seconds, ok, start, closed)`` per request (``start`` on ``time.perf_counter``;
    ``closed``: the response said ``Connection: close``)."""
    queue = list(reversed(work))
    out: list[Row] = []

    async def worker() -> None:
        reader = writer = None
        while queue:
            kind, raw, expect = queue.pop()
            t0 = time.perf_counter()
            ok = close = False
            try:
                if writer is None:
                    reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 30)
                writer.write(raw)
                header = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 60)
                length, close = -1, False
                for line in header.split(b"\r\n"):
                    if line[:15].lower() == b"content-length:":
                        length = int(line[15:])
                    elif line.lower() == b"connection: close":
                        close = True
                if length < 0:
                    raise ValueError("no content-length")
                await asyncio.wait_for(reader.readexactly(length), 60)
                ok = header[9:12] == b"200" and (expect < 0 or length == expect)
                if close:  # the server ends the connection: open another, as any HTTP/1.1 client
                    writer.close()
                    reader = writer = None
            except (TimeoutError, OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
                if writer is not None:
                    writer.close()
                reader = writer = None
            out.append((kind, time.perf_counter() - t0, ok, t0, close))
        if writer is not None:
            writer.close()

    await asyncio.gather(*(worker() for _ in range(conc)))
    return out


def _client(args: tuple) -> list[Row]:
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    return asyncio.run(_drive(*args))


def _stats(rows: list[Row], wall: float) -> dict:
    lat = np.array([r[1] for r in rows]) * 1000
    return {"requests": len(rows), "errors": sum(not r[2] for r in rows), "throughput_rps": round(len(rows) / wall, 1),
            **{f"p{q}_ms": round(float(np.percentile(lat, q)), 2) for q in (50, 90, 99)},
            "max_ms": round(float(lat.max()), 2)}


def _server_cpu(server_pid: int) -> float:
    """User + system CPU seconds of the API workers (the supervisor's children), from /proc."""
    return procs.cpu_seconds(procs.children(server_pid))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--decisions", type=int, default=10_000)
    parser.add_argument("--reports", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--clients", type=int, default=2, help="load-generating processes")
    parser.add_argument("--workers", type=int, default=2, help="uvicorn workers")
    parser.add_argument("--no-balance", action="store_true", help="SUFFICIENCY_BALANCE_CONNECTIONS=false: the "
                        "API workers keep the split the kernel's hash gives (service/connection_share.py)")
    parser.add_argument("--event-loop", choices=("asyncio", "uvloop"), default="asyncio",
                        help="SUFFICIENCY_EVENT_LOOP of the API workers (service/http_limits.py)")
    parser.add_argument("--latencies", metavar="FILE", help="write the mixed phase's requests as JSON lines: "
                        "kind, start (s from the phase's first), latency (ms), ok, closed (the response said "
                        "Connection: close)")
    parser.add_argument("--profile", metavar="DIR", help="record the API workers with py-spy during the load "
                        "(py-spy on PATH or next to this Python); collapsed stacks per worker in DIR")
    args = parser.parse_args(argv)

    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    from service.auth import keys
    from service.db import make_engine, make_sessionmaker, run_migrations, transaction
    from service.engine.synth import generate, to_csv

    name = f"sufficiency_load_{os.getpid()}_{secrets.token_hex(4)}"
    url = make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    server = worker = None
    try:
        run_migrations(url, REPO / "migrations")
        engine = make_engine(url, pool_size=1, max_overflow=0)
        with transaction(make_sessionmaker(engine)) as session:
            token = keys.create(session, name="load", scopes="read,submit,decide")[1]
        engine.dispose()
        settings = {"database_url": url, "broker_url": f"{REDIS_URL}/{random.randint(1, 15)}",
                    "celery_queue": name, "migrate_on_start": "false", "auth": "required",
                    "rate_limit_per_second": 0, "environment": "production",
                    "balance_connections": not args.no_balance, "event_loop": args.event_loop}
        tmp = Path(tempfile.mkdtemp(prefix="sufficiency_load_"))
        env = procs.env_for(**settings)
        worker = procs.start(["worker", "--pool", "solo", "--loglevel", "warning"], env, tmp / "worker.log")
        port = procs.free_port()
        server = procs.start(["serve", "--host", "127.0.0.1", "--port", str(port), "--workers", str(args.workers),
                              "--log-level", "warning"], env, tmp / "api.log")
        base = f"http://127.0.0.1:{port}"
        procs.wait_http(f"{base}/readyz", timeout=60, proc=server)
        auth = {"Authorization": f"Bearer {token}"}
        rows = generate(n_systems=12, n_tasks=300, n_groups=8, seed=0, cost=True)
        with httpx.Client(base_url=base, headers=auth, timeout=60) as http:
            ds = http.post("/v1/datasets", files={"file": ("bench.csv", to_csv(rows).encode(), "text/csv")}).json()
            spec = {"dataset_id": ds["id"], "policies": ["coverage_bootstrap"], "deltas": [0, 5], "orders": 50,
                    "groups": ["group"]}
            rid = http.post("/v1/replays", json=spec).json()["id"]
            deadline = time.monotonic() + 300
            while (status := http.get(f"/v1/replays/{rid}").json()["status"]) not in ("succeeded", "failed"):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"replay still {status}; see {tmp}")
                time.sleep(0.5)
            if status != "succeeded":
                raise RuntimeError(f"replay {status}; see {tmp}")
            report_len = len(http.get(f"/v1/replays/{rid}/report").content)
            systems = [s["name"] for s in ds["summary"]["systems"]]
            tasks = sorted({r["task_id"] for r in rows})
            bodies = [json.dumps(inline_decision(i)).encode() for i in range(9)]
            bodies.append(json.dumps(dataset_decision(ds["id"], systems, tasks, 0)).encode())
            for body in bodies:  # every body is a valid decision before the clock starts
                r = http.post("/v1/decisions", content=body, headers={"content-type": "application/json"})
                r.raise_for_status()
            sizes = [len(http.post("/v1/decisions", content=b, headers={"content-type": "application/json"}).content)
                     for b in bodies]
        # Steady state is what is measured, so every API worker has answered each request once
        # before the clock starts: its first look-up of the dataset and the report (and its
        # first database connection) come from Postgres. Those requests went over the one
        # connection above, to one worker; each new connection here is hashed to a worker
        # afresh, so in 16 the chance that a worker got none of a request is 2^-15. (Without
        # this the other worker paid them in the measured phase: its first dataset decision
        # and report took 42-53 ms, with the requests queued behind them.)
        for _ in range(16):
            with httpx.Client(base_url=base, headers=auth, timeout=60,
                              limits=httpx.Limits(max_keepalive_connections=0)) as fresh:
                for body in bodies:
                    fresh.post("/v1/decisions", content=body, headers={"content-type": "application/json"}
                               ).raise_for_status()
                fresh.get(f"/v1/replays/{rid}/report").raise_for_status()
        host = f"127.0.0.1:{port}"
        # One request object per distinct request, the work items pointing at them: a client's
        # share then pickles to a few hundred kB. Built per item, the 10,000 inline bodies
        # pickled to about 100 MB per client, and the second client started its requests
        # 0.25 s after the first while it unpickled them, beside the servers (the first
        # 0.5 s of the mixed phase held half of its requests above the p99).
        decision_raw = [_request("POST", "/v1/decisions", host, token, b) for b in bodies]
        report_raw = _request("GET", f"/v1/replays/{rid}/report", host, token, None)
        work = [("decision" if i % 10 < 9 else "dataset", decision_raw[i % 10], sizes[i % 10])
                for i in range(args.decisions)]
        work += [("report", report_raw, report_len)] * args.reports
        random.Random(0).shuffle(work)
        shares = [work[i::args.clients] for i in range(args.clients)]
        conc = [args.concurrency // args.clients + (i < args.concurrency % args.clients) for i in range(args.clients)]
        probe = [("healthz", _request("GET", "/healthz", host, token, None), -1)] * args.decisions
        probes = [probe[i::args.clients] for i in range(args.clients)]
        with mp.get_context("spawn").Pool(args.clients) as pool:

            cpu: list[float] = []

            def phase(parts: list[list[tuple[str, bytes, int]]]) -> tuple[list, float]:
                c0, t0 = _server_cpu(server.pid), time.perf_counter()
                results = pool.map(_client, [(port, parts[i], conc[i]) for i in range(args.clients)])
                wall = time.perf_counter() - t0
                cpu.append(_server_cpu(server.pid) - c0)
                return [r for part in results for r in part], wall

            health_before = phase(probes)
            spies = procs.start_profilers(procs.children(server.pid), Path(args.profile)) if args.profile else []
            done, wall = phase(shares)
            procs.stop_profilers(spies)
            health_after = phase(probes)
    finally:
        for proc in (server, worker):
            if proc is not None:
                procs.stop(proc)
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
    if args.latencies:
        first = min(r[3] for r in done)
        with open(args.latencies, "w") as fh:
            for kind, seconds, ok, start, closed in sorted(done, key=lambda r: r[3]):
                fh.write(json.dumps([kind, round(start - first, 6), round(1e3 * seconds, 3), ok, closed]) + "\n")
    total = _stats(done, wall)
    kinds = {"decision": _stats([r for r in done if r[0] in ("decision", "dataset")], wall),
             "report": _stats([r for r in done if r[0] == "report"], wall)}
    parts = {k: _stats([r for r in done if r[0] == k], wall) for k in ("decision", "dataset")}
    health = [_stats(rows, t) for rows, t in (health_before, health_after)]
    health_rps = sum(h["throughput_rps"] for h in health) / 2
    ratio = round(kinds["decision"]["throughput_rps"] / health_rps, 3)
    cpu_us = {"healthz": round(1e6 * (cpu[0] + cpu[2]) / (2 * args.decisions)),
              "mixed": round(1e6 * cpu[1] / len(done))}
    print(f"sufficiency serve --workers {args.workers} on 127.0.0.1, Postgres, Redis, auth required; "
          f"{args.concurrency} connections over {args.clients} client process(es); {wall:.1f} s")
    print(f"{'kind':10} {'requests':>8} {'req/s':>8} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'max ms':>8} "
          f"{'errors':>6}")
    rows = (*kinds.items(), ("all", total), (" inline", parts["decision"]), (" dataset", parts["dataset"]))
    for k, r in rows:
        print(f"{k:10} {r['requests']:>8} {r['throughput_rps']:>8} {r['p50_ms']:>8} {r['p90_ms']:>8} "
              f"{r['p99_ms']:>8} {r['max_ms']:>8} {r['errors']:>6}")
    for name, h in zip(("healthz before", "healthz after"), health, strict=True):
        print(f"{name:15} {h['requests']:>8} req at {h['throughput_rps']} req/s, p99 {h['p99_ms']} ms, "
              f"{h['errors']} errors")
    closed = [sum(r[4] for r in rows) for rows in (health_before[0], done, health_after[0])]
    print(f"connections the server closed (Connection: close), healthz before / mixed / healthz after: "
          f"{closed[0]} / {closed[1]} / {closed[2]}")
    print(f"decisions / healthz (mean of the rounds before and after, same server): {ratio}")
    print(f"API workers' CPU per request: healthz {cpu_us['healthz']} us, mixed phase {cpu_us['mixed']} us (ratio "
          f"{cpu_us['healthz'] / max(cpu_us['mixed'], 1):.3f}; less disturbed by other tenants than throughput)")
    print(json.dumps({"all": total, **kinds, "decision_inline": parts["decision"], "decision_dataset": parts["dataset"],
                      "healthz": health, "decision_healthz_ratio": ratio,
                      "server_cpu_us_per_request": cpu_us, "connections_closed": closed}))
    return 1 if total["errors"] or any(h["errors"] for h in health) else 0


if __name__ == "__main__":
    sys.exit(main())
