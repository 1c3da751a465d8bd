"""Golden values for the decision rules and the coverage floors, computed by hand (or with
exact fractions / scipy.stats), checked against the engine's rule kernels and against the
reference implementation (tests/engine/reference.py)."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from service.engine import coverage
from service.engine import rules as R
from service.engine.records import from_rows
from service.engine.replay import build_report, plan_replay, run_chunk
from service.engine.spec import make_spec
from tests.engine import reference as ref

CODE = {"accept": R.ACCEPT, "reject": R.REJECT, "defer": R.DEFER}


def _cmp(delta: float, d) -> ref.Cmp:
    return ref.Cmp(delta, all(float(x).is_integer() for x in d))


# --------------------------------------------------------------------------- McNemar

MCNEMAR = [
    # (n+, n-, a, decision, tail) with the tail by hand: sums of C(n, i) / 2^n
    (0, 0, 0.05, "defer", None),  # n = 0 always defers
    (5, 0, 0.05, "accept", Fraction(1, 32)),
    (4, 0, 0.05, "defer", Fraction(1, 16)),
    (0, 5, 0.05, "reject", Fraction(1, 32)),
    (0, 4, 0.05, "defer", Fraction(1, 16)),
    (9, 1, 0.05, "accept", Fraction(11, 1024)),
    (9, 1, 0.01, "defer", Fraction(11, 1024)),
    (8, 2, 0.05, "defer", Fraction(56, 1024)),
    (2, 8, 0.05, "defer", Fraction(56, 1024)),
    (1, 9, 0.05, "reject", Fraction(11, 1024)),
    (3, 3, 0.05, "defer", Fraction(42, 64)),  # a tie is on the reject side: P(Bin(6,½) <= 3)
    (15, 5, 0.05, "accept", Fraction(15504 + 4845 + 1140 + 190 + 20 + 1, 2**20)),
    (1, 0, 0.5, "accept", Fraction(1, 2)),  # P = a exactly: accept (<=)
    (0, 1, 0.5, "reject", Fraction(1, 2)),
    (1, 1, 0.75, "reject", Fraction(3, 4)),  # n+ <= n-: P(Bin(2,½) <= 1) = 3/4 <= a
]


@pytest.mark.parametrize("n_plus,n_minus,a,decision,tail", MCNEMAR)
def test_mcnemar_golden(n_plus, n_minus, a, decision, tail):
    if tail is not None:
        n = n_plus + n_minus
        side = "greater" if n_plus > n_minus else "less"
        assert math.isclose(stats.binomtest(n_plus, n, 0.5, alternative=side).pvalue, float(tail), rel_tol=1e-12)
    assert ref.mcnemar_counts(n_plus, n_minus, a) == decision
    assert int(R.mcnemar(np.array(n_plus), np.array(n_minus), a)) == CODE[decision]
    d = np.array([1.0] * n_plus + [-1.0] * n_minus + [0.0] * 3)
    assert R.decide("mcnemar", d, 0.0, a).decision == CODE[decision]


def test_mcnemar_refuses_fractional_differences():
    with pytest.raises(ValueError):
        R.decide("mcnemar", np.array([0.5, -1.0, 1.0]), 0.0, 0.05)


# --------------------------------------------------------------------------- Serfling


@pytest.mark.parametrize(
    "k,n,a,radius",
    [
        # 2·sqrt((1 - 49/300)·ln 20 / 100) = 2·sqrt(0.836667·2.995732/100) = 2·0.158317
        (50, 300, 0.05, 0.316634),
        # k = N: the finite-population factor is 1/N
        (300, 300, 0.05, 2 * math.sqrt(2.995732 / 300 / 600)),
        # k = 1: no finite-population correction
        (1, 300, 0.05, 2 * math.sqrt(2.995732 / 2)),
        # a = 0.1, k = 20, N = 80: 2·sqrt((61/80)·ln 10/40)
        (20, 80, 0.1, 2 * math.sqrt(61 / 80 * 2.302585 / 40)),
    ],
)
def test_serfling_radius_golden(k, n, a, radius):
    assert math.isclose(ref.serfling_radius(k, n, a), radius, rel_tol=1e-5)
    assert math.isclose(float(R.serfling_radius(k, n, a)), radius, rel_tol=1e-5)


@pytest.mark.parametrize(
    "plus,minus,theta,decision",
    [
        (25, 5, 0.0, "accept"),  # m = 0.4, ε = 0.3166: 0.4 - 0.3166 > 0
        (20, 5, 0.0, "defer"),  # m = 0.3
        (5, 21, 0.0, "reject"),  # m = -0.32: -0.32 + 0.3166 <= 0
        (5, 20, 0.0, "defer"),  # m = -0.3
        (30, 0, 0.25, "accept"),  # m = 0.6: 0.6 - 0.3166 > 0.25
        (30, 0, 0.3, "defer"),  # 0.2834 < 0.3 < 0.9166
    ],
)
def test_serfling_decisions_golden(plus, minus, theta, decision):
    d = np.array([1.0] * plus + [-1.0] * minus + [0.0] * (50 - plus - minus))
    assert R.decide("serfling", d, theta, 0.05, n=300).decision == CODE[decision]
    assert ref.serfling(list(d), ref.Cmp(theta * 100, True), 0.05, 300) == decision


# --------------------------------------------------------------------------- paired normal

D10 = [1, 0, 1, 1, 0, 1, 1, 1, 0, 1]  # m = 0.7, sd(ddof=1) = sqrt(0.7·0.3·10/9), se = 0.152753


@pytest.mark.parametrize(
    "d,theta,decision",
    [
        ([1, 1, 1], 0.0, "accept"),  # se == 0: forced
        ([1, 1, 1], 1.0, "reject"),  # se == 0, m = θ: forced rejects
        ([0, 0, 0, 0], 0.0, "reject"),  # se == 0, m = 0 = θ
        ([0.4, 0.4], 0.3, "accept"),  # se == 0 on fractional data
        ([1], 0.0, "defer"),  # k < 2
        ([-1], 0.0, "defer"),
        (D10, 0.0, "accept"),  # z = 4.58
        (D10, 0.4, "accept"),  # Φ(-0.3/0.152753) = 0.02477
        (D10, 0.5, "defer"),  # Φ(-1.3093) = 0.0952
        (D10, 0.95, "defer"),  # m <= θ: Φ(-0.25/0.152753) = 0.0509 > 0.05
        (D10, 0.96, "reject"),  # Φ(-0.26/0.152753) = 0.0444
        ([1, -1], 0.0, "defer"),  # m = 0, se = 1: Φ(0) = 0.5
    ],
)
def test_paired_normal_golden(d, theta, decision):
    d = [float(x) for x in d]
    assert R.decide("paired_normal", np.array(d), theta, 0.05).decision == CODE[decision]
    assert ref.paired_normal(d, _cmp(theta * 100, d), 0.05)[0] == decision


def test_paired_normal_tail_values():
    se = math.sqrt(0.7 * 0.3 * 10 / 9) / math.sqrt(10)
    assert math.isclose(se, 0.152753, rel_tol=1e-5)
    for theta, p in [(0.4, 0.02477), (0.5, 0.09523), (0.95, 0.05085), (0.96, 0.04437)]:
        assert math.isclose(stats.norm.cdf(-abs(0.7 - theta) / se), p, rel_tol=2e-3)
        _, p_ref = ref.paired_normal([float(x) for x in D10], ref.Cmp(theta * 100, True), 0.05)
        assert math.isclose(p_ref, p, rel_tol=2e-3)


# --------------------------------------------------------------------------- forced, exact comparisons


def test_forced_compares_exactly_at_the_threshold():
    d = [1.0] * 10 + [0.0] * 90  # m = 0.10 exactly
    assert R.decide("forced", np.array(d), 0.10).decision == R.REJECT
    assert ref.forced(d, ref.Cmp(10, True)) == "reject"
    d2 = [1.0] * 11 + [0.0] * 89
    assert R.decide("forced", np.array(d2), 0.10).decision == R.ACCEPT


def _two_systems(n: int, wins: int) -> list[dict]:
    """A beats B on ``wins`` of ``n`` tasks and ties (both fail) on the rest."""
    rows = []
    for t in range(n):
        rows.append({"system": "A", "task_id": f"t{t:03d}", "outcome": 1 if t < wins else 0})
        rows.append({"system": "B", "task_id": f"t{t:03d}", "outcome": 0})
    return rows


@pytest.mark.parametrize("delta,n,wins", [(29, 100, 29), (57, 100, 57), (58, 50, 29), (5, 100, 5), (10, 300, 30)])
def test_full_decision_exact_tie_is_negative(delta, n, wins):
    """SPEC §2: Δ_full = δ/100 exactly is a negative decision (sum(D) > δ·N/100 is false).

    δ = 29, N = 100: 29/100·100 = 28.999999999999996 in floating point, so a float
    comparison ``sum > θ·N`` wrongly calls the tie positive.
    """
    rec = from_rows(_two_systems(n, wins))
    spec = make_spec(policies=["stratified_forced"], deltas=[delta], budgets=[1.0], orders=2)
    plan = plan_replay(rec, spec)
    pair_ab = plan.pairs.index((0, 1))
    assert not ref.ref_pair(rec, 0, 1).positive(delta)
    assert not bool(plan.positive(delta)[pair_ab]), f"Δ_full = δ/100 = {delta / 100} must be a negative decision"
    report = build_report(plan, [run_chunk(plan, 0, plan.n_pairs)])
    row = next(p for p in report["configurations"][0]["per_pair"] if p["a"] == "A")
    assert row["full_decision"] == "negative"
    assert row["accept"] == [0.0], "forced at k = N must reproduce the (negative) full decision"


# --------------------------------------------------------------------------- floors


SIZES = [6, 3, 1]  # N = 10
FLOOR_TABLE = {
    # k: (proportional, slack)
    1: ((1, 1, 1), (1, 1, 1)),
    2: ((1, 1, 1), (1, 1, 1)),
    3: ((1, 1, 1), (1, 1, 1)),
    4: ((2, 1, 1), (1, 1, 1)),
    5: ((3, 1, 1), (2, 1, 1)),
    6: ((3, 1, 1), (2, 1, 1)),
    7: ((4, 2, 1), (3, 1, 1)),
    8: ((4, 2, 1), (3, 1, 1)),
    9: ((5, 2, 1), (4, 1, 1)),
    10: ((6, 3, 1), (5, 2, 1)),
}


@pytest.mark.parametrize("k", sorted(FLOOR_TABLE))
def test_floor_table_by_hand(k):
    prop, slack = FLOOR_TABLE[k]
    expect = {"proportional": prop, "slack": slack, "one_per_group": (1, 1, 1), "none": (0, 0, 0)}
    for floor, r in expect.items():
        assert tuple(ref.floor_required(floor, k, SIZES)) == r, (floor, k)
        assert tuple(int(x) for x in coverage.required(floor, k, np.array(SIZES))) == r, (floor, k)
        feas = sum(r) <= k
        assert ref.coverage_feasible(floor, k, SIZES) == feas
        assert bool(coverage.feasible(floor, k, np.array(SIZES))) == feas


def test_feasibility_is_not_monotone_in_k():
    """sizes (1, 1, 4, 4), N = 10, proportional: r(4) = (1,1,1,1) fits, r(5) = (1,1,2,2) = 6 > 5
    does not, r(6) = (1,1,2,2) fits again."""
    sizes = [1, 1, 4, 4]
    got = [ref.coverage_feasible("proportional", k, sizes) for k in range(1, 11)]
    assert got == [False, False, False, True, False, True, True, True, True, True]
    eng = coverage.feasible("proportional", np.arange(1, 11), np.array(sizes))
    assert [bool(x) for x in eng] == got


def test_meets_coverage_by_hand():
    # k = 5, proportional: r = (3, 1, 1)
    assert ref.meets_coverage("proportional", 5, SIZES, [3, 1, 1])
    assert not ref.meets_coverage("proportional", 5, SIZES, [2, 2, 1])
    assert ref.meets_coverage("slack", 5, SIZES, [2, 2, 1])
    assert not ref.meets_coverage("one_per_group", 5, SIZES, [4, 1, 0])
    assert ref.meets_coverage("none", 5, SIZES, [5, 0, 0])
    # infeasible k: nothing meets coverage
    assert not ref.meets_coverage("proportional", 2, SIZES, [1, 1, 0])
    for floor, counts, want in [
        ("proportional", [3, 1, 1], True),
        ("proportional", [2, 2, 1], False),
        ("slack", [2, 2, 1], True),
        ("one_per_group", [4, 1, 0], False),
        ("none", [5, 0, 0], True),
    ]:
        assert bool(coverage.meets(floor, 5, np.array(SIZES), np.array(counts))) == want
    assert not bool(coverage.meets("proportional", 2, np.array(SIZES), np.array([1, 1, 0])))


@pytest.mark.parametrize("b,n,k", [(0.05, 300, 15), (0.1, 300, 30), (0.35, 20, 7), (0.05, 10, 1), (0.95, 89, 85),
                                   (0.15, 80, 12), (0.7, 10, 7), (1.0, 7, 7)])
def test_budget_k(b, n, k):
    assert ref.budget_k(b, n) == k
    assert coverage.budget_k(b, n) == k


# --------------------------------------------------------------------------- exact bootstrap


def _brute_tail(d, theta) -> Fraction:
    """P(m* <= θ) by enumerating all k^k equally likely resamples (exact fractions)."""
    k = len(d)
    vals = [Fraction(repr(x)) for x in d]
    th = Fraction(repr(theta))
    hit = sum(1 for idx in itertools.product(range(k), repeat=k) if sum(vals[i] for i in idx) <= th * k)
    return Fraction(hit, k**k)


TINY = [
    ([1, 0, -1], 0.0),
    ([1, 1, 0, -1], 0.0),
    ([1, 1, 1, 0, -1], 0.0),
    ([1, 1, 0, 0, 0, -1], 0.1),
    ([1, -1, 1, -1, 1, 1], 0.3),
    ([1, 1], 0.0),
    ([0.2, -0.4, 1.0, 0.0], 0.0),
    ([0.6, 0.2, -0.2, 0.4, -1.0], 0.05),
    ([0.5, -0.5, 1.0, 0.0, 0.5], 0.2),
]


@pytest.mark.parametrize("d,theta", TINY)
def test_exact_bootstrap_tail_matches_enumeration(d, theta):
    d = [float(x) for x in d]
    want = float(_brute_tail(d, theta))
    assert math.isclose(ref.exact_bootstrap_tail(d, _cmp(theta * 100, d)), want, abs_tol=1e-12)
    res = R.decide("bootstrap", np.array(d), theta, 0.05, "exact")
    assert math.isclose(res.statistic["p_low"], want, abs_tol=1e-9), (res.statistic, want)
    if all(x in (-1.0, 0.0, 1.0) for x in d):
        k = len(d)
        npl, nmi = d.count(1.0), d.count(-1.0)
        c = math.floor(theta * k + 1e-9)
        assert math.isclose(float(R.tail_trinomial(k, npl, nmi, c)), want, abs_tol=1e-12)


@pytest.mark.parametrize("d,theta", TINY)
def test_exact_bootstrap_decision_matches_enumeration(d, theta):
    d = [float(x) for x in d]
    p_low = _brute_tail(d, theta)
    for a in (0.05, 0.2, 0.5):
        m_up = Fraction(sum(Fraction(repr(x)) for x in d), len(d)) > Fraction(repr(theta))
        if m_up:
            want = "accept" if p_low <= Fraction(repr(a)) else "defer"
        else:
            want = "reject" if 1 - p_low <= Fraction(repr(a)) else "defer"
        assert ref.bootstrap_exact(d, _cmp(theta * 100, d), a)[0] == want
        assert R.decide("bootstrap", np.array(d), theta, a, "exact").decision == CODE[want], (d, theta, a)


def test_exact_bootstrap_tail_larger_k_matches_literal_resampling():
    """k = 40: the exact tail equals a 200 000-resample Monte Carlo within 5 standard errors."""
    rng = np.random.default_rng(99)
    d = [1.0] * 14 + [-1.0] * 10 + [0.0] * 16
    exact = ref.exact_bootstrap_tail(d, ref.Cmp(0, True))
    eng = R.decide("bootstrap", np.array(d), 0.0, 0.05, "exact").statistic["p_low"]
    assert math.isclose(exact, eng, abs_tol=1e-10)
    sums = np.asarray(d)[rng.integers(0, 40, size=(200_000, 40))].sum(axis=1)
    mc = float((sums <= 0).mean())
    assert abs(mc - exact) < 5 * math.sqrt(exact * (1 - exact) / 200_000)


def test_finite_bootstrap_decision_probability():
    """With B resamples, P(accept) = P(Bin(B, p_low) <= floor(a·B)) (the count of m* <= θ is binomial)."""
    d = np.array([1.0] * 8 + [-1.0] * 3 + [0.0] * 9)
    p_low = ref.exact_bootstrap_tail(list(d), ref.Cmp(0, True))
    want = stats.binom.cdf(10, 200, p_low)
    rng = np.random.default_rng(4)
    n = 4000
    acc = sum(R.decide("bootstrap", d, 0.0, 0.05, 200, rng=rng).decision == R.ACCEPT for _ in range(n))
    assert abs(acc / n - want) < 5 * math.sqrt(want * (1 - want) / n) + 1e-9
    lit_rng = np.random.default_rng(5)
    lit = sum(ref.bootstrap_literal(list(d), ref.Cmp(0, True), 0.05, 200, lit_rng) == "accept" for _ in range(300))
    assert abs(lit / 300 - want) < 5 * math.sqrt(want * (1 - want) / 300) + 1e-9


# --------------------------------------------------------------------------- anytime


def test_anytime_concludes_the_full_decision_at_k_equals_n():
    """At t = N, lo = hi = μ: the rule must reach the full-benchmark decision, never defer."""
    rng = np.random.default_rng(8)
    for _ in range(20):
        n = int(rng.integers(5, 60))
        d = rng.choice([-1.0, 0.0, 1.0], size=n)
        for theta in (0.0, 0.05, float(d.mean())):
            full = "accept" if ref.Cmp(theta * 100, True).greater(d.sum(), n) else "reject"
            path = ref.anytime_path(list(d), ref.Cmp(theta * 100, True), 0.05, n)
            assert path[-1] == full
            assert R.decide("anytime", d, theta, 0.05, n=n).decision != R.DEFER


def test_anytime_engine_matches_reference_paths():
    """The first conclusion along random orders: engine kernel == literal reference."""
    rng = np.random.default_rng(12)
    for trial in range(60):
        n = int(rng.integers(20, 120))
        lat = [1, 5][trial % 2]
        v = rng.integers(-lat, lat + 1, size=n)
        bias = int(rng.integers(-lat, lat + 1))
        v = np.clip(v + bias * (rng.random(n) < 0.3), -lat, lat)
        d = v / lat
        theta = [0.0, 0.05, 0.1][trial % 3]
        k = int(rng.integers(1, n + 1))
        path = ref.anytime_path(list(d[:k]), ref.Cmp(theta * 100, lat == 1), 0.05, n)
        first = next(((i + 1, x) for i, x in enumerate(path) if x != "defer"), (k + 1, "defer"))
        dec, stop = R.anytime_paths(v[None, :], lat, n, theta, 0.05, k)
        assert (int(stop[0]), int(dec[0])) == (first[0], CODE[first[1]]), (trial, n, k, theta)


# --------------------------------------------------------------------------- live decide() vs reference


@pytest.mark.parametrize("lattice", [1, 5, 6, None])
def test_decide_matches_reference_on_random_vectors(lattice):
    """``rules.decide`` (the live-decision entry point) against the reference, rule by rule,
    on random observed vectors (``None``: 4-decimal differences, off any small lattice; the
    exact bootstrap is not checked there); cases within 1e-9 of a decision boundary are skipped."""
    rng = np.random.default_rng(100 + (lattice or 0))
    checked = 0
    for _ in range(150):
        k = int(rng.integers(1, 60))
        n = k + int(rng.integers(0, 200))
        if lattice is None:
            v = np.round(np.clip(rng.normal(rng.uniform(-0.3, 0.3), 0.5, size=k), -1, 1), 4)
            d = v
        else:
            shift = int(rng.integers(-lattice, lattice + 1))
            v = np.clip(rng.integers(-lattice, lattice + 1, size=k) + shift * (rng.random(k) < 0.4), -lattice, lattice)
            d = v / lattice
        delta = int(rng.choice([0, 5, 10, -5, 20]))
        a = float(rng.choice([0.05, 0.1, 0.2]))
        theta = delta / 100
        cmp = ref.Cmp(delta, lattice == 1)
        dl = [float(x) for x in d]
        want = {"forced": ref.forced(dl, cmp), "serfling": ref.serfling(dl, cmp, a, n)}
        pn, p = ref.paired_normal(dl, cmp, a)
        if p is None or abs(p - a) > 1e-9:
            want["paired_normal"] = pn
        if lattice is not None:
            bd, pb = ref.bootstrap_exact(dl, cmp, a)
            if abs(pb - a) > 1e-9:
                want["bootstrap"] = bd
        if lattice == 1 and delta == 0:
            want["mcnemar"] = ref.mcnemar(dl, a)
        path = ref.anytime_path(dl, cmp, a, n)
        want["anytime"] = next((x for x in path if x != "defer"), "defer")
        for rule, w in want.items():
            got = R.decide(rule, d, theta, a, "exact", n=n).decision
            assert got == CODE[w], (rule, list(v), lattice, delta, a, n)
            checked += 1
    assert checked > 550
