"""``sufficiency migrate``: apply the Alembic migrations to the configured database."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "migrate",
        help="create or upgrade the database schema (alembic upgrade)",
        description="Apply migrations to SUFFICIENCY_DATABASE_URL (default: the SQLite file in the data dir).",
    )
    p.add_argument("--revision", default="head", help="target revision (default: head)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from service.config import Settings
    from service.db import run_migrations

    settings = Settings()
    run_migrations(settings.sqlalchemy_url, settings.migrations_dir, args.revision)
    print(f"database at revision {args.revision}: {_safe(settings.sqlalchemy_url)}")
    return 0


def _safe(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)
