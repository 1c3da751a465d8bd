"""Time a replay through the HTTP API on Celery workers against the CLI in one process.

    .venv/bin/python benchmarks/service_replay.py [RECORDS] [--workers 1,2]
    .venv/bin/python benchmarks/service_replay.py --board 134x500x12 --policy coverage_bootstrap --workers 2

``RECORDS`` defaults to ``../shared/data/swebench_lite/records.csv`` with two policies x two
thresholds grouped by ``group``; ``--board SxTxG`` generates a synthetic board of S systems,
T tasks and G groups (``sufficiency synth``) instead. First the CLI replays it in one process
(``sufficiency replay --format json``, per-pair rows included, as a user runs it: its chunks on
as many threads as the host gives it, up to four), then again with ``--threads 1`` (its chunks
on one thread, as the CLI ran when issue 13 set its goal, OpenBLAS's threads free to use the
other cores) and on one core (``--threads 1`` and ``OPENBLAS_NUM_THREADS=1``), both of which
must write the same report; then, for each worker count, ``sufficiency serve`` and that many ``sufficiency worker
--concurrency 1`` processes start against a private Postgres database and Redis queue (created
and removed here) and are waited for until ready (``--alive-file``), the records are uploaded
and the replay submitted, and its end awaited as a client should, with ``GET /v1/replays/{id}?wait=``
(``--poll S`` reads the status every S seconds instead: at 0.05 s that cost the API about
0.4 s of CPU per 5 s replay, on the cores the workers share). Reported per run: wall time from submission to a stored
report and its ratios to the CLI's three times in this run (the host is shared: only the ratio
means much), the CPU seconds of the CLI, of each worker and of the API process during the
replay (the POST's share apart), the peak resident memory of the CLI and of each worker
process, the report's size per configuration, whether it equals the CLI's report without its
per-pair rows, and whether the per-pair pages (``/pairs``, fetched whole by pages of 1,000)
equal the CLI's rows; plus the time of one page filtered by a system, and when each step of
the replay happened. ``--profile DIR`` records the API and worker processes with py-spy
during the replay, as collapsed stacks. ``--again`` then submits the same replay once more, as
a leaderboard backend does on a deployment that has replayed before: its estimate comes from
history (no sample) and the workers have their imports, tails and allocations already. Every
wait is bounded.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from tests.service import procs  # noqa: E402

PG = os.environ.get("SUFFICIENCY_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
REDIS = os.environ.get("SUFFICIENCY_TEST_REDIS_URL", "redis://127.0.0.1:6379")


def peak_rss_mb(pid: int) -> float:
    """``VmHWM`` (peak resident set) of a live process, in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def worker_pids(root: int) -> list[int]:
    """A Celery worker and its pool children (the processes that run the chunks)."""
    out, todo = [root], [root]
    while todo:
        kids = list(procs.children(todo.pop()))
        out += kids
        todo += kids
    return out


def replay_timeline(url: str, rid: str) -> dict[str, float]:
    """When each step of a replay happened, in seconds after the API stored it (the database's
    own timestamps): the run job started, the first chunk claimed, the first and the last chunk
    stored, the report stored, and the seconds from claim to store summed over the chunks (the
    workers' busy time: against workers x the span, what they spent idle or between chunks).
    Shows where the wall time between the POST and the report goes."""
    engine = create_engine(url)
    try:
        with engine.connect() as c:
            created, started, finished = c.execute(
                text("SELECT created_at, started_at, finished_at FROM replays WHERE id = :id"), {"id": rid}
            ).one()
            chunks = c.execute(
                text("SELECT heartbeat_at, finished_at FROM replay_chunks WHERE replay_id = :id"), {"id": rid}
            ).all()
    finally:
        engine.dispose()
    claimed = min(h for h, _ in chunks)  # a chunk's claim time (its first beat comes 5 s later)
    first = min(f for _, f in chunks)
    last = max(f for _, f in chunks)
    steps = {"started": started, "first claimed": claimed, "first chunk": first, "last chunk": last, "report": finished}
    out = {k: round((v - created).total_seconds(), 2) for k, v in steps.items() if v is not None}
    out["chunk seconds"] = round(sum((f - h).total_seconds() for h, f in chunks), 2)  # claim to store, summed
    return out


