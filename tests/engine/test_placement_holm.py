"""A placement's Holm step-down (SPEC §8.1) against the round-by-round procedure it replaces:
every open comparison run again at ``a / (S - r)`` until a round concludes nothing. ``anytime``
must give the same decisions, stops and levels from one walk per comparison; ``anytime_eb``
must stop stepping down after ``EB_STEP_DOWN_ROUNDS`` rounds."""

from __future__ import annotations

import numpy as np
import pytest

from service.engine import placement as P
from service.engine import rules as R
from service.engine.live import LiveSpec, _coverage_path, make_live_spec, make_universe, rule_verdict
from service.engine.records import from_rows, group_labels
from service.engine.synth import generate
from tests.engine.placement_reference import round_by_round


def _prefix_entry(universe, y, seq):
    ye = np.full(universe.n, np.nan)
    ye[seq] = y[seq]
    trials = np.zeros(universe.n, dtype=np.int64)
    trials[seq] = 1
    return P.Entry(ye, trials, np.asarray(seq, dtype=np.intp))


def _staggered(rule, s_count=20, n=300, k=150, a=0.05, seed=3):
    """A board built so that Holm concludes one comparison per round: system ``i`` (1-based)
    concludes at ``a / (S - i + 1)`` and not at ``a / (S - i + 2)``, found by running the rule
    on random perturbations of the entry (the search uses ``rule_verdict`` only)."""
    rng = np.random.default_rng(seed)
    universe = make_universe([f"t{i}" for i in range(n)])
    spec = make_live_spec(rule=rule, a=a, floor="proportional", coverage_aware=False)
    y_entry = (rng.random(n) < 0.6).astype(float)
    seq = np.arange(k)

    def concludes(y, level):
        s = LiveSpec(rule, 0.0, level, spec.floor, coverage_aware=False)
        return rule_verdict(s, y_entry[seq] - y[seq], n, 1)[0] != R.DEFER

    rows = []
    for _ in range(400 * s_count):
        i = len(rows) + 1
        if i > s_count:
            break
        y = y_entry.copy()
        m = int(rng.integers(5, n // 2))
        idx = rng.choice(n, size=m, replace=False)
        y[idx] = (rng.random(m) < rng.uniform(0.0, 1.0)).astype(float)
        if concludes(y, a / (s_count - i + 1)) and (i == 1 or not concludes(y, a / (s_count - i + 2))):
            rows.append(y)
    assert len(rows) == s_count
    board = P.Board(tuple(f"s{j}" for j in range(s_count)), np.array(rows))
    return universe, board, _prefix_entry(universe, y_entry, seq), spec


def _same(universe, board, entry, spec, correction):
    dec, stop, levels, rounds = round_by_round(universe, board, entry, spec, correction)
    cov = None
    if spec.coverage_aware and len(entry.sequence):
        cov = _coverage_path(universe.labels[entry.sequence], universe.n_g, spec.floor, len(entry.sequence))
    got = P._decide(entry, board, cov, spec, correction)
    np.testing.assert_array_equal(got[0], dec)
    np.testing.assert_array_equal(got[1], stop)
    np.testing.assert_array_equal(got[2], levels)  # the same floats: levels are a / (S - r)
    return rounds, int((dec != R.DEFER).sum())


def test_anytime_step_down_on_a_board_that_concludes_one_comparison_per_round():
    universe, board, entry, spec = _staggered("anytime")
    rounds, concluded = _same(universe, board, entry, spec, "holm")
    assert rounds == 20 and concluded == 20  # one conclusion per round
    _same(universe, board, entry, spec, "bonferroni")


@pytest.mark.parametrize("trials", [1, 3])
@pytest.mark.parametrize("coverage_aware", [True, False])
def test_anytime_step_down_equals_the_rounds_on_synthetic_boards(trials, coverage_aware):
    """Held-out systems of synthetic boards with groups (3 trials: fractional means on a lattice),
    at several prefixes of the placement order, both corrections."""
    rec = from_rows(generate(n_systems=16, n_tasks=240, n_groups=6, trials=trials, seed=21 + trials))
    labels, names = group_labels(rec, "group")
    universe = make_universe(rec.tasks, [names[i] for i in labels.tolist()])
    y = np.where(rec.observed, rec.y, np.nan)
    spec = make_live_spec(rule="anytime", a=0.05, floor="proportional", coverage_aware=coverage_aware)
    stepped = concluded = 0
    for h in range(0, rec.n_systems, 3):
        keep = [i for i in range(rec.n_systems) if i != h]
        board = P.Board(tuple(rec.systems[i] for i in keep), y[keep])
        order = P.placement_order(universe, board, spec.floor, h)
        for k in (0, 1, 30, 90, 160, 240):
            entry = _prefix_entry(universe, y[h], order[:k])
            for correction in P.CORRECTIONS:
                rounds, c = _same(universe, board, entry, spec, correction)
                stepped += rounds > 2
                concluded += c
    assert stepped and concluded  # the boards exercise the step-down, not only its first round


def test_anytime_walks_each_comparison_once(monkeypatch):
    universe, board, entry, spec = _staggered("anytime")
    walks = []
    real = P.anytime_strengths
    monkeypatch.setattr(P, "anytime_strengths", lambda *a, **k: walks.append(1) or real(*a, **k))
    monkeypatch.setattr(P, "rule_verdict", None)  # anytime never runs the rule per level
    P._decide(entry, board, None, spec, "holm")
    assert len(walks) == len(board.systems)


def test_anytime_eb_stops_stepping_down_after_its_rounds(monkeypatch):
    """On a board that concludes one comparison per round, ``anytime_eb`` runs the rule at most
    ``S × (1 + EB_STEP_DOWN_ROUNDS)`` times, concluding what the first rounds of Holm conclude
    (a subset of Holm's conclusions, so the family error stays at ``a``)."""
    universe, board, entry, spec = _staggered("anytime_eb")
    s_count = len(board.systems)
    full_dec, _, _, full_rounds = round_by_round(universe, board, entry, spec, "holm")
    assert full_rounds == s_count and (full_dec != R.DEFER).all()  # the board needs every round
    cap = P.EB_STEP_DOWN_ROUNDS
    dec, stop, levels, _ = round_by_round(universe, board, entry, spec, "holm", max_rounds=cap)
    runs = []
    real = P.rule_verdict
    monkeypatch.setattr(P, "rule_verdict", lambda *a, **k: runs.append(1) or real(*a, **k))
    got = P._decide(entry, board, None, spec, "holm")
    assert len(runs) <= s_count * (1 + cap) < s_count * (s_count + 1) // 2
    np.testing.assert_array_equal(got[0], dec)
    np.testing.assert_array_equal(got[1], stop)
    np.testing.assert_array_equal(got[2], levels)
    concluded = got[0] != R.DEFER
    assert concluded.sum() == cap + 1  # one per round
    np.testing.assert_array_equal(got[0][concluded], full_dec[concluded])


@pytest.mark.parametrize("rule", ["anytime", "anytime_eb"])
def test_a_level_that_rounds_to_zero_concludes_only_what_is_certain(rule):
    """``a / S`` underflows to 0 at ``a = 5e-324`` (the API's ``a > 0`` allows it): no comparison
    concludes on evidence, one that no completion can change still does (ln(1/0) was a 500)."""
    universe = make_universe([f"t{i}" for i in range(40)])
    y_entry = np.ones(40)
    board = P.Board(("zero", "half"), np.array([np.zeros(40), np.r_[np.ones(20), np.zeros(20)]]))
    spec = make_live_spec(rule=rule, a=0.5, floor="proportional", coverage_aware=False)
    spec = LiveSpec(rule, 0.0, 5e-324, spec.floor, coverage_aware=False)
    for k, certain in ((10, 0), (25, 1), (35, 2)):  # no completion can undo 25 wins of 40, nor 15 of 40
        entry = _prefix_entry(universe, y_entry, np.arange(k))
        for correction in P.CORRECTIONS:
            dec, _, levels = P._decide(entry, board, None, spec, correction)
            assert (dec != R.DEFER).sum() == certain and (levels <= 5e-324).all()
