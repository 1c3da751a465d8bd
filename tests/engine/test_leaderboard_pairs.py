"""The leaderboard's all-pairs pass (``evalstats.paired_tests``) against one ``_compare`` per pair.

Every field of every output (rows, adjacent leads, the matrix, rank intervals, letters, tie
groups) must be what the per-pair leaderboard of ``tests/engine/leaderboard_reference.py``
returns: the same types, integers and strings equal, floats the same bits (NaN where it has
NaN). The pass is built to make the same IEEE operations in the same order, so nothing looser
than bit equality is allowed here.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from service.engine import evalstats as E
from service.engine import leaderboard as L
from service.engine.records import from_rows, load_records
from service.engine.synth import generate
from tests.conftest import shared_dataset
from tests.engine.leaderboard_reference import differences, reference_leaderboard


def _same_board(records, **options) -> None:
    new = L.leaderboard(records, **options)
    old = reference_leaderboard(records, **options)
    found = differences(new, old)
    assert not found, f"{len(found)} differences with {options}, first: " + "; ".join(found[:5])


# --------------------------------------------------------------------------- real datasets

REAL = (
    "tau2_airline",
    "swebench_java_verified",
    "swebench_lite",
    "swebench_verified_bash_only",
    "tau2_bench",  # unequal task sets
    "terminal_bench_1_fractional",
    "terminal_bench_2_fractional",
    "terminal_bench_core_0.1.1",  # five trials per task
)


@pytest.mark.parametrize("name", REAL)
def test_real_boards_match_the_per_pair_leaderboard(name):
    records = load_records(str(shared_dataset(name)))
    for cluster in (None, "group"):
        for correction in L.CORRECTIONS:
            _same_board(records, cluster=cluster, correction=correction, matrix=True)
    _same_board(records, level=0.9, ties="leader")
    _same_board(records, cluster="group", ties="adjacent")


# --------------------------------------------------------------------------- synthetic boards


def _drop_cells(rows: list[dict], share: float, seed: int) -> list[dict]:
    """Rows without a random ``share`` of (system, task) cells, and of single trials besides."""
    rng = np.random.default_rng(seed)
    cells = sorted({(r["system"], r["task_id"]) for r in rows})
    gone = {cells[k] for k in np.flatnonzero(rng.random(len(cells)) < share)}
    return [r for r in rows if (r["system"], r["task_id"]) not in gone and rng.random() >= share / 3]


def _with_edge_systems(rows: list[dict]) -> list[dict]:
    """Adds a copy of the first system (a tie: every difference 0), systems that pass and fail
    everything (a constant difference: zero variance, nonzero mean), and systems whose common
    tasks are none, one, all in one group or in some groups (no test; one task; one cluster;
    fewer clusters than the key has), and one with two trials of its last tasks only."""
    tasks: dict[str, dict] = {}
    for r in rows:
        tasks.setdefault(r["task_id"], r)
    ids = sorted(tasks)
    by_group: dict[str, list[str]] = {}
    for t in ids:
        by_group.setdefault(tasks[t]["group"], []).append(t)
    one_group = next(g for g in by_group.values() if len(g) >= 3)

    def system(name: str, chosen: list[str], outcome) -> list[dict]:
        return [{**tasks[t], "system": name, "trial": 0, "outcome": outcome(k)} for k, t in enumerate(chosen)]

    first = min(r["system"] for r in rows)
    out = rows + [{**r, "system": "zz_copy"} for r in rows if r["system"] == first]
    out += system("zz_all_pass", ids, lambda k: 1)
    out += system("zz_all_fail", ids, lambda k: 0)
    out += system("zz_head", ids[:6], lambda k: k % 2)
    out += system("zz_tail", ids[6:12] + ids[5:6], lambda k: 1)  # shares one task with zz_head
    out += system("zz_far", ids[-6:], lambda k: k % 3 == 0)  # shares no task with zz_head
    out += system("zz_one_group", one_group, lambda k: (k + 1) % 2)
    some = [t for g in sorted(by_group)[:3] for t in by_group[g]]
    out += system("zz_some_groups", some, lambda k: k % 4 == 1)  # 3 of the clusters
    # 0/1 single trials but on its last tasks, two trials: McNemar against systems without those
    out += system("zz_rough_end", ids[:20], lambda k: k % 3 == 1)
    for trial in (0, 1):
        out += [{**r, "trial": trial, "outcome": trial} for r in system("zz_rough_end", ids[-2:], lambda k: 0)]
    return out


BOARDS = [
    # (seed, trials, fractional, missing share, edge systems)
    (0, 1, False, 0.0, False),
    (1, 1, False, 0.0, True),
    (2, 1, False, 0.08, True),
    (3, 3, False, 0.0, False),
    (4, 3, False, 0.08, True),
    (5, 1, True, 0.0, False),
    (6, 1, True, 0.08, True),
]


@pytest.mark.parametrize(("seed", "trials", "fractional", "missing", "edges"), BOARDS)
def test_synthetic_boards_match_the_per_pair_leaderboard(seed, trials, fractional, missing, edges):
    rows = generate(n_systems=18, n_tasks=150, n_groups=7, trials=trials, seed=seed, fractional=fractional)
    if missing:
        rows = _drop_cells(rows, missing, seed)
    if edges:
        rows = _with_edge_systems(rows)
    records = from_rows(rows)
    assert (records.observed.all()) == (not missing and not edges)
    for cluster in (None, "group", "group,difficulty"):
        for correction in L.CORRECTIONS:
            _same_board(records, cluster=cluster, correction=correction, matrix=True)
    _same_board(records, ties="leader", level=0.8)


@pytest.mark.parametrize("cells", [1, 97, 4096])
def test_any_chunking_gives_the_same_board(monkeypatch, cells):
    """Chunks of one pair (tasks > cells), of a few, and of many pairs with uneven task sets."""
    monkeypatch.setattr(E, "PAIR_CELLS", cells)
    records = from_rows(_with_edge_systems(_drop_cells(generate(n_systems=9, n_tasks=60, n_groups=5, seed=9), 0.1, 9)))
    for cluster in (None, "group"):
        _same_board(records, cluster=cluster, correction="bh", matrix=True)


@pytest.mark.parametrize("n_tasks", [1, 2, 3, 7, 8, 9, 128, 129, 131, 300])
def test_task_counts_around_numpys_summation_blocks(n_tasks):
    """numpy sums fewer than 8 values in a loop, then 8 at a time, and halves above 128: the
    packed rows must be summed as each pair's own array is, on each side of those sizes."""
    rows = generate(n_systems=8, n_tasks=n_tasks, n_groups=1, trials=2, seed=n_tasks, fractional=True)
    records = from_rows(rows)
    _same_board(records, matrix=True)
    _same_board(from_rows([r for r in rows if r["trial"] == 0]), matrix=True)


