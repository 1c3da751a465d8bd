"""``sufficiency demo``: the whole service on the embedded default, in one command.

Starts the API (SQLite file + in-process job runner unless configured otherwise),
generates a synthetic benchmark with the shipped generator, uploads it over HTTP, runs a
replay through the job runner, prints the minimum sufficient budgets and the report URL,
and keeps serving so the reader can explore ``/docs``.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time

DEMO_POLICIES = ("coverage_bootstrap", "uniform_forced", "serfling_coverage")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "demo",
        help="start the service, replay a synthetic benchmark through it, keep serving",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--systems", type=int, default=12, help="synthetic systems (default 12)")
    p.add_argument("--tasks", type=int, default=300, help="synthetic tasks (default 300)")
    p.add_argument("--groups", type=int, default=8, help="task groups (default 8)")
    p.add_argument("--orders", type=int, default=500, help="sampled orders per pair (default 500, as in SPEC §5)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--exit-after", action="store_true", help="stop the server once the replay is reported")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from service.config import Settings
    from service.main import create_app

    settings = Settings()
    app = create_app(settings)
    server = uvicorn.Server(uvicorn.Config(app, host=args.host, port=args.port, log_level="warning"))
    base = f"http://{args.host}:{args.port}"
    outcome: dict[str, int] = {"code": 0}

    def drive() -> None:
        deadline = time.monotonic() + 60
        while not server.started:
            if server.should_exit or time.monotonic() > deadline:
                return
            time.sleep(0.05)
        try:
            _drive(base, args, settings)
        except Exception as exc:  # the demo reports, it does not crash the server thread
            print(f"demo failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            outcome["code"] = 1
            server.should_exit = True
            return
        if args.exit_after:
            server.should_exit = True
        else:
            print(f"\nServing at {base} (API docs: {base}/docs). Press Ctrl-C to stop.", flush=True)

    print(f"Starting the service at {base} (database: {_where(settings)}) ...", flush=True)
    threading.Thread(target=drive, name="demo", daemon=True).start()
    server.run()
    if not server.started:
        print(f"could not start the server on {args.host}:{args.port} (in use? try --port)", file=sys.stderr)
        return 1
    return outcome["code"]


def _where(settings) -> str:  # noqa: ANN001
    from sqlalchemy.engine import make_url

    return make_url(settings.sqlalchemy_url).render_as_string(hide_password=True)


def _drive(base: str, args: argparse.Namespace, settings) -> None:  # noqa: ANN001
    import httpx

    from service.engine.synth import generate, to_csv

    started = time.monotonic()
    rows = generate(n_systems=args.systems, n_tasks=args.tasks, n_groups=args.groups, seed=args.seed, cost=True)
    content = to_csv(rows).encode()
    print(f"Generated a synthetic benchmark: {args.systems} systems x {args.tasks} tasks in {args.groups} groups "
          f"({len(rows)} records).", flush=True)
    with httpx.Client(base_url=base, timeout=60) as http:
        r = http.post("/v1/datasets", files={"file": ("synthetic.csv", content, "text/csv")}, data={"name": "demo"})
        r.raise_for_status()
        dataset = r.json()
        print(f"Uploaded dataset {dataset['id']} ({'new' if r.status_code == 201 else 'already stored'}).")
        spec = {
            "dataset_id": dataset["id"],
            "policies": list(DEMO_POLICIES),
            "deltas": [0, 5],
            "orders": args.orders,
            "groups": ["group"],
            "seed": args.seed,
        }
        r = http.post("/v1/replays", json=spec)
        r.raise_for_status()
        replay = r.json()
        url = f"{base}/v1/replays/{replay['id']}"
        chunks = f"{replay['n_chunks']} chunk{'' if replay['n_chunks'] == 1 else 's'}"
        print(f"Submitted replay {replay['id']}: {replay['n_pairs']} pairs in {chunks}, "
              f"{len(DEMO_POLICIES)} policies x 2 thresholds, {args.orders} orders per pair.", flush=True)
        last = -1.0
        while True:
            # held up to 0.25 s while it runs (its progress shows at that pace), sent at its end
            state = http.get(f"/v1/replays/{replay['id']}", params={"wait": 0.25}).json()
            if state["progress"] - last >= 0.1 or state["status"] in ("succeeded", "failed", "cancelled"):
                print(f"  {state['status']:<9} {state['progress']:6.1%}", flush=True)
                last = state["progress"]
            if state["status"] in ("succeeded", "failed", "cancelled"):
                break
        if state["status"] != "succeeded":
            raise RuntimeError(f"replay {state['status']}: {state['error']}")
        report = http.get(f"/v1/replays/{replay['id']}/report").json()
        page = f"{base}/replays/{replay['id']}"
        has_page = http.get(page).status_code == 200  # the HTML report, when the pages are mounted
    print("\nMinimum sufficient budget (share of tasks; targets: "
          f"FAR/FRR <= {report['targets']['alpha']}, coverage failure <= {report['targets']['gamma']}, "
          f"defer <= {report['targets']['eta']}):")
    print(f"  {'policy':<22} {'delta (pp)':>10} {'sufficient at':>14} {'error+coverage at':>18}")
    for conf in report["configurations"]:
        print(f"  {conf['policy']['name']:<22} {conf['delta']:>10g} {_pct(conf['minimum_sufficient_budget']):>14} "
              f"{_pct(conf['error_coverage_budget']):>18}")
    print()
    if has_page:
        print(f"Report page:  {page}")
    print(f"Report (JSON): {url}/report\nReport (CSV):  {url}/report.csv\nMetric rows:   {url}/metrics")
    print(f"Done in {time.monotonic() - started:.1f} s.", flush=True)


def _pct(budget: float | None) -> str:
    return "none" if budget is None else f"{budget:.0%}"
