"""``sufficiency serve``: the HTTP API under uvicorn."""

from __future__ import annotations

import argparse
import os
import sys


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "serve",
        help="run the HTTP API",
        description="Serve the API. Without SUFFICIENCY_BROKER_URL, replays run in this process (one worker).",
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--workers", type=int, default=1,
                   help="uvicorn worker processes, each with its own listening socket on Linux (needs a broker if > 1)")
    p.add_argument("--log-level", default="info")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from service.config import Settings
    from service.serving import Supervisor, reuseport_spreads

    if args.workers < 1:
        print("sufficiency serve: --workers must be at least 1", file=sys.stderr)
        return 2
    settings = Settings()
    if args.workers > 1 and not settings.broker_url:
        print(
            "sufficiency serve: --workers > 1 needs SUFFICIENCY_BROKER_URL "
            "(the in-process job runner lives in one process)",
            file=sys.stderr,
        )
        return 2
    from service.auth.middleware import exposure_warning

    warning = exposure_warning(args.host, settings)
    if warning:
        print(warning, file=sys.stderr)
    if args.workers > 1 and settings.should_migrate_on_start:
        # Once, here: workers that each migrate a fresh SQLite file at start-up race for its
        # lock, and the loser fails to start. The workers inherit the environment.
        from service.db import run_migrations

        run_migrations(settings.sqlalchemy_url, settings.migrations_dir)
        os.environ["SUFFICIENCY_MIGRATE_ON_START"] = "false"
    if args.workers > 1 and reuseport_spreads():
        return Supervisor(args.host, args.port, args.workers, args.log_level,
                          balance=settings.balance_connections).run()
    from service.http_limits import uvicorn_options

    uvicorn.run(
        "service.main:create_app",
        factory=True,
        host=args.host,
        port=args.port,
        workers=args.workers,
        log_level=args.log_level,
        **uvicorn_options(settings),  # header size and time, connections, keep-alive, trusted proxies
    )
    return 0
