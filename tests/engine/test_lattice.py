"""The lattice bootstrap kernels (engine/lattice.py, lattice_decisions.py) against direct convolution.

Each bracket must contain the exact tail on every row (a bound that is off by a constant, a
missing error term or a wrong window would fail here), the exact tail must agree with a
k-fold ``np.convolve`` to 1e-12, and the staged decisions must equal the decisions taken on
the exact tail of every case, for the exact rule and for finite B with the same uniforms.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from service.engine import lattice as LT
from service.engine import lattice_decisions as LD
from service.engine import rules as R
from service.engine.lattice_kernel import law_ranges, short_brackets


def direct_tail(counts: np.ndarray, values: np.ndarray, c: int) -> float:
    """``P(S <= c)`` by ``k`` direct convolutions of the one-draw pmf."""
    k = int(counts.sum())
    if k == 0:
        return 1.0
    lo = int(values.min())
    pmf = np.zeros(int(values.max()) - lo + 1)
    pmf[values - lo] = counts / k
    dist = np.array([1.0])
    for _ in range(k):
        dist = np.convolve(dist, pmf)
    idx = c - lo * k
    return float(dist[: max(0, min(len(dist), idx + 1))].sum())


def random_rows(rng: np.random.Generator, n_rows: int, values: np.ndarray, k_max: int) -> np.ndarray:
    """Histograms of assorted shapes: spread, concentrated on 0, two-point, one value."""
    rows = []
    for i in range(n_rows):
        k = int(rng.integers(1, k_max + 1))
        kind = i % 4
        if kind == 0:
            p = rng.dirichlet(np.ones(len(values)))
        elif kind == 1:
            p = rng.dirichlet(np.full(len(values), 0.3))
        elif kind == 2:
            p = np.zeros(len(values))
            p[rng.choice(len(values), 2, replace=False)] = 0.5
        else:
            p = np.zeros(len(values))
            p[rng.integers(len(values))] = 1.0
        rows.append(rng.multinomial(k, p))
    return np.array(rows, dtype=np.float64)


def moments(hist: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, ...]:
    """What the brackets take of histograms: ``k``, ``Σv``, ``Σv²`` and the least and largest
    value present, per row."""
    k = hist.sum(axis=1).astype(np.int64)
    present = hist > 0
    vlo = values[np.argmax(present, axis=1)].astype(np.float64)
    vhi = values[len(values) - 1 - np.argmax(present[:, ::-1], axis=1)].astype(np.float64)
    return k, hist @ values, hist @ (values * values), vlo, vhi


VALUE_SETS = [
    np.arange(-5, 6),  # differences of fifths (five trials)
    np.array([-4, -2, 0, 2, 4]),  # an even sub-lattice: |φ| returns to 1 at ω = π
    np.array([-7, -3, 0, 1, 6]),  # irregular gaps
    np.arange(-12, 13),  # a wider lattice
]


@pytest.mark.parametrize("vi", range(len(VALUE_SETS)))
def test_exact_tail_matches_direct_convolution(vi):
    values = VALUE_SETS[vi]
    rng = np.random.default_rng(vi)
    hist = random_rows(rng, 160, values, 40)
    k = hist.sum(axis=1)
    mean = hist @ values / k
    c = np.rint(k * mean + rng.normal(0, 2, len(k)) * np.sqrt(k)).astype(np.int64)  # near the middle
    c[::7] = (k[::7] * values.min()).astype(np.int64) - 1  # below the support
    c[3::7] = (k[3::7] * values.max()).astype(np.int64)  # at the top of the support
    got = LT.tail(hist, values, c)
    want = np.array([direct_tail(h, values, int(cc)) for h, cc in zip(hist, c, strict=True)])
    assert np.abs(got - want).max() < 1e-12
    assert np.abs(got - R.tail_lattice(hist, values, c)).max() < 1e-12


def test_exact_tail_on_large_sums():
    """k up to 300 (n up to 3000 frequencies): truncation and angle reduction stay exact."""
    values = np.arange(-5, 6)
    rng = np.random.default_rng(11)
    hist = random_rows(rng, 40, values, 300)
    k = hist.sum(axis=1)
    c = np.rint(hist @ values + rng.normal(0, 1.5, len(k)) * np.sqrt(k) * 2).astype(np.int64)
    got = LT.tail(hist, values, c)
    want = np.array([direct_tail(h, values, int(cc)) for h, cc in zip(hist, c, strict=True)])
    assert np.abs(got - want).max() < 1e-12


@pytest.mark.parametrize("vi", range(len(VALUE_SETS)))
def test_every_bracket_contains_the_exact_tail(vi):
    values = VALUE_SETS[vi]
    rng = np.random.default_rng(100 + vi)
    hist = random_rows(rng, 3000, values, 120)
    k, s, q, vlo, vhi = moments(hist, values)
    sd = np.sqrt(np.maximum(k * q - s * s, 0) / k)
    c = np.rint(s + rng.normal(0, 1.5, len(k)) * np.maximum(sd, 1)).astype(np.int64)
    exact = LT.tail(hist, values, c)
    counts = hist.astype(np.uint16)  # as a compiled Histograms holds them
    brackets = {
        "bennett": LT.bennett_bracket(k, s, q, vlo, vhi, c),
        "berry_esseen": LT.berry_esseen_bracket(k, s, q, vlo, vhi, c),
        "approx": LT.approx_bracket(hist, values, c, k, s, q, vlo, vhi),
        "short_brackets": tuple(b[0] for b in short_brackets(counts, values, c, k, s, q, vlo, vhi, LT.EPS_ALIAS,
                                                             LT.EPS_APPROX)),
        "whole support": tuple(b[0] for b in short_brackets(counts, values, c, k, s, q, vlo, vhi, LT.EPS_ALIAS,
                                                            LT.EPS_TERM, full=True)),
    }
    for name, (lo, hi) in brackets.items():
        assert np.all(lo <= exact + 1e-12), (name, np.max(lo - exact))  # exact: to rounding (1e-13)
        assert np.all(exact <= hi + 1e-12), (name, np.max(exact - hi))
    spread = sd > 0  # (a one-value row is decided by Bennett: S is a constant)
    for name in ("approx", "short_brackets"):
        lo, hi = brackets[name]
        assert np.quantile((hi - lo)[spread], 0.9) < 1e-3, name  # narrow: it decides almost everything
    lo, hi = brackets["whole support"]
    assert np.max(hi - lo) < 1e-8  # the slack of the bounds, and only that


def test_saturation_edges_are_safe():
    for a, big_b in [(0.05, 200), (0.1, 50), (0.01, 1000), (0.05, 1), (0.5, 7)]:
        p1, p0 = R.saturation(a, big_b)
        c = math.floor(a * big_b + 1e-9)
        assert p1 <= p0
        assert stats.binom.sf(c, big_b, p1) < 2.0**-54  # conclude for every u < 1
        if p0 < 1:
            assert stats.binom.cdf(c, big_b, p0) < 2.0**-60  # defer for every u > 0


def _block(seed: int, values: np.ndarray, n_pairs: int = 6, n_tasks: int = 30, reps: int = 40):
    """A replay-like block: per-pair task values, random prefixes at a few budgets."""
    rng = np.random.default_rng(seed)
    vals = rng.choice(values, size=(n_pairs, n_tasks), p=rng.dirichlet(np.ones(len(values)) * 2))
    ks = np.array([3, 8, 15, 24, 30])
    orders = np.stack([rng.permutation(n_tasks) for _ in range(reps)])
    rank = np.empty_like(orders)
    rank[np.arange(reps)[:, None], orders] = np.arange(n_tasks)[None, :]
    obs = (rank.T[:, :, None] < ks[None, None, :]).reshape(n_tasks, -1).astype(np.float32)

    def summer(x):  # as chunk's: float32 sums of small integers, float64 kept for wide ones
        if x.dtype == np.float64:
            return (x @ obs.astype(np.float64)).reshape(len(x), reps, len(ks))
        return (x.astype(np.float32) @ obs).astype(np.float64).reshape(len(x), reps, len(ks))

    summer.shared = True  # one set of orders for every pair
    summer.order, summer.ks = orders, ks  # prefixes of these: what lattice_kernel.count_words counts along
    return vals, ks, summer, rng


def _decide_as_on_exact_tails(vals, ks, summer, rng, theta: float, big_bs: tuple[int, ...],
                              compiled: bool = False) -> dict:
    """Staged decisions of a block (exact, and each finite B with fresh uniforms) against the
    decisions on the exact tail of every case's own histogram; returns the block's cache.
    ``compiled``: the stages of ``lattice_kernel`` (``Tails._settle_compiled``)."""
    lattice = 5
    ssum = summer(vals.astype(np.float32))
    qsum = summer((vals * vals).astype(np.float32))
    v_all = np.unique(vals)
    hist = np.stack([summer((vals == v).astype(np.float32)) for v in v_all], axis=-1).reshape(-1, len(v_all))
    k = np.broadcast_to(ks[None, None, :], ssum.shape).ravel()
    c = R.bootstrap_threshold(theta, k, lattice)
    p_low = LT.tail(hist, v_all, c)  # each case on its own histogram
    pos = R.above(ssum.ravel(), k.astype(np.float64), theta, lattice)
    cache: dict = {}
    for a in (0.05, 0.2):
        got = LD.bootstrap_decisions(vals, summer, ssum, qsum, ks, theta, lattice, a, "exact", None, cache, compiled)
        want = R.bootstrap_from_tail(p_low, pos, a, "exact").reshape(ssum.shape)
        np.testing.assert_array_equal(got, want)
        for big_b in big_bs:
            u = rng.random(ssum.shape)
            got = LD.bootstrap_decisions(vals, summer, ssum, qsum, ks, theta, lattice, a, big_b, u, cache, compiled)
            q = R.bootstrap_conclude_prob(p_low, pos, a, big_b)
            want = np.where(u.ravel() < q, np.where(pos, R.ACCEPT, R.REJECT), R.DEFER).reshape(ssum.shape)
            np.testing.assert_array_equal(got, want)
    return cache


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("theta", [0.0, 0.05, -0.1])
def test_staged_decisions_equal_decisions_on_exact_tails(theta, compiled):
    vals, ks, summer, rng = _block(7, np.arange(-5, 6))
    cache = _decide_as_on_exact_tails(vals, ks, summer, rng, theta, (200, 20), compiled)
    tails, _ = cache[("lattice", f"{theta!r}")]
    assert tails.refined[2] > 0  # the short sums were reached
    assert tails.refined[3] < len(tails.c) / 4  # most cases never needed the exact tail (or the whole support)


def test_compiled_stages_fall_back_to_exact_tails(monkeypatch):
    """A case the compiled sums leave open (a tail within rounding of its breakpoint) is
    decided on numpy's exact tail: here the sums over the whole support are skipped, so every
    case they would have settled goes there, and the decisions are still the exact tails'."""
    import service.engine.lattice_kernel as K

    vals, ks, summer, rng = _block(7, np.arange(-5, 6))
    tails, _ = _decide_as_on_exact_tails(vals, ks, summer, rng, 0.05, (200,), compiled=True)[("lattice", "0.05")]
    assert (tails.stage == 3).any() and not (tails.stage == 4).any()  # the whole support settled them all
    real = K.short_stage
    monkeypatch.setattr(K, "short_stage", lambda *a, full=False, **kw: 0 if full else real(*a, full=full, **kw))
    tails, _ = _decide_as_on_exact_tails(vals, ks, summer, rng, 0.05, (200,), compiled=True)[("lattice", "0.05")]
    assert (tails.stage == 4).any()


