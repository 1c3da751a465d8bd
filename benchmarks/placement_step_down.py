"""A placement read's Holm step-down: one walk per comparison (``placement.holm_levels``) against
the round-by-round procedure (every open comparison run again at ``a / (S - r)``), measured in
the same run on two boards:

* ``staggered``: a board built so that most rounds conclude one comparison (the worst case:
  about ``S`` rounds, ``S²/2`` runs of the rule), the entry observed on a third of the tasks;
* ``synthetic``: ``sufficiency synth``-like tiers, one system held out and observed on half the
  tasks in the placement order (what a harness sees mid-run).

    .venv/bin/python benchmarks/placement_step_down.py [--systems 240 --tasks 3000]

Both give the same decisions, stops and levels (checked here, and in
tests/engine/test_placement_holm.py).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from service.engine import placement as P  # noqa: E402
from service.engine.live import _coverage_path, make_live_spec, make_universe  # noqa: E402
from service.engine.records import from_rows, group_labels  # noqa: E402
from service.engine.synth import generate  # noqa: E402
from tests.engine.placement_reference import round_by_round  # noqa: E402


def prefix_entry(n, y, seq):
    ye = np.full(n, np.nan)
    ye[seq] = y[seq]
    trials = np.zeros(n, dtype=np.int64)
    trials[seq] = 1
    return P.Entry(ye, trials, np.asarray(seq, dtype=np.intp))


def staggered(s_count, n, a, seed=0):
    """Perturbations of the entry, chosen so that the i-th strongest concludes at ``a / (S-i+1)``
    and not before (strengths found from one walk each; candidates that fit no free slot are
    skipped, so a few rounds conclude more than one)."""
    rng = np.random.default_rng(seed)
    spec = make_live_spec(rule="anytime", a=a, floor="proportional", coverage_aware=False)
    y_entry = (rng.random(n) < 0.6).astype(float)
    universe = make_universe([f"t{i}" for i in range(n)])
    entry = prefix_entry(n, y_entry, np.arange(n // 3))
    cands = []
    best = []
    for _ in range(40 * s_count):
        y = y_entry.copy()
        m = int(rng.integers(5, n // 2))
        idx = rng.choice(n, size=m, replace=False)
        y[idx] = (rng.random(m) < rng.uniform(0.1, 0.9)).astype(float)
        common = P._common(entry, P.Board(("x",), y[None]), None, 0)
        best.append(float(np.fmax.reduce(P.anytime_strengths(spec, *common)[1])))
        cands.append(y)
    best = np.array(best)
    chosen: list[int] = []
    for i in range(1, s_count + 1):
        lo = math.log((s_count - i + 1) / a)
        hi = math.log((s_count - i + 2) / a) if i > 1 else np.inf
        fits = [int(c) for c in np.flatnonzero((best >= lo) & (best < hi)) if int(c) not in chosen]
        if fits:
            chosen.append(fits[0])
    board = P.Board(tuple(f"s{j}" for j in range(len(chosen))), np.array(cands)[chosen])
    return universe, board, entry, spec


def synthetic(s_count, n, groups, a):
    rec = from_rows(generate(n_systems=s_count + 1, n_tasks=n, n_groups=groups, seed=7))
    labels, names = group_labels(rec, "group")
    universe = make_universe(rec.tasks, [names[i] for i in labels.tolist()])
    y = np.where(rec.observed, rec.y, np.nan)
    held = s_count // 2
    keep = [i for i in range(rec.n_systems) if i != held]
    board = P.Board(tuple(rec.systems[i] for i in keep), y[keep])
    spec = make_live_spec(rule="anytime", a=a, floor="proportional", coverage_aware=True)
    order = P.placement_order(universe, board, spec.floor, 0)
    entry = prefix_entry(universe.n, y[held], order[: n // 2])
    return universe, board, entry, spec


def measure(name, universe, board, entry, spec):
    cov = None
    if spec.coverage_aware:
        cov = _coverage_path(universe.labels[entry.sequence], universe.n_g, spec.floor, len(entry.sequence))
    t0 = time.perf_counter()
    dec, stop, levels, rounds = round_by_round(universe, board, entry, spec, "holm")
    t_old = time.perf_counter() - t0
    t0 = time.perf_counter()
    got = P._decide(entry, board, cov, spec, "holm")
    t_new = time.perf_counter() - t0
    same = all(np.array_equal(x, y) for x, y in zip(got, (dec, stop, levels), strict=True))
    print(f"{name:10s} S={len(board.systems):4d} k={len(entry.sequence):5d} rounds={rounds:4d} "
          f"concluded={int((dec != 0).sum()):4d}  round by round {t_old:7.3f} s  one walk {t_new:7.3f} s  "
          f"ratio {t_new / t_old:.3f}  same={same}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--systems", type=int, default=240)
    ap.add_argument("--tasks", type=int, default=3000)
    ap.add_argument("--a", type=float, default=0.05)
    args = ap.parse_args()
    measure("staggered", *staggered(args.systems, args.tasks, args.a))
    measure("synthetic", *synthetic(134, 500, 12, args.a))


if __name__ == "__main__":
    main()
