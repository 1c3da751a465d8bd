"""``sufficiency example``: write a small real dataset (shipped with the project) to try every command on."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from service import examples


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "example",
        help="write a small real dataset (τ²-bench airline, 5 systems x 50 tasks) with its provenance and licence",
        description=(
            "Copy a real dataset shipped with the project into a folder: records.csv (SPEC §1 records, see "
            "docs/spec.md), SOURCE.md (where every row comes from, caveats) and LICENSE. The folder is named "
            "after the dataset, so uploads of it get a useful default name."
        ),
    )
    p.add_argument(
        "name",
        nargs="?",
        default=examples.DEFAULT,
        help=f"which example (default {examples.DEFAULT}; --list shows them)",
    )
    p.add_argument("--dir", default=".", help="parent folder to write into (default: the current one)")
    p.add_argument("--list", action="store_true", help="list the shipped examples and exit")
    p.add_argument("--force", action="store_true", help="overwrite files that differ from the shipped ones")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.list:
        for name in examples.names():
            print(f"{name}\t{examples.path(name)}")
        return 0
    try:
        source = examples.path(args.name).parent
    except KeyError as exc:
        print(f"error: {exc.args[0]}", file=sys.stderr)
        return 2
    target = Path(args.dir) / args.name
    target.mkdir(parents=True, exist_ok=True)
    for fname in examples.FILES:
        data = (source / fname).read_bytes()
        out = target / fname
        if out.exists() and out.read_bytes() != data and not args.force:
            print(f"error: {out} exists and differs from the shipped file (--force overwrites it)", file=sys.stderr)
            return 2
        out.write_bytes(data)
    records = target / "records.csv"
    print(f"wrote {records} (provenance and licence: {target / 'SOURCE.md'}, {target / 'LICENSE'})")
    print("try:")
    print(f"  sufficiency replay {records} --policy coverage_bootstrap --policy serfling_coverage --delta 0 --delta 5")
    print(f"  sufficiency leaderboard {records}")
    return 0
