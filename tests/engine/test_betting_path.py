"""``betting.betting_path`` (one live sequence, with and without the coverage mask, in one pass)
gives what ``betting_paths`` (checked against the literal reference in test_betting.py) gives
for each mask, and its wealth at the stop is ``betting_statistic``'s; the live answer's
``anytime`` statistic is that wealth."""

from __future__ import annotations

import math

import numpy as np
import pytest

from service.engine import betting
from service.engine.live import live_from_arrays

A = 0.05


def _random_path(rng: np.random.Generator, trial: int) -> tuple[int, int, int | None, np.ndarray]:
    """``k`` steps of ``N``, the lattice (None: off any) and the values, leaning upwards."""
    k = int(rng.integers(1, 250))
    n = k + int(rng.integers(0, 300))
    lattice = (None, 1, 2, 3)[trial % 4]
    if lattice is None:
        v = np.round(rng.uniform(-1, 1, k) + rng.uniform(0, 0.6), 4).clip(-1, 1)
    else:
        v = np.clip(rng.integers(-lattice, lattice + 1, k) + (rng.random(k) < 0.4) * lattice, -lattice, lattice)
    return k, n, lattice, v


def test_one_pass_equals_betting_paths_with_and_without_the_mask() -> None:
    rng = np.random.default_rng(12)
    concluded = masked_later = 0
    for trial in range(200):
        k, n, lattice, v = _random_path(rng, trial)
        theta = float(rng.choice([0.0, 0.05, -0.1]))
        cov = np.arange(k) >= int(rng.integers(0, k + 1))  # coverage met from some step on
        path = betting.betting_path(v, lattice, n, theta, A, cov)
        dec, stop = betting.betting_paths(v[None, :], lattice, n, theta, A, k, cov[None, :])
        free, free_stop = betting.betting_paths(v[None, :], lattice, n, theta, A, k)
        assert (path.decision, path.stop, path.free_decision) == (int(dec[0]), int(stop[0]), int(free[0])), trial
        unmasked = betting.betting_path(v, lattice, n, theta, A)
        assert (unmasked.decision, unmasked.stop) == (int(free[0]), int(free_stop[0]))
        d = v / (lattice or 1)
        t = min(int(stop[0]), k)
        if lattice in (None, 1):  # the same X as the statistic's: the same wealth
            stat = betting.betting_statistic(d, n, theta, A, t)
            assert (path.log_up[t - 1], path.log_down[t - 1]) == (stat["log_wealth_up"], stat["log_wealth_down"])
        concluded += int(dec[0]) != 0
        masked_later += int(stop[0]) > int(free_stop[0])
    assert concluded > 20 and masked_later > 5


def test_the_live_statistic_is_the_wealth_at_the_stop() -> None:
    rng = np.random.default_rng(2)
    ids = [f"t{i}" for i in range(300)]
    groups = [f"g{i % 5}" for i in range(300)]
    seen = [ids[i] for i in rng.permutation(300)[:160]]
    a = [float(rng.random() < 0.75) for _ in seen]
    b = [float(rng.random() < 0.45) for _ in seen]
    out = live_from_arrays(ids, groups, a, b, seen, rule="anytime", delta=0)
    stop = out["statistic"]["stopped_at"]
    assert out["decision"] == "accept" and isinstance(stop, int)
    d = np.array(a) - np.array(b)
    stat = betting.betting_statistic(d, 300, 0.0, A, stop)
    assert out["statistic"]["log_wealth_up"] == float(f"{stat['log_wealth_up']:.12g}")
    assert out["statistic"]["log_wealth_down"] == float(f"{stat['log_wealth_down']:.12g}")


def _random_paths(rng: np.random.Generator, trial: int) -> tuple[int | None, int, int, int, np.ndarray]:
    """``(lattice, kmax, n, cases, v)``: paths on no lattice and on lattices of step 1, 1/2 and
    1/5 in turn, of random lengths, counts and value frequencies (some conclude at once, some never)."""
    lattice = (None, 1, 2, 5)[trial % 4]
    scale = lattice or 1
    kmax = int(rng.integers(1, 120))
    n = kmax + int(rng.integers(0, 80))
    cases = int(rng.integers(1, 50))
    vals = np.arange(-scale, scale + 1)
    v = rng.choice(vals, size=(cases, kmax), p=rng.dirichlet(np.ones(len(vals)) * 0.7)).astype(np.float64)
    if lattice is None:
        v = np.round(v + rng.uniform(-0.3, 0.3, v.shape), 3).clip(-1, 1)
    return lattice, kmax, n, cases, v


