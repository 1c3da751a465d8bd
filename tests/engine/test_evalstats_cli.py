"""The ``leaderboard`` and ``stats`` subcommands (SPEC §8) end to end through ``service.cli``."""

from __future__ import annotations

import json

import pytest

from service.cli import main

CSV = "system,task_id,trial,outcome,group\n" + "".join(
    f"{s},t{t},{i},{int((t * 7 + i * 3 + len(s)) % 10 < cut)},g{t % 4}\n"
    for s, cut in (("alpha", 8), ("beta", 5), ("gamma", 2))
    for t in range(40)
    for i in range(3)
)


@pytest.fixture
def records(tmp_path):
    path = tmp_path / "r.csv"
    path.write_text(CSV)
    return str(path)


def test_leaderboard_table_and_json(records, capsys):
    assert main(["leaderboard", records, "--cluster", "group", "--matrix"]) == 0
    out = capsys.readouterr().out
    assert "clustered by group (4 clusters)" in out and "pass@3" in out and "Pairwise matrix" in out
    assert main(["leaderboard", records, "--format", "json", "--correction", "bh", "--ties", "leader"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["stats"]["system"] for r in doc["rows"]] == ["alpha", "beta", "gamma"]
    assert doc["correction"] == "bh" and doc["ties"] == "leader" and len(doc["matrix"]) == 3
    assert sum(len(g["systems"]) for g in doc["tie_groups"]) == 3


def test_leaderboard_errors(records, tmp_path, capsys):
    assert main(["leaderboard", records, "--cluster", "repo"]) == 2
    assert "--cluster" in capsys.readouterr().err
    bad = tmp_path / "bad.csv"
    bad.write_text("system,task_id,outcome\nA,t1,2\nB,t1,0\n")
    assert main(["leaderboard", str(bad)]) == 2
    assert "row 1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["leaderboard", records, "--level", "1.5"])


def test_stats_calculators(capsys):
    assert main(["stats", "passk", "--n", "5", "--c", "2", "--k", "2"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["pass_at_k"] == pytest.approx(0.7)
    assert main(["stats", "runs", "--max-failure-rate", "0.05"]) == 0
    assert json.loads(capsys.readouterr().out)["runs"] == 59
    assert main(["stats", "tasks", "--margin", "0.03"]) == 0
    assert json.loads(capsys.readouterr().out)["tasks"] == 1068
    assert main(["stats", "bound", "--successes", "20", "--n", "20"]) == 0
    assert round(json.loads(capsys.readouterr().out)["failure_upper"], 4) == 0.1391
    assert main(["stats", "passk", "--n", "3", "--c", "1", "--k", "4"]) == 2
    assert "k:" in capsys.readouterr().err


def test_stats_pair_is_seeded(records, capsys):
    args = ["stats", "pair", records, "alpha", "beta", "--seed", "3", "--boot", "500"]
    assert main(args) == 0
    first = json.loads(capsys.readouterr().out)
    assert main(args) == 0
    assert json.loads(capsys.readouterr().out) == first
    assert first["bootstrap"]["low"] < first["diff"] < first["bootstrap"]["high"]


def test_leaderboard_table_shows_rank_intervals_letters_and_unequal_task_sets(tmp_path, capsys):
    path = tmp_path / "u.csv"
    rows = ["system,task_id,outcome"]
    rows += (
        [f"a,t{t},1" for t in range(30)] + [f"b,t{t},{t % 2}" for t in range(10, 40)] + [f"c,t{t},0" for t in range(40)]
    )
    path.write_text("\n".join(rows) + "\n")
    assert main(["leaderboard", str(path)]) == 0
    out = capsys.readouterr().out
    assert "warning (unequal_task_sets)" in out and "as few as 20, for a and b" in out
    assert "(on 20 common tasks)" in out and "Rank intervals:" in out
    assert main(["leaderboard", str(path), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["unequal_task_sets"]["smallest_overlap"] == 20 and doc["ties"] == "cliques"
    # every pair differs (McNemar 10-0, 30-0, 15-0 on the common tasks), so each rank is pinned
    assert [(r["rank_low"], r["rank_high"]) for r in doc["rows"]] == [(1, 1), (2, 2), (3, 3)]
    assert [r["letters"] for r in doc["rows"]] == [["a"], ["b"], ["c"]]


@pytest.mark.parametrize("target", ["5e-324", "1e-300"])
def test_a_failure_rate_too_small_for_any_run_count_is_an_error_naming_it(target, capsys):
    """The closed form ln(alpha) / ln(1 - target) overflows (5e-324: about 6e323 runs, inf
    to ``ceil``): a refusal naming the argument, not a traceback."""
    assert main(["stats", "runs", "--max-failure-rate", target]) == 2
    err = capsys.readouterr().err
    assert "--max-failure-rate" in err and "runs would be needed" in err


@pytest.mark.parametrize("argv", [
    ["stats", "tasks", "--margin", "1e-170"],  # was a ZeroDivisionError traceback
    ["stats", "tasks", "--margin", "1e-160"],  # OverflowError
    ["stats", "power", "--delta", "1e-160"],
    ["stats", "power", "--delta", "0.05", "--sd-diff", "1e300"],
    ["stats", "margin", "--n", "5e-324"],  # printed a null margin with exit code 0
    ["stats", "gap", "--n", "1e-320"],
])
def test_calculators_at_the_edge_of_floating_point_are_errors_not_tracebacks(argv, capsys):
    """As the API's 422: exit code 2 and a sentence, where the CLI raised or printed null."""
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert "no finite answer" in captured.err and captured.out == ""