def test_a_large_board_matches():
    records = from_rows(generate(n_systems=60, n_tasks=400, n_groups=12, seed=11))
    _same_board(records, matrix=True)
    _same_board(records, cluster="group", matrix=True)


# --------------------------------------------------------------------------- the comparison itself


def test_the_comparison_sees_one_count_or_one_ulp(monkeypatch):
    """A pass that is off by one task or one unit in the last place of one pair's number must
    fail the comparison above; so must a McNemar count off by one."""
    records = from_rows(generate(n_systems=10, n_tasks=80, n_groups=4, seed=3))
    old = reference_leaderboard(records, matrix=True)
    real = E.paired_tests

    def perturbed(field: str, k: int, change):
        def run(*args):
            out = real(*args)
            values = getattr(out, field).copy()
            values[k] = change(values[k])
            return dataclasses.replace(out, **{field: values})

        return run

    changes = [
        ("n_tasks", 0, lambda v: v + 1),
        ("diff", 5, lambda v: np.nextafter(v, np.inf)),
        ("se", 17, lambda v: np.nextafter(v, -np.inf)),
        ("p_value", 30, lambda v: np.nextafter(v, np.inf)),
    ]
    for field, k, change in changes:
        monkeypatch.setattr(L, "paired_tests", perturbed(field, k, change))
        assert differences(L.leaderboard(records, matrix=True), old), field
    monkeypatch.setattr(L, "paired_tests", real)
    assert not differences(L.leaderboard(records, matrix=True), old)

    def one_more_plus(d, common, n, signs):
        mean, squares, (plus, minus), u = centred(d, common, n, signs)
        return mean, squares, (plus + 1, minus), u

    centred = E._centred
    monkeypatch.setattr(E, "_centred", one_more_plus)
    assert differences(L.leaderboard(records, matrix=True), old)
