"""``engine.pairs.PairTable``: the per-pair rows of the report, stored compactly and paged.

The rows are checked against a direct computation from the chunk tallies; filters and sorts
against plain Python sorting of those rows (what the report page did before the tables)."""

from __future__ import annotations

import numpy as np
import pytest

from service.engine.pairs import PairTable, pair_tables
from service.engine.records import parse_records
from service.engine.replay import build_report, plan_replay, run_chunk
from service.engine.spec import make_spec
from service.engine.synth import generate, to_csv


@pytest.fixture(scope="module")
def replayed() -> tuple[object, list, dict]:
    rows = generate(n_systems=7, n_tasks=60, n_groups=3, seed=5, cost=True)
    for r in rows:
        if r["system"] == rows[0]["system"] and r["task_id"] == rows[0]["task_id"]:
            r["cost"] = None  # this system is excluded as A under cost_forced
    records = parse_records(to_csv(rows).encode())
    spec = make_spec(
        policies=["coverage_bootstrap", "cost_forced"],
        deltas=[0, 4],
        orders=12,
        seeds=2,
        budgets=[0.2, 0.5, 0.8],
        groups=["group"],
        seed=1,
    )
    plan = plan_replay(records, spec)
    chunks = [run_chunk(plan, a, min(a + 9, plan.n_pairs)) for a in range(0, plan.n_pairs, 9)]
    return plan, chunks, build_report(plan, chunks)


def test_rows_are_the_reports_and_survive_storage(replayed: tuple) -> None:
    plan, chunks, report = replayed
    tables = pair_tables(plan, list(reversed(chunks)))  # chunk order does not matter
    assert len(tables) == len(report["configurations"]) == len(plan.configs)
    tot = plan.spec.orders * plan.spec.seeds
    acc = np.concatenate([ch.accept for ch in chunks])
    for c, (table, conf) in enumerate(zip(tables, report["configurations"], strict=True)):
        rows = table.rows()
        assert rows == conf["per_pair"] and len(rows) == conf["n_pairs"]
        p = int(np.flatnonzero(plan.applicable[:, c])[-1])  # the last applicable pair, by hand
        a, b = plan.pairs[p]
        assert rows[-1]["a"] == plan.records.systems[a] and rows[-1]["b"] == plan.records.systems[b]
        assert rows[-1]["accept"] == [float(f"{x / tot:.12g}") for x in acc[p, c].sum(axis=0)]
        for key in ("accept", "reject", "defer"):  # every share of every row (read off a table of them)
            counts = np.concatenate([getattr(ch, key) for ch in chunks])[:, c].sum(axis=1)  # [pairs, budgets]
            want = [[float(f"{x / tot:.12g}") for x in counts[q]] for q in np.flatnonzero(plan.applicable[:, c])]
            assert [r[key] for r in rows] == want, key
        assert PairTable.from_bytes(table.to_bytes()).rows() == rows
        rebuilt = PairTable.from_rows(list(plan.records.systems), rows, tot, len(plan.spec.budgets))
        assert rebuilt.rows() == rows
    assert len(tables[2]) < len(tables[0])  # cost_forced leaves out pairs whose A lacks costs
    no_rows = build_report(plan, chunks, per_pair=False)
    assert no_rows == {
        **report,
        "configurations": [{k: v for k, v in conf.items() if k != "per_pair"} for conf in report["configurations"]],
    }


def _reference(rows: list[dict], *, systems=None, query="", sort="pair", descending=False) -> list[tuple]:  # noqa: ANN001
    keep = [
        r
        for r in rows
        if (not systems or r["a"] in systems or r["b"] in systems)
        and (not query or query.lower() in r["a"].lower() or query.lower() in r["b"].lower())
    ]
    key = {
        "abs_delta": lambda p: (abs(p["delta_full"]), p["a"], p["b"]),
        "delta": lambda p: (p["delta_full"], p["a"], p["b"]),
        "defer": lambda p: (p["defer"][-1], p["a"], p["b"]),
        "a": lambda p: (p["a"], p["b"]),
        "b": lambda p: (p["b"], p["a"]),
    }.get(sort)
    if key is None:
        keep = keep[::-1] if descending else keep
    else:
        keep.sort(key=key, reverse=descending)
    return [(r["a"], r["b"]) for r in keep]


@pytest.mark.parametrize("sort", ["pair", "abs_delta", "delta", "defer", "a", "b"])
@pytest.mark.parametrize("descending", [False, True])
def test_select_filters_and_sorts_like_the_rows(replayed: tuple, sort: str, descending: bool) -> None:
    plan, chunks, report = replayed
    table = pair_tables(plan, chunks)[0]
    rows = report["configurations"][0]["per_pair"]
    names = list(plan.records.systems)
    for systems, query in (
        (None, ""),
        ([names[2]], ""),
        ([names[0], names[5]], ""),
        (None, names[3][-4:].upper()),
        (["nobody"], ""),
        ([names[1]], names[4][:7]),
    ):
        got = [
            (r["a"], r["b"])
            for r in table.rows(table.select(systems=systems, query=query, sort=sort, descending=descending))
        ]
        assert got == _reference(rows, systems=systems, query=query, sort=sort, descending=descending)
    with pytest.raises(ValueError, match="unknown sort"):
        table.select(sort="nonsense")