def submit(http: httpx.Client, dataset_id: str, spec: dict, api_pids: list[int], timeout: float,
           tmp: Path, poll: float = 0.0) -> tuple[httpx.Response, dict, float, float, float]:
    """POST the replay and wait for its end: the POST's answer, the final state, the POST's
    seconds, the seconds to the end, and the API's CPU seconds during the POST. The wait is a
    long poll (``?wait=``), as a client should wait; ``poll`` > 0 reads the status every
    ``poll`` seconds instead (what polling costs the host the workers share)."""
    api_cpu0 = procs.cpu_seconds(api_pids)
    t0 = time.monotonic()
    r = http.post("/v1/replays", json={"dataset_id": dataset_id, **spec})
    r.raise_for_status()
    post_seconds = time.monotonic() - t0
    post_cpu = round(procs.cpu_seconds(api_pids) - api_cpu0, 2)
    rid = r.json()["id"]
    params = {} if poll > 0 else {"wait": 10}
    while (state := http.get(f"/v1/replays/{rid}", params=params).json())["status"] not in ("succeeded", "failed"):
        if time.monotonic() - t0 > timeout:
            raise TimeoutError(f"replay still {state['status']} after {timeout:.0f} s; see {tmp}")
        if poll > 0:
            time.sleep(poll)
    return r, state, post_seconds, time.monotonic() - t0, post_cpu


def run_cli(records: Path, cli_args: list[str], out: Path, env: dict[str, str] | None = None,
            ) -> tuple[float, float, float]:
    """``sufficiency replay`` of ``records`` to ``out`` as JSON: its seconds, CPU seconds and the
    peak resident memory of this process's largest child so far (MB). ``env``: added to ours."""
    t0, c0 = time.monotonic(), resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(
        [sys.executable, "-m", "service.cli", "replay", str(records), *cli_args, "--format", "json", "--out", str(out)],
        cwd=REPO,
        check=True,
        capture_output=True,
        env={**os.environ, **(env or {})},
    )
    seconds = time.monotonic() - t0
    c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return seconds, c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime, c1.ru_maxrss / 1024


def wait_ready(alive: list[Path], pool: list[subprocess.Popen], started: float, timeout: float) -> list[float]:
    """Wait until every worker has touched its ``--alive-file`` (Celery's ``worker_ready``: its
    imports done and its pool started); seconds from ``started`` (``time.monotonic``) to each.
    A replay is timed on running workers, as a deployment has them: a worker's first start on a
    fresh checkout also compiles numba's cache of the engine's kernels (11-15 s on two cores),
    once per install."""
    took: list[float | None] = [None] * len(alive)
    while None in took:
        for i, (f, proc) in enumerate(zip(alive, pool, strict=True)):
            if proc.poll() is not None:
                raise RuntimeError(f"worker {i} exited with {proc.returncode} before it was ready")
            if took[i] is None and f.exists():
                took[i] = time.monotonic() - started
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"workers not ready after {timeout:.0f} s")
        time.sleep(0.05)
    return took  # type: ignore[return-value]  (no None left)


