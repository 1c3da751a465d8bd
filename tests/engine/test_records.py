"""Records parsing and validation (SPEC §1) against hand-computed values."""

from __future__ import annotations

import json

import numpy as np
import pytest

from service.engine.records import MAX_TRIAL, RecordsError, filter_systems, from_rows, group_labels, parse_records
from tests.conftest import shared_dataset

CSV = """system,task_id,trial,outcome,cost,repo
A,t1,0,1,2.0,r1
A,t1,1,0,4.0,r1
A,t2,0,1,,r2
B,t1,0,0,1.0,r1
B,t2,0,0.5,1.0,r2
"""


def test_aggregates_trials_into_one_case_per_task():
    rec = parse_records(CSV.encode(), "csv")
    assert rec.systems == ("A", "B") and rec.tasks == ("t1", "t2")
    np.testing.assert_allclose(rec.y, [[0.5, 1.0], [0.0, 0.5]])
    assert rec.trials.tolist() == [[2, 1], [1, 1]]
    assert rec.cost[0, 0] == 3.0 and np.isnan(rec.cost[0, 1])
    assert rec.metadata == {"repo": ("r1", "r2")}
    assert not rec.binary and not rec.single_trial


def test_jsonl_equals_csv():
    lines = [
        {"system": "A", "task_id": "t1", "trial": 0, "outcome": 1, "cost": 2.0, "repo": "r1"},
        {"system": "A", "task_id": "t1", "trial": 1, "outcome": 0, "cost": 4.0, "repo": "r1"},
        {"system": "A", "task_id": "t2", "trial": 0, "outcome": 1, "repo": "r2"},
        {"system": "B", "task_id": "t1", "trial": 0, "outcome": 0, "cost": 1.0, "repo": "r1"},
        {"system": "B", "task_id": "t2", "trial": 0, "outcome": 0.5, "cost": 1, "repo": "r2"},
    ]
    rec = parse_records("\n".join(json.dumps(x) for x in lines), "jsonl")
    ref = parse_records(CSV, "csv")
    np.testing.assert_array_equal(rec.y, ref.y)
    np.testing.assert_array_equal(rec.cost, ref.cost)


@pytest.mark.parametrize(
    ("body", "row", "field"),
    [
        ("system,task_id,trial\nA,t,0\n", None, "outcome"),
        ("system,task_id,outcome\n,t,1\nB,t,1\n", 1, "system"),
        ("system,task_id,outcome\nA,t,1\nB,,1\n", 2, "task_id"),
        ("system,task_id,outcome\nA,t,yes\nB,t,1\n", 1, "outcome"),
        ("system,task_id,outcome\nA,t,1.5\nB,t,1\n", 1, "outcome"),
        ("system,task_id,outcome\nA,t,nan\nB,t,1\n", 1, "outcome"),
        ("system,task_id,outcome,cost\nA,t,1,-1\nB,t,1,\n", 1, "cost"),
        ("system,task_id,outcome,cost\nA,t,1,inf\nB,t,1,\n", 1, "cost"),
        ("system,task_id,outcome\nA,t,1\nB,t,1\nA,t,0\n", 3, "trial"),
        ("system,task_id,trial,outcome\nA,t,2147483648,1\nB,t,0,1\n", 1, "trial"),  # past MAX_TRIAL
        ("system,task_id,trial,outcome\nA,t,0,1\nB,t,1e300,1\n", 2, "trial"),  # past int64: no crash
        ("system,task_id,outcome,repo\nA,t,1,x\nB,t,1,y\n", 2, "repo"),
        ("system,task_id,outcome\nA,t,1\nA,u,1\n", None, "system"),
    ],
)
def test_validation_names_row_and_field(body, row, field):
    with pytest.raises(RecordsError) as info:
        parse_records(body, "csv")
    first = info.value.errors[0]
    assert (first.row, first.field) == (row, field), str(info.value)


def test_binary_garbage_and_empty_are_rejected():
    with pytest.raises(RecordsError, match="binary"):
        parse_records(b"\x00\x01\x02garbage")
    with pytest.raises(RecordsError, match="empty"):
        parse_records(b"")


def test_system_filter_and_multi_column_groups():
    body = "system,task_id,outcome,repo,level\n" + "".join(
        f"{s},t{t},1,r{t % 2},l{t % 3}\n" for s in "AB" for t in range(20)
    ) + "C,t0,1,r0,l0\n"
    rec = parse_records(body, "csv")
    kept, dropped = filter_systems(rec, 0.95)
    assert kept.systems == ("A", "B") and dropped == ["C"]
    labels, names = group_labels(kept, "repo,level")
    assert len(names) == 6 and labels.shape == (20,)
    with pytest.raises(ValueError, match="difficulty"):
        group_labels(kept, "difficulty")


def test_real_swebench_lite_shape():
    rec = parse_records(shared_dataset("swebench_lite").read_bytes(), filename="records.csv")
    assert (rec.n_systems, rec.n_tasks) == (42, 300)
    assert rec.binary_single_trial
    _, names = group_labels(rec, "group")
    assert len(names) == 12