@pytest.mark.parametrize("compiled", [False, True])
def test_staged_decisions_on_wide_blocks(compiled):
    """300 tasks (counts of 16 bits) and an irregular lattice: still the exact tails' decisions."""
    vals, ks, summer, rng = _block(17, np.array([-7, -3, 0, 1, 6]), n_pairs=4, n_tasks=300, reps=12)
    assert LD.count_values(vals, summer, 4 * 12 * len(ks))[1].dtype == np.uint16
    cache = _decide_as_on_exact_tails(vals, ks, summer, rng, 0.0, (200,), compiled)
    tails, _ = cache[("lattice", "0.0")]
    assert tails.refined[2] > 0


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("theta", [0.0, 0.05, -0.1])
def test_mirrored_and_equal_pairs_decide_as_on_their_own_exact_tails(theta, compiled):
    """A pair's mirror (differences negated) and an equal pair share one law row, and a mirror
    reads its tail at ``-c - 1`` of it: every case must still decide as on the exact tail of
    its own histogram. Pairs are mirrored, duplicated, or alone, in a scrambled order."""
    base, ks, summer, rng = _block(13, np.arange(-5, 6), n_pairs=4)
    zero = np.zeros_like(base[:1])  # its own mirror
    vals = np.concatenate([base[[0]], -base[[1]], -base[[0]], base[[1]], base[[2]], base[[2]], -base[[2]], base[[3]],
                           zero])
    cache = _decide_as_on_exact_tails(vals, ks, summer, rng, theta, (200,), compiled)
    laws = cache[("lattice",)]
    per_pair = len(laws.k) // len(vals)
    assert len(laws.counts) == 5 * per_pair  # base 0, base 1, base 2, base 3, zero
    np.testing.assert_array_equal(LD._families(vals)[0], [0, 1, 0, 1, 4, 4, 4, 7, 8])
    np.testing.assert_array_equal(LD._families(vals)[1], [False, False, True, True, False, False, True, False, False])
    tails, _ = cache[("lattice", f"{theta!r}")]
    assert tails.refined[2] > 0  # the short sum was reached, so the mirrors' reading of it was used
    # a summer that does not say its pairs share their tasks (neyman's) shares no law
    own = _decide_as_on_exact_tails(vals, ks, lambda x: summer(x), rng, theta, (), compiled)
    assert len(own[("lattice",)].counts) == len(vals) * per_pair


