"""Real datasets shipped with the project (each folder: ``records.csv``, ``SOURCE.md``, ``LICENSE``).

Shipped so that a fresh install can try every command on real records with nothing beside it;
``sufficiency example`` copies one out.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

DEFAULT = "tau2_airline"
FILES = ("records.csv", "SOURCE.md", "LICENSE")


def names() -> list[str]:
    root = resources.files(__name__)
    return sorted(p.name for p in root.iterdir() if p.is_dir() and (p / "records.csv").is_file())


def path(name: str = DEFAULT) -> Path:
    """The shipped ``records.csv`` of ``name`` (package data: a real file in any install)."""
    if name not in names():
        raise KeyError(f"no shipped example '{name}'; examples: {', '.join(names())}")
    return Path(str(resources.files(__name__) / name / "records.csv"))
