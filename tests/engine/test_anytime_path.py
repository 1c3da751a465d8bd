"""The one-path anytime kernel (``service.engine.anytime``) against the replay's kernel
(``rules.anytime_paths``): the same decision at the same step, exactly, on random paths."""

from __future__ import annotations

import numpy as np
import pytest

from service.engine import rules as R
from service.engine.anytime import anytime_path


def _paths(rng: np.random.Generator, kind: str, cases: int, k: int) -> tuple[np.ndarray, int | None]:
    if kind == "binary":
        p = rng.uniform(0.2, 0.8, (cases, 1))
        return (rng.random((cases, k)) < p).astype(np.int64) - (rng.random((cases, k)) < 0.5), 1
    if kind == "lattice":  # differences of means of 4 trials: multiples of 1/4
        return rng.integers(-4, 5, (cases, k)), 4
    return np.round(rng.uniform(-1, 1, (cases, k)) + rng.normal(0.1, 0.2, (cases, 1)), 6).clip(-1, 1), None


@pytest.mark.parametrize("kind", ["binary", "lattice", "continuous"])
@pytest.mark.parametrize("with_coverage", [False, True])
def test_one_path_equals_the_replay_kernel(kind: str, with_coverage: bool) -> None:
    rng = np.random.default_rng(13 + len(kind) + with_coverage)
    cases, k = 90, 300
    v, lattice = _paths(rng, kind, cases, k)
    seen = {R.ACCEPT: 0, R.REJECT: 0, R.DEFER: 0}
    for theta, a, n in ((0.0, 0.05, 500), (0.05, 0.1, 1000), (-0.03, 0.01, 400)):
        cov = rng.random((cases, k)) < 0.9 if with_coverage else None
        dec, stop = R.anytime_paths(v, lattice, n, theta, a, k, cov)
        for c in range(cases):
            kmax = int(rng.integers(1, k + 1)) if c % 3 == 0 else k  # a shorter prefix too
            want = (
                (int(dec[c]), int(stop[c]))
                if kmax == k
                else tuple(
                    int(x[0])
                    for x in R.anytime_paths(
                        v[c : c + 1], lattice, n, theta, a, kmax, None if cov is None else cov[c : c + 1]
                    )
                )
            )
            got = anytime_path(v[c], lattice, n, theta, a, kmax, None if cov is None else cov[c])
            assert got == want, (kind, theta, a, n, c, kmax)
            seen[got[0]] += 1
    assert min(seen.values()) > 0, seen  # every outcome was exercised
