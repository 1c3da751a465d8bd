"""The synthetic benchmark generator (`sufficiency synth`): valid records, deterministic,
realistic structure (graded systems, uneven groups, trials, costs)."""

from __future__ import annotations

import json
from itertools import combinations

import numpy as np
import pytest

from service.cli import main
from service.engine.records import group_labels, parse_records
from service.engine.synth import generate, synthesize, to_csv, to_jsonl


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_output_parses_as_valid_records(fmt):
    rows = generate(n_systems=6, n_tasks=120, n_groups=5, seed=1)
    text = to_csv(rows) if fmt == "csv" else to_jsonl(rows)
    rec = parse_records(text.encode(), fmt)
    assert rec.n_systems == 6 and rec.n_tasks == 120
    assert rec.binary_single_trial
    assert set(rec.metadata) == {"group", "difficulty"}
    assert np.all(rec.observed)
    assert len(rows) == 6 * 120


def test_csv_and_jsonl_give_the_same_dataset():
    rows = generate(n_systems=4, n_tasks=50, n_groups=4, trials=2, seed=3, fractional=True)
    a = parse_records(to_csv(rows), "csv")
    b = parse_records(to_jsonl(rows), "jsonl")
    assert a.systems == b.systems and a.tasks == b.tasks
    np.testing.assert_array_equal(a.y, b.y)
    np.testing.assert_array_equal(a.cost, b.cost)


def test_deterministic_for_a_seed():
    assert to_csv(generate(seed=7)) == to_csv(generate(seed=7))
    assert to_jsonl(generate(seed=7, trials=3)) == to_jsonl(generate(seed=7, trials=3))
    assert to_csv(generate(seed=7)) != to_csv(generate(seed=8))


@pytest.mark.parametrize("seed", range(5))
def test_scores_follow_designed_abilities(seed):
    bench = synthesize(n_systems=12, n_tasks=300, n_groups=8, seed=seed)
    rec = parse_records(to_csv(bench.rows))
    assert rec.systems == bench.systems
    scores = rec.scores()
    ab = bench.abilities
    # rank correlation between designed ability and observed score
    rank_ab = np.argsort(np.argsort(ab))
    rank_sc = np.argsort(np.argsort(scores))
    assert np.corrcoef(rank_ab, rank_sc)[0, 1] > 0.85
    # every pair clearly apart in ability is ordered the same way by score
    for i, j in combinations(range(len(ab)), 2):
        if abs(ab[i] - ab[j]) > 0.8:
            assert (scores[i] - scores[j]) * (ab[i] - ab[j]) > 0, (bench.systems[i], bench.systems[j])
    # graded: both near-ties and far-apart pairs exist
    gaps = np.abs(ab[:, None] - ab[None, :])[np.triu_indices(len(ab), 1)]
    assert gaps.min() < 0.2 and gaps.max() > 2.5
    assert scores.max() - scores.min() > 0.4
    # observed scores stay near the model's expected scores
    assert np.max(np.abs(scores - bench.expected_scores())) < 0.1


@pytest.mark.parametrize("seed", range(5))
def test_group_sizes_are_uneven_and_all_nonempty(seed):
    bench = synthesize(n_systems=3, n_tasks=300, n_groups=8, seed=seed)
    rec = parse_records(to_csv(bench.rows))
    idx, names = group_labels(rec, "group")
    sizes = np.bincount(idx, minlength=len(names))
    assert len(names) == 8 and sizes.min() >= 1 and sizes.sum() == 300
    assert sorted(sizes.tolist(), reverse=True) == list(bench.group_sizes)
    assert sizes.max() >= 3 * sizes.min()


def test_every_group_has_a_task_when_groups_equal_tasks():
    bench = synthesize(n_systems=2, n_tasks=5, n_groups=5, seed=0)
    assert bench.group_sizes == (1, 1, 1, 1, 1)