def test_mirror_tail_is_read_at_minus_c_minus_one():
    """The identity the mirrors rest on, on brackets: ``P(-S <= c) = 1 - P(S <= -c - 1)``,
    with both thresholds of ``approx_bracket`` in one call equal to two calls of one."""
    values = np.arange(-5, 6)
    rng = np.random.default_rng(31)
    hist = random_rows(rng, 600, values, 60)
    k, s, q, vlo, vhi = moments(hist, values)
    c = np.rint(s + rng.normal(0, 1.0, len(k)) * np.sqrt(np.maximum(k, 1)) * 2).astype(np.int64)
    mirror = LT.tail(hist[:, ::-1], -values[::-1], c)  # P(-S <= c) on the reversed histogram
    exact = LT.tail(hist, values, c)
    spread = np.sqrt(np.maximum(k * q - s * s, 0)) > 0
    for lo, hi in (LT.approx_bracket(hist, values, np.stack([c, -c - 1]), k, s, q, vlo, vhi),
                   short_brackets(hist.astype(np.uint16), values, np.stack([c, -c - 1]), k, s, q, vlo, vhi,
                                  LT.EPS_ALIAS, LT.EPS_APPROX)):
        assert np.all(1.0 - hi[1] <= mirror + 1e-12) and np.all(mirror <= 1.0 - lo[1] + 1e-12)
        assert np.all(lo[0] <= exact + 1e-12) and np.all(exact <= hi[0] + 1e-12)
        # the window holds both thresholds, and is no less sharp for it
        assert np.quantile((hi - lo)[:, spread], 0.9) < 1e-3


