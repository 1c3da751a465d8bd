"""The binary tails' memo and blocked FFT (tails.tail_binary, tails.tail_lattice).

``tail_binary`` must give ``tail_trinomial``'s numbers (an independent closed form: a sum of
binomials) whether a tail comes from its dense table, is computed on a miss, goes through
the dict kept for large ``k``, or is met again after its table was evicted; ``tail_lattice``
must give the same bits however its rows are blocked (a replay's report must not depend on
which chunk met a sample first).
"""

from __future__ import annotations

import numpy as np
import pytest

from service.engine import rules as R
from service.engine import tail_tables
from service.engine import tails as T


def _keys(rng: np.random.Generator, ks: list[int], n: int):
    k = rng.choice(ks, n)
    a = rng.integers(0, k + 1)
    b = rng.integers(0, k - a + 1)
    c = rng.integers(-3, 4, n) + np.rint(0.02 * k).astype(int)  # thresholds near the middle
    return k, a, b, c


@pytest.fixture(autouse=True)
def fresh_memo(monkeypatch):
    monkeypatch.setattr(T, "_dense", type(T._dense)())
    monkeypatch.setattr(T, "_TAIL_MEMO", {})


def test_tail_binary_matches_the_closed_form_from_tables_misses_and_hits():
    rng = np.random.default_rng(1)
    k, a, b, c = _keys(rng, [5, 40, 300], 600)
    first = R.tail_binary(k, a, b, c)  # all misses: computed and stored
    np.testing.assert_allclose(first, R.tail_trinomial(k, a, b, c), rtol=0, atol=1e-11)
    assert len(T._dense) == len(set(zip(k.tolist(), c.tolist(), strict=True)))
    again = R.tail_binary(k[::-1], a[::-1], b[::-1], c[::-1])  # all hits, another order
    np.testing.assert_array_equal(again, first[::-1])
    filled = sum(int((~np.isnan(tail_tables.decode(t.cells))).sum()) for t in T._dense.values())
    assert filled == len(set(zip(k.tolist(), a.tolist(), b.tolist(), c.tolist(), strict=True)))


def test_tail_binary_past_the_dense_size_uses_the_dict(monkeypatch):
    monkeypatch.setattr(T, "_DENSE_MAX_K", 50)
    rng = np.random.default_rng(2)
    k, a, b, c = _keys(rng, [30, 120], 300)
    got = R.tail_binary(k, a, b, c)
    np.testing.assert_allclose(got, R.tail_trinomial(k, a, b, c), rtol=0, atol=1e-11)
    assert {kk for kk, _c in T._dense} == {30}
    assert T._TAIL_MEMO and {key[0] for key in T._TAIL_MEMO} == {120}
    np.testing.assert_array_equal(R.tail_binary(k, a, b, c), got)


def test_the_dict_memo_keeps_at_most_its_entries_under_threads(monkeypatch):
    """Samples past the dense size go through ``_TAIL_MEMO``, bounded by ``_MEMO_ENTRIES``
    (at 4 M entries it took 1.17 GB of a replay): blocks with more new samples than room, and
    threads filling it at once, still get every value right and leave it within the bound."""
    from concurrent.futures import ThreadPoolExecutor

    monkeypatch.setattr(T, "_DENSE_MAX_K", 50)
    monkeypatch.setattr(T, "_MEMO_ENTRIES", 150)
    rng = np.random.default_rng(6)
    blocks = [_keys(rng, [60, 90], 400) for _ in range(12)]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda b: R.tail_binary(*b), blocks))
    assert 0 < len(T._TAIL_MEMO) <= 150
    for b, g in zip(blocks, got, strict=True):
        np.testing.assert_allclose(g, R.tail_trinomial(*b), rtol=0, atol=1e-11)
        np.testing.assert_array_equal(R.tail_binary(*b), g)  # hits and misses give the same bits
    assert len(T._TAIL_MEMO) <= 150


def test_evicted_tables_are_computed_again_to_the_same_numbers(monkeypatch):
    monkeypatch.setattr(T, "_DENSE_BYTES", 8 * 41 * 41)  # room for one table of k = 40
    rng = np.random.default_rng(3)
    k, a, b, c = _keys(rng, [40], 200)
    c = np.where(np.arange(200) % 2 == 0, 0, 1)  # two tables at k = 40: the first is evicted
    got = R.tail_binary(k, a, b, c)
    assert len(T._dense) == 1
    np.testing.assert_array_equal(R.tail_binary(k, a, b, c), got)
    np.testing.assert_allclose(got, R.tail_trinomial(k, a, b, c), rtol=0, atol=1e-11)


@pytest.mark.parametrize("block", [1 << 9, 1 << 12, 1 << 20])
def test_tail_lattice_gives_the_same_bits_however_rows_are_blocked(monkeypatch, block):
    rng = np.random.default_rng(4)
    k, a, b, c = _keys(rng, [17, 200, 333], 500)
    hist = np.stack([b, k - a - b, a], axis=1)
    values = np.array([-1, 0, 1])
    base = R.tail_lattice(hist, values, c)
    monkeypatch.setattr(T, "_FFT_BLOCK", block)
    np.testing.assert_array_equal(R.tail_lattice(hist, values, c), base)
    np.testing.assert_array_equal(R.tail_lattice(hist[::-1], values, c[::-1]), base[::-1])