def test_difficulty_is_heterogeneous():
    bench = synthesize(seed=0)
    rec = parse_records(to_csv(bench.rows))
    solve = rec.y.mean(axis=0)
    assert (solve == 0).sum() > 10  # tasks nobody solves
    assert (solve == 1).sum() > 0 or (solve > 0.9).sum() > 5  # tasks nearly everyone solves
    assert set(rec.metadata["difficulty"]) == {"easy", "medium", "hard"}


def test_trials_give_several_rows_per_task():
    rows = generate(n_systems=3, n_tasks=40, n_groups=4, trials=4, seed=2)
    assert len(rows) == 3 * 40 * 4
    rec = parse_records(to_csv(rows))
    assert np.all(rec.trials == 4)
    assert not rec.single_trial and rec.binary
    # repeats are one case: y is the mean over trials, so fractions appear
    assert np.any((rec.y > 0) & (rec.y < 1))


def test_fractional_outcomes():
    rows = generate(n_systems=3, n_tasks=40, n_groups=4, seed=2, fractional=True, fraction_of=5)
    values = {r["outcome"] for r in rows}
    assert values <= {0.0, 0.2, 0.4, 0.6, 0.8, 1.0}
    assert not parse_records(to_csv(rows)).binary


def test_costs_non_negative_and_optional():
    rows = generate(seed=4, trials=2)
    costs = np.array([r["cost"] for r in rows])
    assert np.all(np.isfinite(costs)) and np.all(costs >= 0)
    assert costs.max() / np.median(costs) > 5  # heavy-tailed like real per-instance costs
    no_cost = generate(seed=4, cost=False)
    assert all("cost" not in r for r in no_cost)
    assert "cost" not in to_csv(no_cost).splitlines()[0].split(",")
    assert np.all(np.isnan(parse_records(to_csv(no_cost)).cost))


def test_costs_grow_with_difficulty():
    bench = synthesize(seed=5)
    rec = parse_records(to_csv(bench.rows))
    task_cost = np.nanmean(np.log(rec.cost), axis=0)
    assert np.corrcoef(bench.difficulties, task_cost)[0, 1] > 0.3


def test_missing_cells():
    rows = generate(n_systems=5, n_tasks=100, n_groups=4, seed=0, missing=0.1)
    rec = parse_records(to_csv(rows))
    assert 0.8 < rec.observed.mean() < 0.97


@pytest.mark.parametrize(
    "kwargs",
    [dict(n_systems=1), dict(n_tasks=3, n_groups=4), dict(trials=0), dict(n_groups=0), dict(missing=1.0)],
)
def test_rejects_bad_arguments(kwargs):
    with pytest.raises(ValueError):
        generate(**kwargs)


def test_cli_round_trip(tmp_path, capsys):
    out = tmp_path / "bench.csv"
    args = ["synth", "--systems", "5", "--tasks", "60", "--groups", "4", "--trials", "2", "--seed", "9"]
    assert main([*args, "--out", str(out)]) == 0
    rec = parse_records(out.read_bytes(), filename=str(out))
    assert rec.n_systems == 5 and rec.n_tasks == 60 and np.all(rec.trials == 2)
    assert out.read_text() == to_csv(generate(n_systems=5, n_tasks=60, n_groups=4, trials=2, seed=9))
    capsys.readouterr()

    assert main([*args, "--format", "jsonl", "--no-cost"]) == 0
    text = capsys.readouterr().out
    first = json.loads(text.splitlines()[0])
    assert "cost" not in first and first["trial"] == 0
    rec2 = parse_records(text, "jsonl")
    np.testing.assert_array_equal(rec.y, rec2.y)


def test_cli_jsonl_from_extension_and_bad_args(tmp_path, capsys):
    out = tmp_path / "bench.jsonl"
    assert main(["synth", "--systems", "2", "--tasks", "10", "--groups", "2", "--out", str(out)]) == 0
    assert out.read_text().startswith("{")
    assert main(["synth", "--tasks", "3", "--groups", "5"]) == 2
    assert "n_groups" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["synth", "--systems", "1"])