def test_every_bad_row_is_counted_though_only_the_first_are_listed():
    from service.engine.records import MAX_ERRORS

    n = 12_600
    body = "system,task_id,outcome\n" + "".join(f"S{i % 42},t{i // 42},2\n" for i in range(n))
    with pytest.raises(RecordsError) as info:
        parse_records(body, "csv")
    exc = info.value
    assert len(exc.errors) == MAX_ERRORS and exc.total == n and exc.bad_rows == n
    assert "12,600 problems on 12,600 data rows" in exc.summary
    assert str(exc.errors[0]).startswith("data row 1, field 'outcome'")
    # rows with two problems count once as rows, twice as problems
    with pytest.raises(RecordsError) as info:
        parse_records("system,task_id,outcome,cost\n" + "A,t,2,-1\n" * 30, "csv")
    assert (info.value.total, info.value.bad_rows) == (60, 30)
    # CSV rows of the wrong width, and JSONL lines that are not objects, are all counted too
    with pytest.raises(RecordsError) as info:
        parse_records("system,task_id,outcome\n" + "A,t\n" * 25, "csv")
    assert info.value.total == 25 and "(system, task_id, outcome)" in info.value.errors[0].message
    with pytest.raises(RecordsError) as info:
        parse_records("\n".join(["[1]"] * 25 + ["", "nope"]), "jsonl")
    assert info.value.total == 26 and "line 1 of the file" in info.value.errors[0].message
    assert info.value.summary.startswith("26 problems on 26 data rows")


def test_a_missing_column_lists_the_columns_found_and_hints_at_renames():
    with pytest.raises(RecordsError) as info:
        parse_records("model,instance_id,resolved\nA,t,1\nB,t,0\n", "csv")
    messages = {e.field: e.message for e in info.value.errors}
    assert set(messages) == {"system", "task_id", "outcome"}
    msg = messages["system"]
    assert "columns found: 'model', 'instance_id', 'resolved'" in msg
    assert "rename model -> system, instance_id -> task_id, resolved -> outcome" in msg
    with pytest.raises(RecordsError) as info:
        parse_records("system;task_id;outcome\nA;t;1\nB;t;0\n", "csv")
    assert "';'-separated" in info.value.errors[0].message
    # JSONL: a field no line has is one whole-input problem, not one per line
    lines = "\n".join(json.dumps({"model": s, "task_id": "t", "outcome": 1}) for s in "AB")
    with pytest.raises(RecordsError) as info:
        parse_records(lines, "jsonl")
    assert len(info.value.errors) == 1 and info.value.errors[0].row is None
    assert "rename model -> system" in info.value.errors[0].message


def test_csv_true_false_outcomes_read_like_json_booleans():
    csv_rec = parse_records("system,task_id,outcome\nA,t1,True\nA,t2,false\nB,t1,FALSE\nB,t2,true\n", "csv")
    lines = [{"system": s, "task_id": t, "outcome": o}
             for s, t, o in [("A", "t1", True), ("A", "t2", False), ("B", "t1", False), ("B", "t2", True)]]
    json_rec = parse_records("\n".join(json.dumps(x) for x in lines), "jsonl")
    np.testing.assert_array_equal(csv_rec.y, json_rec.y)
    np.testing.assert_array_equal(csv_rec.y, [[1.0, 0.0], [0.0, 1.0]])
    with pytest.raises(RecordsError):  # only outcomes: a boolean is no trial index
        parse_records("system,task_id,outcome,trial\nA,t1,1,true\nB,t1,1,0\n", "csv")


def test_load_records_takes_a_path_like_and_reads_the_format_from_its_extension(tmp_path):
    from pathlib import Path

    from service.engine.records import load_records

    class Where:  # any os.PathLike, not only pathlib
        def __init__(self, p: Path) -> None:
            self.p = p

        def __fspath__(self) -> str:
            return str(self.p)

    csv_file = tmp_path / "r.csv"
    csv_file.write_text(CSV)
    lines = [{"system": s, "task_id": t, "outcome": o} for s, t, o in [("A", "t1", 1), ("B", "t1", 0)]]
    jsonl_file = tmp_path / "r.jsonl"
    jsonl_file.write_text("\n".join(json.dumps(x) for x in lines))
    for path, systems in ((csv_file, ("A", "B")), (jsonl_file, ("A", "B"))):
        by_str = load_records(str(path))
        for given in (path, Where(path)):
            rec = load_records(given)
            assert rec.systems == systems
            np.testing.assert_array_equal(rec.y, by_str.y)
            np.testing.assert_array_equal(rec.trials, by_str.trials)
    # the name decides the format: JSON lines in a .csv file are read as CSV (and refused),
    # while content sniffing alone would have read them as JSONL
    mislabelled = tmp_path / "lines.csv"
    mislabelled.write_text(jsonl_file.read_text())
    for given in (mislabelled, str(mislabelled)):
        with pytest.raises(RecordsError) as info:
            load_records(given)
        assert {e.field for e in info.value.errors} >= {"system", "task_id", "outcome"}


def test_trial_bound_is_inclusive():
    """``MAX_TRIAL`` itself is a trial (the live tables' integer column holds it)."""
    rec = parse_records(f"system,task_id,trial,outcome\nA,t,{MAX_TRIAL},1\nB,t,0,1\n", "csv")
    assert rec.raw_trial.tolist() == [MAX_TRIAL, 0]


def test_held_bytes_is_what_the_records_allocate():
    """``held_bytes`` (what the dataset cache weighs) against tracemalloc on records read back
    from their stored form, where every array and string is new: within 10 %."""
    import gc
    import tracemalloc

    from service.engine.records_blob import records_from_bytes, records_to_bytes
    from service.engine.synth import generate

    for args in (dict(n_systems=30, n_tasks=400, n_groups=4), dict(n_systems=2, n_tasks=40_000, n_groups=12),
                 dict(n_systems=5, n_tasks=8_000, n_groups=3, trials=3)):
        blob = records_to_bytes(from_rows(generate(seed=3, **args)))
        gc.collect()
        tracemalloc.start()
        try:
            rec = records_from_bytes(blob)
            traced = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        assert 0.9 * traced <= rec.held_bytes() <= 1.1 * traced, (args, traced, rec.held_bytes())