@pytest.mark.parametrize("nfft", [4, 64, 1024])
def test_cdf_weights_sum_a_spectrum_as_its_inverse_transform_then_a_running_sum(nfft):
    """``tail_lattice`` reads ``P(S <= m)`` off the spectrum with ``_cdf_weights``; here against
    ``irfft`` and ``cumsum`` (what it replaced), for every ``m``, odd and even, on a random
    real signal (its spectrum has a non-zero Nyquist term)."""
    x = np.random.default_rng(5).normal(size=nfft)
    f = np.fft.rfft(x)
    spec = np.ascontiguousarray(f).view(np.float64)
    want = np.cumsum(np.fft.irfft(f, nfft))
    got = np.array([spec @ T._cdf_weights(0, m, nfft) for m in range(nfft)])
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12 * nfft)
    np.testing.assert_allclose(got, np.cumsum(x), rtol=0, atol=1e-12 * nfft)


def test_conclude_binary_is_the_finite_b_probability_of_the_exact_tail_memoized():
    """``P(B resamples conclude)`` per 0/1 sample: the binomial of its exact tail (the closed
    form ``tail_trinomial``) with ``m > θ`` iff ``n+ - n- > c``; the same numbers again from
    the memo, in another order, and through the dict past the dense size."""
    rng = np.random.default_rng(6)
    k, a, b, c = _keys(rng, [12, 90, 250], 800)
    for big_b, level in ((200, 0.05), (20, 0.1)):
        want = R.bootstrap_conclude_prob(R.tail_trinomial(k, a, b, c), a - b > c, level, big_b)
        got = R.conclude_binary(k, a, b, c, level, big_b)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-10)
        assert ((got > 0) & (got < 1)).sum() > 50  # not only sure cases
        np.testing.assert_array_equal(R.conclude_binary(k[::-1], a[::-1], b[::-1], c[::-1], level, big_b),
                                      got[::-1])
    assert {key[2:] for key in T._dense if len(key) > 2} == {("conclude", 200, 10), ("conclude", 20, 2)}


def test_conclude_binary_past_the_dense_size(monkeypatch):
    monkeypatch.setattr(T, "_DENSE_MAX_K", 50)
    rng = np.random.default_rng(7)
    k, a, b, c = _keys(rng, [30, 120], 300)
    want = R.bootstrap_conclude_prob(R.tail_trinomial(k, a, b, c), a - b > c, 0.05, 200)
    got = R.conclude_binary(k, a, b, c, 0.05, 200)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-10)
    assert any(len(key) == 7 for key in T._TAIL_MEMO)  # (k, n+, n-, c, "conclude", B, c_max)
    np.testing.assert_array_equal(R.conclude_binary(k, a, b, c, 0.05, 200), got)


@pytest.mark.parametrize("nfft", [8, 256])
def test_cdf_weights_sum_any_window_of_the_periodic_inverse(nfft):
    """A window ``[lo, hi]`` may start below 0: the sum is over the periodic inverse."""
    x = np.random.default_rng(8).normal(size=nfft)
    spec = np.ascontiguousarray(np.fft.rfft(x)).view(np.float64)
    for lo, hi in ((-3, 2), (-nfft // 2, 1), (5, nfft + 3), (-1, -1), (0, nfft - 1)):
        want = sum(x[s % nfft] for s in range(lo, hi + 1))
        assert abs(spec @ T._cdf_weights(lo, hi, nfft) - want) < 1e-12 * nfft


def test_short_transforms_give_the_closed_form_tail_and_the_full_transforms_numbers(monkeypatch):
    """Narrow laws (few discordant tasks) get a transform shorter than the support; every
    tail must still be the closed form's, and the full transform's, to rounding (both are
    about 5e-14 off the closed form at k = 600; a window that left out mass would be far
    more), including thresholds out in the tails where the window's edge is nearest."""
    rng = np.random.default_rng(9)
    k = np.full(3000, 600)
    disc = rng.integers(1, 120, 3000)  # discordant draws: narrow to wide laws
    a = rng.binomial(disc, 0.5)
    b = disc - a
    sd = np.sqrt(disc)
    c = np.rint((a - b) + rng.uniform(-7.5, 7.5, 3000) * sd).astype(np.int64)
    hist = np.stack([b, k - a - b, a], axis=1)
    values = np.array([-1, 0, 1])
    full = 1 << (2 * 600).bit_length()
    sizes = T._window_sizes(hist.astype(float), values + 1, 600, c + 600, full)
    assert (sizes < full).mean() > 0.5 and (sizes <= full // 4).any()
    got = R.tail_lattice(hist, values, c)
    assert ((got > 1e-12) & (got < 1 - 1e-12)).sum() > 1000  # not only sure tails
    np.testing.assert_allclose(got, R.tail_trinomial(k, a, b, c), rtol=0, atol=1e-12)
    monkeypatch.setattr(T, "_window_sizes", lambda h, y, kk, m, f: np.full(len(h), f))
    np.testing.assert_allclose(got, R.tail_lattice(hist, values, c), rtol=0, atol=1e-12)
