"""A placement's Holm step-down as it was written before ``placement.holm_levels``: the rule run
at each round's level on every open comparison, until a round concludes nothing. Kept as the
reference for tests/engine/test_placement_holm.py and benchmarks/placement_step_down.py."""

from __future__ import annotations

import numpy as np

from service.engine import rules as R
from service.engine.live import LiveSpec, _coverage_path, rule_verdict


def round_by_round(universe, board, entry, spec, correction, max_rounds=None):
    """The step-down as it was written before ``holm_levels``: the rule run at each round's
    level on every open comparison. Returns decisions, stops, levels and the rounds run."""
    s_count = len(board.systems)
    seq = entry.sequence
    cov = None
    if spec.coverage_aware and len(seq):
        cov = _coverage_path(universe.labels[seq], universe.n_g, spec.floor, len(seq))

    def verdicts(levels, todo):
        dec = np.zeros(s_count, dtype=np.int64)
        stop = np.zeros(s_count, dtype=np.int64)
        obs = board.observed
        for j in np.flatnonzero(todo).tolist():
            keep = obs[j, seq]
            pos = seq[keep]
            if not len(pos):
                continue
            d = entry.y[pos] - board.y[j, pos]
            both = np.concatenate([entry.y[pos], board.y[j, pos]])
            lat = 1 if np.array_equal(both, np.round(both)) else R.find_lattice(both)
            s = LiveSpec(spec.rule, 0.0, float(levels[j]), spec.floor, coverage_aware=spec.coverage_aware)
            v, stat = rule_verdict(s, d, int(obs[j].sum()), lat, None if cov is None else cov[keep])
            dec[j] = v
            stop[j] = stat.get("stopped_at") or 0
        return dec, stop

    levels = np.full(s_count, spec.a / s_count)
    dec, stop = verdicts(levels, np.ones(s_count, dtype=bool))
    rounds = 1
    while correction == "holm" and (max_rounds is None or rounds <= max_rounds):
        open_ = dec == R.DEFER
        r = s_count - int(open_.sum())
        if not open_.any() or r == 0:
            break
        levels = np.where(open_, spec.a / (s_count - r), levels)
        d2, s2 = verdicts(levels, open_)
        rounds += 1
        new = open_ & (d2 != R.DEFER)
        if not new.any():
            break
        dec = np.where(new, d2, dec)
        stop = np.where(new, s2, stop)
    return dec, stop, levels, rounds