def test_kernel_compiles_where_numba_cannot_cache(monkeypatch):
    """A read-only install without a writable home: numba refuses ``cache=True`` at
    decoration; the kernel is then compiled in each process instead of failing the import."""
    from service.engine import lattice_short as K

    calls = []

    def fake_njit(**options):
        calls.append(options)
        if options.get("cache"):
            raise RuntimeError("cannot cache function '_brackets': no locator available")
        return lambda fn: fn

    monkeypatch.setattr(K, "njit", fake_njit)
    assert K.compiled(lambda x: x + 1)(1) == 2
    assert calls == [{"cache": True, "nogil": True}, {"nogil": True}]


@pytest.mark.parametrize("k", [1, 2, 3, 40, 77, 100, 101, 300, 1000])
def test_power_by_squaring_matches_numpy(k):
    """``_power`` replaces numpy's complex power (which goes through exp/log past k = 100)."""
    rng = np.random.default_rng(k)
    z = np.sqrt(rng.random(500)) * np.exp(2j * np.pi * rng.random(500))  # inside the unit disk
    z[:5] = np.exp(2j * np.pi * rng.random(5))  # on the circle: |z|^k = 1
    got = LT._power(z.copy(), k)
    want = z.astype(np.clongdouble) ** k
    assert np.abs(got - want).max() < 1e-13 * k


def test_present_range_matches_a_scan():
    rng = np.random.default_rng(5)
    for n_v in (1, 11, 24, 25, 53, 60):
        counts = (rng.random((400, n_v)) < 0.2) * rng.integers(1, 9, (400, n_v))
        counts[:3] = 0  # empty rows
        counts = counts.astype(np.float32)
        lo, hi = LD._present_range(counts)
        c_lo, c_hi = np.empty(len(counts), dtype=np.int64), np.empty(len(counts), dtype=np.int64)
        law_ranges(counts.astype(np.uint16), c_lo, c_hi)  # the compiled one, on the counts' type it is compiled for
        for row, a, b, ca, cb in zip(counts, lo, hi, c_lo, c_hi, strict=True):
            present = np.flatnonzero(row > 0)
            if len(present):
                assert (a, b) == (ca, cb) == (present[0], present[-1])


@pytest.mark.parametrize("n_tasks", [30, 300, 1 << 16])  # fields of 8 bits, of 16, float32 sums per value
def test_compiled_histograms_have_numpy_ranges(n_tasks):
    """``Histograms`` with ``compiled`` (ranges by ``lattice_kernel``) against numpy's, mirrors and
    cases of no tasks included."""
    base, ks, summer, rng = _block(23, np.arange(-5, 6), n_pairs=3, n_tasks=n_tasks, reps=10)
    vals = np.concatenate([base, -base[:2], np.zeros_like(base[:1])])
    ks = np.concatenate([[0], ks])  # a budget of no tasks first

    def summer0(x):
        return np.concatenate([np.zeros((len(x), 10, 1)), summer(x)], axis=2)

    summer0.shared = True
    sums = summer0(vals.astype(np.float32)), summer0((vals * vals).astype(np.float32))
    numpy_h = LD.Histograms(vals, summer0, *sums, ks)
    compiled_h = LD.Histograms(vals, summer0, *sums, ks, compiled=True)
    np.testing.assert_array_equal(numpy_h.vlo, compiled_h.vlo)
    np.testing.assert_array_equal(numpy_h.vhi, compiled_h.vhi)
    np.testing.assert_array_equal(numpy_h.counts, compiled_h.counts)  # unpacked by the kernel
    assert compiled_h.counts.dtype == (np.uint16 if n_tasks < 1 << 16 else np.float32)
    assert compiled_h.flip.any() and (compiled_h.k == 0).any()


def test_group_order_sorts_by_keys_and_keeps_equal_hashes_adjacent():
    rng = np.random.default_rng(8)
    keys = (rng.integers(0, 4, 3000), rng.integers(-50, 50, 3000), rng.integers(0, 3, 3000))
    fp = rng.integers(0, 40, 3000)
    order = LT._group_order(keys, fp)
    assert sorted(order) == list(range(3000))
    seq = list(zip(*(key[order] for key in keys), strict=True))
    assert seq == sorted(seq)  # sorted by the keys, first most significant
    rows = list(zip(*(key[order] for key in keys), fp[order], strict=True))
    runs = [row for i, row in enumerate(rows) if i == 0 or row != rows[i - 1]]
    assert len(runs) == len(set(runs))  # a (keys, hash) run is never split


