"""What a replay computes: policies (SPEC §4.3) and the replay specification (§3–§6).

The spec is a sweep: every combination of grouping × floor × policy × level ``a`` ×
resample count ``B`` × threshold δ is one *configuration*, replayed at every budget.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from service.engine import classes, schedule, selection
from service.engine.coverage import FLOORS
from service.engine.errors import FieldError

ORDERS = ("uniform", "stratified", "cost_ascending", "neyman")
RULES = ("forced", "bootstrap", "paired_normal", "mcnemar", "serfling", "anytime", "anytime_eb")
MAX_RESAMPLES = 1_000_000
"""Largest finite bootstrap ``B``, in replays and live decisions alike."""
ANYTIME_RULES = ("anytime", "anytime_eb")
"""Rules valid when consulted after every task: ``anytime`` (betting, ``engine/betting.py``) and
its predecessor ``anytime_eb`` (empirical Bernstein, ``rules.anytime_paths``), kept as a baseline."""
ORIENTATIONS = ("directed", "one_per_pair")
DEFAULT_BUDGETS = tuple(round(0.05 * i, 2) for i in range(1, 20))


class SpecError(FieldError):
    """A replay specification that cannot run; ``field`` names the offending option."""


@dataclass(frozen=True)
class Policy:
    """A task order, a decision rule and whether the rule defers when coverage is unmet."""

    name: str
    order: str
    rule: str
    coverage_aware: bool
    checkpoints: tuple[float, ...] | None = None
    """A schedule (SPEC §4.4): the rule is consulted only at these budget fractions, at the
    levels ``spending`` gives them; at budget ``k`` the case ends at the first conclusive
    checkpoint ``<= k``."""
    spending: str | None = None

    def describe(self) -> dict[str, object]:
        out: dict[str, object] = {"name": self.name, "order": self.order, "rule": self.rule,
                                  "coverage_aware": self.coverage_aware}
        if self.checkpoints is not None:
            out["checkpoints"] = list(self.checkpoints)
            out["spending"] = self.spending
        return out


def schedule_tag(checkpoints: Sequence[float], spending: str) -> str:
    """The suffix naming a scheduled policy: ``<spending>@<fractions>`` (sessions look replays
    of their own schedule up by it)."""
    vals = [float(c) for c in checkpoints]
    parts: list[str] = []
    i = 0
    while i < len(vals):  # runs of >= 3 equally spaced fractions as start:stop:step (what --checkpoints reads)
        j = i + 1
        while j + 1 < len(vals) and abs((vals[j + 1] - vals[j]) - (vals[i + 1] - vals[i])) < 1e-9:
            j += 1
        if j - i >= 2:
            parts.append(f"{vals[i]:g}:{vals[j]:g}:{round(vals[i + 1] - vals[i], 10):g}")
            i = j + 1
        else:
            parts.append(f"{vals[i]:g}")
            i += 1
    text = ",".join(parts)
    if len(text) > 120:  # the name is stored in a 200-character column: name long schedules by a digest
        text = "sha1:" + hashlib.sha1(text.encode()).hexdigest()[:16]
    return f"{spending}@{text}"


def with_schedule(policy: Policy, checkpoints: Sequence[object] | str | None, spending: str | None,
                  field: str = "checkpoints") -> Policy:
    """``policy`` carrying a schedule (validated), named ``<name>[<tag>]``; unchanged without one."""
    if checkpoints is None:
        if spending is not None:
            raise SpecError("spending", "spending applies to a schedule: give checkpoints too")
        return policy
    if policy.rule in ANYTIME_RULES:
        raise SpecError(field, f"policy '{policy.name}': {policy.rule} needs no schedule (valid after every task)")
    if policy.order == "neyman":
        raise SpecError(field, f"policy '{policy.name}': a schedule needs a single task order, not neyman")
    fractions = parse_fractions(checkpoints, field) if isinstance(checkpoints, str) else checkpoints
    if len(fractions) > MAX_SCHEDULE_CHECKPOINTS:
        raise SpecError(field, f"{len(fractions):,} checkpoints; the limit is {MAX_SCHEDULE_CHECKPOINTS}")
    try:
        cks = schedule.check_checkpoints(list(fractions), field)
        spend = schedule.check_spending(spending or schedule.DEFAULT_SPENDING, policy.rule, "spending")
    except FieldError as exc:
        raise SpecError(exc.field, exc.message) from None
    return replace(policy, name=f"{policy.name}[{schedule_tag(cks, spend)}]", checkpoints=cks, spending=spend)


MAX_SCHEDULE_CHECKPOINTS = 200
"""Checkpoints of a replay policy's schedule: each is a look at every path of a chunk, and a
range such as ``"0.5:1:1e-300"`` is counted before it is expanded."""


def parse_fractions(text: str, field: str, max_count: int = MAX_SCHEDULE_CHECKPOINTS) -> tuple[float, ...]:
    """``"0.02:0.5:0.02,1"``: comma-separated numbers or ``start:stop:step`` ranges (inclusive),
    at most ``max_count`` in all (refused from the arithmetic, before a range is made)."""
    out: list[float] = []
    for part in text.split(","):
        if not part.strip():
            continue
        if ":" in part:
            try:
                out.extend(parse_budgets(part, max_count, "checkpoints"))
            except SpecError as exc:  # in the caller's field (a policy's own checkpoints: "policies")
                raise SpecError(field, exc.message) from None
        else:
            out.append(_number(part, field))
        if len(out) > max_count:
            raise SpecError(field, f"more than {max_count} checkpoints; the limit is {max_count}")
    return tuple(out)


def _number(text: str, field: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise SpecError(field, f"cannot read '{text.strip()}' as a fraction") from None


NAMED_POLICIES: dict[str, Policy] = {
    p.name: p
    for p in (
        Policy("uniform_forced", "uniform", "forced", False),
        Policy("stratified_forced", "stratified", "forced", False),
        Policy("cost_forced", "cost_ascending", "forced", False),
        Policy("bootstrap", "uniform", "bootstrap", False),
        Policy("coverage_bootstrap", "stratified", "bootstrap", True),
        Policy("coverage_bootstrap_uniform", "uniform", "bootstrap", True),
        Policy("coverage_paired_normal", "stratified", "paired_normal", True),
        Policy("coverage_mcnemar", "stratified", "mcnemar", True),
        Policy("neyman_coverage_bootstrap", "neyman", "bootstrap", True),
        Policy("serfling_coverage", "stratified", "serfling", True),
        Policy("anytime_coverage", "stratified", "anytime", True),
    )
}


def parse_policy(value: str | Mapping[str, object] | Policy) -> Policy:
    """A named policy, or a custom one as a mapping / ``"order=...,rule=...,coverage=yes"``.

    A custom policy without a name is named ``custom:<order>/<rule>[/coverage]``.
    """
    if isinstance(value, Policy):
        return value
    if isinstance(value, str):
        if value in NAMED_POLICIES:
            return NAMED_POLICIES[value]
        if "=" not in value:
            raise SpecError("policy", f"unknown policy '{value}'; named policies: {', '.join(NAMED_POLICIES)}")
        parts: dict[str, object] = {}
        for item in value.split(","):
            k, _, v = item.partition("=")
            parts[k.strip()] = v.strip()
        value = parts
    order = str(value.get("order", ""))
    rule = str(value.get("rule", ""))
    cov = value.get("coverage_aware", value.get("coverage", False))
    if isinstance(cov, str):
        if cov.lower() not in ("yes", "no", "true", "false", "1", "0"):
            raise SpecError("policy", f"coverage must be yes or no, got '{cov}'")
        cov = cov.lower() in ("yes", "true", "1")
    if order not in ORDERS:
        raise SpecError("policy", f"unknown order '{order}'; orders: {', '.join(ORDERS)}")
    if rule not in RULES:
        raise SpecError("policy", f"unknown rule '{rule}'; rules: {', '.join(RULES)}")
    name = str(value.get("name") or f"custom:{order}/{rule}{'/coverage' if cov else ''}")
    return with_schedule(Policy(name, order, rule, bool(cov)), value.get("checkpoints"),  # type: ignore[arg-type]
                         value.get("spending"), "policies")  # type: ignore[arg-type]


@dataclass(frozen=True)
class ReplaySpec:
    """Everything a replay takes. Lists are swept as a cartesian product.

    ``bootstrap`` holds resample counts ``B`` (ints) and/or ``"exact"``; ``groups`` holds
    grouping keys (``None`` = one group, ``"repo"``, ``"repo,difficulty"``).
    """

    policies: tuple[Policy, ...] = (NAMED_POLICIES["coverage_bootstrap"],)
    deltas: tuple[float, ...] = (0.0,)
    budgets: tuple[float, ...] = DEFAULT_BUDGETS
    orders: int = 500
    bootstrap: tuple[int | str, ...] = (200,)
    a: tuple[float, ...] = (0.05,)
    floors: tuple[str, ...] = ("proportional",)
    groups: tuple[str | None, ...] = (None,)
    orientation: str = "directed"
    min_task_coverage: float = 0.95
    alpha: float = 0.05
    gamma: float = 0.05
    eta: float = 0.25
    seed: int = 0
    seeds: int = 1
    pairs: str = "all"  # which pairs count (SPEC §5.1), e.g. "top:10+min_gap:2"
    gap_classes: tuple[float, ...] = classes.DEFAULT_EDGES  # |Δ_full| edges in pp
    extra: dict[str, object] = field(default_factory=dict, compare=False)

    def to_dict(self) -> dict[str, object]:
        """Canonical, JSON-ready form (what reports echo and what hashes are taken of)."""
        return {
            "policies": [p.describe() for p in self.policies],
            "deltas": list(self.deltas),
            "budgets": list(self.budgets),
            "orders": self.orders,
            "bootstrap": list(self.bootstrap),
            "a": list(self.a),
            "floors": list(self.floors),
            "groups": list(self.groups),
            "orientation": self.orientation,
            "min_task_coverage": self.min_task_coverage,
            "alpha": self.alpha,
            "gamma": self.gamma,
            "eta": self.eta,
            "seed": self.seed,
            "seeds": self.seeds,
            "pairs": self.pairs,
            "gap_classes": list(self.gap_classes),
        }


def make_spec(**options: object) -> ReplaySpec:
    """Build and validate a spec from plain values (CLI, JSON). Raises ``SpecError``."""
    known = set(ReplaySpec.__dataclass_fields__) - {"extra"}
    checkpoints, spending = options.pop("checkpoints", None), options.pop("spending", None)
    unknown = sorted(set(options) - known)
    if unknown:
        raise SpecError(unknown[0], "unknown option")
    spec = ReplaySpec()
    vals: dict[str, object] = {}
    for key, value in options.items():
        if value is None:
            continue
        vals[key] = value
    if "policies" in vals:
        pols = vals["policies"]
        if isinstance(pols, str | Mapping | Policy):
            pols = [pols]
        vals["policies"] = tuple(parse_policy(p) for p in pols)  # type: ignore[union-attr]
    if checkpoints is not None or spending is not None:
        # One schedule for every policy whose rule can take one (anytime policies keep theirs).
        pols = vals.get("policies", spec.policies)
        if all(p.rule in ANYTIME_RULES for p in pols):  # type: ignore[union-attr]
            raise SpecError("checkpoints", "a schedule applies to fixed-sample rules; every policy here is anytime")
        vals["policies"] = tuple(p if p.rule in ANYTIME_RULES or p.checkpoints is not None
                                 else with_schedule(p, checkpoints, spending)  # type: ignore[arg-type]
                                 for p in pols)  # type: ignore[union-attr]
    for key in ("deltas", "budgets", "bootstrap", "a", "floors", "groups", "gap_classes"):
        if key in vals and (isinstance(vals[key], str | int | float) or vals[key] is None):
            vals[key] = (vals[key],)
        if key in vals:
            vals[key] = tuple(vals[key])  # type: ignore[arg-type]
    # Numbers are normalised so that 0 and 0.0 give the same spec (and the same report bytes).
    for key in ("deltas", "budgets", "a", "gap_classes"):
        if key in vals:
            vals[key] = tuple(_as_float(key, x) for x in vals[key])  # type: ignore[union-attr]
    for key in ("alpha", "gamma", "eta", "min_task_coverage"):
        if key in vals:
            vals[key] = _as_float(key, vals[key])
    if "bootstrap" in vals:
        vals["bootstrap"] = tuple(x if x == "exact" or isinstance(x, bool) or not isinstance(x, float) or x != int(x)
                                  else int(x) for x in vals["bootstrap"])  # type: ignore[union-attr]
    if isinstance(vals.get("pairs"), str):
        try:
            vals["pairs"] = selection.canonical(vals["pairs"])  # type: ignore[arg-type]
        except FieldError as exc:
            raise SpecError(exc.field, exc.message) from None
    spec = replace(spec, **vals)  # type: ignore[arg-type]
    validate_spec(spec)
    return spec


def _as_float(name: str, x: object) -> object:
    """``float(x)`` for real numbers; anything else is left for ``validate_spec`` to name."""
    if isinstance(x, bool) or not isinstance(x, int | float):
        return x
    return float(x)


def _finite(name: str, x: object) -> float:
    if isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(float(x)):
        raise SpecError(name, f"must be a finite number, got {x!r}")
    return float(x)


def validate_spec(spec: ReplaySpec) -> None:
    """Check the spec on its own (dataset-dependent checks happen in ``plan_replay``)."""
    if not spec.policies:
        raise SpecError("policies", "at least one policy is needed")
    names = [p.name for p in spec.policies]
    if len(set(names)) != len(names):
        raise SpecError("policies", "a policy is listed twice")
    if not spec.deltas:
        raise SpecError("deltas", "at least one threshold is needed")
    for d in spec.deltas:
        v = _finite("deltas", d)
        if not -100.0 <= v <= 100.0:
            raise SpecError("deltas", f"δ is in percentage points and must be in [-100, 100], got {d}")
    if not spec.budgets:
        raise SpecError("budgets", "at least one budget is needed")
    for b in spec.budgets:
        v = _finite("budgets", b)
        if not 0.0 < v <= 1.0:
            raise SpecError("budgets", f"budget fractions must be in (0, 1], got {b}")
    if len(set(spec.budgets)) != len(spec.budgets) or list(spec.budgets) != sorted(spec.budgets):
        raise SpecError("budgets", "budgets must be increasing and distinct")
    if isinstance(spec.orders, bool) or not isinstance(spec.orders, int) or not 1 <= spec.orders <= 100_000:
        raise SpecError("orders", f"must be an integer in [1, 100000], got {spec.orders!r}")
    if not spec.bootstrap:
        raise SpecError("bootstrap", "at least one resample count is needed")
    for b in spec.bootstrap:
        if b == "exact":
            continue
        if isinstance(b, bool) or not isinstance(b, int) or not 1 <= b <= MAX_RESAMPLES:
            raise SpecError("bootstrap", f"must be 'exact' or an integer in [1, {MAX_RESAMPLES}], got {b!r}")
    if not spec.a:
        raise SpecError("a", "at least one level is needed")
    for a in spec.a:
        v = _finite("a", a)
        if not 0.0 < v < 1.0:
            raise SpecError("a", f"level a must be in (0, 1), got {a}")
    if not spec.floors:
        raise SpecError("floors", "at least one floor is needed")
    for f in spec.floors:
        if f not in FLOORS:
            raise SpecError("floors", f"unknown floor '{f}'; floors: {', '.join(FLOORS)}")
    if not spec.groups:
        raise SpecError("groups", "at least one grouping (or none) is needed")
    if spec.orientation not in ORIENTATIONS:
        raise SpecError("orientation", f"must be one of {', '.join(ORIENTATIONS)}, got '{spec.orientation}'")
    v = _finite("min_task_coverage", spec.min_task_coverage)
    if not 0.0 <= v <= 1.0:
        raise SpecError("min_task_coverage", "must be in [0, 1]")
    for name in ("alpha", "gamma", "eta"):
        v = _finite(name, getattr(spec, name))
        if not 0.0 <= v <= 1.0:
            raise SpecError(name, "must be in [0, 1]")
    if isinstance(spec.seed, bool) or not isinstance(spec.seed, int) or spec.seed < 0:
        raise SpecError("seed", "must be an integer >= 0")
    if isinstance(spec.seeds, bool) or not isinstance(spec.seeds, int) or not 1 <= spec.seeds <= 1000:
        raise SpecError("seeds", "must be an integer in [1, 1000]")
    try:
        selection.parse_selection(spec.pairs)
        classes.validate_edges(spec.gap_classes)
    except FieldError as exc:
        raise SpecError(exc.field, exc.message) from None
    for p in spec.policies:
        if p.rule == "mcnemar" and any(float(d) != 0.0 for d in spec.deltas):
            raise SpecError("deltas", f"policy '{p.name}' uses mcnemar, which is defined only at δ = 0")


def parse_budgets(text: str, max_count: int | None = None, what: str = "budgets") -> tuple[float, ...]:
    """``"0.05:0.95:0.05"`` (start:stop:step, inclusive) or ``"0.1,0.25,0.5"``.

    With ``max_count``, a grid of more budgets is refused from its arithmetic, before a
    single budget is made (``"0.5:1:1e-300"`` would otherwise be 5e299 floats). ``what`` names
    the values (and the field) in the errors: a schedule's checkpoints are read the same way."""
    text = text.strip()
    try:
        if ":" in text:
            start, stop, step = (float(x) for x in text.split(":"))
            if not all(math.isfinite(x) for x in (start, stop, step)):
                raise SpecError(what, f"start, stop and step must be finite numbers, got '{text}'")
            if step <= 0:
                raise SpecError(what, "step must be positive")
            count = math.floor((stop - start) / step + 1e-9) + 1 if stop >= start else 0
            if max_count is not None and count > max_count:
                raise SpecError(what, f"the range '{text}' has {count:.4g} {what}; the limit is {max_count}")
            n = int(count)
            return tuple(round(start + i * step, 10) for i in range(n))
        if max_count is not None and text.count(",") + 1 > max_count:
            raise SpecError(what, f"{text.count(',') + 1} {what}; the limit is {max_count}")
        return tuple(float(x) for x in text.split(",") if x.strip())
    except SpecError:
        raise
    except (ValueError, OverflowError):
        raise SpecError(what, f"cannot read '{text}': use start:stop:step or a comma list") from None


def as_sequence(x: object) -> Sequence[object]:
    return x if isinstance(x, list | tuple) else [x]
