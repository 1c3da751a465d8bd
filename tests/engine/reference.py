"""A slow reference implementation of SPEC §2–§6, one case at a time.

Written independently of ``service.engine.rules`` / ``service.engine.replay``: it reads the
aggregated records (``Records``), and takes from the engine's ``Plan`` only what is shared
randomness (``plan.case_observed``: which tasks a case observes, in observation order) plus
the list of configurations. Everything else (task sets, paired differences, full decisions,
orientation, coverage floors, every decision rule, the coverage-aware wrapper, metrics and
sufficiency) is recomputed here, literally from the SPEC text, with plain Python / scipy.

Comparison conventions (SPEC §2 "compare exactly"):

- binary single-trial data: every comparison of a mean with θ = δ/100 is done in exact
  rational arithmetic on integer sums (δ read as the decimal it was written as);
- otherwise a mean ``x`` is "greater than θ" iff ``x > θ + 1e-9`` (the SPEC's tolerance).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache
from statistics import NormalDist

import numpy as np
from scipy import stats

TOL = 1e-9
ACCEPT, REJECT, DEFER = "accept", "reject", "defer"
METRICS = (
    "false_accept_rate",
    "false_reject_rate",
    "decision_error",
    "defer_rate",
    "coverage_failure",
    "cost_fraction",
    "task_fraction",
)


def dec(x: float) -> Fraction:
    """A float parameter (δ, a) read as the decimal the user wrote."""
    return Fraction(repr(float(x)))


# --------------------------------------------------------------------------- comparisons


@dataclass(frozen=True)
class Cmp:
    """How means are compared with θ = δ/100 for one pair (exact on integers, else 1e-9)."""

    delta: float
    exact: bool

    @property
    def theta(self) -> float:
        return float(self.delta) / 100.0

    def greater(self, total: float, count: int) -> bool:
        """Is ``total / count > θ``?"""
        if self.exact:
            return Fraction(round(total)) * 100 > dec(self.delta) * count
        return total / count > self.theta + TOL

    def mean_greater(self, x: float) -> bool:
        """For a mean that is not an integer sum over a count (only the tolerance applies)."""
        return x > self.theta + TOL


# --------------------------------------------------------------------------- coverage (§3)


def budget_k(b: float, n: int) -> int:
    return min(n, max(0, math.ceil(b * n - 1e-9)))


def floor_required(floor: str, k: int, sizes: Sequence[int]) -> list[int]:
    """r_g(k) for each group, straight from the SPEC §3 table."""
    big_n = sum(sizes)
    out = []
    for n_g in sizes:
        if floor == "proportional":
            out.append(max(1, min(n_g, (k * n_g) // big_n)))
        elif floor == "slack":
            out.append(max(1, min(n_g, (k * n_g) // big_n - 1)))
        elif floor == "one_per_group":
            out.append(1)
        elif floor == "none":
            out.append(0)
        else:
            raise ValueError(floor)
    return out


def coverage_feasible(floor: str, k: int, sizes: Sequence[int]) -> bool:
    return sum(floor_required(floor, k, sizes)) <= k


def meets_coverage(floor: str, k: int, sizes: Sequence[int], counts: Sequence[int]) -> bool:
    """Coverage feasible at ``k`` and at least r_g(k) observed tasks in every group."""
    if not coverage_feasible(floor, k, sizes):
        return False
    return all(c >= r for c, r in zip(counts, floor_required(floor, k, sizes), strict=True))


# --------------------------------------------------------------------------- decision rules (§4.2)


def forced(d: Sequence[float], cmp: Cmp) -> str:
    return ACCEPT if cmp.greater(sum(d), len(d)) else REJECT


def bootstrap_literal(d: Sequence[float], cmp: Cmp, a: float, b: int, rng: np.random.Generator) -> str:
    """B literal resamples of size k with replacement."""
    k = len(d)
    arr = np.asarray(d, dtype=np.float64)
    low = 0
    for _ in range(b):
        sample = arr[rng.integers(0, k, size=k)]
        if not cmp.greater(float(math.fsum(sample)), k):
            low += 1
    high = b - low
    up = cmp.greater(sum(d), k)
    if up and Fraction(low, b) <= dec(a):
        return ACCEPT
    if not up and Fraction(high, b) <= dec(a):
        return REJECT
    return DEFER


def lattice_scale(d: Sequence[float], max_scale: int = 2520) -> int | None:
    """Smallest L with every d·L an integer (within 1e-7), or None."""
    for scale in range(1, max_scale + 1):
        if all(abs(x * scale - round(x * scale)) < 1e-7 for x in d):
            return scale
    return None


def exact_bootstrap_tail(d: Sequence[float], cmp: Cmp) -> float:
    """P(m* <= θ) under the exact resampling distribution (k draws with replacement).

    {-1, 0, 1} data: condition on the number i of +1 draws (Bin(k, p+)); given i the number
    of -1 draws is Bin(k - i, p- / (1 - p+)), and m* <= θ iff i - j <= θ·k.
    Other lattice data: k-fold convolution of the one-draw pmf on the integer lattice d·L.
    """
    k = len(d)
    vals = {round(x) for x in d} if all(float(x).is_integer() for x in d) else None
    if vals is not None and vals <= {-1, 0, 1}:
        n_plus = sum(1 for x in d if x == 1)
        n_minus = sum(1 for x in d if x == -1)
        return _trinomial_tail(k, n_plus, n_minus, cmp)
    scale = lattice_scale(d)
    if scale is None:
        raise ValueError("exact bootstrap reference needs lattice data")
    ints = [round(x * scale) for x in d]
    return _lattice_tail(tuple(sorted(ints)), scale, cmp)


@lru_cache(maxsize=100_000)
def _trinomial_tail_cached(k: int, n_plus: int, n_minus: int, delta: float, exact: bool) -> float:
    cmp = Cmp(delta, exact)
    # c = the largest resample sum s (of +1/-1 draws) with s/k <= θ
    c = -k - 1
    for s in range(k, -k - 1, -1):
        if not cmp.greater(s, k):
            c = s
            break
    if c < -k:
        return 0.0
    p_plus, p_minus = n_plus / k, n_minus / k
    i = np.arange(k + 1)
    w = stats.binom.pmf(i, k, p_plus)  # number of +1 draws
    rest = k - i
    q = p_minus / (1.0 - p_plus) if p_plus < 1.0 else 0.0
    jmin = np.maximum(0, i - c)  # need (i - j) <= c, j = number of -1 draws among the rest
    tail = np.where(jmin == 0, 1.0, stats.binom.sf(jmin - 1, rest, q))
    tail = np.where(jmin > rest, 0.0, tail)
    return float(min(1.0, np.sum(w * tail)))


def _trinomial_tail(k: int, n_plus: int, n_minus: int, cmp: Cmp) -> float:
    return _trinomial_tail_cached(k, n_plus, n_minus, cmp.delta, cmp.exact)


@lru_cache(maxsize=4096)
def _lattice_tail_cached(ints: tuple[int, ...], scale: int, delta: float, exact: bool) -> float:
    cmp = Cmp(delta, exact)
    k = len(ints)
    lo, hi = min(ints), max(ints)
    pmf = np.zeros(hi - lo + 1)
    for v in ints:
        pmf[v - lo] += 1.0 / k
    dist = np.array([1.0])
    for _ in range(k):
        dist = np.convolve(dist, pmf)
    # dist[s] = P(sum of (v - lo) over k draws = s); the sum of d* is (s + k·lo)/scale.
    total = 0.0
    for s, p in enumerate(dist):
        if p and not cmp.mean_greater((s + k * lo) / scale / k):
            total += p
    return min(1.0, total)


def _lattice_tail(ints: tuple[int, ...], scale: int, cmp: Cmp) -> float:
    return _lattice_tail_cached(ints, scale, cmp.delta, cmp.exact)


def bootstrap_exact(d: Sequence[float], cmp: Cmp, a: float) -> tuple[str, float]:
    """Decision and the tail used (p_low on accept side, p_high on reject side)."""
    p_low = exact_bootstrap_tail(d, cmp)
    if cmp.greater(sum(d), len(d)):
        return (ACCEPT if p_low <= a else DEFER), p_low
    p_high = 1.0 - p_low
    return (REJECT if p_high <= a else DEFER), p_high


@lru_cache(maxsize=100_000)
def _finite_probs_cached(key: tuple[float, ...], delta: float, exact: bool, a: float, b: int) -> tuple[float, float]:
    cmp = Cmp(delta, exact)
    d = list(key)
    p_low = exact_bootstrap_tail(d, cmp)
    # count/B <= a  <=>  count <= floor(a·B) (a read as a decimal)
    c = math.floor(dec(a) * b)
    if cmp.greater(sum(d), len(d)):
        return float(stats.binom.cdf(c, b, p_low)), 0.0  # P(#{m* <= θ} <= c)
    return 0.0, float(stats.binom.cdf(c, b, 1.0 - p_low))  # P(#{m* > θ} <= c)


def bootstrap_finite_probabilities(d: Sequence[float], cmp: Cmp, a: float, b: int) -> tuple[float, float]:
    """P(accept), P(reject) of bootstrap(a, B): the number of the B resample means at or below θ
    is Binomial(B, p_low) with p_low the exact resampling tail."""
    return _finite_probs_cached(tuple(sorted(d)), cmp.delta, cmp.exact, a, b)


def paired_normal(d: Sequence[float], cmp: Cmp, a: float) -> tuple[str, float | None]:
    k = len(d)
    if k < 2:
        return DEFER, None
    if max(d) == min(d):  # sd == 0 exactly
        return forced(d, cmp), None
    m = math.fsum(d) / k
    var = math.fsum((x - m) ** 2 for x in d) / (k - 1)
    se = math.sqrt(var) / math.sqrt(k)
    theta = cmp.theta
    if cmp.greater(sum(d), k):
        p = NormalDist().cdf(-(m - theta) / se)
        return (ACCEPT if p <= a else DEFER), p
    p = NormalDist().cdf(-(theta - m) / se)
    return (REJECT if p <= a else DEFER), p


def binom_half_upper(n: int, x: int) -> Fraction:
    """P(Bin(n, 1/2) >= x), exactly."""
    return Fraction(sum(math.comb(n, i) for i in range(max(x, 0), n + 1)), 2**n)


def binom_half_lower(n: int, x: int) -> Fraction:
    """P(Bin(n, 1/2) <= x), exactly."""
    return Fraction(sum(math.comb(n, i) for i in range(0, min(x, n) + 1)), 2**n)


def mcnemar_counts(n_plus: int, n_minus: int, a: float) -> str:
    n = n_plus + n_minus
    if n == 0:
        return DEFER
    if n_plus > n_minus:
        return ACCEPT if binom_half_upper(n, n_plus) <= dec(a) else DEFER
    return REJECT if binom_half_lower(n, n_plus) <= dec(a) else DEFER


def mcnemar(d: Sequence[float], a: float) -> str:
    return mcnemar_counts(sum(1 for x in d if x == 1), sum(1 for x in d if x == -1), a)


def serfling_radius(k: int, big_n: int, a: float) -> float:
    return 2.0 * math.sqrt((1.0 - (k - 1) / big_n) * math.log(1.0 / a) / (2.0 * k))


def serfling(d: Sequence[float], cmp: Cmp, a: float, big_n: int) -> str:
    k = len(d)
    m = math.fsum(d) / k
    eps = serfling_radius(k, big_n, a)
    if cmp.mean_greater(m - eps):
        return ACCEPT
    if not cmp.mean_greater(m + eps):
        return REJECT
    return DEFER


def anytime_path(d: Sequence[float], cmp: Cmp, a: float, big_n: int) -> list[str]:
    """The anytime(a) decision after each step t = 1..len(d) (docs/engine-api.md).

    Literal: keeps every step's (λ_i, a_i, b_i) and re-evaluates ln M±_t(μ) as a sum over
    the steps at each needed μ (no running quadratic coefficients).
    """
    theta_x = (cmp.theta + 1.0) / 2.0
    log_target = math.log(1.0 / a)
    lams: list[float] = []
    psis: list[float] = []
    avals: list[float] = []
    bvals: list[float] = []
    s_prev = 0.0  # S_{i-1}
    sq = 0.0  # Σ_{j<i} (X_j - μ̂_{j-1})²
    out = []
    d_sum = 0.0
    for i, di in enumerate(d, start=1):
        x = (di + 1.0) / 2.0
        mu_hat = (0.5 + s_prev) / i
        var_hat = (0.25 + sq) / i
        lam = min(0.5, math.sqrt(2.0 * log_target / (var_hat * i * math.log(1.0 + i))))
        lams.append(lam)
        psis.append(-math.log(1.0 - lam) - lam)
        avals.append(x + s_prev / (big_n - i + 1))
        bvals.append(big_n / (big_n - i + 1))
        sq += (x - mu_hat) ** 2
        s_prev += x
        d_sum += di
        t = i
        lam_a, psi_a = np.asarray(lams), np.asarray(psis)
        av, bv = np.asarray(avals), np.asarray(bvals)

        def log_m(mu: float, sign: float, lam_a=lam_a, psi_a=psi_a, av=av, bv=bv) -> float:
            xi = av - bv * mu
            return float(np.sum(sign * lam_a * xi - psi_a * xi * xi))

        lo = s_prev / big_n
        hi = (s_prev + big_n - t) / big_n
        up = cmp.greater(d_sum, t)
        decision = DEFER
        if up:
            # lo_t > θ_X  <=>  S_t/N > (θ+1)/2  <=>  (2 S_t - N)/N > θ (an integer sum on binary data)
            if cmp.greater(2.0 * s_prev - big_n, big_n) or (
                log_m(lo, 1.0) >= log_target and log_m(theta_x, 1.0) >= log_target
            ):
                decision = ACCEPT
        else:
            # hi_t <= θ_X  <=>  (2 (S_t + N - t) - N)/N <= θ
            if not cmp.greater(2.0 * (s_prev + big_n - t) - big_n, big_n) or (
                log_m(theta_x, -1.0) >= log_target and log_m(hi, -1.0) >= log_target
            ):
                decision = REJECT
        out.append(decision)
    return out


def agrapa_bets(s_prev: float, q_prev: float, i: int, big_n: int, mu: float, rho: float) -> tuple[float, float, float]:
    """Step ``i``'s centre ``c`` (the mean of the ``N - i + 1`` values not yet seen, were the
    population mean ``mu``) and the two bets ``(λ⁺, λ⁻)`` aimed at it, from the sum and sum of
    squares of the ``i - 1`` values before it: aGRAPA, clipped to ``rho`` of the range."""
    c = (big_n * mu - s_prev) / (big_n - i + 1)
    mu_hat = (0.5 + s_prev) / i
    spread = 0.0 if i == 1 else max(q_prev - s_prev * s_prev / (i - 1), 0.0)  # Σ (X_j - X̄)² over j < i
    var_hat = (0.25 + spread) / i
    g = (mu_hat - c) / (var_hat + (mu_hat - c) ** 2)
    return c, min(max(g, 0.0), rho / max(c, 1e-9)), min(max(-g, 0.0), rho / max(1.0 - c, 1e-9))


def betting_path(d: Sequence[float], cmp: Cmp, a: float, big_n: int, rho: float = 0.75) -> list[str]:
    """The anytime(a) decision after each step (engine/betting.py's docstring), literally: a
    loop over the steps with running scalars and the capital as a product (compared in logs)."""
    theta_x = (cmp.theta + 1.0) / 2.0
    log_target = math.log(1.0 / a)
    s_prev = q_prev = 0.0
    log_up = log_dn = 0.0
    d_sum = 0.0
    out = []
    for i, di in enumerate(d, start=1):
        x = (di + 1.0) / 2.0
        c, lam_up, lam_dn = agrapa_bets(s_prev, q_prev, i, big_n, theta_x, rho)
        log_up += math.log(1.0 + lam_up * (x - c))
        log_dn += math.log(1.0 - lam_dn * (x - c))
        s_prev += x
        q_prev += x * x
        d_sum += di
        if cmp.greater(d_sum, i):
            sure = cmp.greater(2.0 * s_prev - big_n, big_n)  # S_t/N > θ_X: no completion can fall to θ
            out.append(ACCEPT if sure or log_up >= log_target else DEFER)
        else:
            sure = not cmp.greater(2.0 * (s_prev + big_n - i) - big_n, big_n)  # (S_t + N - t)/N <= θ_X
            out.append(REJECT if sure or log_dn >= log_target else DEFER)
    return out


def serfling_stitched_path(d: Sequence[float], cmp: Cmp, a: float, big_n: int) -> list[str]:
    """Baseline anytime rule: Serfling radius at level a·6/(π² t²) at step t."""
    out = []
    total = 0.0
    for t, di in enumerate(d, start=1):
        total += di
        m = total / t
        eps = serfling_radius(t, big_n, a * 6.0 / (math.pi**2 * t * t))
        if cmp.mean_greater(m - eps):
            out.append(ACCEPT)
        elif not cmp.mean_greater(m + eps):
            out.append(REJECT)
        else:
            out.append(DEFER)
    return out


# --------------------------------------------------------------------------- pairs (§1, §2)


@dataclass
class RefPair:
    a: int
    b: int
    tasks: list[int]
    diffs: list[float]
    exact: bool
    cost_a: list[float]

    @property
    def n(self) -> int:
        return len(self.tasks)

    def cmp(self, delta: float) -> Cmp:
        return Cmp(delta, self.exact)

    def positive(self, delta: float) -> bool:
        return self.cmp(delta).greater(math.fsum(self.diffs), self.n)

    @property
    def delta_full(self) -> float:
        return math.fsum(self.diffs) / self.n


def ref_filter(records, min_task_coverage: float) -> list[int]:
    """Indices of the systems with outcomes for >= min_task_coverage of the task universe."""
    n_tasks = len(records.tasks)
    keep = []
    for s in range(len(records.systems)):
        have = sum(1 for t in range(n_tasks) if records.trials[s, t] > 0)
        if have >= min_task_coverage * n_tasks - 1e-9:
            keep.append(s)
    return keep


def ref_pair(records, a: int, b: int) -> RefPair:
    tasks = [t for t in range(len(records.tasks)) if records.trials[a, t] > 0 and records.trials[b, t] > 0]
    exact = bool(records.binary_single_trial)
    diffs = []
    for t in tasks:
        diff = float(records.y[a, t]) - float(records.y[b, t])
        diffs.append(float(round(diff)) if exact else diff)
    cost_a = [float(records.cost[a, t]) for t in tasks]
    return RefPair(a, b, tasks, diffs, exact, cost_a)


def ref_pairs(records, orientation: str) -> list[tuple[int, int]]:
    """Ordered (A, B) pairs of system indices (SPEC §2 orientation)."""
    n = len(records.systems)
    if orientation == "directed":
        return [(i, j) for i in range(n) for j in range(n) if i != j]
    out = []
    for i in range(n):
        for j in range(i + 1, n):
            p = ref_pair(records, i, j)
            total = math.fsum(p.diffs)
            if p.exact:
                tie, a_higher = total == 0, total > 0
            else:
                tie, a_higher = abs(total / p.n) <= TOL, total > 0
            if tie:
                first = i if records.systems[i] < records.systems[j] else j
            else:
                first = i if a_higher else j
            out.append((first, j if first == i else i))
    return out


def ref_groups(records, key, tasks: Sequence[int]) -> list[int]:
    """A group index per task of T (groups are the distinct metadata tuples, in order of first use)."""
    if key is None or (isinstance(key, str) and not key.strip()):
        return [0] * len(tasks)
    cols = [c.strip() for c in key.split(",")] if isinstance(key, str) else list(key)
    index: dict[tuple, int] = {}
    out = []
    for t in tasks:
        name = tuple(records.metadata[c][t] for c in cols)
        out.append(index.setdefault(name, len(index)))
    return out


def same_partition(x: Sequence[int], y: Sequence[int]) -> bool:
    fwd: dict[int, int] = {}
    back: dict[int, int] = {}
    for u, v in zip(x, y, strict=True):
        if fwd.setdefault(u, v) != v or back.setdefault(v, u) != u:
            return False
    return True


# --------------------------------------------------------------------------- one case


def decide(rule: str, d: Sequence[float], cmp: Cmp, a: float, bootstrap, big_n: int, rng=None) -> str:
    """A fixed-sample rule on the observed differences (not anytime)."""
    if rule == "forced":
        return forced(d, cmp)
    if rule == "bootstrap":
        if bootstrap == "exact":
            return bootstrap_exact(d, cmp, a)[0]
        return bootstrap_literal(d, cmp, a, int(bootstrap), rng)
    if rule == "paired_normal":
        return paired_normal(d, cmp, a)[0]
    if rule == "mcnemar":
        return mcnemar(d, a)
    if rule == "serfling":
        return serfling(d, cmp, a, big_n)
    raise ValueError(rule)


@lru_cache(maxsize=200_000)
def _decide_cached(rule, key, delta, exact, a, bootstrap, big_n):
    return decide(rule, list(key), Cmp(delta, exact), a, bootstrap, big_n)


def decide_cached(rule: str, d: Sequence[float], cmp: Cmp, a: float, bootstrap, big_n: int) -> str:
    """Memoised on the observed multiset (every fixed-sample rule is order-free)."""
    return _decide_cached(rule, tuple(sorted(d)), cmp.delta, cmp.exact, a, bootstrap, big_n)


# --------------------------------------------------------------------------- replay (§5, §6)


@dataclass
class CaseOutcome:
    decision: str
    positive: bool
    covered: bool
    cost_fraction: float | None
    task_fraction: float
    tasks_used: int
    p_accept: float | None = None  # finite-B bootstrap without rng: probabilities, not a draw
    p_reject: float | None = None

    def probs(self) -> tuple[float, float]:
        if self.p_accept is not None:
            return self.p_accept, self.p_reject
        return float(self.decision == ACCEPT), float(self.decision == REJECT)


@dataclass
class BudgetResult:
    budget: float
    k_values: list[int] = field(default_factory=list)
    cases: list[CaseOutcome] = field(default_factory=list)
    per_pair: dict[int, list[str]] = field(default_factory=dict)

    def expected(self) -> dict[str, float]:
        """Expected accept / reject counts and their variances (sums of per-case Bernoullis),
        plus expected coverage failures."""
        acc = [c.probs()[0] for c in self.cases]
        rej = [c.probs()[1] for c in self.cases]
        cov = [a + r for c, a, r in zip(self.cases, acc, rej, strict=True) if not c.covered]
        return {
            "accept": math.fsum(acc),
            "accept_var": math.fsum(p * (1 - p) for p in acc),
            "reject": math.fsum(rej),
            "reject_var": math.fsum(p * (1 - p) for p in rej),
            "coverage_fail": math.fsum(cov),
            "coverage_fail_var": math.fsum(p * (1 - p) for p in cov),
        }

    def counts(self) -> dict[str, int]:
        c = {ACCEPT: 0, REJECT: 0, DEFER: 0}
        for x in self.cases:
            c[x.decision] += 1
        return c

    def metrics(self) -> dict[str, float | None]:
        n = len(self.cases)
        neg = [c for c in self.cases if not c.positive]
        pos = [c for c in self.cases if c.positive]
        fa = sum(1 for c in neg if c.decision == ACCEPT)
        fr = sum(1 for c in pos if c.decision == REJECT)
        costs = [c.cost_fraction for c in self.cases]
        return {
            "false_accept_rate": fa / len(neg) if neg else None,
            "false_reject_rate": fr / len(pos) if pos else None,
            "decision_error": (fa + fr) / n if n else None,
            "defer_rate": sum(1 for c in self.cases if c.decision == DEFER) / n if n else None,
            "coverage_failure": sum(1 for c in self.cases if c.decision != DEFER and not c.covered) / n if n else None,
            "cost_fraction": (sum(costs) / n) if n and all(x is not None for x in costs) else None,
            "task_fraction": sum(c.task_fraction for c in self.cases) / n if n else None,
            "mean_tasks_used": sum(c.tasks_used for c in self.cases) / n if n else None,
        }


def sufficiency(metrics_by_budget: list[tuple[float, dict]], alpha: float, gamma: float, eta: float) -> dict:
    """SPEC §6; a null rate counts as meeting its target."""

    def ok(v, target):
        return v is None or v <= target

    rows = []
    min_b = None
    ec_b = None
    for b, m in metrics_by_budget:
        misses = []
        if not ok(m["false_accept_rate"], alpha):
            misses.append("false_accept_rate")
        if not ok(m["false_reject_rate"], alpha):
            misses.append("false_reject_rate")
        if not ok(m["coverage_failure"], gamma):
            misses.append("coverage_failure")
        first_three = not misses
        if not ok(m["defer_rate"], eta):
            misses.append("defer_rate")
        if not misses and min_b is None:
            min_b = b
        if first_three and ec_b is None:
            ec_b = b
        rows.append({"budget": b, "sufficient": not misses, "misses": misses})
    return {"minimum_sufficient_budget": min_b, "error_coverage_budget": ec_b, "budgets": rows}


def reference_config(plan, config_index: int, pair_indices=None, seed_index: int = 0, rng=None,
                     anytime_coverage_at: str = "stop") -> list[BudgetResult]:
    """Replay one configuration of ``plan`` case by case.

    ``anytime_coverage_at``: which observed subset an anytime conclusion's coverage is judged
    on for ``coverage_failure``: the stopping prefix (``"stop"``) or all ``k`` tasks (``"k"``).
    Finite-B bootstrap needs ``rng`` (literal resampling; not shared with the engine).
    """
    cfg = plan.configs[config_index]
    pol = cfg.policy
    records = plan.records
    budgets = list(plan.spec.budgets) if hasattr(plan, "spec") else None
    pairs = range(len(plan.pairs)) if pair_indices is None else pair_indices
    results: list[BudgetResult] | None = None
    for p in pairs:
        a_idx, b_idx = plan.pairs[p]
        rp = ref_pair(records, a_idx, b_idx)
        engine_tasks = [int(x) for x in plan.pair_tasks(p)]
        assert engine_tasks == rp.tasks, f"pair {p}: engine task set differs from T"
        groups = ref_groups(records, cfg.group, rp.tasks)
        assert same_partition(groups, [int(x) for x in plan.labels(p, cfg.group)]), "group partition differs"
        n_groups = max(groups) + 1
        sizes = [groups.count(g) for g in range(n_groups)]
        big_n = rp.n
        ks = [int(k) for k in plan.ks(p)]
        if budgets is None:
            budgets = list(range(len(ks)))
        assert ks == [budget_k(b, big_n) for b in budgets], "budget k differs"
        if results is None:
            results = [BudgetResult(b) for b in budgets]
        cmp = rp.cmp(cfg.delta)
        positive = rp.positive(cfg.delta)
        cost_complete = all(not math.isnan(c) for c in rp.cost_a)
        total_cost = math.fsum(rp.cost_a) if cost_complete else None
        anytime_paths = None
        previous = None
        for bi, k in enumerate(ks):
            obs = np.asarray(plan.case_observed(p, seed_index, config_index, bi))
            _check_observed(obs, previous, pol.order, cfg.floor, k, groups, sizes, rp.cost_a, rp.diffs)
            previous = obs
            res = results[bi]
            res.k_values.append(k)
            shares = []
            if pol.rule in ("anytime", "anytime_eb") and anytime_paths is None:
                full = np.asarray(plan.case_observed(p, seed_index, config_index, len(ks) - 1))
                anytime_paths = [_anytime_case(rp, groups, sizes, list(map(int, row)), cmp, cfg, pol) for row in full]
            for r, row in enumerate(obs):
                row = [int(x) for x in row]
                assert len(row) == k and len(set(row)) == k
                d = [rp.diffs[i] for i in row]
                counts = [0] * n_groups
                for i in row:
                    counts[groups[i]] += 1
                covered_k = meets_coverage(cfg.floor, k, sizes, counts)
                probs = (None, None)
                used = k
                covered = covered_k
                if pol.rule in ("anytime", "anytime_eb"):
                    decisions, cov_at, full_row = anytime_paths[r]
                    assert full_row[:k] == row, "anytime: budget-k tasks are not a prefix of one order"
                    decision = DEFER
                    for t in range(1, k + 1):
                        if pol.coverage_aware and not cov_at[t - 1]:
                            continue
                        if decisions[t - 1] != DEFER:
                            decision = decisions[t - 1]
                            used = t
                            break
                    if anytime_coverage_at == "stop" and decision != DEFER:
                        covered = cov_at[used - 1]
                else:
                    if pol.coverage_aware and not covered_k:
                        decision = DEFER
                    elif pol.rule == "bootstrap" and cfg.bootstrap != "exact" and rng is None:
                        decision = DEFER
                        probs = bootstrap_finite_probabilities(d, cmp, cfg.a, int(cfg.bootstrap))
                    elif pol.rule == "bootstrap" and cfg.bootstrap != "exact":
                        decision = decide(pol.rule, d, cmp, cfg.a, cfg.bootstrap, big_n, rng)
                    else:
                        decision = decide_cached(pol.rule, d, cmp, cfg.a, cfg.bootstrap, big_n)
                cf = math.fsum(rp.cost_a[i] for i in row) / total_cost if cost_complete and total_cost else None
                res.cases.append(CaseOutcome(decision, positive, covered, cf, k / big_n, used, *probs))
                shares.append(decision)
            res.per_pair[p] = shares
    return results or []


def _anytime_case(rp: RefPair, groups, sizes, order: list[int], cmp: Cmp, cfg, pol):
    d = [rp.diffs[i] for i in order]
    decisions = (betting_path if pol.rule == "anytime" else anytime_path)(d, cmp, cfg.a, rp.n)
    cov_at = []
    counts = [0] * len(sizes)
    for t, i in enumerate(order, start=1):
        counts[groups[i]] += 1
        cov_at.append(meets_coverage(cfg.floor, t, sizes, counts))
    return decisions, cov_at, order


def _check_observed(obs, previous, order: str, floor: str, k: int, groups, sizes, cost_a, diffs) -> None:
    """The shared randomness itself obeys SPEC §4.1 (checked on every case the reference replays)."""
    if order != "neyman" and previous is not None:
        assert np.array_equal(obs[:, : previous.shape[1]], previous), f"{order}: budgets do not extend one order"
    counts = np.zeros((obs.shape[0], len(sizes)), dtype=np.int64)
    for g in range(len(sizes)):
        counts[:, g] = np.isin(obs, [i for i, x in enumerate(groups) if x == g]).sum(axis=1)
    if order == "stratified" and coverage_feasible(floor, k, sizes):
        assert all(meets_coverage(floor, k, sizes, row) for row in counts.tolist()), "stratified prefix misses floor"
    if order == "cost_ascending":
        c = np.asarray(cost_a)[obs]
        assert np.all(np.diff(c, axis=1) >= 0), "cost order not ascending"
    if order == "neyman":
        assert np.all(counts == counts[0]), "neyman group counts vary across draws"
        assert np.all(counts[0] <= np.asarray(sizes))
        if coverage_feasible(floor, k, sizes):
            r = floor_required(floor, k, sizes)
            assert np.all(counts[0] >= np.asarray(r)), "neyman misses floor"
            # the rest in proportion to n_g·S_g (S_g: sd, ddof 0, of D in group g), largest remainder
            sds = []
            for g in range(len(sizes)):
                vals = [x for x, gg in zip(diffs, groups, strict=True) if gg == g]
                mu = math.fsum(vals) / len(vals)
                sds.append(math.sqrt(math.fsum((x - mu) ** 2 for x in vals) / len(vals)))
            w = [n * sd for n, sd in zip(sizes, sds, strict=True)]
            if not any(x > 1e-12 for x in w):
                w = [float(n) for n in sizes]
            rest = k - sum(r)
            extra = counts[0] - np.asarray(r)
            if rest > 0 and not np.any(counts[0] == np.asarray(sizes)):
                for g in range(len(sizes)):
                    q = rest * w[g] / math.fsum(w)
                    assert math.floor(q + 1e-9) <= extra[g] <= math.ceil(q - 1e-9), ("neyman share", g, q, extra)
