"""Decision rules (SPEC §4.2) on observed paired differences.

Decisions are coded ``ACCEPT = 1``, ``REJECT = -1``, ``DEFER = 0``. The kernels work on
sufficient statistics so that replay can evaluate millions of cases at once:

* differences live on a lattice ``d = v / L`` with integer ``v`` (``L = 1`` for binary
  single-trial data, ``L = 5`` for fractions of five trials, ...); ``s = Σ v`` and
  ``q = Σ v²`` over the ``k`` observed tasks; comparisons with ``θ`` are then exact;
* the bootstrap needs the histogram of ``v`` (for binary data: ``n+`` and ``n-``).

``decide`` wraps the kernels for one observed vector (live decisions, tests).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import special

from service.engine import binom
from service.engine import tails as T
from service.engine.tails import (  # noqa: F401  (the rules' tails, under their old names)
    FAR_TAIL,
    lattice_screen,
    tail_binary,
    tail_lattice,
    tail_trinomial,
    tail_trinomial_screen,
)

ACCEPT, REJECT, DEFER = 1, -1, 0
MAX_LATTICE = 10_000
MAX_FFT = 1 << 18
"""Largest support (lattice units) of a resample sum whose exact law is convolved by FFT."""
TOL = 1e-9


def find_lattice(values: np.ndarray, max_l: int = MAX_LATTICE) -> int | None:
    """Smallest ``L <= max_l`` with every value an integer multiple of ``1/L`` (within 1e-9).

    Candidates come from a sample of the distinct values (a lattice of all values is one of
    the sample's), then each is checked on all of them.
    """
    arr = np.asarray(values, dtype=np.float64)
    if arr.size and np.all(arr == np.round(arr)):  # 0/1 data, the common case: skip the search
        return 1
    v = np.unique(arr)
    v = v[np.isfinite(v)]
    sample = v[:: max(1, len(v) // 64)]
    lats = np.arange(1, max_l + 1, dtype=np.float64)
    scaled = lats[:, None] * sample[None, :]
    ok = np.all(np.abs(scaled - np.round(scaled)) <= 1e-9 * lats[:, None], axis=1)
    for lat in np.flatnonzero(ok) + 1:
        full = v * lat
        if np.all(np.abs(full - np.round(full)) <= 1e-9 * lat):
            return int(lat)
    return None


def above(s: np.ndarray, k: np.ndarray, theta: float, lattice: int | None) -> np.ndarray:
    """``m > θ`` where ``m = s/(k·L)``: on a lattice ``s`` is an integer and ``θ·k·L`` is
    compared with 1e-9 slack, so ``δ·N/100`` that is an integer in exact arithmetic (e.g.
    0.29·100 = 28.999999999999996 in floats) is not crossed by ``s = 29``."""
    if lattice is not None:
        return s > theta * k * lattice + TOL
    return s / np.maximum(k, 1) > theta + TOL


# ----------------------------------------------------------------------------- kernels


def forced(s, k, theta, lattice):
    return np.where(above(s, k, theta, lattice), ACCEPT, REJECT).astype(np.int8)


def paired_normal(s, q, k, theta, a, lattice):
    """``se = sd(d, ddof=1)/sqrt(k)``; ``k < 2`` defers; ``se == 0`` decides as forced."""
    s = np.asarray(s, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    lat = lattice or 1
    pos = above(s, k, theta, lattice)
    ss = q * k - s * s  # k·Σv² - (Σv)² = k(k-1)·var·L²; exact in integers on a lattice
    if lattice is None:
        ss = np.where(ss <= 1e-12 * np.maximum(q * k, 1.0), 0.0, ss)
    zero = ss <= 0
    with np.errstate(divide="ignore", invalid="ignore"):
        se = np.sqrt(np.maximum(ss, 0) / (k * (k - 1))) / lat / np.sqrt(k)
        m = s / (k * lat)
        p_low = special.ndtr(-(m - theta) / se)  # Φ(-(m-θ)/se)
        p_high = special.ndtr(-(theta - m) / se)
    dec = np.where(pos, np.where(p_low <= a, ACCEPT, DEFER), np.where(p_high <= a, REJECT, DEFER))
    dec = np.where(zero, np.where(pos, ACCEPT, REJECT), dec)
    return np.where(k < 2, DEFER, dec).astype(np.int8)


def mcnemar(n_plus, n_minus, a):
    """Exact binomial test on discordant pairs (binary single-trial data, δ = 0)."""
    n_plus = np.rint(np.asarray(n_plus)).astype(np.int64)
    n_minus = np.rint(np.asarray(n_minus)).astype(np.int64)
    # Decide each distinct (n+, n-) once: replays repeat a few thousand of them millions of times.
    width = int(max(n_plus.max(initial=0), n_minus.max(initial=0))) + 1
    code = n_plus * width + n_minus
    uniq, inv = np.unique(code.ravel(), return_inverse=True)
    up, um = np.divmod(uniq, width)
    n = up + um
    p_acc = special.bdtrc(up - 1, n, 0.5)  # P(Bin(n,½) >= n+)
    p_rej = special.bdtr(up, n, 0.5)  # P(Bin(n,½) <= n+)
    p_acc = np.where(up <= 0, 1.0, p_acc)
    acc = (up > um) & (p_acc <= a)
    rej = (up <= um) & (p_rej <= a)
    dec = np.where(acc, ACCEPT, np.where(rej, REJECT, DEFER)).astype(np.int8)
    return dec[inv].reshape(code.shape)


def log_inv(a: float) -> float:
    """``ln(1/a)``, the evidence a rule needs at level ``a``; ``inf`` at ``a = 0`` (a spending
    function spends nothing at its first looks: nothing may conclude there)."""
    return math.log(1.0 / a) if a > 0 else math.inf


def serfling_radius(k, n, a):
    """``ε = 2·sqrt((1 - (k-1)/N)·ln(1/a)/(2k))`` for values of range 2."""
    k = np.asarray(k, dtype=np.float64)
    return 2.0 * np.sqrt(np.maximum(1.0 - (k - 1.0) / n, 0.0) * log_inv(a) / (2.0 * k))


def serfling(s, k, n, theta, a, lattice):
    k = np.asarray(k, dtype=np.float64)
    m = np.asarray(s, dtype=np.float64) / (k * (lattice or 1))
    eps = serfling_radius(k, n, a)
    return np.where(m - eps > theta, ACCEPT, np.where(m + eps <= theta, REJECT, DEFER)).astype(np.int8)


def bootstrap_threshold(theta: float, k: np.ndarray, lattice: int) -> np.ndarray:
    """Largest resample sum (in lattice units) with ``m* <= θ``."""
    return np.floor(theta * np.asarray(k, dtype=np.float64) * lattice + TOL).astype(np.int64)


def _chernoff_edge(big_b: int, c: int, upper: bool, tiny: float) -> float:
    """For ``X ~ Bin(B, p)``: the largest ``p`` with ``P(X > c) < tiny`` (``upper``) or the
    smallest with ``P(X <= c) < tiny``, by Chernoff's ``exp(-B·KL(x/B || p))`` and bisection."""

    def kl(x: float, p: float) -> float:
        out = 0.0
        if x > 0:
            out += x * math.log(x / p)
        if x < 1:
            out += (1 - x) * math.log((1 - x) / (1 - p))
        return out

    if upper:
        x = (c + 1) / big_b
        if x > 1:
            return 1.0  # X > c is impossible
        lo, hi = 0.0, x  # bound holds for p < x
        for _ in range(200):
            mid = (lo + hi) / 2
            if mid > 0 and math.exp(-big_b * kl(x, mid)) < tiny:
                lo = mid
            else:
                hi = mid
        return lo
    x = c / big_b
    if x < 0:
        return 0.0  # X <= c is impossible
    lo, hi = x, 1.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if mid < 1 and math.exp(-big_b * kl(x, mid)) < tiny:
            hi = mid
        else:
            lo = mid
    return hi


@lru_cache(maxsize=64)
def saturation(a: float, big_b: int) -> tuple[float, float]:
    """``(p1, p0)`` for the finite-B rule: below ``p1`` the chance to conclude is within
    ``2^-54`` of 1 (every uniform ``u < 1`` concludes), above ``p0`` it is below ``2^-60``
    (every ``u > 0`` defers). ``p`` is the tail on the wrong side (``p_low`` when ``m > θ``)."""
    c = math.floor(a * big_b + 1e-9)
    return _chernoff_edge(big_b, c, True, 2.0**-55), _chernoff_edge(big_b, c, False, 2.0**-61)  # with margin


def conclude_binary(k, n_plus, n_minus, c, a, resamples: int) -> np.ndarray:
    """``bootstrap_conclude_prob`` of 0/1 samples (``m > θ`` iff ``n+ - n- > c``), memoized
    as their tails are: a replay's blocks ask for the same tens of thousands of them again,
    and the binomial is as costly as looking the tail up."""
    big_b = int(resamples)
    c_max = math.floor(a * big_b + 1e-9)  # all that the rule takes of a
    p1 = saturation(a, big_b)[0]

    def compute(k, n_plus, n_minus, c):
        # a wrong-side tail below p1 concludes for every uniform (the binomial is 1 to rounding):
        # Chernoff's bound says so for most samples, without their tail
        q = np.ones(len(k))
        need = np.flatnonzero(T.chernoff_binary(k, n_plus, n_minus, c) > p1)
        if len(need):
            kk, npl, nmi, cc = k[need], n_plus[need], n_minus[need], c[need]
            q[need] = bootstrap_conclude_prob(T.tail_binary(kk, npl, nmi, cc), npl - nmi > cc, a, big_b)
        return q

    return T.memo_binary(("conclude", big_b, c_max), compute, k, n_plus, n_minus, c)


def exact_binary(k, n_plus, n_minus, c, a) -> np.ndarray:
    """``bootstrap_from_tail(..., "exact")`` of 0/1 samples (``m > θ`` iff ``n+ - n- > c``): a
    sample whose wrong-side tail Chernoff's bound puts at or below ``a`` concludes whatever its
    exact value, so only the others need their tail (about a fifth of a board's)."""
    k, n_plus, n_minus, c = (np.asarray(x, dtype=np.int64) for x in (k, n_plus, n_minus, c))
    pos = n_plus - n_minus > c
    dec = np.where(pos, ACCEPT, REJECT).astype(np.int8)
    need = np.flatnonzero(T.chernoff_binary(k, n_plus, n_minus, c) > a)
    if len(need):
        p_low = T.tail_binary(k[need], n_plus[need], n_minus[need], c[need])
        dec[need] = bootstrap_from_tail(p_low, pos[need], a, "exact")
    return dec


def bootstrap_conclude_prob(p_low, pos, a, resamples: int):
    """Probability that ``B`` resamples conclude: the count of ``m* <= θ`` is exactly
    ``Binomial(B, p_low)``; accept needs it ``<= floor(a·B)`` (when ``m > θ``), reject needs
    the count of ``m* > θ`` ``<= floor(a·B)`` (when ``m <= θ``)."""
    big_b = int(resamples)
    c = math.floor(a * big_b + 1e-9)
    p_low, pos = np.broadcast_arrays(np.asarray(p_low, dtype=np.float64), np.asarray(pos, dtype=bool))
    out = np.empty(p_low.shape)
    # each case needs one side; a replay's tails are mostly 0 or 1 and repeat: the binomial
    # once per distinct value of each side
    for side, prob in ((True, lambda v: binom.cdf(c, big_b, v)),
                       (False, lambda v: binom.sf(big_b - c - 1, big_b, v))):
        at = pos == side
        if at.any():
            vals, inv = np.unique(p_low[at], return_inverse=True)
            out[at] = prob(vals)[inv]
    return out


def bootstrap_from_tail(p_low, pos, a, resamples, u=None):
    """Decision from the exact resampling tail ``p_low = P(m* <= θ)``.

    ``resamples == "exact"``: accept iff ``m > θ`` and ``p_low <= a``; reject iff ``m <= θ``
    and ``1 - p_low <= a``. With ``B`` resamples the count of ``m* <= θ`` is exactly
    ``Binomial(B, p_low)``; ``u`` (uniforms, one per case) draws the decision from the
    resulting accept / reject probabilities, so one uniform replaces ``B·k`` draws.
    """
    p_low = np.asarray(p_low, dtype=np.float64)
    if resamples == "exact":
        acc = pos & (p_low <= a + 1e-12)
        rej = ~pos & (1.0 - p_low <= a + 1e-12)
    else:
        q = bootstrap_conclude_prob(p_low, pos, a, resamples)
        acc = pos & (u < q)
        rej = ~pos & (u < q)
    return np.where(acc, ACCEPT, np.where(rej, REJECT, DEFER)).astype(np.int8)


# ------------------------------------------------------------------------ anytime rule


def _log_wealth(quad: tuple, sign: int, mu) -> np.ndarray:
    """``ln M±_t(μ) = ±(L1 - L2·μ) - (Q0 - 2·Q1·μ + Q2·μ²)`` from the running sums."""
    l1, l2, q0, q1, q2 = quad
    return sign * (l1 - l2 * mu) - (q0 - 2.0 * q1 * mu + q2 * mu * mu)


_EB_SEGMENT = 4096
"""Steps of ``anytime_paths``' paths turned into rows at once: the loop reads one step of every
path at a time, and two float64 transposes of the whole ``[cases, kmax]`` held twice the
paths again (as int64) for the whole walk."""


def anytime_paths(v: np.ndarray, lattice: int, n: int, theta: float | Sequence[float], a: float, kmax: int,
                  cov_ok: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """First conclusion of the anytime-valid rule along each path (docs/engine-api.md).

    ``v``: ``[cases, >= kmax]`` integer lattice values in observation order (``d = v/L``);
    ``n``: population size ``N``; ``cov_ok``: ``[cases or 1, kmax]`` coverage met at step t.
    Returns ``(decision, stop)``: decision at the first step ``t <= kmax`` that concludes,
    ``stop = t`` (``kmax + 1`` when none). With a sequence of thresholds both gain a leading
    axis: the wealth sums do not depend on θ, so several thresholds cost little more than one.
    Paths that have concluded for every θ are dropped from the working set as they go.
    """
    thetas = np.atleast_1d(np.asarray(theta, dtype=np.float64))
    n_th = len(thetas)
    cases = v.shape[0]
    log_inv_a = log_inv(a)
    theta_x = (thetas[:, None] + 1.0) / 2.0
    scale = lattice or 1  # without a lattice ``v`` holds the differences themselves
    cov = None if cov_ok is None else np.broadcast_to(cov_ok[:, :kmax], (cases, kmax))
    idx = np.arange(cases)  # cases still undecided for some θ
    state = np.zeros((9, cases))  # s_prev, var_acc, l1, l2, q0, q1, q2, vsum, mu_hat
    state[1] = 0.25
    state[8] = 0.5
    dec = np.zeros((n_th, cases), dtype=np.int8)
    stop = np.full((n_th, cases), kmax + 1, dtype=np.int64)
    live = np.ones((n_th, cases), dtype=bool)
    for i in range(1, kmax + 1):
        if (i - 1) % _EB_SEGMENT == 0:  # the next steps, one row per step
            seg = np.asarray(v[:, i - 1 : min(kmax, i - 1 + _EB_SEGMENT)], dtype=np.float64)
            vt = np.ascontiguousarray(seg.T)
            xt = (vt / scale + 1.0) / 2.0
            cov_t = None if cov is None else np.ascontiguousarray(cov[:, i - 1 : i - 1 + len(vt)].T)
        s_prev, var_acc, l1, l2, q0, q1, q2, vsum, mu_hat = state
        j = (i - 1) % _EB_SEGMENT
        x = xt[j, idx]
        lam = np.minimum(0.5, np.sqrt(2.0 * log_inv_a / (var_acc / i * i * math.log(1.0 + i))))
        psi = -np.log1p(-lam) - lam
        rem = n - i + 1
        ai = x + s_prev / rem
        bi = n / rem
        l1 += lam * ai
        l2 += lam * bi
        q0 += psi * ai * ai
        q1 += psi * ai * bi
        q2 += psi * bi * bi
        var_acc += (x - mu_hat) ** 2
        s_prev += x
        state[8] = (0.5 + s_prev) / (i + 1)
        vsum += vt[j, idx]
        lo = s_prev / n
        hi = (s_prev + n - i) / n
        quad = (l1, l2, q0, q1, q2)
        pos = above(vsum[None, :], i, thetas[:, None], lattice)
        up_lo = _log_wealth(quad, 1, lo) >= log_inv_a
        dn_hi = _log_wealth(quad, -1, hi) >= log_inv_a
        acc = pos & ((lo > theta_x + TOL) | (up_lo & (_log_wealth(quad, 1, theta_x) >= log_inv_a)))
        rej = ~pos & ((hi <= theta_x + TOL) | ((_log_wealth(quad, -1, theta_x) >= log_inv_a) & dn_hi))
        hit = live[:, idx] & (acc | rej)
        if cov_t is not None:
            hit &= cov_t[j, idx][None, :]
        if hit.any():
            th, col = np.nonzero(hit)
            dec[th, idx[col]] = np.where(acc[th, col], ACCEPT, REJECT)
            stop[th, idx[col]] = i
            live[th, idx[col]] = False
            still = live[:, idx].any(axis=0)
            if not still.any():
                break
            if still.sum() < 0.7 * len(idx):  # compact the working set
                idx = idx[still]
                state = state[:, still]
    if np.ndim(theta) == 0:
        return dec[0], stop[0]
    return dec, stop


# --------------------------------------------------------------------- one observed vector


@dataclass(frozen=True)
class RuleResult:
    """A rule's verdict on one observed vector, with the number that decided it."""

    decision: int
    k: int
    mean: float
    statistic: dict[str, float]


def decide(rule: str, d: np.ndarray, theta: float, a: float = 0.05, resamples: int | str = "exact",
           n: int | None = None, rng: np.random.Generator | None = None, binary: bool | None = None) -> RuleResult:
    """Apply one rule to observed differences ``d`` (in [-1, 1]) with threshold ``θ``.

    ``n`` is the population size ``N`` (serfling, anytime); ``rng`` is needed only for a
    finite number of bootstrap resamples. For ``anytime`` the order of ``d`` matters: the
    verdict is the first conclusion along it.
    """
    d = np.asarray(d, dtype=np.float64)
    k = len(d)
    lat = find_lattice(d) if k else 1
    m = float(d.mean()) if k else 0.0
    if k == 0:
        return RuleResult(DEFER, 0, 0.0, {})
    v = np.round(d * lat).astype(np.int64) if lat else d
    s = np.array(v.sum())
    q = np.array((v * v).sum())
    kk = np.array(k)
    if rule == "forced":
        return RuleResult(int(forced(s, kk, theta, lat)), k, m, {})
    if rule == "paired_normal":
        se = float(d.std(ddof=1) / math.sqrt(k)) if k > 1 else float("nan")
        dec = int(paired_normal(s, q, kk, theta, a, lat))
        # special.ndtr is stats.norm.cdf without its argument handling (~50 us on a live answer)
        p = float(special.ndtr(-abs(m - theta) / se)) if k > 1 and se > 0 else float("nan")
        return RuleResult(dec, k, m, {"se": se, "tail_probability": p})
    if rule == "mcnemar":
        if binary is False or not np.all(np.isin(d, (-1.0, 0.0, 1.0))):
            raise ValueError("mcnemar needs binary single-trial outcomes")
        npl, nmi = int((d > 0).sum()), int((d < 0).sum())
        nn = npl + nmi
        p = float(binom.sf(npl - 1, nn, 0.5)) if npl > nmi else float(binom.cdf(npl, nn, 0.5))
        return RuleResult(int(mcnemar(npl, nmi, a)), k, m, {"n_plus": npl, "n_minus": nmi, "p_value": p})
    if rule == "serfling":
        big_n = n or k
        eps = float(serfling_radius(k, big_n, a))
        return RuleResult(int(serfling(s, kk, big_n, theta, a, lat)), k, m, {"radius": eps})
    if rule == "bootstrap":
        pos = above(s, kk, theta, lat)
        if lat is None or 2 * lat * k > MAX_FFT:  # off a small lattice: literal resamples
            if resamples == "exact":
                raise ValueError("the exact bootstrap needs outcomes on a small grid of step 1/L; use a finite B")
            if rng is None:
                raise ValueError("a finite number of resamples needs rng")
            big_b = int(resamples)
            sums = v[rng.integers(0, k, size=(big_b, k))].sum(axis=1)
            low = int((~above(sums.astype(np.float64), k, theta, lat)).sum())
            c_max = math.floor(a * big_b + 1e-9)
            dec = ACCEPT if pos and low <= c_max else REJECT if not pos and big_b - low <= c_max else DEFER
            return RuleResult(dec, k, m, {"p_low": low / big_b, "p_high": 1.0 - low / big_b})
        c = bootstrap_threshold(theta, kk, lat)
        vals = np.unique(v)
        hist = np.array([[int((v == x).sum()) for x in vals]])
        p_low = float(tail_lattice(hist, vals, np.atleast_1d(c))[0])
        u = None
        if resamples != "exact":
            if rng is None:
                raise ValueError("a finite number of resamples needs rng")
            u = rng.random()
        dec = int(bootstrap_from_tail(np.array(p_low), np.array(pos), a, resamples, u))
        return RuleResult(dec, k, m, {"p_low": p_low, "p_high": 1.0 - p_low})
    if rule == "anytime":
        big_n = n or k
        dec, stop = anytime_paths(v[None, :], lat, big_n, theta, a, k)
        return RuleResult(int(dec[0]), k, m, {"stopped_at": int(stop[0]) if stop[0] <= k else None})
    raise ValueError(f"unknown rule '{rule}'")
