"""Live accept / reject / defer for a run in progress (SPEC §7).

A harness has observed some tasks of a benchmark for systems A and B. ``live_decision``
answers with the decision of the chosen rule (SPEC §4.2, computed by the rule code that the
replay uses: the bootstrap kernels, ``rules.decide`` for the other fixed-sample rules, the
betting rule of ``engine/betting.py`` for ``anytime``), why, the coverage table at ``k``
(SPEC §3), and which unobserved tasks to run next so that coverage is met at the next budget
point (``engine/suggest.py``).

Inputs are normalised once (``make_universe`` and ``aggregate``, in ``engine/observations.py``;
``make_live_spec``); every problem raises ``LiveError(field, message)``. Outcomes are
aggregated per SPEC §1: the outcome of a system on a task is the mean over its trials, and a
task counts as observed (one of the ``k``) once both systems have ``trials_needed`` trials of
it. The sequence in which tasks became observed matters only to ``anytime`` (its verdict is
the first conclusion along the sequence).

Determinism: the default bootstrap is exact; a finite ``B`` draws its one uniform from a
generator seeded by a hash of the observed differences; ``next`` breaks ties with a
generator seeded by a hash of the universe (so suggestions are stable while a run goes on).

Example::

    >>> u = make_universe(["t1", "t2", "t3", "t4"], ["x", "x", "y", "y"])
    >>> obs = aggregate(u, [("A", "t1", 0, 1.0), ("B", "t1", 0, 0.0),
    ...                     ("A", "t3", 0, 1.0), ("B", "t3", 0, 1.0)], ("A", "B"))
    >>> out = live_decision(u, obs, make_live_spec(rule="bootstrap", delta=0))
    >>> out["decision"], out["reason"], out["k"], out["N"]
    ('defer', 'insufficient_evidence', 2, 4)
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from service.engine import answers
from service.engine import rules as R
from service.engine.anytime import anytime_path
from service.engine.betting import betting_path, betting_statistic, conclusion_strengths
from service.engine.coverage import FLOORS, budget_k, required
from service.engine.numbers import clean as _clean
from service.engine.observations import LiveError, Observed, Universe, aggregate, make_universe
from service.engine.observations import aggregate_columns as aggregate_columns  # re-exported: callers import
from service.engine.observations import aggregate_single as aggregate_single  # them from here
from service.engine.spec import ANYTIME_RULES, DEFAULT_BUDGETS, MAX_RESAMPLES, RULES
from service.engine.suggest import budget_points, next_tasks
from service.engine.suggest import recommended_order as recommended_order

DEFAULT_LIVE_BUDGETS: tuple[float, ...] = (*DEFAULT_BUDGETS, 1.0)
REASONS = ("decided", "coverage_unmet", "coverage_infeasible", "insufficient_evidence")
DECISIONS = {R.ACCEPT: "accept", R.REJECT: "reject", R.DEFER: "defer"}
OPTIONAL_STOPPING = (
    "'{rule}' is a fixed-sample rule: its error rate holds at one budget chosen in advance. Checking it "
    "after every task and stopping at the first accept or reject (optional stopping) inflates false "
    "accepts and rejects; to monitor continuously use rule 'anytime' (or a session, which concludes "
    "fixed-sample rules only at its declared checkpoints)."
)


@dataclass(frozen=True)
class LiveSpec:
    """What to decide with: rule, threshold δ (percentage points), level ``a``, coverage
    floor, resamples (``"exact"`` or ``B``), whether unmet coverage defers, the budget grid
    (fractions) that defines ``next``, and an optional budget cap (fraction of ``N``)."""

    rule: str = "bootstrap"
    delta: float = 0.0
    a: float = 0.05
    floor: str = "proportional"
    bootstrap: int | str = "exact"
    coverage_aware: bool = True
    budgets: tuple[float, ...] = DEFAULT_LIVE_BUDGETS
    budget: float | None = None
    seed: int = 0

    @property
    def theta(self) -> float:
        return self.delta / 100.0


def make_live_spec(*, rule: str = "bootstrap", delta: float = 0.0, a: float = 0.05, floor: str = "proportional",
                   bootstrap: int | str = "exact", coverage_aware: bool = True,
                   budgets: Sequence[float] | None = None, budget: float | None = None, seed: int = 0) -> LiveSpec:
    """Validate the decision options (input-independent checks)."""
    if rule not in RULES:
        raise LiveError("rule", f"unknown rule '{rule}'; rules: {', '.join(RULES)}")
    if not (isinstance(delta, int | float) and math.isfinite(delta) and -100.0 <= delta <= 100.0):
        raise LiveError("delta", "delta is in percentage points, a finite number in [-100, 100]")
    if rule == "mcnemar" and delta != 0:
        raise LiveError("delta", "mcnemar tests delta = 0 only (SPEC §4.2)")
    if not (isinstance(a, int | float) and 0.0 < a < 1.0):
        raise LiveError("a", "the level a must be in (0, 1)")
    if floor not in FLOORS:
        raise LiveError("floor", f"unknown floor '{floor}'; floors: {', '.join(FLOORS)}")
    if bootstrap != "exact" and not (isinstance(bootstrap, int) and not isinstance(bootstrap, bool)
                                     and 1 <= bootstrap <= MAX_RESAMPLES):
        raise LiveError("bootstrap", f"bootstrap is 'exact' or a number of resamples from 1 to {MAX_RESAMPLES:,}")
    grid = tuple(DEFAULT_LIVE_BUDGETS if budgets is None else budgets)
    if not grid:
        raise LiveError("budgets", "give at least one budget")
    for i, b in enumerate(grid):
        if not (isinstance(b, int | float) and 0.0 < b <= 1.0):
            raise LiveError(f"budgets[{i}]", "budgets are fractions in (0, 1]")
    grid = tuple(sorted(set(float(b) for b in grid)))
    if budget is not None and not (0.0 < budget <= 1.0):
        raise LiveError("budget", "budget is a fraction in (0, 1]")
    return LiveSpec(rule, float(delta), float(a), floor, bootstrap, bool(coverage_aware), grid,
                    None if budget is None else float(budget), int(seed))


def check_observed(spec: LiveSpec, observed: Observed, field: str = "observations") -> int | None:
    """Input-dependent checks: mcnemar needs binary single-trial outcomes; the exact
    bootstrap needs outcomes on a small grid of step 1/L (else give a finite ``bootstrap``).
    Returns the lattice ``L`` of the observed outcomes (``None`` off a small lattice)."""
    if spec.rule == "mcnemar" and not observed.binary_single_trial:
        raise LiveError(field, "mcnemar needs binary (0/1) single-trial outcomes; these are fractional or repeated")
    lat = _lattice(observed)
    if spec.rule == "bootstrap" and spec.bootstrap == "exact" and observed.k:
        if lat is None or 2 * lat * observed.k > R.MAX_FFT:
            raise LiveError("bootstrap", "the exact bootstrap needs outcomes on a small grid of step 1/L "
                                         "(e.g. 0/1 or fractions of a few trials); give a number of resamples")
    return lat


# ----------------------------------------------------------------------------- decision


def _lattice(observed: Observed) -> int | None:
    seq = observed.sequence
    if not len(seq) or observed.binary_single_trial:
        return 1
    values = np.concatenate([observed.y_a[seq], observed.y_b[seq]])
    if np.array_equal(values, np.round(values)):  # 0/1 outcomes: the common case, no search
        return 1
    return R.find_lattice(values)


def _coverage_path(labels: np.ndarray, n_g: np.ndarray, floor: str, k: int) -> np.ndarray:
    """Coverage met after each of the first ``k`` observations of ``labels`` (in order)."""
    steps = np.arange(1, k + 1)
    req = required(floor, steps, n_g)  # [k, G]
    onehot = np.zeros((k, len(n_g)), dtype=np.int64)
    onehot[np.arange(k), labels] = 1
    counts = np.cumsum(onehot, axis=0)
    return np.all(counts >= req, axis=1) & (req.sum(axis=1) <= steps)


def _kernel_values(d: np.ndarray, lattice: int | None) -> np.ndarray:
    """What the anytime kernels walk: ``d·L`` as integers on a lattice, ``d`` itself off one."""
    return np.round(d * lattice).astype(np.int64) if lattice else d


def rule_verdict(spec: LiveSpec, d: np.ndarray, n: int, lattice: int | None,
                 cov_path: np.ndarray | None = None, rng_key: bytes = b"") -> tuple[int, dict[str, object]]:
    """The rule's verdict on differences ``d`` (in observation order) and its statistic.

    Fixed-sample rules go through ``rules.decide``; ``anytime`` through
    ``rules.anytime_paths`` (first conclusion along the sequence, at steps where
    ``cov_path`` holds when given), exactly as in replay.
    """
    k = len(d)
    if spec.rule == "anytime":
        if k == 0:
            return R.DEFER, {"stopped_at": None}
        return _anytime_verdict(spec, d, n, lattice, cov_path)[:2]
    if spec.rule == "anytime_eb":
        if k == 0:
            return R.DEFER, {"stopped_at": None}
        # = R.anytime_paths, one path
        dec, stop = anytime_path(_kernel_values(d, lattice), lattice, n, spec.theta, spec.a, k, cov_path)
        stopped = stop if stop <= k else None
        return dec, {"stopped_at": stopped, "log_wealth_threshold": _clean(R.log_inv(spec.a))}
    rng = None
    if spec.bootstrap != "exact":
        h = hashlib.sha256(rng_key + np.ascontiguousarray(d).tobytes()).digest()
        words = np.frombuffer(h[:16], np.uint32).tolist()
        rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([spec.seed, *words])))
    if spec.rule == "bootstrap" and k and lattice is not None and 2 * lattice * k <= R.MAX_FFT:
        return _bootstrap_on_lattice(spec, d, lattice, rng)
    try:
        res = R.decide(spec.rule, d, spec.theta, spec.a, spec.bootstrap, n=n, rng=rng)
    except ValueError as exc:  # the rule cannot run on these outcomes
        raise LiveError("rule", str(exc)) from None
    stat: dict[str, object] = {k_: (_clean(float(v)) if isinstance(v, float) else v) for k_, v in res.statistic.items()}
    if spec.rule == "serfling" and k:
        eps = float(res.statistic["radius"])
        stat["lower"] = _clean(res.mean - eps)
        stat["upper"] = _clean(res.mean + eps)
    return res.decision, stat


def _anytime_verdict(spec: LiveSpec, d: np.ndarray, n: int, lattice: int | None,
                     cov_path: np.ndarray | None) -> tuple[int, dict[str, object], int]:
    """``anytime`` on ``d`` (``k >= 1``): the verdict where ``cov_path`` holds, its statistic
    (``ln K±`` at the stop, or at ``k``), and the verdict without the floors, from one pass of
    the betting rule (``betting.betting_path``, the replay's arithmetic)."""
    k = len(d)
    path = betting_path(_kernel_values(d, lattice), lattice, n, spec.theta, spec.a, cov_path)
    stopped = path.stop if path.stop <= k else None
    t = stopped or k
    if lattice is None or lattice == 1:  # the path's X is (d + 1)/2 itself: its wealth is the statistic
        up, down = float(path.log_up[t - 1]), float(path.log_down[t - 1])
    else:  # v/L may differ from d in the last bit: the statistic is on d, as it always was
        wealth = betting_statistic(d, n, spec.theta, spec.a, t)
        up, down = wealth["log_wealth_up"], wealth["log_wealth_down"]
    stat: dict[str, object] = {"stopped_at": stopped, "log_wealth_threshold": _clean(R.log_inv(spec.a)),
                               "log_wealth_up": _clean(up), "log_wealth_down": _clean(down)}
    return path.decision, stat, path.free_decision


def anytime_strengths(spec: LiveSpec, d: np.ndarray, n: int, lattice: int | None,
                      cov_path: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``anytime`` on ``d`` at every level at once (``betting.conclusion_strengths``): per step,
    whether a conclusion there accepts and the largest ``ln(1/a)`` at which it concludes; the
    first step with strength ``>= ln(1/a)`` is ``rule_verdict``'s stop at level ``a``."""
    return conclusion_strengths(_kernel_values(d, lattice), lattice, n, spec.theta, cov_path)


def _bootstrap_on_lattice(spec: LiveSpec, d: np.ndarray, lattice: int,
                          rng: np.random.Generator | None) -> tuple[int, dict[str, object]]:
    """The bootstrap rule through the kernels the replay calls (``above``,
    ``bootstrap_threshold``, ``tail_lattice``, ``bootstrap_from_tail``) with the lattice
    known here, as ``rules.decide`` composes them: ``decide`` would search the lattice again,
    which costs more than the whole exact tail for a few hundred 0/1 outcomes."""
    k = len(d)
    v = np.round(d * lattice).astype(np.int64)
    n_plus, n_minus = int(np.count_nonzero(v == 1)), int(np.count_nonzero(v == -1))
    trinomial = n_plus + n_minus + int(np.count_nonzero(v == 0)) == k  # differences of 0/1 outcomes
    if trinomial and lattice == 1 and spec.bootstrap == "exact":
        dec, stat = _exact_binary_verdict(k, n_plus, n_minus, spec.theta, spec.a)
        return dec, dict(stat)
    kk = np.array(k)
    pos = R.above(np.array(v.sum()), kk, spec.theta, lattice)
    c = R.bootstrap_threshold(spec.theta, kk, lattice)
    if trinomial:  # the replay's memoised trinomial tail
        p_low = float(R.tail_binary(kk, n_plus, n_minus, c)[0])
    else:
        vals, counts = np.unique(v, return_counts=True)
        p_low = float(R.tail_lattice(counts[None, :], vals, np.atleast_1d(c))[0])
    u = None if spec.bootstrap == "exact" else rng.random()  # type: ignore[union-attr]
    dec = int(R.bootstrap_from_tail(np.array(p_low), np.array(pos), spec.a, spec.bootstrap, u))
    return dec, {"p_low": _clean(p_low), "p_high": _clean(1.0 - p_low)}


@lru_cache(maxsize=65536)
def _exact_binary_verdict(k: int, n_plus: int, n_minus: int, theta: float, a: float) -> tuple[int, dict[str, object]]:
    """``_bootstrap_on_lattice`` for 0/1 outcomes and the exact bootstrap, whose verdict
    depends on the counts alone: a harness deciding after every task meets the same
    ``(k, n+, n-)`` again and again, and the kernels cost more on one case than a look-up.
    The statistic dict is shared between calls: copy it before handing it out."""
    kk = np.array(k)
    pos = R.above(np.array(n_plus - n_minus), kk, theta, 1)
    c = R.bootstrap_threshold(theta, kk, 1)
    p_low = float(R.tail_binary(kk, n_plus, n_minus, c)[0])
    dec = int(R.bootstrap_from_tail(np.array(p_low), np.array(pos), a, "exact"))
    return dec, {"p_low": _clean(p_low), "p_high": _clean(1.0 - p_low)}


def live_decision(universe: Universe, observed: Observed, spec: LiveSpec,
                  priority: np.ndarray | None = None, *, fixed_checkpoint: bool = False,
                  checkpoints: Sequence[tuple[int, float]] | None = None, forecast: bool = False) -> dict[str, object]:
    """The full answer of SPEC §7 for one observed state (a JSON-ready dict).

    ``priority``: rank per task used to pick ``next`` tasks within a group (lower first;
    default a seeded shuffle of the universe). ``fixed_checkpoint`` suppresses the optional
    stopping warning (sessions evaluate fixed-sample rules only at declared checkpoints);
    ``checkpoints``: ``(k, level)`` still ahead, for the forecast of a session's schedule;
    ``forecast=True`` adds the forecast of further tasks (it simulates continuations: a few ms to ~0.1 s).
    """
    lattice = check_observed(spec, observed)
    n = universe.n
    n_g = universe.n_g
    seq = observed.sequence
    k = len(seq)
    d = observed.y_a[seq] - observed.y_b[seq]
    labels_seq = universe.labels[seq]
    counts_g = np.bincount(labels_seq, minlength=len(n_g))
    req = universe.required(spec.floor, k)
    feasible = bool(req.sum() <= k)
    met = feasible and bool(np.all(counts_g >= req))

    cov_path = None
    if spec.rule in ANYTIME_RULES and spec.coverage_aware and k:
        cov_path = _coverage_path(labels_seq, n_g, spec.floor, k)
    free: int | None = None  # anytime's verdict without the floors, when the same pass gives it
    if spec.rule == "anytime" and k:
        verdict, statistic, free = _anytime_verdict(spec, d, n, lattice, cov_path)
    else:
        verdict, statistic = rule_verdict(spec, d, n, lattice, cov_path, universe.digest())
    decision = verdict
    if spec.rule in ANYTIME_RULES:
        concluded = verdict != R.DEFER
        reason = "decided" if concluded else None
    else:
        concluded = verdict != R.DEFER and (met or not spec.coverage_aware)
        reason = "decided" if concluded else None
        if not concluded:
            decision = R.DEFER
    if reason is None:
        if spec.coverage_aware and not feasible:
            reason = "coverage_infeasible"
        elif spec.coverage_aware and not met:
            reason = "coverage_unmet"
        else:
            reason = "insufficient_evidence"

    has_a = observed.trials_a > 0
    has_b = observed.trials_b > 0
    observed_mask = np.zeros(n, dtype=bool)
    observed_mask[seq] = True
    m = float(d.sum()) / k if k else None  # as d.mean(): numpy's mean is this sum over k
    groups = [
        {"group": name, "n": size, "required": r, "observed": c, "missing": max(0, r - c)}
        for name, size, r, c in zip(universe.group_names, n_g.tolist(), req.tolist(), counts_g.tolist(), strict=True)
    ]
    a_wins, b_wins = int(np.count_nonzero(d > R.TOL)), int(np.count_nonzero(d < -R.TOL))
    k_cap = budget_k(spec.budget, n) if spec.budget is not None else n
    out: dict[str, object] = {
        "decision": DECISIONS[decision],
        "reason": reason,
        "rule": spec.rule,
        "rule_decision": DECISIONS[verdict],
        "k": k,
        "N": n,
        "budget_fraction": _clean(k / n),
        "mean_difference": _clean(m),
        "delta": spec.delta,
        "a": spec.a,
        "counts": {
            "observed": k,
            "a_wins": a_wins,
            "b_wins": b_wins,
            "ties": k - a_wins - b_wins,
            "a_only": int(np.count_nonzero(has_a & ~has_b)),
            "b_only": int(np.count_nonzero(has_b & ~has_a)),
            "pending": int(np.count_nonzero((has_a | has_b) & ~observed_mask)),
            "unobserved": int(n - k),
        },
        "statistic": statistic,
        "coverage": {"floor": spec.floor, "coverage_aware": spec.coverage_aware, "k": k, "feasible": feasible,
                     "met": met, "groups": groups},
        "next": None if decision != R.DEFER else next_tasks(universe, observed, spec, priority, k_cap),
        "budget_exhausted": decision == R.DEFER and k >= k_cap,
        "warning": None if spec.rule in ANYTIME_RULES or fixed_checkpoint else OPTIONAL_STOPPING.format(rule=spec.rule),
    }
    _harness_answers(out, spec, d, n, lattice, k_cap, (verdict, free), cov_path, groups, feasible, checkpoints,
                     forecast)
    return out


def _harness_answers(out: dict[str, object], spec: LiveSpec, d: np.ndarray, n: int, lattice: int | None, k_cap: int,
                     verdicts: tuple[int, int | None], cov_path: np.ndarray | None, groups: list[dict[str, object]],
                     feasible: bool, checkpoints: Sequence[tuple[int, float]] | None, forecast: bool) -> None:
    """SPEC §7's interval at the stop, the forecast of further tasks and the coverage warning
    (``engine/answers.py``); the forecast is seeded by a hash of the observed differences."""
    k = len(d)
    stop = out["statistic"].get("stopped_at") if spec.rule in ANYTIME_RULES else None  # type: ignore[union-attr]
    at = d[: int(stop)] if isinstance(stop, int) else d
    out["interval"] = answers.interval(spec.rule, at, n, spec.a, lattice)
    out["forecast"] = None
    if forecast and out["decision"] == "defer" and k:
        h = hashlib.sha256(b"forecast" + np.ascontiguousarray(d).tobytes()).digest()
        rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([spec.seed, *np.frombuffer(h[:16], np.uint32)
                                                                          .tolist()])))
        ahead = checkpoints
        if ahead is None and spec.rule not in ANYTIME_RULES:
            ahead = [(p, spec.a) for p in budget_points(spec.budgets, n, k_cap)]
        out["forecast"] = answers.forecast(spec.rule, d, n, spec.theta, spec.a, lattice, k_cap, rng, ahead)
    verdict, free = verdicts
    blocked = verdict != R.DEFER and out["decision"] == "defer"
    if spec.rule in ANYTIME_RULES and spec.coverage_aware and cov_path is not None and not blocked:
        if free is None:
            free = rule_verdict(spec, d, n, lattice, None)[0]  # the verdict without the floors
        blocked = free != R.DEFER and verdict == R.DEFER
    out["coverage_warning"] = answers.coverage_warning(groups, spec.coverage_aware, feasible, k, blocked)


def live_from_arrays(task_ids: Sequence[str], groups: Sequence[str | None] | None, outcomes_a: Sequence[float],
                     outcomes_b: Sequence[float], observed_ids: Sequence[str], **spec: object) -> dict[str, object]:
    """Convenience for notebooks and tests: one outcome per system for each observed task,
    observed in the given order."""
    u = make_universe(task_ids, groups)
    rows: list[tuple[str, str, int, float]] = []
    for t, ya, yb in zip(observed_ids, outcomes_a, outcomes_b, strict=True):
        rows.append(("A", t, 0, ya))
        rows.append(("B", t, 0, yb))
    return live_decision(u, aggregate(u, rows, ("A", "B")), make_live_spec(**spec))  # type: ignore[arg-type]
