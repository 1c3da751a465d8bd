"""``sufficiency worker``: a Celery worker for replay jobs (needs SUFFICIENCY_BROKER_URL)."""

from __future__ import annotations

import argparse
import sys


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "worker",
        help="run a Celery worker for replay jobs",
        description="Run a Celery worker. Configure with SUFFICIENCY_DATABASE_URL and SUFFICIENCY_BROKER_URL.",
    )
    p.add_argument("--concurrency", "-c", type=int, default=None, help="worker processes (default: CPU count)")
    p.add_argument("--pool", choices=("prefork", "solo", "threads"), default="prefork")
    p.add_argument("--loglevel", "-l", default="info")
    p.add_argument("--no-sweeper", action="store_true", help="do not re-dispatch chunks of dead workers")
    p.add_argument("--alive-file", default=None, help="touched every sweep interval (for container healthchecks)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from service.config import Settings
    from workers.app import create_worker_app, install_sweeper

    settings = Settings()
    if not settings.broker_url:
        print("sufficiency worker: set SUFFICIENCY_BROKER_URL (e.g. redis://localhost:6379/0)", file=sys.stderr)
        return 2
    app = create_worker_app(settings)
    if not args.no_sweeper:
        install_sweeper(app, settings, args.alive_file)
    argv = [
        "worker",
        f"--queues={settings.celery_queue}",
        f"--loglevel={args.loglevel}",
        f"--pool={args.pool}",
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
    ]
    if args.concurrency:
        argv.append(f"--concurrency={args.concurrency}")
    app.worker_main(argv)
    return 0
