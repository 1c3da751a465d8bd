"""Work a forecast holds at once: its paths are drawn by blocks of rows and ``anytime_eb``'s walk
reads them by segments of steps; neither may change a number (one stream split by rows, the
same arithmetic per step)."""

from __future__ import annotations

import numpy as np
import pytest

from service.engine import answers
from service.engine import rules as R


def _forecasts(rule: str, lattice: int | None) -> list[dict | None]:
    rng = np.random.default_rng(5)
    out = []
    for k, n, edge in ((40, 900, 0.55), (200, 2_500, 0.5), (7, 300, 0.7)):
        d = (rng.random(k) < edge).astype(float) - (rng.random(k) < 0.5).astype(float)
        if lattice is None:
            d = np.clip(d + rng.normal(0, 0.05, k), -1, 1)
        elif lattice > 1:
            d = np.round(d * rng.integers(1, lattice + 1, k) / lattice * lattice) / lattice
        ahead = None if rule.startswith("anytime") else [(p, 0.05) for p in (k + 5, n // 3, n)]
        out.append(answers.forecast(rule, d, n, 0.0, 0.05, lattice, n, np.random.default_rng(k), ahead))
    return out


@pytest.mark.parametrize(("rule", "lattice"), [("anytime", 1), ("anytime", None), ("anytime_eb", 1),
                                                ("anytime_eb", 3), ("bootstrap", 1), ("paired_normal", 2)])
def test_blocks_of_rows_give_the_forecast_of_one_block(monkeypatch, rule, lattice):
    monkeypatch.setattr(answers, "FORECAST_CELLS", 10**9)
    whole = _forecasts(rule, lattice)
    assert all(f is not None for f in whole)
    assert len({f["expected_more_tasks"] for f in whole}) == 3  # the cases differ
    monkeypatch.setattr(answers, "FORECAST_CELLS", 700)  # a row or less per block
    assert _forecasts(rule, lattice) == whole
    monkeypatch.setattr(answers, "FORECAST_CELLS", 9_000)  # blocks of uneven rows
    assert _forecasts(rule, lattice) == whole


def test_anytime_eb_segments_of_steps_give_one_pass(monkeypatch):
    rng = np.random.default_rng(8)
    v = rng.integers(-2, 3, size=(60, 500)) + (rng.random((60, 500)) < 0.3)
    cov = np.arange(500)[None, :] >= rng.integers(0, 200, size=(60, 1))
    whole = R.anytime_paths(v, 2, 1_000, [0.0, 0.1], 0.05, 480, cov)
    assert len(np.unique(whole[1])) > 10
    monkeypatch.setattr(R, "_EB_SEGMENT", 7)
    got = R.anytime_paths(v, 2, 1_000, [0.0, 0.1], 0.05, 480, cov)
    np.testing.assert_array_equal(got[0], whole[0])
    np.testing.assert_array_equal(got[1], whole[1])


@pytest.mark.parametrize("lattice", [1, 2, None])
def test_anytime_eb_forecast_is_the_step_loop_s(lattice):
    """The forecast walks each ``anytime_eb`` path by prefix sums; the stops are those of
    ``rules.anytime_paths``' step loop over the same drawn paths, to the step."""
    rng = np.random.default_rng(2)
    k, n = 25, 3_000
    d = (rng.random(k) < 0.6).astype(float) - (rng.random(k) < 0.45).astype(float)
    if lattice == 2:
        d = d / 2.0
    elif lattice is None:
        d = np.clip(d + rng.normal(0, 0.05, k), -1, 1)
    got = answers.forecast("anytime_eb", d, n, 0.0, 0.05, lattice, n, np.random.default_rng(9))
    v = np.round(d * lattice).astype(np.int64) if lattice else d
    draw = np.random.default_rng(9)
    paths = np.concatenate([np.tile(v, (answers.FORECAST_PATHS, 1)),
                            v[draw.integers(0, k, size=(answers.FORECAST_PATHS, n - k))]], axis=1)
    _, stop = R.anytime_paths(paths, lattice, n, 0.0, 0.05, n)
    more = np.minimum(stop, n) - k
    assert got["expected_more_tasks"] == pytest.approx(float(more.mean()), abs=0)
    assert got["conclude_share"] == float((stop <= n).mean()) and 0 < got["p10"] < got["p90"]
