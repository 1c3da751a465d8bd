"""The compiled first stages' shortcuts (``lattice_kernel``) against what they stand for."""

from __future__ import annotations

import numpy as np
import pytest

from service.engine import lattice_kernel as K
from service.engine import rules as R
from service.engine.lattice_decisions import pack_counts


@pytest.mark.parametrize("exact", [True, False])
@pytest.mark.parametrize("pos", [True, False])
def test_an_end_past_the_conclude_reach_never_concludes(exact, pos):
    """``_conclude_reach``: the Berry–Esseen stage skips the end of a bracket that would have
    to conclude when its half-width is past this distance (from 0 for ``pos``, from 1 else).
    Every such end must decide not to conclude (0) whatever the uniform (not 2, the binomial's
    call), and the reach must not be slack: just inside it an end can conclude."""
    a = 0.05
    t_lo, t_hi = 0.031, 0.072  # a finite B's sure thresholds for some case
    reach = K._conclude_reach(pos, exact, a, t_lo, t_hi)
    past = np.linspace(0.0, 1.0, 20_001)
    past = past[past > reach] if pos else 1.0 - past[past > reach]
    concluded = 1 if pos else -1
    assert len(past) and all(K._decide(p, pos, exact, a, t_lo, t_hi) == 0 for p in past)
    inside = reach - 1e-9 if pos else 1.0 - reach + 1e-9
    assert K._decide(inside, pos, exact, a, t_lo, t_hi) in ((concluded,) if exact else (concluded, 2))


@pytest.mark.parametrize("n_tasks", [40, 300])
def test_unpacked_counts_are_numpys_with_their_ranges(n_tasks):
    """``unpack_counts`` (one compiled pass) against numpy's unpacking and ``law_ranges``, on
    fields of 8 bits and of 16, empty rows included."""
    from service.engine.lattice_decisions import count_values

    rng = np.random.default_rng(n_tasks)
    values = rng.choice(np.arange(-6, 7), size=(3, n_tasks))
    observed = rng.random((50, n_tasks)) < 0.4
    observed[:2] = False  # cases of no tasks

    def summer(x):  # per pair, per case: the sum over the case's observed tasks
        return np.einsum("pn,cn->pc", x, observed.astype(x.dtype))

    vals, words, bits = pack_counts(values, summer, 3 * 50)
    assert bits == (8 if n_tasks < 256 else 16)
    counts, lo_i, hi_i = K.unpack_counts(words, bits, len(vals))
    np.testing.assert_array_equal(counts, count_values(values, summer, 3 * 50)[1])
    want_lo, want_hi = np.empty(len(counts), dtype=np.int64), np.empty(len(counts), dtype=np.int64)
    K.law_ranges(counts, want_lo, want_hi)
    np.testing.assert_array_equal(lo_i, want_lo)
    np.testing.assert_array_equal(hi_i, want_hi)
    assert (counts.sum(axis=1) == np.tile(observed.sum(axis=1), 3)).all()


@pytest.mark.parametrize("a", [0.05, 0.01, 0.2])
def test_bennett_cannot_conclude_where_the_first_stage_skips_it(a):
    """``_far``: within ``sqrt(far)`` standard deviations of the mean, Bennett's bound (as the
    first stage widens it) is above the exact rule's breakpoint, so skipping it loses no
    decision; past the band it can conclude (the band is not wider than it must be)."""
    rng = np.random.default_rng(3)
    far = K._far(True, a)
    assert far > K._MIDDLE and K._far(False, a) == K._MIDDLE
    for _ in range(3000):
        var = rng.uniform(0.5, 400.0)
        b = rng.uniform(0.2, 12.0)
        t = np.sqrt(rng.uniform(0.0, far) * var)
        assert K._bennett(t, var, b) * (1.0 + 1e-9) + 1e-9 > a + 1e-12
    # a two-point law near the normal: Bennett concludes a little past the band
    var, b = 400.0, 0.01
    assert K._bennett(np.sqrt(far * var) * 1.05, var, b) < a


def _cases(rng, values, n: int, spread: float) -> tuple:
    """``n`` assorted histograms over ``values`` (up to 80 tasks), their moments, thresholds
    about ``spread`` standard deviations either side of the mean, a side each, and the exact
    tails: what the first stages take, and what they must bracket."""
    from service.engine import lattice as LT
    from tests.engine.test_lattice import moments, random_rows

    hist = random_rows(rng, n, values, 80)
    k, s, q, vlo, vhi = moments(hist, values)
    sd = np.sqrt(np.maximum(k * q - s * s, 0) / np.maximum(k, 1))
    c = np.rint(s + rng.normal(0, spread, len(k)) * np.maximum(sd, 1.0)).astype(np.int64)
    pos = rng.random(len(k)) < 0.5
    return k, s, q, vlo, vhi, c, pos, LT.tail(hist, values, c)


