"""Shared fixtures. Real-data tests read ../shared/data and skip, saying why, without it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("SUFFICIENCY_SHARED_DATA", REPO.parent / "shared" / "data"))


def shared_dataset(name: str) -> Path:
    """Path of ``../shared/data/<name>/records.csv``, or skip the test when absent."""
    path = SHARED_DATA / name / "records.csv"
    if not path.exists():
        pytest.skip(f"real-data test: {path} is absent (set SUFFICIENCY_SHARED_DATA)")
    return path
