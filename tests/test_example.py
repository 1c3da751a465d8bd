"""The shipped real dataset: `sufficiency example` writes it intact, and the README's commands run on it."""

from __future__ import annotations

import json

from service import examples
from service.cli import main
from service.engine.records import load_records


def test_example_writes_the_shipped_files_and_refuses_to_clobber(tmp_path, capsys) -> None:  # noqa: ANN001
    assert main(["example", "--dir", str(tmp_path)]) == 0
    out = tmp_path / "tau2_airline"
    for name in examples.FILES:
        assert (out / name).read_bytes() == (examples.path().parent / name).read_bytes()
    assert (
        "MIT" in (out / "LICENSE").read_text()
        and "a2c024725189473d2d7cea3a5cfdbcc67478e41f" in (out / "SOURCE.md").read_text()
    )
    (out / "records.csv").write_text("edited")
    assert main(["example", "--dir", str(tmp_path)]) == 2
    assert "differs" in capsys.readouterr().err
    assert main(["example", "--dir", str(tmp_path), "--force"]) == 0
    assert main(["example", "nope"]) == 2


def test_shipped_dataset_is_complete_and_matches_its_provenance_table() -> None:
    rec = load_records(str(examples.path()))
    assert (rec.n_systems, rec.n_tasks) == (5, 50) and rec.binary_single_trial
    assert (rec.trials == 1).all()  # every system ran every task once
    passed = dict(zip(rec.systems, (rec.y.sum(axis=1)).astype(int).tolist(), strict=True))
    assert passed == {
        "aide-platform_claude-sonnet-4-5": 36,
        "distyl-button_claude-opus-4-6": 38,
        "ironshell-adaptive-agent_claude-opus-4-6": 49,
        "nvidia-toolorchestra": 28,
        "sierra-exp_qwen2.5-7b": 9,
    }


def test_readme_commands_run_on_the_shipped_dataset(tmp_path, capsys) -> None:  # noqa: ANN001
    path = str(examples.path())
    out = tmp_path / "r.json"
    args = [
        "replay",
        path,
        "--policy",
        "coverage_bootstrap",
        "--policy",
        "serfling_coverage",
        "--delta",
        "0",
        "--delta",
        "5",
        "--orders",
        "40",
        "--format",
        "json",
        "--out",
        str(out),
    ]
    assert main(args) == 0
    report = json.loads(out.read_text())
    assert report["spec"]["deltas"] == [0.0, 5.0]
    capsys.readouterr()
    assert main(["leaderboard", path]) == 0
    assert "ironshell-adaptive-agent_claude-opus-4-6" in capsys.readouterr().out
    assert main(["stats", "pair", path, "distyl-button_claude-opus-4-6", "aide-platform_claude-sonnet-4-5"]) == 0


def test_stats_pair_with_an_unknown_system_lists_the_known_ones(capsys) -> None:  # noqa: ANN001
    assert main(["stats", "pair", str(examples.path()), "nope", "nvidia-toolorchestra"]) == 2
    err = capsys.readouterr().err
    assert "unknown system 'nope'" in err and "sierra-exp_qwen2.5-7b" in err and "nvidia-toolorchestra" in err