@pytest.mark.parametrize("exact", [True, False])
def test_first_stage_brackets_hold_the_exact_tail(exact):
    """Whatever ends the compiled first stages compute or leave (Bennett skipped in the middle
    and within ``_far``, a Berry–Esseen end skipped past ``_conclude_reach``), every bracket
    holds the exact tail, and a case they settle is settled as its exact tail decides: on
    assorted histograms over several lattices, thresholds near the mean and far from it,
    cases above θ and below it."""
    from service.engine.lattice_decisions import _finite_b_decide
    from tests.engine.test_lattice import VALUE_SETS

    rng = np.random.default_rng(11 if exact else 12)
    a, big_b = 0.05, 200
    for values in VALUE_SETS:
        k, s, q, vlo, vhi, c, pos, tail = _cases(rng, values, 1200, 1.5)
        if exact:
            t_lo = t_hi = None
            want = R.bootstrap_from_tail(tail, pos, a, "exact")
        else:
            u = rng.random(len(k))
            _, t_lo, t_hi = _finite_b_decide(a, big_b, pos, u)
            want = np.where(u < R.bootstrap_conclude_prob(tail, pos, a, big_b), np.where(pos, R.ACCEPT, R.REJECT),
                            R.DEFER)
        lo, hi = np.zeros(len(k)), np.ones(len(k))
        stage = np.full(len(k), -1, dtype=np.int8)
        out = np.zeros(len(k), dtype=np.int8)
        open_ = np.zeros(len(k), dtype=bool)
        K.first_stages(k, s.astype(np.float64), q.astype(np.float64), vlo, vhi, c, pos, a, t_lo, t_hi, lo, hi, stage,
                       out, open_)
        assert np.all(lo <= tail + 1e-12) and np.all(tail <= hi + 1e-12), values
        settled = ~open_
        assert settled.any() and open_.any()  # both kinds met
        np.testing.assert_array_equal(out[settled], want[settled])  # (finite B: the sure thresholds')


def test_bernsteins_bound_is_never_below_bennetts():
    """The first stages try Bernstein's bracket before Bennett's and keep it where it settles a
    case: sound only if Bernstein's bound is never the tighter one (``h(u) >= u²/2(1 + u/3)``),
    here over three decades of ``u = bt/v`` either side of 1, and the guards alike."""
    rng = np.random.default_rng(7)
    for _ in range(20_000):
        var = 10.0 ** rng.uniform(-2, 4)
        b = 10.0 ** rng.uniform(-2, 2)
        t = var / b * 10.0 ** rng.uniform(-3, 3)
        bennett, bernstein = K._bennett(t, var, b), K._bernstein(t, var, b)
        assert bernstein >= bennett * (1.0 - 1e-12), (t, var, b)
    # far apart where u is large (Bennett's log pays there), together where it is small
    assert K._bernstein(50.0, 10.0, 5.0) > 100 * K._bennett(50.0, 10.0, 5.0)
    assert K._bernstein(5.0, 100.0, 0.01) == pytest.approx(K._bennett(5.0, 100.0, 0.01), rel=1e-3)
    for args in ((0.0, 1.0, 1.0), (1.0, 0.0, 1.0), (1.0, 1.0, 0.0), (-1.0, 1.0, 1.0)):
        assert K._bernstein(*args) == K._bennett(*args) == 1.0


def test_a_second_rule_reads_the_first_rules_bernstein_brackets():
    """Brackets are shared by the rules at one threshold. A case that Bernstein's bracket
    settled for the first rule (finite B) is left at ``_BERNSTEIN`` with that bracket; the
    second rule (exact) tries it before Bennett's. Every bracket still holds the exact tail,
    and every case the second rule settles is settled as its exact tail decides."""
    from service.engine.lattice_decisions import _finite_b_decide
    from tests.engine.test_lattice import VALUE_SETS

    rng = np.random.default_rng(13)
    a, big_b = 0.05, 200
    for values in VALUE_SETS:
        k, s, q, vlo, vhi, c, pos, tail = _cases(rng, values, 1500, 2.0)
        _, t_lo, t_hi = _finite_b_decide(a, big_b, pos, rng.random(len(k)))
        args = (k, s.astype(np.float64), q.astype(np.float64), vlo, vhi, c, pos, a)

        lo, hi, stage = np.zeros(len(k)), np.ones(len(k)), np.full(len(k), -1, dtype=np.int8)
        out, open_ = np.zeros(len(k), dtype=np.int8), np.zeros(len(k), dtype=bool)
        K.first_stages(*args, t_lo, t_hi, lo, hi, stage, out, open_)  # the finite-B rule first
        left = stage == K._BERNSTEIN
        assert left.any() and (stage == 0).any()  # both kinds of bracket are left
        K.first_stages(*args, None, None, lo, hi, stage, out, open_)  # then the exact rule
        assert np.all(lo <= tail + 1e-12) and np.all(tail <= hi + 1e-12), values
        want = R.bootstrap_from_tail(tail, pos, a, "exact")
        np.testing.assert_array_equal(out[~open_], want[~open_])
        assert (~open_[left]).any()  # some settled again from the stored bracket
