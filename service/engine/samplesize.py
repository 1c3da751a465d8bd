"""Sample sizes (SPEC §8): how many runs bound a failure rate, how many tasks give a margin or
detect a paired difference, and the smallest significant gap with ``n`` tasks."""

from __future__ import annotations

import math
from dataclasses import dataclass

from scipy import special

from service.engine.intervals import binomial_bounds
from service.engine.statbase import StatsInputError, _count, _level, _positive, _unit, _z


@dataclass(frozen=True)
class Gap:
    """Minimum significant gap between two scores, independent samples vs paired."""

    n: float
    unpaired: float
    paired: float


MAX_RUNS = 2**53


def runs_for_bound(max_failure_rate: float, level: float = 0.95, failures: int = 0) -> int:
    """Fewest runs ``n`` such that ``failures`` failures in ``n`` runs give an exact
    one-sided upper bound on the failure rate of at most ``max_failure_rate``.

    With zero failures: the smallest ``n >= ln(alpha) / ln(1 - target)`` (59 runs for 5 %
    at 95 %). Otherwise the bound ``Beta_{1-alpha}(f + 1, n - f)`` decreases in ``n``. Either
    way the smallest ``n`` is found by bisection (from the closed form when ``f = 0``), so a
    tiny target costs a few dozen bound evaluations, not a walk over the rounding error.
    """
    target = _unit(max_failure_rate, "max_failure_rate", low_open=True, high_open=True)
    level = _level(level)
    f = _count(failures, "failures", 0)
    if f >= MAX_RUNS:  # the runs needed start past it: say so of the field that put them there
        raise StatsInputError("failures", f"at most {MAX_RUNS:.3g} failures (the runs needed exceed it)")

    def bound(n: int) -> float:
        return binomial_bounds(n - f, n, level).failure_upper

    lo, hi = f + 1, 2 * (f + 1)
    if f == 0:  # start from the closed form; the bisection below only corrects its rounding
        closed = math.log(1.0 - level) / math.log1p(-target)
        if not closed <= MAX_RUNS:  # a target of 5e-324 needs ~6e323 runs (inf to ceil())
            raise StatsInputError("max_failure_rate", f"more than {MAX_RUNS:.3g} runs would be needed")
        guess = max(1, math.ceil(closed - 1e-9))
        lo, hi = max(1, guess // 2), max(2, guess)
    while hi <= MAX_RUNS and bound(hi) > target:
        lo, hi = hi, hi * 2
    if hi > MAX_RUNS:  # past exact integers in double precision (and any real budget)
        raise StatsInputError("max_failure_rate", f"more than {MAX_RUNS:.3g} runs would be needed")
    if bound(lo) <= target:
        return lo
    while hi - lo > 1:  # bound(lo) > target >= bound(hi)
        mid = (lo + hi) // 2
        if bound(mid) <= target:
            hi = mid
        else:
            lo = mid
    return hi


def margin_of_error(n: float, p: float = 0.5, level: float = 0.95) -> float:
    """Half-width of the normal interval of a score: ``z·sqrt(p (1 - p) / n)`` (SPEC §8).
    ``n`` may be fractional (an average task count); ±6.92 pp at ``n = 200.5, p = 0.5``."""
    n = _positive(n, "n")
    p = _unit(p, "p")
    return _z(_level(level)) * math.sqrt(p * (1.0 - p) / n)


def tasks_for_margin(margin: float, p: float = 0.5, level: float = 0.95) -> int:
    """Fewest tasks for a margin of at most ``margin``: ``ceil(z² p (1 - p) / margin²)``;
    385 / 1,068 / 2,401 / 9,604 tasks for ±5 / ±3 / ±2 / ±1 pp at ``p = 0.5``."""
    m = _unit(margin, "margin", low_open=True)
    p = _unit(p, "p")
    z = _z(_level(level))
    return max(1, math.ceil(z * z * p * (1.0 - p) / (m * m) * (1.0 - 1e-12)))


def min_significant_gap(n: float, p: float = 0.5, rho: float = 0.0, level: float = 0.95) -> Gap:
    """Smallest score difference significant at ``level`` with ``n`` tasks per system.

    Independent samples: ``z·sqrt(2 p (1 - p) / n)`` (``z·sqrt(0.5 / n)`` at ``p = 0.5``,
    about 9.8 pp at ``n = 200``). Paired on the same tasks with per-task correlation
    ``rho`` the variance of the difference shrinks by ``(1 - rho)``, so the gap by
    ``sqrt(1 - rho)`` (about 6.9 pp at ``rho = 0.5``).
    """
    n = _positive(n, "n")
    p = _unit(p, "p")
    r = float(rho)
    if not math.isfinite(r) or not -1.0 <= r <= 1.0:
        raise StatsInputError("rho", f"must be in [-1, 1], got {rho!r}")
    unpaired = _z(_level(level)) * math.sqrt(2.0 * p * (1.0 - p) / n)
    return Gap(n=n, unpaired=unpaired, paired=unpaired * math.sqrt(1.0 - r))


def tasks_for_paired_difference(
    delta: float,
    power: float = 0.8,
    rho: float = 0.0,
    p: float = 0.5,
    level: float = 0.95,
    sd_diff: float | None = None,
) -> int:
    """Tasks needed to detect a paired difference ``delta`` with the given power.

    Two-sided test at ``alpha = 1 - level`` on the per-task differences, normal
    approximation: ``n = ceil((z_{1-alpha/2} + z_{power})² · sigma_D² / delta²)`` with
    ``sigma_D² = 2 p (1 - p) (1 - rho)`` (two scores of variance ``p (1 - p)`` and
    correlation ``rho``) unless ``sd_diff`` gives ``sigma_D`` directly. At least 2.

    Refused where the formula has no meaning: ``sigma_D = 0`` (``rho = 1``, ``p`` of 0 or 1, or
    ``sd_diff = 0``: the per-task difference is a constant, so no difference δ arises), which
    answered 2 tasks for any δ; and ``power <= alpha / 2``, where ``z_{1-alpha/2} + z_{power}``
    is not positive and its square grew again as the power fell (2 tasks for 2.5 %, 246,222
    for 1e-300).
    """
    d = _unit(abs(float(delta)), "delta", low_open=True)
    pw = _unit(power, "power", low_open=True, high_open=True)
    level = _level(level)
    if pw <= (1.0 - level) / 2.0:
        raise StatsInputError("power", f"must exceed alpha / 2 = {(1.0 - level) / 2.0:.6g}: a test at level {level:g} "
                                       "rejects that often with no difference at all")
    if sd_diff is None:
        p = _unit(p, "p")
        r = float(rho)
        if not math.isfinite(r) or not -1.0 <= r <= 1.0:
            raise StatsInputError("rho", f"must be in [-1, 1], got {rho!r}")
        var = 2.0 * p * (1.0 - p) * (1.0 - r)
    else:
        sd = float(sd_diff)
        if not math.isfinite(sd) or sd < 0:
            raise StatsInputError("sd_diff", f"must be a finite number >= 0, got {sd_diff!r}")
        var = sd * sd
    if var == 0.0:
        field = "sd_diff" if sd_diff is not None else "rho" if float(rho) == 1.0 else "p"
        raise StatsInputError(field, "the per-task difference would have no variance (rho = 1, p of 0 or 1, or "
                                     "sd_diff = 0): no difference can arise; give sd_diff > 0")
    zsum = _z(level) + float(special.ndtri(pw))  # stats.norm.ppf
    return max(2, math.ceil(zsum * zsum * var / (d * d) * (1.0 - 1e-12)))
