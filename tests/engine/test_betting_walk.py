"""A replay walks its ``anytime`` paths compiled from ``betting.COMPILED_WALK_FROM`` path-steps
(each pair read in each order in place, ``betting_walks``) and with numpy's walk below: the
two give the same report, on 0/1, fractional and real-valued records, with and without the
coverage floors, at several thresholds, and the choice is the replay's, not a chunk's."""

from __future__ import annotations

import json

import numpy as np
import pytest

from service.engine import betting, chunk
from service.engine.records import from_rows
from service.engine.replay import run_replay
from service.engine.spec import make_spec
from service.engine.synth import generate

POLICIES = ["anytime_coverage", "order=uniform,rule=anytime"]


def _real_valued(rows: list[dict]) -> list[dict]:
    rng = np.random.default_rng(3)
    return [{**r, "outcome": float(np.clip(r["outcome"] * 0.6 + rng.random() * 0.4, 0, 1))} for r in rows]


@pytest.mark.parametrize("kind", ["binary", "fractional", "real"])
def test_compiled_and_numpy_walks_give_the_same_report(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    rows = generate(6, 80, 4, seed=5, fractional=kind == "fractional")
    records = from_rows(_real_valued(rows) if kind == "real" else rows)
    assert records.binary_single_trial == (kind == "binary")
    spec = make_spec(policies=POLICIES, deltas=[0, 3], orders=40, groups=[None, "group"])
    walked = []
    real = chunk.betting_walks
    monkeypatch.setattr(chunk, "betting_walks", lambda *a, **k: walked.append(1) or real(*a, **k))
    monkeypatch.setattr(betting, "COMPILED_WALK_FROM", 0)
    compiled = run_replay(records, spec, chunks=3)
    assert walked  # the compiled walk ran
    calls = len(walked)
    monkeypatch.setattr(betting, "COMPILED_WALK_FROM", 10**18)
    numpy_walk = run_replay(records, spec)
    assert len(walked) == calls  # and not here
    assert json.dumps(compiled, sort_keys=True) == json.dumps(numpy_walk, sort_keys=True)
    # the comparison bites: many cases concluded, each way, in every configuration
    for c in compiled["configurations"]:
        last = c["budgets"][-1]
        assert last["accept"] > 50 and last["reject"] > 50, (c["policy"], c["delta"])


def test_the_choice_is_the_replays_size() -> None:
    assert betting.compiled_walk(betting.COMPILED_WALK_FROM)
    assert not betting.compiled_walk(betting.COMPILED_WALK_FROM - 1)


def test_walks_refuse_a_coverage_of_another_shape() -> None:
    values = np.zeros((3, 10))
    order = np.tile(np.arange(10), (4, 1))
    with pytest.raises(ValueError, match="not \\[1 or 4, 10\\]"):
        betting.betting_walks(values, order, 1, 10, [0.0], 0.05, np.ones((3, 10), dtype=bool))