def run_once(records: Path, spec: dict, workers: int, cli: dict, cli_times: tuple[float, float, float], tmp: Path,
             timeout: float, repeat: bool = False, profile: Path | None = None, poll: float = 0.0) -> dict:
    """One replay through the API on ``workers`` Celery workers; its times, CPU, memory and checks.
    ``cli_times``: the CLI's seconds as a user runs it, with ``--threads 1`` and on one core."""
    cli_seconds, one_seconds, core_seconds = cli_times
    from service.engine.report import report_json

    admin = create_engine(PG, isolation_level="AUTOCOMMIT")
    name = f"sufficiency_bench_{os.getpid()}_{secrets.token_hex(3)}"
    with admin.connect() as c:
        c.execute(text(f'CREATE DATABASE "{name}"'))
    # the workers' shared 0/1 tails (engine/tail_tables.py) in a fresh directory where the default puts them
    tails = Path(tempfile.mkdtemp(dir="/dev/shm" if Path("/dev/shm").is_dir() else tmp)) / "tails"
    url = make_url(PG).set(database=name).render_as_string(hide_password=False)
    env = procs.env_for(
        database_url=url, broker_url=f"{REDIS}/{secrets.randbelow(15) + 1}", celery_queue=name, data_dir=tmp / "data",
        shared_tails_dir=tails,  # none met yet: a first replay, not one after the last run's
    )
    started: list[subprocess.Popen] = []
    try:
        subprocess.run(
            [sys.executable, "-m", "service.cli", "migrate"],
            cwd=REPO,
            env=env,
            check=True,
            capture_output=True,
            timeout=120,
        )
        port = procs.free_port()
        started.append(procs.start(["serve", "--port", str(port)], env, tmp / f"api{workers}.log"))
        pool, alive = [], [tmp / f"worker{workers}_{i}.alive" for i in range(workers)]
        boot = time.monotonic()
        for i in range(workers):
            pool.append(
                procs.start(
                    ["worker", "--concurrency", "1", "--loglevel", "warning", "--alive-file", str(alive[i])],
                    env,
                    tmp / f"worker{workers}_{i}.log",
                )
            )
        started += pool
        base = f"http://127.0.0.1:{port}"
        procs.wait_http(f"{base}/readyz", timeout=60)
        ready = wait_ready(alive, pool, boot, timeout=600)
        print(f"{workers} worker(s) ready {', '.join(f'{x:.1f}' for x in ready)} s after their start", flush=True)
        time.sleep(1)  # the pool processes' own warm-up (a database and a broker connection)
        with httpx.Client(base_url=base, timeout=120) as http:
            r = http.post("/v1/datasets", files={"file": ("records.csv", records.read_bytes(), "text/csv")})
            r.raise_for_status()
            api_pids = worker_pids(started[0].pid)
            workers_cpu0, api_cpu0 = [procs.cpu_seconds(worker_pids(w.pid)) for w in pool], procs.cpu_seconds(api_pids)
            dataset_id = r.json()["id"]
            spies = procs.start_profilers(api_pids + [p for w in pool for p in worker_pids(w.pid)], profile) \
                if profile else []
            try:
                r, state, post_seconds, elapsed, post_cpu = submit(http, dataset_id, spec, api_pids, timeout, tmp, poll)
            finally:
                procs.stop_profilers(spies)
            rid = r.json()["id"]
            cpu = [round(procs.cpu_seconds(worker_pids(w.pid)) - c, 2) for w, c in zip(pool, workers_cpu0, strict=True)]
            api_cpu = round(procs.cpu_seconds(api_pids) - api_cpu0, 2)
            rss = [max(peak_rss_mb(p) for p in worker_pids(w.pid)) for w in pool]
            if state["status"] != "succeeded":
                raise RuntimeError(f"replay failed: {state['error']}")
            timeline = replay_timeline(url, rid)
            report = http.get(f"/v1/replays/{rid}/report").content
            confs = cli["configurations"]
            same_report = report == report_json(
                {**cli, "configurations": [{k: v for k, v in c.items() if k != "per_pair"} for c in confs]}
            )
            same_pairs = True
            for c, conf in enumerate(confs):
                rows: list[dict] = []
                while len(rows) < len(conf["per_pair"]):
                    page = http.get(
                        f"/v1/replays/{rid}/pairs", params={"config": c, "limit": 1000, "offset": len(rows)}
                    ).json()
                    if not page["items"]:
                        break
                    rows += page["items"]
                same_pairs &= rows == conf["per_pair"]
            system = cli["dataset"]["system_names"][0]
            t1 = time.monotonic()
            one = http.get(f"/v1/replays/{rid}/pairs", params={"system": system, "sort": "abs_delta", "limit": 50})
            page_ms = (time.monotonic() - t1) * 1000
            one.raise_for_status()
            again = None
            if repeat:  # the same replay submitted again: history for the estimate, warm workers
                cpu0 = [procs.cpu_seconds(worker_pids(w.pid)) for w in pool]
                r2, state2, _, elapsed2, _ = submit(http, dataset_id, spec, api_pids, timeout, tmp, poll)
                if state2["status"] != "succeeded":
                    raise RuntimeError(f"second replay failed: {state2['error']}")
                again = {
                    "seconds": round(elapsed2, 1),
                    "ratio_to_cli": round(elapsed2 / cli_seconds, 3),
                    "ratio_to_cli_one_thread": round(elapsed2 / one_seconds, 3),
                    "ratio_to_cli_one_core": round(elapsed2 / core_seconds, 3),
                    "estimated_seconds": r2.json().get("estimated_seconds"),
                    "worker_cpu_seconds": [round(procs.cpu_seconds(worker_pids(w.pid)) - c, 2)
                                           for w, c in zip(pool, cpu0, strict=True)],
                    "timeline_seconds": replay_timeline(url, r2.json()["id"]),
                }
        out = {
            "workers": workers,
            "seconds": round(elapsed, 1),
            "post_seconds": round(post_seconds, 2),
            "estimated_seconds": r.json().get("estimated_seconds"),
            "ratio_to_cli": round(elapsed / cli_seconds, 3),
            "ratio_to_cli_one_thread": round(elapsed / one_seconds, 3),
            "ratio_to_cli_one_core": round(elapsed / core_seconds, 3),
            "worker_cpu_seconds": cpu,
            "api_cpu_seconds": api_cpu,
            "api_cpu_seconds_post": post_cpu,
            "n_pairs": state["n_pairs"],
            "n_chunks": state["n_chunks"],
            "worker_peak_rss_mb": [round(x) for x in rss],
            "report_bytes_per_configuration": len(report) // max(1, len(confs)),
            "report_equals_cli_without_rows": same_report,
            "pairs_equal_cli_rows": same_pairs,
            "one_system_page_ms": round(page_ms, 1),
            "one_system_pairs": one.json()["matched"],
            "timeline_seconds": timeline,
            "again": again,
        }
        print(
            f"{workers} worker(s): {elapsed:.1f} s = {out['ratio_to_cli']}x the CLI, {out['ratio_to_cli_one_thread']}x "
            f"the CLI with --threads 1, {out['ratio_to_cli_one_core']}x on one core (the POST answered in "
            f"{post_seconds:.2f} s, estimate {out['estimated_seconds']} s); {state['n_pairs']} pairs in "
            f"{state['n_chunks']} chunks; CPU s: workers {cpu}, API {api_cpu} ({post_cpu} in the POST); "
            f"worker peak RSS {out['worker_peak_rss_mb']} MB; report "
            f"{out['report_bytes_per_configuration'] / 1e3:.0f} kB per configuration (== CLI without rows: "
            f"{same_report}); pages == CLI rows: {same_pairs}; a page of {system}'s pairs in {page_ms:.0f} ms; "
            f"after the replay was stored (s): {', '.join(f'{k} {v}' for k, v in timeline.items())}",
            flush=True,
        )
        if again:
            print(
                f"  the same replay again: {again['seconds']:.1f} s = {again['ratio_to_cli']}x the CLI, "
                f"{again['ratio_to_cli_one_thread']}x the CLI with --threads 1, "
                f"{again['ratio_to_cli_one_core']}x on one core (estimate "
                f"{again['estimated_seconds']} s); CPU s: workers {again['worker_cpu_seconds']}; after it was stored "
                f"(s): {', '.join(f'{k} {v}' for k, v in again['timeline_seconds'].items())}",
                flush=True,
            )
        return out
    finally:
        for p in reversed(started):
            procs.stop(p)
        shutil.rmtree(tails.parent, ignore_errors=True)
        with admin.connect() as c:
            c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("records", nargs="?", type=Path, default=REPO.parent / "shared/data/swebench_lite/records.csv")
    parser.add_argument("--board", metavar="SxTxG", help="a synthetic board instead: systems x tasks x groups")
    parser.add_argument("--policy", action="append", help="default: coverage_bootstrap and serfling_coverage")
    parser.add_argument("--delta", action="append", type=float, help="default: 0 and 5")
    parser.add_argument("--workers", default="1,2", help="comma-separated worker counts to run")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per service replay")
    parser.add_argument("--profile", metavar="DIR", type=Path,
                        help="record the API and worker processes with py-spy during the first replay (py-spy on "
                        "PATH or next to this Python); collapsed stacks per process in DIR")
    parser.add_argument("--again", action="store_true",
                        help="then submit the same replay once more (an estimate from history, workers warm)")
    parser.add_argument("--poll", type=float, default=0.0, metavar="S",
                        help="read the replay's status every S seconds instead of waiting with ?wait= (a long poll)")
    args = parser.parse_args(argv)
    policies = args.policy or ["coverage_bootstrap", "serfling_coverage"]
    deltas = args.delta or [0.0, 5.0]
    spec = {"policies": policies, "deltas": deltas, "groups": ["group"]}
    cli_args = [
        "--group",
        "group",
        *(x for p in policies for x in ("--policy", p)),
        *(x for d in deltas for x in ("--delta", f"{d:g}")),
    ]
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        records = args.records
        if args.board:
            systems, tasks, groups = (int(x) for x in args.board.lower().split("x"))
            records = tmp / "board.csv"
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "service.cli",
                    "synth",
                    "--systems",
                    str(systems),
                    "--tasks",
                    str(tasks),
                    "--groups",
                    str(groups),
                    "--out",
                    str(records),
                ],
                cwd=REPO,
                check=True,
                capture_output=True,
            )
        out = tmp / "cli.json"
        cli_seconds, cli_cpu, cli_rss = run_cli(records, cli_args, out)
        cli = json.loads(out.read_bytes())
        cli_bytes = out.stat().st_size
        print(
            f"CLI (1 process, as a user runs it): {cli_seconds:.1f} s, {cli_cpu:.1f} s CPU, peak RSS {cli_rss:.0f} MB, "
            f"report {cli_bytes / 1e6:.1f} MB ({len(cli['configurations'])} configuration(s))",
            flush=True,
        )
        # the CLI as it was when issue 13 set its goal: its chunks on one thread (OpenBLAS free to
        # spread the products over the cores); it now runs them on up to four (``--threads``)
        one_seconds, one_cpu, _ = run_cli(records, [*cli_args, "--threads", "1"], tmp / "cli1.json")
        if (tmp / "cli1.json").read_bytes() != out.read_bytes():
            raise RuntimeError("the CLI's report with --threads 1 differs from its report on several threads")
        print(f"CLI with --threads 1: {one_seconds:.1f} s, {one_cpu:.1f} s CPU, the same report", flush=True)
        # and on one core: OpenBLAS on one thread too, so that only this process's own thread works
        # (with --threads 1 OpenBLAS's threads keep the other cores busy, mostly spinning: on two
        # cores 12.7 s of CPU for 7.2 s, against 7.2 s of CPU for 7.4 s on one, 2026-12-05)
        core_seconds, core_cpu, _ = run_cli(records, [*cli_args, "--threads", "1"], tmp / "cli1.json",
                                            {"OPENBLAS_NUM_THREADS": "1"})
        if (tmp / "cli1.json").read_bytes() != out.read_bytes():
            raise RuntimeError("the CLI's report on one core differs from its report on several threads")
        print(f"CLI on one core (--threads 1, OPENBLAS_NUM_THREADS=1): {core_seconds:.1f} s, {core_cpu:.1f} s CPU, "
              "the same report", flush=True)
        times = (cli_seconds, one_seconds, core_seconds)
        runs = [run_once(records, spec, int(w), cli, times, tmp, args.timeout, args.again, args.profile, args.poll)
                for w in args.workers.split(",")]
    print(
        json.dumps(
            {
                "cli_seconds": round(cli_seconds, 1),
                "cli_cpu_seconds": round(cli_cpu, 2),
                "cli_peak_rss_mb": round(cli_rss),
                "cli_one_thread_seconds": round(one_seconds, 1),
                "cli_one_thread_cpu_seconds": round(one_cpu, 2),
                "cli_one_core_seconds": round(core_seconds, 1),
                "cli_one_core_cpu_seconds": round(core_cpu, 2),
                "cli_report_bytes": cli_bytes,
                "runs": runs,
            }
        )
    )
    return 0 if all(r["report_equals_cli_without_rows"] and r["pairs_equal_cli_rows"] for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