def test_segments_give_what_one_pass_gives(monkeypatch) -> None:
    """numpy's ``betting_paths`` advances many paths ``SEGMENT`` steps at a time and drops those that
    have concluded for every threshold: decisions and stops equal one segment over the whole
    path, with several thresholds, per-path and shared coverage masks, and paths that conclude
    in the first segment, in later ones and never."""
    rng = np.random.default_rng(4)
    for trial in range(60):
        lattice, kmax, n, cases, v = _random_paths(rng, trial)
        thetas = [0.0, 0.05, -0.1] if trial % 2 else 0.02
        cov = None if trial % 3 == 0 else (rng.random((1 if trial % 3 == 1 else cases, kmax)) < 0.85)
        monkeypatch.setattr(betting, "SEGMENT", 7)
        monkeypatch.setattr(betting, "_COLUMN_SUMS_FROM", (0, 10**9)[trial % 2])  # both ways of summing
        got = betting.betting_paths(v, lattice, n, thetas, A, kmax, cov, compiled=False)
        monkeypatch.setattr(betting, "SEGMENT", 10**6)
        monkeypatch.setattr(betting, "_COLUMN_SUMS_FROM", 10**9)
        want = betting.betting_paths(v, lattice, n, thetas, A, kmax, cov, compiled=False)
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1]), trial


def test_column_sums_are_cumsum_to_the_bit() -> None:
    """``_carried`` adds column by column from ``_COLUMN_SUMS_FROM`` rows: the same values as
    one ``cumsum`` per row, on sums that round (random reals), in place or not."""
    rng = np.random.default_rng(8)
    for rows in (betting._COLUMN_SUMS_FROM, 3 * betting._COLUMN_SUMS_FROM + 1):
        x = rng.normal(size=(rows, 16)) * 10.0 ** rng.integers(-8, 8, size=(rows, 1))
        start = rng.normal(size=rows)
        want = np.cumsum(np.concatenate([start[:, None], x], axis=1), axis=1)[:, 1:]
        assert np.array_equal(betting._carried(start, x), want)
        assert np.array_equal(betting._carried(start, x.copy(), scratch=True), want)


def test_the_compiled_walk_gives_what_numpy_gives() -> None:
    """The compiled walk (each path left at its first conclusion for every threshold) concludes
    per path and threshold where numpy's walk of many paths does, and where numpy's arithmetic
    over the whole of one path (``betting_path``) does, with several thresholds,
    per-path and shared coverage masks, lattices and real differences, and paths that conclude
    at once, later and never."""
    rng = np.random.default_rng(4)
    concluded = open_ = 0
    for trial in range(60):
        lattice, kmax, n, cases, v = _random_paths(rng, trial)
        thetas = [0.0, 0.05, -0.1] if trial % 2 else [0.02]
        cov = None if trial % 3 == 0 else (rng.random((1 if trial % 3 == 1 else cases, kmax)) < 0.85)
        dec, stop = betting.betting_paths(v, lattice, n, thetas, A, kmax, cov)
        numpy_walk = betting.betting_paths(v, lattice, n, thetas, A, kmax, cov, compiled=False)
        assert np.array_equal(dec, numpy_walk[0]) and np.array_equal(stop, numpy_walk[1]), trial
        for j, theta in enumerate(thetas):
            for p in range(cases):
                mask = None if cov is None else cov[0 if len(cov) == 1 else p]
                path = betting.betting_path(v[p], lattice, n, theta, A, mask)
                assert (int(dec[j, p]), int(stop[j, p])) == (path.decision, path.stop), (trial, j, p)
                concluded += path.decision != 0
                open_ += path.decision == 0
    assert concluded > 300 and open_ > 300


def test_paths_past_kmax_and_mask_rows() -> None:
    """Steps past ``kmax`` are not read, integer values walk as their floats do, and a mask
    with neither one row nor a row per path is refused."""
    rng = np.random.default_rng(9)
    v = rng.integers(-1, 2, size=(20, 80))
    short = betting.betting_paths(v, 1, 100, 0.0, A, 50)
    assert all(np.array_equal(x, y) for x, y in
               zip(short, betting.betting_paths(v[:, :50].astype(float), 1, 100, 0.0, A, 50), strict=True))
    with pytest.raises(ValueError, match="3 rows for 20 paths"):
        betting.betting_paths(v, 1, 100, 0.0, A, 50, np.ones((3, 50), dtype=bool))


def test_strengths_give_every_level_s_first_conclusion() -> None:
    """``conclusion_strengths``: at each level ``a``, the first step whose strength is
    ``>= ln(1/a)`` is ``betting_paths``' decision and stop at ``a`` (to the step)."""
    rng = np.random.default_rng(31)
    seen = set()
    for trial in range(150):
        k, n, lattice, v = _random_path(rng, trial)
        v = v if rng.random() < 0.5 else -v  # both directions
        theta = float(rng.choice([0.0, 0.05, -0.1]))
        cov = None if trial % 3 == 0 else np.arange(k) >= int(rng.integers(0, k + 1))
        accepts, strength = betting.conclusion_strengths(v, lattice, n, theta, cov)
        for a in (0.2, 0.05, 0.05 / 7, 0.05 / 300, 1e-9):
            mask = None if cov is None else cov[None, :]
            dec, stop = betting.betting_paths(v[None, :], lattice, n, theta, a, k, mask)
            hit = strength >= math.log(1.0 / a)
            if hit.any():
                t = int(np.argmax(hit))
                got = (betting.ACCEPT if accepts[t] else betting.REJECT, t + 1)
            else:
                got = (betting.DEFER, k + 1)
            assert got == (int(dec[0]), int(stop[0])), (trial, a)
            seen.add(got[0])
    assert seen == {betting.ACCEPT, betting.REJECT, betting.DEFER}