def test_approx_merges_only_equal_histograms(monkeypatch):
    """Repeated rows are computed once, and only equal rows are merged: with a hash shared by
    every row (so that different rows interleave in the sort), rows of one window group that
    differ must still get their own brackets. The replay's shape: one threshold per k,
    histograms drawn from one pair."""
    values = np.arange(-5, 6)
    rng = np.random.default_rng(21)
    p = np.array([0, 0, 0, 1, 2, 40, 3, 1, 0, 0, 0], dtype=np.float64)
    hist = np.array([rng.multinomial(k, p / p.sum()) for k in rng.choice([6, 12], 1500)], dtype=np.float64)
    k = hist.sum(axis=1).astype(np.int64)
    s, q = hist @ values, hist @ (values * values)
    c = np.where(k == 6, 0, 1).astype(np.int64)
    present = hist > 0
    vlo = values[np.argmax(present, axis=1)].astype(np.float64)
    vhi = values[len(values) - 1 - np.argmax(present[:, ::-1], axis=1)].astype(np.float64)
    args = (hist, values, c, k, s, q, vlo, vhi)
    monkeypatch.setattr(LT, "MERGE_BELOW", 0)  # the windows of a row alone (small groups tested below)
    merged = LT.approx_bracket(*args)
    with monkeypatch.context() as m:
        m.setattr(LT, "row_hash", lambda words: np.zeros(len(words), dtype=np.int64))
        clash = LT.approx_bracket(*args)
    alone = np.array([[b[0] for b in LT.approx_bracket(*(x[i : i + 1] if x is not values else x for x in args))]
                      for i in range(len(hist))])
    assert len(np.unique(hist, axis=0)) < len(hist) / 2  # duplicates to merge
    exact = LT.tail(hist, values, c)
    for lo, hi in (merged, clash):
        assert np.all(lo <= exact + 1e-12) and np.all(exact <= hi + 1e-12)  # each row's own bracket
        # alone, a row may leave out terms below EPS_APPROX that its block kept
        np.testing.assert_allclose(np.stack([lo, hi], axis=1), alone, rtol=0, atol=1e-5)


def test_small_groups_share_a_call_with_longer_windows(monkeypatch):
    """Rows of one ``(k, c)`` whose spreads give windows of many lengths: the small groups are
    computed with the next longer window, and every bracket still contains the exact tail and
    stays within 3x the width it has with a window of its own."""
    values = np.arange(-5, 6)
    rng = np.random.default_rng(5)
    k = 60
    rows = []
    for i in range(400):  # spreads from one value to all eleven: many window lengths
        p = np.zeros(11)
        width = 1 + i % 6
        p[5 - width + 1 : 5 + width] = rng.dirichlet(np.ones(2 * width - 1))
        rows.append(rng.multinomial(k, p))
    hist = np.array(rows, dtype=np.float64)
    ks = np.full(len(hist), k, dtype=np.int64)
    s, q = hist @ values, hist @ (values * values)
    c = np.zeros(len(hist), dtype=np.int64)
    present = hist > 0
    vlo = values[np.argmax(present, axis=1)].astype(np.float64)
    vhi = values[len(values) - 1 - np.argmax(present[:, ::-1], axis=1)].astype(np.float64)
    args = (hist, values, c, ks, s, q, vlo, vhi)
    calls = []
    real = LT._fourier_cdf
    monkeypatch.setattr(LT, "_fourier_cdf", lambda *a: calls.append(a[5]) or real(*a))
    lo, hi = LT.approx_bracket(*args)
    merged_calls = list(calls)
    monkeypatch.setattr(LT, "MERGE_BELOW", 0)
    calls.clear()
    lo0, hi0 = LT.approx_bracket(*args)
    assert len(merged_calls) < len(calls)  # some groups did merge
    exact = LT.tail(hist, values, c)
    assert np.all(lo <= exact + 1e-12) and np.all(exact <= hi + 1e-12)
    spread = k * q - s * s > 0  # (a one-value row is Bennett's: S is a constant)
    assert np.all((hi - lo)[spread] <= np.maximum(hi0 - lo0, 1e-4)[spread] * 3)


