"""The ``sufficiency`` command. Each subcommand lives in ``service.commands.<name>`` and
exposes ``register(subparsers)``; this module only wires them together."""

from __future__ import annotations

import argparse
import importlib
import sys

from service import __version__

SUBCOMMANDS = ("replay", "synth", "leaderboard", "stats", "serve", "worker", "migrate", "demo", "keys", "example")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sufficiency",
        description=(
            "When is a partial agent-benchmark run enough? Every number is defined in docs/spec.md "
            "(in the repository). New here? `sufficiency example` writes a small real dataset to try."
        ),
    )
    parser.add_argument("--version", action="version", version=f"sufficiency {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS:
        try:
            module = importlib.import_module(f"service.commands.{name}")
        except ModuleNotFoundError as exc:  # a subcommand whose module is not written yet
            if exc.name != f"service.commands.{name}":
                raise
            continue
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
