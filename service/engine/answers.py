"""What a harness can act on, beside the decision (SPEC §7).

* ``interval``: the confidence interval for ``Δ`` the rule implies at the stop, each bound at
  the rule's level ``a`` (two-sided coverage ``1 − 2a``), so that it excludes ``θ`` exactly
  when the rule concludes: paired normal ``m ± z_{1−a}·se``; Serfling ``m ± ε``; the exact
  bootstrap's ``a`` and ``1 − a`` quantiles of ``m*``; McNemar's exact (Clopper–Pearson) bounds
  on the share of discordant tasks A wins, scaled to ``Δ``; for ``anytime`` the confidence
  sequence of ``engine/betting.py`` (valid after optional stopping, wherever the run stops).
* ``forecast``: the further tasks to a conclusion if the observed differences are
  representative of the rest: continuations drawn with replacement from the observed
  differences, run through the same rule (``anytime`` after every task; a fixed-sample rule
  at the remaining checkpoints with their levels) up to the cap; mean, quantiles and the share
  that concludes within the cap. Seeded by the caller (a hash of the input: same input, same
  answer). Coverage is assumed met along the way (follow ``next``).
* ``coverage_warning``: for coverage-aware rules, the groups the harness's own order has left
  below their floors at ``k`` and by how many tasks (the rule cannot stop until they are met).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import special

from service.engine import rules as R
from service.engine import tails as T
from service.engine.anytime import anytime_path
from service.engine.betting import betting_paths, confidence_sequence
from service.engine.numbers import clean as _clean
from service.engine.schedule import scheduled_paths

FORECAST_PATHS = 100
FORECAST_CELLS = 1 << 20
"""Path steps a forecast draws and walks at once. Its paths are ``FORECAST_PATHS × cap``: at a
100,000-task cap the draw and the paths were 80 MB of int64 each (227 MiB at the peak; 305 MiB
for ``anytime_eb``), so they are drawn a few rows at a time: one stream split by rows, the same
paths. ``anytime_eb`` walks each path by prefix sums (``anytime.anytime_path``): its step loop
over all paths cost Python per step, 3.6 s at that cap with 1,000 observed (now 1.05 s)."""


def interval(rule: str, d: np.ndarray, n: int, a: float, lattice: int | None) -> dict[str, object] | None:
    """The rule's confidence interval for ``Δ`` on the observed differences ``d`` (None for
    ``forced``, which has none, and before any observation)."""
    k = len(d)
    if k == 0 or rule == "forced":
        return None
    m = float(d.mean())
    lower = upper = None
    anytime_valid = False
    if rule == "paired_normal":
        if k < 2:
            return None
        se = float(d.std(ddof=1)) / math.sqrt(k)
        z = float(-special.ndtri(a))  # stats.norm.isf(a), without its argument handling
        lower, upper = m - z * se, m + z * se
    elif rule == "serfling":
        eps = float(R.serfling_radius(k, n, a))
        lower, upper = m - eps, m + eps
    elif rule == "mcnemar":
        n_plus, n_minus = int((d > 0).sum()), int((d < 0).sum())
        disc = n_plus + n_minus
        if disc == 0:
            lower = upper = 0.0
        else:
            from scipy import stats  # on first use, not at import (engine/binom.py says why)
            p_lo = float(stats.beta.ppf(a, n_plus, disc - n_plus + 1)) if n_plus > 0 else 0.0
            p_hi = float(stats.beta.ppf(1 - a, n_plus + 1, disc - n_plus)) if n_minus > 0 else 1.0
            lower, upper = (2 * p_lo - 1) * disc / k, (2 * p_hi - 1) * disc / k
    elif rule == "bootstrap":
        if lattice is None:
            return None
        lower, upper = _bootstrap_quantiles(np.round(d * lattice).astype(np.int64), lattice, a)
    elif rule == "anytime":
        lo_x, hi_x = confidence_sequence((d + 1.0) / 2.0, n, a)
        lower, upper = 2.0 * lo_x - 1.0, 2.0 * hi_x - 1.0
        anytime_valid = True
    else:  # anytime_eb: the baseline reports its stop, not an interval
        return None
    return {
        "lower": _clean(lower),
        "upper": _clean(upper),
        "k": k,
        "level_each_side": a,
        "coverage": _clean(1.0 - 2.0 * a),
        "anytime_valid": anytime_valid,
    }


def _bootstrap_quantiles(v: np.ndarray, lattice: int, a: float) -> tuple[float, float]:
    """The ``a`` and ``1 − a`` quantiles of the exact resampling distribution of ``m*`` (the
    ``k``-fold convolution of the observed histogram, by FFT)."""
    k = len(v)
    vmin = int(v.min())
    span = int(v.max()) - vmin
    if span == 0:
        return float(v[0]) / lattice, float(v[0]) / lattice
    pmf = np.bincount(v - vmin, minlength=span + 1) / k
    size = span * k + 1
    nfft = 1 << (size - 1).bit_length()
    dist = np.fft.irfft(T._int_power(np.fft.rfft(pmf, nfft), k), nfft)[:size]
    cdf = np.cumsum(np.clip(dist, 0.0, None))
    cdf /= cdf[-1]
    lo_idx = int(np.searchsorted(cdf, a - 1e-12))  # smallest sum with P(m* <= sum) >= a
    hi_idx = int(np.searchsorted(cdf, 1 - a - 1e-12))
    to_mean = lambda i: (i + vmin * k) / (k * lattice)  # noqa: E731
    return to_mean(lo_idx), to_mean(hi_idx)


def forecast(
    rule: str,
    d: np.ndarray,
    n: int,
    theta: float,
    a: float,
    lattice: int | None,
    k_cap: int,
    rng: np.random.Generator,
    checkpoints: Sequence[tuple[int, float]] | None = None,
) -> dict[str, object] | None:
    """Further tasks to a conclusion if the rest looks like what was observed (see module doc).

    ``checkpoints``: ``(k_j, level_j)`` still ahead for a fixed-sample rule (default: every
    further task at level ``a``, as a stateless caller would check); ``anytime`` ignores them.
    """
    k = len(d)
    if k == 0 or k >= k_cap or rule == "forced":
        return None
    lat = lattice or 1
    v = np.round(d * lat).astype(np.int64) if lattice else np.asarray(d, dtype=np.float64)
    ahead = []
    if rule not in ("anytime", "anytime_eb"):
        ahead = [(kj, lv) for kj, lv in (checkpoints or [(j, a) for j in range(k + 1, k_cap + 1)]) if k < kj <= k_cap]
        if not ahead or lattice is None:
            return None
    rows = max(1, FORECAST_CELLS // k_cap)

    def drawn(count: int) -> np.ndarray:  # the next ``count`` paths (one stream, split by rows)
        paths = np.empty((count, k_cap), dtype=v.dtype)
        paths[:, :k] = v[None, :]
        paths[:, k:] = v[rng.integers(0, k, size=(count, k_cap - k))]
        return paths

    stop = np.empty(FORECAST_PATHS, dtype=np.int64)
    for lo in range(0, FORECAST_PATHS, rows):
        hi = min(FORECAST_PATHS, lo + rows)
        paths = drawn(hi - lo)
        if rule == "anytime":
            stop[lo:hi] = betting_paths(paths, lattice, n, theta, a, k_cap)[1]
        elif rule == "anytime_eb":  # each path by prefix sums (``rules.anytime_paths``' stop, to the step)
            stop[lo:hi] = [anytime_path(path, lattice, n, theta, a, k_cap)[1] for path in paths]
        else:
            checks = [kj for kj, _ in ahead], [lv for _, lv in ahead]
            stop[lo:hi] = scheduled_paths(rule, paths, lat, *checks, theta, n)[1]
    done = stop <= k_cap
    more = np.minimum(stop, k_cap) - k
    q = np.percentile(more, [10, 50, 90])
    return {
        "expected_more_tasks": _clean(float(more.mean())),
        "p10": int(q[0]),
        "median": int(q[1]),
        "p90": int(q[2]),
        "conclude_share": _clean(float(done.mean())),
        "cap": k_cap,
        "simulations": FORECAST_PATHS,
    }


def coverage_warning(
    groups: list[dict[str, object]], coverage_aware: bool, feasible: bool, k: int, blocked: bool
) -> dict[str, object] | None:
    """The groups below their floor at ``k`` (the harness's order is behind), or None."""
    if not coverage_aware or not feasible or k == 0:
        return None
    behind = [{"group": g["group"], "missing": g["missing"]} for g in groups if int(g["missing"]) > 0]  # type: ignore[arg-type]
    if not behind:
        return None
    total = sum(int(g["missing"]) for g in behind)  # type: ignore[arg-type]
    names = ", ".join(f"{g['group']} ({g['missing']})" for g in behind[:10]) + (" ..." if len(behind) > 10 else "")
    why = ("the rule's evidence would conclude now, but " if blocked else "") + "a coverage-aware rule cannot stop"
    return {
        "groups": behind,
        "missing": total,
        "blocked_conclusion": blocked,
        "message": f"the run's order is behind the coverage floors at k = {k}: {total} task(s) missing in "
        f"{len(behind)} group(s): {names}; {why} until they are met (run the tasks in `next`).",
    }
