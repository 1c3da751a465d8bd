"""Chernoff's bound on a 0/1 sample's wrong-side resampling tail (tails.chernoff_binary) and
the decisions that use it to skip the tail (rules.exact_binary, rules.conclude_binary).

The bound must hold against the closed form (``tail_trinomial``, a sum of binomials) taken on
the wrong side itself, so that ``1 - τ`` rounding does not hide a violation; it must be far
sharper than Bernstein's where the law is skewed (else it skips nothing); and a decision made
without the tail must be the decision made with it, bit for bit.
"""

from __future__ import annotations

import numpy as np
import pytest

from service.engine import rules as R
from service.engine import tails as T


@pytest.fixture(autouse=True)
def fresh_memo(monkeypatch):
    monkeypatch.setattr(T, "_dense", type(T._dense)())
    monkeypatch.setattr(T, "_TAIL_MEMO", {})


def _samples(rng: np.random.Generator, n: int, k_max: int = 400, ks: list[int] | None = None):
    k = rng.integers(1, k_max, n) if ks is None else rng.choice(ks, n)
    n_plus = rng.binomial(k, rng.random(n))
    n_minus = rng.binomial(k - n_plus, rng.random(n))
    c = rng.integers(-6, 7, n)
    # edge laws: no -1 draws, no +1 draws, no 0 draws, a single task
    n_minus[:50], n_plus[50:100] = 0, 0
    n_minus[100:150] = k[100:150] - n_plus[100:150]
    k[150:170], n_plus[150:170], n_minus[150:170] = 1, 1, 0
    return k, n_plus, n_minus, c


def _wrong_side(k, n_plus, n_minus, c):
    """The wrong-side tail exactly: ``P(S <= c)`` where the mean is above ``c``, else
    ``P(S >= c + 1) = P(-S <= -c - 1)`` (the closed form with + and - swapped)."""
    pos = n_plus - n_minus > c
    return np.where(pos, R.tail_trinomial(k, n_plus, n_minus, c), R.tail_trinomial(k, n_minus, n_plus, -c - 1))


def test_the_bound_holds_on_every_sample_and_is_sharp_in_the_far_tails():
    rng = np.random.default_rng(11)
    k, n_plus, n_minus, c = _samples(rng, 6000)
    exact = _wrong_side(k, n_plus, n_minus, c)
    bound = T.chernoff_binary(k, n_plus, n_minus, c)
    assert np.all(bound >= exact * (1 - 1e-12) - 1e-300)
    # where the exact tail is tiny the bound is too (a bound of 1 would skip nothing), and far
    # below Bernstein's on skewed laws
    far = exact < 1e-20
    assert far.sum() > 500 and np.mean(bound[far] < 1e-13) > 0.95
    bern = T.tail_trinomial_screen(k, n_plus, n_minus, c)
    missed = np.isnan(bern) & far  # what Bernstein's screen leaves to the FFT though it is tiny
    assert missed.sum() > 50 and np.mean(bound[missed] < 1e-13) > 0.8
    # Chernoff's exponent is the best one: within a factor of about sqrt(k) of the tail
    mid = (exact > 1e-8) & (exact < 0.1) & (k > 20)
    assert np.median(bound[mid] / exact[mid]) < 20


def test_point_laws_and_one_sided_laws_are_exact_or_bounded():
    # tails that are exactly 0, reached as t -> inf: all draws +1 (S = k, P(S <= 3) = 0); all
    # draws 0 (P(S <= -1) = 0); no +1 draws with the mean below c + 1 (P(S >= 1) = 0)
    assert T.chernoff_binary(10, 10, 0, 3) < 1e-100
    assert T.chernoff_binary(10, 0, 0, -1) < 1e-100
    assert T.chernoff_binary(40, 0, 12, 0) < 1e-100
    # {0, +1} only and c = 0: P(S <= 0) = p0^k, which the bound reaches
    k, n_plus = 50, 15
    assert T.chernoff_binary(k, n_plus, 0, 0) == pytest.approx(0.7**50, rel=1e-8)
    assert T.chernoff_binary(k, n_plus, 0, 0) >= 0.7**50


@pytest.mark.parametrize("a", [0.05, 0.1])
def test_exact_binary_decides_as_the_exact_tail_does(a):
    rng = np.random.default_rng(12)
    k, n_plus, n_minus, c = _samples(rng, 1500, k_max=200)
    pos = n_plus - n_minus > c
    want = R.bootstrap_from_tail(R.tail_trinomial(k, n_plus, n_minus, c), pos, a, "exact")
    got = R.exact_binary(k, n_plus, n_minus, c, a)
    np.testing.assert_array_equal(got, want)
    skipped = T.chernoff_binary(k, n_plus, n_minus, c) <= a
    assert 0.2 < skipped.mean() < 0.95  # the bound decides many, not all
    assert (want[~skipped] != R.DEFER).any() and (want[~skipped] == R.DEFER).any()


@pytest.mark.parametrize(("a", "big_b"), [(0.05, 200), (0.1, 20), (0.025, 1000)])
def test_conclude_binary_without_a_tail_is_the_binomial_of_the_tail(a, big_b):
    """Samples whose bound is below ``saturation``'s ``p1`` get ``q = 1`` without their tail:
    exactly what the binomial of the exact tail gives them."""
    rng = np.random.default_rng(13)
    k, n_plus, n_minus, c = _samples(rng, 3000, ks=[8, 40, 120, 200])  # few k: a table each
    pos = n_plus - n_minus > c
    want = R.bootstrap_conclude_prob(R.tail_binary(k, n_plus, n_minus, c), pos, a, big_b)
    got = R.conclude_binary(k, n_plus, n_minus, c, a, big_b)
    np.testing.assert_array_equal(got, want)
    skipped = T.chernoff_binary(k, n_plus, n_minus, c) <= R.saturation(a, big_b)[0]
    assert skipped.sum() > 200 and np.all(want[skipped] == 1.0)
