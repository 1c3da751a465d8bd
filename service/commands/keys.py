"""``sufficiency keys create|list|revoke``: manage API keys in the configured database.

The token is printed once, by ``create``; only its SHA-256 is stored.
"""

from __future__ import annotations

import argparse
import sys


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "keys",
        help="create, list and revoke API keys (used when SUFFICIENCY_AUTH=required)",
        description="Manage API keys in SUFFICIENCY_DATABASE_URL (default: the SQLite file in the data dir).",
    )
    sub = p.add_subparsers(dest="keys_command", metavar="ACTION", required=True)
    c = sub.add_parser("create", help="create a key and print it (once)")
    c.add_argument("--name", required=True, help="what the key is for (shown by `keys list`)")
    c.add_argument("--scopes", default="read", help="comma list of read, submit, decide, admin (default read)")
    c.add_argument("--owner", help="who owns the replays and sessions made with it (default: the name)")
    c.set_defaults(func=run_create)
    ls = sub.add_parser("list", help="list keys (never their tokens)")
    ls.add_argument("--all", action="store_true", help="include revoked keys")
    ls.set_defaults(func=run_list)
    r = sub.add_parser("revoke", help="revoke a key by id, prefix or name")
    r.add_argument("key", metavar="KEY", help="the key's id, its prefix, or its name (must be unique)")
    r.set_defaults(func=run_revoke)


def _factory():  # noqa: ANN202
    from service.config import Settings
    from service.db import make_engine, make_sessionmaker, run_migrations

    settings = Settings()
    if settings.should_migrate_on_start:  # the embedded default: make the schema if this is the first command
        run_migrations(settings.sqlalchemy_url, settings.migrations_dir)
    return make_sessionmaker(make_engine(settings.sqlalchemy_url, pool_size=1, max_overflow=0))


def run_create(args: argparse.Namespace) -> int:
    from service.auth import keys
    from service.db import transaction

    try:
        with transaction(_factory()) as session:
            key, token = keys.create(session, name=args.name, scopes=args.scopes, owner=args.owner)
    except ValueError as exc:
        print(f"sufficiency keys create: {exc}", file=sys.stderr)
        return 2
    print(token)
    print(f"created key {key.prefix} ({key.name}, owner {key.owner}, scopes {','.join(key.scopes)}); "
          "the key above is shown only now", file=sys.stderr)
    return 0


def run_list(args: argparse.Namespace) -> int:
    from service.auth import keys
    from service.db import transaction

    with transaction(_factory(), write=False) as session:
        rows = [k for k in keys.all_keys(session) if args.all or k.revoked_at is None]
    print(f"{'prefix':<12}  {'name':<24}  {'owner':<20}  {'scopes':<26}  {'created':<20}  revoked")
    for k in rows:
        revoked = k.revoked_at.strftime("%Y-%m-%d %H:%M:%S") if k.revoked_at else "-"
        print(f"{k.prefix:<12}  {k.name:<24}  {k.owner:<20}  {','.join(k.scopes):<26}  "
              f"{k.created_at.strftime('%Y-%m-%d %H:%M:%S'):<20}  {revoked}")
    return 0


def run_revoke(args: argparse.Namespace) -> int:
    from service.auth import keys
    from service.db import transaction

    with transaction(_factory()) as session:
        found = keys.find(session, args.key)
        if len(found) != 1:
            what = "no key matches" if not found else f"{len(found)} keys match"
            print(f"sufficiency keys revoke: {what} '{args.key}' (give the id or prefix)", file=sys.stderr)
            return 2
        key = keys.revoke(session, found[0])
    print(f"revoked key {key.prefix} ({key.name})")
    return 0
