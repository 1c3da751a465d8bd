"""``betting.confidence_sequence`` finds the hull of the kept means by testing blocks inwards
from both ends of its grid; that must give exactly what testing the whole grid at once gives
(the straightforward form, written out here), on binary, lattice and continuous runs."""

from __future__ import annotations

import numpy as np

from service.engine import betting


def _whole_grid(x: np.ndarray, n: int, a: float, grid: int = 256) -> tuple[float, float]:
    t, s_t = len(x), float(x.sum())
    lo_any, hi_any = s_t / n, (s_t + n - t) / n
    if hi_any - lo_any <= 1e-12:
        return lo_any, hi_any
    mus = np.linspace(lo_any, hi_any, grid)
    inside = np.flatnonzero(~betting._excluded(x, n, mus, a))
    if not len(inside):
        m = min(max(s_t / t, lo_any), hi_any)
        return m, m

    def refine(good: float, bad: float) -> float:
        for _ in range(3):
            pts = np.linspace(good, bad, 66)[1:-1]
            out = betting._excluded(x, n, pts, a)
            j = int(np.argmax(out)) if out.any() else len(pts)
            good, bad = (pts[j - 1] if j else good), (pts[j] if j < len(pts) else bad)
        return float(good)

    first, last = int(inside[0]), int(inside[-1])
    lower = lo_any if first == 0 else refine(float(mus[first]), float(mus[first - 1]))
    upper = hi_any if last == grid - 1 else refine(float(mus[last]), float(mus[last + 1]))
    return lower, upper


def test_block_search_equals_the_whole_grid() -> None:
    rng = np.random.default_rng(7)
    seen_edge = 0
    for trial in range(150):
        k = int(rng.integers(1, 300))
        n = k + int(rng.integers(0, 400))
        a = (0.05, 0.01, 0.1, 0.3)[trial % 4]
        kind = trial % 3
        if kind == 0:
            d = (rng.random(k) < rng.uniform(0.2, 0.9)).astype(float) - (rng.random(k) < 0.5)
        elif kind == 1:
            d = rng.integers(-4, 5, k) / 4
        else:
            d = np.round(rng.uniform(-1, 1, k), 5)
        x = (d + 1.0) / 2.0
        got = betting.confidence_sequence(x, n, a)
        assert got == _whole_grid(x, n, a), (trial, k, n, a)
        seen_edge += n == k or got[0] == x.sum() / n
    assert seen_edge > 0  # ends at the completion bounds were exercised too