def test_group_order_for_keys_too_wide_to_share_a_word_with_the_hash():
    """Packed keys past 2**54 leave under 8 hash bits: the two-sort path."""
    rng = np.random.default_rng(9)
    keys = (rng.integers(0, 3, 2000), rng.integers(-(1 << 58), 1 << 58, 2000) // (1 << 55) * (1 << 55))
    assert int(LT._pack(keys).max()).bit_length() > 54
    fp = rng.integers(0, 1 << 60, 2000) // (1 << 56)
    order = LT._group_order(keys, fp)
    rows = list(zip(*(key[order] for key in keys), fp[order], strict=True))
    assert sorted(order) == list(range(2000))
    assert [r[:2] for r in rows] == sorted(r[:2] for r in rows)
    runs = [row for i, row in enumerate(rows) if i == 0 or row != rows[i - 1]]
    assert len(runs) == len(set(runs))


def test_pack_is_equal_exactly_where_the_keys_are():
    rng = np.random.default_rng(10)
    for scale in (10, 1 << 58):  # mixed radix, and dense ids past 62 bits
        keys = (rng.integers(0, 5, 3000), rng.integers(-scale, scale, 3000) // max(1, scale // 8),
                rng.integers(0, 3, 3000) * scale)
        packed = LT._pack(keys)
        rows = list(zip(*keys, strict=True))
        order = np.argsort(packed, kind="stable")
        assert [rows[i] for i in order] == sorted(rows)  # sorts as the keys do
        assert len(set(packed.tolist())) == len(set(rows))  # equal exactly where the keys are


@pytest.mark.parametrize("n_tasks", [30, 300, 1 << 16])
def test_count_values_packs_exact_counts_and_words_that_code_rows(n_tasks):
    """Counts packed several to a float64 (8-bit fields below 256 tasks, 16-bit below 65,536,
    one sum per value past that) equal the per-value sums, and rows with equal words are
    exactly the equal rows."""
    rng = np.random.default_rng(n_tasks)
    values = np.array([-5, -3, -1, 0, 1, 2, 4, 5, 7, -7, 3, -2, 6, -6])  # 14 values: three words at 8 bits
    n_pairs, reps = 3, 4 if n_tasks > 1000 else 20
    vals = rng.choice(values, size=(n_pairs, n_tasks), p=rng.dirichlet(np.ones(len(values))))
    ks = np.unique(np.linspace(1, n_tasks, 6).astype(int))
    if n_tasks > 1000:  # a few tasks carry the variety; the rest are 0
        vals[:, 20:] = 0
    orders = np.stack([rng.permutation(n_tasks) for _ in range(reps)])
    rank = np.empty_like(orders)
    rank[np.arange(reps)[:, None], orders] = np.arange(n_tasks)[None, :]
    obs = (rank.T[:, :, None] < ks[None, None, :]).reshape(n_tasks, -1).astype(np.float32)

    def summer(x):
        dt = np.float64 if x.dtype == np.float64 else np.float32
        return (x.astype(dt) @ obs.astype(dt)).astype(np.float64).reshape(len(x), reps, len(ks))

    n_cases = n_pairs * reps * len(ks)
    got_vals, counts, words = LD.count_values(vals, summer, n_cases)
    np.testing.assert_array_equal(got_vals, np.unique(vals))
    want = np.stack([summer((vals == v).astype(np.float32)).ravel() for v in got_vals], axis=1)
    np.testing.assert_array_equal(counts.astype(np.float64), want)
    assert counts.dtype == (np.uint8 if n_tasks < 256 else np.uint16 if n_tasks < 1 << 16 else np.float32)
    _, row_id = np.unique(want, axis=0, return_inverse=True)
    _, word_id = np.unique(words, axis=0, return_inverse=True)
    same_rows = row_id.ravel()[:, None] == row_id.ravel()[None, :]
    same_words = word_id.ravel()[:, None] == word_id.ravel()[None, :]
    np.testing.assert_array_equal(same_rows, same_words)
    assert len(np.unique(row_id)) > 10  # the check sees many different rows


@pytest.mark.parametrize(("a", "big_b"), [(0.05, 200), (0.1, 50), (0.01, 1000), (0.5, 7)])
def test_finite_b_thresholds_are_sound_at_both_ends_of_every_cell(a, big_b):
    """Where ``_finite_b_decide`` concludes or defers without a binomial, the binomial agrees:
    checked against scipy at the thresholds themselves and at both ends of the uniform's cell
    (the least favourable points: a table that took a cell's other end, or a grid point one
    cell off, fails here)."""
    sure_c, sure_d = LD._threshold_tables(a, big_b)
    c = math.floor(a * big_b + 1e-9)
    rng = np.random.default_rng(big_b)
    cells = np.r_[0, LD._U_GRID - 1, rng.integers(0, LD._U_GRID, 3000)]
    u_ends = np.concatenate([cells / LD._U_GRID, np.nextafter((cells + 1) / LD._U_GRID, 0.0)])
    cell = np.tile(cells, 2)
    for w, says_conclude in ((sure_c[cell], True), (sure_d[cell], False)):
        p_conclude = stats.binom.cdf(c, big_b, w)
        if says_conclude:
            assert np.all(u_ends < p_conclude)
        else:
            sure = u_ends > 0
            assert np.all(u_ends[sure] >= p_conclude[sure])
    # the thresholds are tight: a cell's conclude and defer points are a few grid cells apart
    p1, p0 = R.saturation(a, big_b)
    assert np.all(sure_c <= sure_d)
    assert np.quantile(sure_d - sure_c, 0.99) <= 4 * (p0 - p1) / (LD._GRID - 1)


def test_finite_b_decide_matches_the_binomial_on_every_case():
    """The decision for any tail and uniform equals ``u < P(conclude)`` from scipy, on both
    sides (``pos``), at the saturation points, at u = 0 and near the thresholds."""
    a, big_b = 0.05, 200
    rng = np.random.default_rng(3)
    p1, p0 = R.saturation(a, big_b)
    sure_c, sure_d = LD._threshold_tables(a, big_b)
    n = 40_000
    u = rng.random(n)
    u[:50] = 0.0
    cell = np.clip((u * LD._U_GRID).astype(int), 0, LD._U_GRID - 1)
    wrong = rng.uniform(0, 0.2, n)
    wrong[50:2000:3] = sure_c[cell[50:2000:3]]
    wrong[51:2000:3] = sure_d[cell[51:2000:3]]
    wrong[52:2000:3] = np.nextafter(sure_c[cell[52:2000:3]], 1.0)
    wrong[2000:2100] = p1
    wrong[2100:2200] = p0
    pos = rng.random(n) < 0.5
    p_low = np.where(pos, wrong, 1.0 - wrong)
    got = LD._finite_b_decide(a, big_b, pos, u)[0](p_low, slice(None))
    conclude = u < R.bootstrap_conclude_prob(p_low, pos, a, big_b)  # (scipy's binomial, either side)
    want = np.where(conclude, np.where(pos, R.ACCEPT, R.REJECT), R.DEFER)
    np.testing.assert_array_equal(got, want)
    idx = rng.permutation(n)[: n // 2]  # through an index, as a later stage calls it
    np.testing.assert_array_equal(LD._finite_b_decide(a, big_b, pos, u)[0](p_low[idx], idx), want[idx])


@pytest.mark.parametrize("eps_alias", [0.3, 0.05, 1e-3])
def test_compiled_brackets_hold_with_short_windows(eps_alias):
    """``lattice_kernel.short_brackets`` with windows far shorter than the replays use, where
    the mass aliased from beyond each end is large: each end's bound must still cover it."""
    values = np.arange(-5, 6)
    rng = np.random.default_rng(53)
    hist = random_rows(rng, 1500, values, 150)
    k, s, q, vlo, vhi = moments(hist, values)
    sd = np.sqrt(np.maximum(k * q - s * s, 0) / k)
    c = np.rint(s + rng.normal(0, 1.5, len(k)) * np.maximum(sd, 1)).astype(np.int64)
    exact, mirror = LT.tail(hist, values, c), LT.tail(hist[:, ::-1], -values[::-1], c)
    lo, hi = short_brackets(hist.astype(np.uint16), values, np.stack([c, -c - 1]), k, s, q, vlo, vhi, eps_alias, 1e-9)
    assert np.all(lo[0] <= exact + 1e-12) and np.all(exact <= hi[0] + 1e-12)
    assert np.all(1.0 - hi[1] <= mirror + 1e-12) and np.all(mirror <= 1.0 - lo[1] + 1e-12)
    assert np.median((hi - lo)[0, sd > 0]) < 3 * eps_alias  # wide only by what the windows leave out


def _near_periodic_rows(rng: np.random.Generator, n_rows: int, values: np.ndarray, k_max: int) -> np.ndarray:
    """Histograms with nearly all their mass on multiples of 5 and a little on the rest: ``|φ|``
    climbs back towards 1 near ω = 2π/5 and its multiples, between frequencies where it is small."""
    on_five = values % 5 == 0
    rows = []
    for _ in range(n_rows):
        p = np.where(on_five, rng.random(len(values)), rng.random(len(values)) * 0.02)
        rows.append(rng.multinomial(int(rng.integers(5, k_max + 1)), p / p.sum()))
    return np.array(rows, dtype=np.float64)


@pytest.mark.parametrize("shape", ["spread", "few_tasks", "near_periodic"])
def test_sparse_brackets_contain_the_exact_tail(shape):
    """Values with many distinct ``|v|`` (``lattice_short.SPARSE_MAGS`` or more: scores of step
    1/40 here) take the sparse sums, which skip the frequencies a bound on ``|φ|``'s slope keeps
    below the threshold: the short and the whole-support brackets must still hold the exact tail,
    for a threshold and its mirror, and be as narrow as the dense sums' (where ``|φ|`` keeps coming
    back near 1, skipping too far would leave out terms that matter)."""
    from service.engine.lattice_short import SPARSE_MAGS

    if shape == "spread":
        values = np.arange(-40, 41)
        hist = random_rows(np.random.default_rng(71), 2000, values, 150)
    elif shape == "few_tasks":  # short windows with many rows each: the tabled sums
        values = np.arange(-40, 41)
        hist = random_rows(np.random.default_rng(74), 2000, values, 20)
    else:  # multiples of 5 up to 160, and -2 and 1
        values = np.unique(np.r_[np.arange(-160, 161, 5), -2, 1])
        hist = _near_periodic_rows(np.random.default_rng(72), 300, values, 80)
    assert len({abs(int(v)) for v in values if v}) >= SPARSE_MAGS
    rng = np.random.default_rng(73)
    k, s, q, vlo, vhi = moments(hist, values)
    sd = np.sqrt(np.maximum(k * q - s * s, 0) / k)
    c = np.rint(s + rng.normal(0, 1.5, len(k)) * np.maximum(sd, 1)).astype(np.int64)
    exact, mirror = LT.tail(hist, values, c), LT.tail(hist[:, ::-1], -values[::-1], c)
    for eps, full, width in ((LT.EPS_APPROX, False, 1e-3), (LT.EPS_TERM, True, 1e-8)):
        lo, hi = short_brackets(hist.astype(np.uint16), values, np.stack([c, -c - 1]), k, s, q, vlo, vhi,
                                LT.EPS_ALIAS, eps, full=full)
        assert np.all(lo[0] <= exact + 1e-12) and np.all(exact <= hi[0] + 1e-12), (full, np.max(lo[0] - exact))
        assert np.all(1.0 - hi[1] <= mirror + 1e-12) and np.all(mirror <= 1.0 - lo[1] + 1e-12), full
        assert np.quantile((hi - lo)[:, sd > 0], 0.9) < width, full


@pytest.mark.parametrize("n_tasks", [30, 300])
def test_counting_along_orders_equals_the_packed_products(n_tasks):
    """``lattice_kernel.count_words`` (counts along each order's prefixes) gives the words,
    counts and value ranges that ``pack_counts`` (matrix products) and ``unpack_counts`` give:
    8- and 16-bit fields, budgets that repeat a k, and values of 21 columns (several words)."""
    from service.engine.lattice_kernel import count_words, unpack_counts

    vals, _, _, rng = _block(31, np.arange(-10, 11), n_pairs=5, n_tasks=n_tasks, reps=9)
    ks = np.array([1, 4, 4, n_tasks // 2, n_tasks])
    order = np.stack([rng.permutation(n_tasks) for _ in range(9)])
    rank = np.empty_like(order)
    rank[np.arange(9)[:, None], order] = np.arange(n_tasks)[None, :]
    obs = (rank.T[:, :, None] < ks[None, None, :]).reshape(n_tasks, -1).astype(np.float64)

    def products(x):  # noqa: ANN001, ANN202
        return (x @ obs).reshape(len(x), 9, len(ks))

    want_vals, want_words, want_bits = LD.pack_counts(vals, products, 5 * 9 * len(ks))
    want_counts, want_lo, want_hi = unpack_counts(want_words, want_bits, len(want_vals))
    products.order, products.ks = order, ks
    got = count_words(vals, products)
    assert got is not None
    for g, w in zip(got, (want_vals, want_words, want_bits, want_counts, want_lo, want_hi), strict=True):
        np.testing.assert_array_equal(g, w)
    assert want_bits == (8 if n_tasks < 256 else 16) and want_words.shape[1] > 1
    products.ks = ks[::-1]  # budgets out of order: not prefixes to count along
    assert count_words(vals, products) is None
    assert count_words(vals, lambda x: x) is None  # a summer without orders (neyman's)


def test_compiled_normal_cdf_is_within_its_stated_error():
    """``lattice_kernel._normal_cdf`` (a table of Φ and φ, cubic Hermite between its nodes, in
    the compiled Berry–Esseen bracket) against scipy's ``ndtr`` on a fine grid, tails, nodes and
    the edges of the table included: within the interpolation bound its docstring derives, and
    that within the error the bracket adds for it."""
    from scipy.special import ndtr

    from service.engine import lattice_kernel as K

    x = np.concatenate([np.linspace(-40, 40, 80_001), np.linspace(-6.5, 6.5, 200_001), K._PHI_X,
                        [0.0, -0.0, 1e-300, -1e-300, np.inf, -np.inf, 6.0, -6.0, np.nextafter(6.0, 0)]])
    got = np.array([K._normal_cdf(v) for v in x])
    err = np.max(np.abs(got - ndtr(x)))
    bound = K._PHI_STEP**4 / 384 * 0.5506 + ndtr(-K._PHI_REACH) + 1e-15
    assert err <= bound < K.NORMAL_CDF_ERROR
    assert np.isnan(K._normal_cdf(np.nan))


@pytest.mark.parametrize("n", [1, 3, 5, 17, 1025, 60001])
def test_half_turn_tables_are_the_phases(n):
    """``lattice_short._half_turn`` fills ``e^{iπp/n}`` for ``p < 2n`` from a quarter of them by
    symmetry: every entry within rounding of ``cos`` and ``sin`` computed directly (a wrong sign
    or a mirror off by one is off by up to 2)."""
    from service.engine.lattice_short import _half_turn

    h_cos, h_sin = np.full(2 * n + 2, np.nan), np.full(2 * n + 2, np.nan)
    _half_turn(h_cos, h_sin, n)
    p = np.arange(2 * n)
    assert np.max(np.abs(h_cos[: 2 * n] - np.cos(p * np.pi / n))) < 4e-15
    assert np.max(np.abs(h_sin[: 2 * n] - np.sin(p * np.pi / n))) < 4e-15
    assert np.isnan(h_cos[2 * n :]).all()  # nothing written past the table


def test_mod_by_a_reciprocal_is_the_remainder():
    """``lattice_short._mod`` (a float reciprocal instead of a division) equals ``%`` wherever the
    sums use it, up to 2**40: random values, and those next to multiples of ``m`` where the float
    quotient rounds across an integer."""
    from service.engine.lattice_short import _mod

    rng = np.random.default_rng(5)
    moduli = [2, 3, 6, 1026, 120_002, 2 * (2**18 + 1), 2**21 - 2, *rng.integers(2, 2**22, 200).tolist()]
    low = 0  # cases whose float quotient fell one short (the correction that takes it back is needed)
    for m in moduli:
        inv = 1.0 / m
        xs = np.r_[rng.integers(0, 2**40, 200), (rng.integers(1, 2**40 // m, 200)[:, None] * m + [-1, 0, 1]).ravel()]
        xs = xs[xs >= 0].tolist()
        assert [_mod(x, m, inv) for x in xs] == [x % m for x in xs], m
        low += sum(int(x * inv) < x // m for x in xs)
    assert low > 0
