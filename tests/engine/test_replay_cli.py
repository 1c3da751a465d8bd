"""`sufficiency replay`: output formats, SPEC metric names, determinism across --jobs, errors."""

from __future__ import annotations

import csv
import io
import json

import pytest

from service.cli import main
from service.engine.records import load_records
from service.engine.replay import run_replay
from service.engine.report import report_json
from service.engine.spec import make_spec
from tests.conftest import shared_dataset

SPEC_NAMES = {"false_accept_rate", "false_reject_rate", "decision_error", "defer_rate", "coverage_failure",
              "cost_fraction", "task_fraction"}


@pytest.fixture(scope="module", params=["tau2_airline", "swebench_lite"])
def lite_path(request):
    """A real dataset: the shipped one (always) and SWE-bench Lite (when ../shared/data has it)."""
    return str(shared_dataset(request.param))


def run_cli(args, capsys):
    code = main(["replay", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_json_report_carries_spec_names_and_is_identical_for_any_jobs(lite_path, tmp_path, capsys):
    common = [lite_path, "--group", "group", "--policy", "coverage_bootstrap", "--policy", "anytime_coverage",
              "--delta", "0", "--delta", "5", "--orders", "12", "--budgets", "0.1,0.5,0.9", "--format", "json"]
    outs = []
    for jobs in ("1", "2"):
        path = tmp_path / f"r{jobs}.json"
        code, _, _ = run_cli([*common, "--jobs", jobs, "--out", str(path)], capsys)
        assert code == 0
        outs.append(path.read_bytes())
    assert outs[0] == outs[1]
    rep = json.loads(outs[0])
    conf = rep["configurations"][0]
    assert SPEC_NAMES <= set(conf["budgets"][0])
    assert {"minimum_sufficient_budget", "error_coverage_budget"} <= set(conf)
    # the CLI prints exactly the engine's canonical bytes
    spec = make_spec(policies=["coverage_bootstrap", "anytime_coverage"], deltas=[0.0, 5.0], orders=12,
                     budgets=[0.1, 0.5, 0.9], groups=["group"])
    assert report_json(run_replay(load_records(lite_path), spec)) == outs[0]


def test_table_is_default_and_csv_has_a_row_per_budget(lite_path, capsys):
    code, out, _ = run_cli([lite_path, "--orders", "5", "--budgets", "0.25,0.5", "--policy", "stratified_forced"],
                           capsys)
    assert code == 0 and "min sufficient" in out and "stratified_forced" in out
    code, out, _ = run_cli([lite_path, "--orders", "5", "--budgets", "0.25,0.5", "--format", "csv",
                            "--policy", "serfling_coverage", "--delta", "0", "--delta", "10"], capsys)
    rows = list(csv.DictReader(io.StringIO(out)))
    assert code == 0 and len(rows) == 4
    assert {r["delta"] for r in rows} == {"0.0", "10.0"}
    assert all(0 <= float(r["defer_rate"]) <= 1 for r in rows)


def test_bad_records_name_row_and_field(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("system,task_id,outcome\nA,t1,1\nB,t1,2\n")
    code, _, err = run_cli([str(bad)], capsys)
    assert code == 2 and "row 2" in err and "outcome" in err


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--policy", "nonsense"], "--policy"),
        (["--policy", "coverage_mcnemar", "--delta", "5"], "--delta"),
        (["--budgets", "0.5,0.2"], "--budgets"),
        (["--group", "difficulty"], "--group"),
        (["--floor", "nope"], "--floor"),
        (["--a", "1.5"], "--a"),
        (["--bootstrap", "lots"], "--bootstrap"),
    ],
)
def test_bad_options_are_named(capsys, args, field):
    """Errors name the flag the user types (--delta, --group: repeated to sweep), on the shipped dataset."""
    from service import examples

    code, _, err = run_cli([str(examples.path()), "--orders", "2", *args], capsys)
    assert code == 2 and err.startswith(f"error: {field}: "), err


def test_mcnemar_refuses_fractional_outcomes(capsys):
    path = str(shared_dataset("terminal_bench_1_fractional"))
    code, _, err = run_cli([path, "--policy", "coverage_mcnemar", "--orders", "2"], capsys)
    assert code == 2 and "binary single-trial" in err
