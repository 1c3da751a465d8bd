"""Shared fixtures. Real-data tests read ../shared/data (or ``SUFFICIENCY_SHARED_DATA``) and skip,
saying why, without it; the dataset shipped in ``service/examples`` is always there, so the tests
written against it always run. The end of a run counts the real-data skips."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from service import examples

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("SUFFICIENCY_SHARED_DATA", REPO.parent / "shared" / "data"))
SKIP_PREFIX = "real-data test"


def shared_dataset(name: str) -> Path:
    """Path of a real dataset: a shipped example (``tau2_airline``: always present) or
    ``$SUFFICIENCY_SHARED_DATA/<name>/records.csv`` (default ``../shared/data``), else skip."""
    if name in examples.names():
        return examples.path(name)
    path = SHARED_DATA / name / "records.csv"
    if not path.exists():
        pytest.skip(f"{SKIP_PREFIX}: {path} is absent (set SUFFICIENCY_SHARED_DATA to the folder holding {name}/)")
    return path


def pytest_configure(config) -> None:  # noqa: ANN001
    """Compile the lattice kernels once, in the main process before any xdist worker starts:
    on a fresh checkout numba has no cache yet, and the compilation (about 8 s) would otherwise
    run in several processes at once, some of them Celery workers that tests wait for."""
    if not hasattr(config, "workerinput"):
        import service.engine.lattice_kernel  # noqa: F401


@pytest.fixture(autouse=True)
def _own_tail_tables(monkeypatch):
    """Each test starts with its process's own 0/1 tail tables: an app's lifespan shares them
    with the host's other processes (engine/tail_tables.py) only until that test ends."""
    from service.engine import tail_tables

    monkeypatch.setattr(tail_tables, "_shared", None)


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # noqa: ANN001, ARG001
    """Say in one line how many real-data tests skipped and why, instead of leaving it in the skip list."""
    skipped = terminalreporter.stats.get("skipped", [])
    n = sum(1 for r in skipped if SKIP_PREFIX in str(getattr(r, "longrepr", "")))
    if n:
        terminalreporter.write_line(
            f"{n} real-data test(s) skipped: {SHARED_DATA} has no records (set SUFFICIENCY_SHARED_DATA to the "
            "folder with swebench_lite/, terminal_bench_core_0.1.1/, ...; the shipped tau2_airline tests ran)",
            yellow=True,
        )
