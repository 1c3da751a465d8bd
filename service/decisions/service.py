"""Live decision use cases: normalise a request, decide with the engine, add calibration."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from pydantic_core import to_json
from sqlalchemy.orm import Session, sessionmaker

from service import limits
from service.config import Settings
from service.datasets import service as datasets
from service.decisions import repository
from service.decisions.schemas import DecisionCreate, RuleOptions
from service.engine.live import (
    LiveError,
    LiveSpec,
    Observed,
    Universe,
    aggregate_columns,
    aggregate_single,
    live_decision,
    make_live_spec,
    make_universe,
)
from service.engine.records import group_labels
from service.engine.spec import NAMED_POLICIES, ORDERS
from service.errors import Unprocessable
from service.lru import LRU
from service.replays import service as replays

log = logging.getLogger(__name__)


def unprocessable(exc: LiveError) -> Unprocessable:
    return Unprocessable([{"field": exc.field, "message": exc.message}])


@dataclass(frozen=True)
class RuleChoice:
    """The rule, its coverage-awareness and the policy names a replay would store it under."""

    rule: str
    coverage_aware: bool
    policy_names: tuple[str, ...]


def resolve_rule(opts: RuleOptions, default_rule: str) -> RuleChoice:
    """``policy`` (named) or ``rule``; the names to match replays by, preferred first."""
    return rule_choice(opts.policy, opts.rule, opts.coverage_aware, default_rule)


@lru_cache(maxsize=256)
def rule_choice(policy_name: str | None, rule: str | None, coverage_aware: bool | None,
                default_rule: str) -> RuleChoice:
    if policy_name is not None:
        policy = NAMED_POLICIES.get(policy_name)
        if policy is None:
            raise LiveError("policy", f"unknown policy '{policy_name}'; named policies: {', '.join(NAMED_POLICIES)}")
        if rule is not None and rule != policy.rule:
            raise LiveError("rule", f"policy '{policy.name}' uses rule '{policy.rule}', not '{rule}'")
        cov = policy.coverage_aware if coverage_aware is None else coverage_aware
        return RuleChoice(policy.rule, cov, (policy.name,))
    rule = rule or default_rule
    cov = True if coverage_aware is None else coverage_aware
    named = [p.name for p in NAMED_POLICIES.values() if p.rule == rule and p.coverage_aware == cov]
    named.sort(key=lambda name: NAMED_POLICIES[name].order != "stratified")
    custom = [f"custom:{o}/{rule}{'/coverage' if cov else ''}" for o in ("stratified", *[o for o in ORDERS
                                                                                       if o != "stratified"])]
    return RuleChoice(rule, cov, (*named, *custom))


def live_spec(opts: RuleOptions, choice: RuleChoice, *, budgets: list[float] | None, budget: float | None,
              seed: int) -> LiveSpec:
    # The key carries each value's type: 1 == 1.0 == True would otherwise share an entry
    # (make_live_spec refuses a boolean bootstrap that an integer of the same value passes).
    key = tuple((type(v), v) for v in (choice.rule, opts.delta, opts.a, opts.floor, opts.bootstrap,
                                        choice.coverage_aware, budget, seed))
    grid = None if budgets is None else tuple((type(b), b) for b in budgets)
    return _live_spec(key, grid)


@lru_cache(maxsize=256)
def _live_spec(key: tuple[tuple[type, Any], ...], grid: tuple[tuple[type, Any], ...] | None) -> LiveSpec:
    """``make_live_spec`` once per distinct set of options: a harness sends the same ones on
    every call, and checking them costs as much as aggregating a few hundred outcomes."""
    rule, delta, a, floor, bootstrap, coverage_aware, budget, seed = (v for _, v in key)
    return make_live_spec(rule=rule, delta=delta, a=a, floor=floor, bootstrap=bootstrap, coverage_aware=coverage_aware,
                          budgets=None if grid is None else [b for _, b in grid], budget=budget, seed=seed)


_UNIVERSES: LRU[tuple[uuid.UUID, str | None], Universe] = LRU(16)


def cached_universe(dataset_id: uuid.UUID, group: str | None) -> Universe | None:
    return _UNIVERSES.get((dataset_id, group))


def dataset_universe(session: Session, dataset_id: uuid.UUID, group: str | None,
                     settings: Settings | None = None) -> Universe:
    """Every task of the dataset (SPEC §1) with its group under ``group`` (kept in memory:
    datasets never change). With ``settings`` a dataset of more than ``max_universe_tasks``
    tasks is refused before its universe is built and kept (16 per process, each about 80
    bytes a task beyond the dataset's own arrays)."""
    key = (dataset_id, group)
    hit = cached_universe(dataset_id, group)
    if hit is not None:
        return hit
    with _UNIVERSES.loading(key):  # the misses meanwhile wait for this load (service/lru.py)
        hit = cached_universe(dataset_id, group)  # loaded while this request waited
        if hit is not None:
            return hit
        records = datasets.load_records(session, dataset_id)
        if settings is not None:
            limits.check_universe(records.n_tasks, settings, "dataset_id")
        try:
            labels, names = group_labels(records, group)
        except ValueError as exc:
            raise LiveError("group", str(exc)) from None
        universe = make_universe(records.tasks, [names[i] for i in labels.tolist()])
        _UNIVERSES.put(key, universe)
    return universe


def _forget_dataset(dataset_id: uuid.UUID) -> None:
    """A deleted dataset answers no more decisions from this process's caches."""
    for cache in (_UNIVERSES, _CALIBRATIONS):
        for key in cache.keys():
            if key[0] == dataset_id:
                cache.pop(key)


datasets.on_delete(_forget_dataset)


_INLINE: LRU[tuple[tuple[str, ...], tuple[str | None, ...] | None], Universe] = LRU(
    32, weigh=lambda key, universe: universe.n, max_weight=400_000
)
"""Up to 32 universes, 400,000 tasks in all (each task about 80 bytes of universe plus its id
in the key: some 60 MB)."""


def inline_universe(task_ids: list[str], groups: list[str | None] | None) -> Universe:
    """A universe given in the request (a harness sends the same one every time: the last
    few are kept, keyed by their content)."""
    key = (tuple(task_ids), None if groups is None else tuple(groups))
    hit = _INLINE.get(key)
    if hit is not None:
        return hit
    universe = make_universe(task_ids, groups, field="universe")
    _INLINE.put(key, universe)
    return universe


def observed_of(body: DecisionCreate, universe: Universe) -> Observed:
    """Aggregate the request's observations (list or compact form) over the universe."""
    systems = (body.system_a, body.system_b)
    if body.observations is not None and body.outcomes is not None:
        raise LiveError("outcomes", "give observations or outcomes, not both")
    if body.outcomes is not None:
        if body.order is None and set(body.outcomes) <= set(systems):
            fast = aggregate_single(universe, body.outcomes.get(body.system_a, {}),
                                    body.outcomes.get(body.system_b, {}))  # type: ignore[arg-type]
            if fast is not None:
                return fast
        sys_col: list[str] = []
        task_col: list[str] = []
        trial_col: list[int] = []
        out_col: list[Any] = []
        for name, per_task in body.outcomes.items():
            if name not in systems:
                raise LiveError(f"outcomes.{name}", f"'{name}' is neither system A ('{systems[0]}') nor B "
                                                    f"('{systems[1]}')")
            if list not in set(map(type, per_task.values())):  # one outcome per task
                sys_col += [name] * len(per_task)
                task_col += per_task.keys()
                trial_col += [0] * len(per_task)
                out_col += per_task.values()
                continue
            for task, value in per_task.items():
                if isinstance(value, list):
                    for trial, v in enumerate(value):
                        sys_col.append(name)
                        task_col.append(task)
                        trial_col.append(trial)
                        out_col.append(v)
                else:
                    sys_col.append(name)
                    task_col.append(task)
                    trial_col.append(0)
                    out_col.append(value)
        order = body.order if body.order is not None else list(body.outcomes.get(body.system_a, {}))
        return aggregate_columns(universe, sys_col, task_col, trial_col, out_col, systems, order=order,
                                 where=lambda i: f"outcomes.{sys_col[i]}.{task_col[i]}")
    obs = body.observations or []
    return aggregate_columns(universe, [o.system for o in obs], [o.task_id for o in obs], [o.trial for o in obs],
                             [o.outcome for o in obs], systems, order=body.order)


def check_systems(system_a: str, system_b: str) -> None:
    if not system_a:
        raise LiveError("system_a", "name system A")
    if not system_b:
        raise LiveError("system_b", "name system B")
    if system_a == system_b:
        raise LiveError("system_b", f"A and B must be different systems (both are '{system_a}')")


def calibration(session: Session, dataset_id: uuid.UUID, choice: RuleChoice, spec: LiveSpec, group: str | None,
                fraction: float) -> dict[str, Any] | None:
    """The newest finished replay of the dataset with this policy, δ, floor, level and
    grouping: its FAR, FRR and defer rate at the replayed budget nearest to ``k/N`` and its
    minimum sufficient budget; ``None`` when there is none."""
    rows = repository.calibration_rows(session, dataset_id, policies=list(choice.policy_names), floor=spec.floor,
                                       delta=spec.delta, a=spec.a, group=group)
    return calibration_of(rows, choice, spec, group, fraction)


def calibration_of(rows: list[dict[str, Any]], choice: RuleChoice, spec: LiveSpec, group: str | None,
                   fraction: float) -> dict[str, Any] | None:
    """``calibration`` from the metric rows ``repository.calibration_rows`` returned."""
    if not rows:
        return None
    replay_id = rows[0]["id"]
    rows = [r for r in rows if r["id"] == replay_id]
    present = {r["policy"] for r in rows}
    policy = next(p for p in choice.policy_names if p in present)
    rows = [r for r in rows if r["policy"] == policy]
    boots = [r["bootstrap"] for r in rows]
    boot = str(spec.bootstrap) if str(spec.bootstrap) in boots else boots[0]
    rows = [r for r in rows if r["bootstrap"] == boot]
    budgets = sorted({r["budget"] for r in rows if r["budget"] is not None})
    nearest = min(budgets, key=lambda b: (abs(b - fraction), -b)) if budgets else None
    out: dict[str, Any] = {"replay_id": replay_id, "policy": policy, "group": group, "bootstrap": boot,
                           "budget": nearest, "false_accept_rate": None, "false_reject_rate": None,
                           "defer_rate": None, "minimum_sufficient_budget": None}
    for r in rows:
        if r["budget"] is None and r["metric"] == "minimum_sufficient_budget":
            out["minimum_sufficient_budget"] = r["value"]
        elif nearest is not None and r["budget"] is not None and abs(r["budget"] - nearest) < 1e-12 \
                and r["metric"] in ("false_accept_rate", "false_reject_rate", "defer_rate"):
            out[r["metric"]] = r["value"]
    return out


class NeedsDatabase(Exception):
    """A dataset decision whose look-ups are not all cached (``decide(..., cached_only=True)``)."""


_CALIBRATIONS: LRU[tuple, tuple[float, int, list[dict[str, Any]]]] = LRU(256)

REFRESH_SHARE = 0.2
"""An entry in this last share of its life is read again in the background while it is served."""
_REFRESHER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="calibration-refresh")
_refreshing: set[tuple] = set()
_refreshing_lock = threading.Lock()


def _refresh_soon(key: tuple, factory: sessionmaker[Session], read: Callable[[Session], list[dict[str, Any]]],
                  ttl: float) -> None:
    """Read the rows of ``key`` again in a background thread (once at a time per key) and
    replace its entry. Without it every entry expired under load: each process's requests on
    the dataset then went to the route, its thread and the database until one read landed,
    and the bursts of slow requests that made showed in the load benchmark twice per phase."""
    with _refreshing_lock:
        if key in _refreshing:
            return
        _refreshing.add(key)

    def run() -> None:
        try:
            now, generation = time.monotonic(), replays.finished_generation()
            with factory() as session:
                rows = read(session)
            _CALIBRATIONS.put(key, (now + ttl, generation, rows))
        except Exception as exc:  # the entry expires as it would have; the next miss reads (or says why not)
            log.warning("could not refresh calibration rows: %s", type(exc).__name__)
        finally:
            with _refreshing_lock:
                _refreshing.discard(key)

    _REFRESHER.submit(run)


def _calibration_rows(session_of: Callable[[], Session], dataset_id: uuid.UUID, choice: RuleChoice,
                      spec: LiveSpec, group: str | None, ttl: float, cached_only: bool,
                      factory: sessionmaker[Session] | None = None) -> list[dict[str, Any]]:
    """``repository.calibration_rows``, kept ``ttl`` seconds per process: a harness on a
    dataset asks after every task, and the answer changes only when a replay of the dataset
    finishes (one finished in this process drops the cache at once; elsewhere it shows
    within ``ttl``). With ``factory``, an entry in the last ``REFRESH_SHARE`` of its life is
    served and read again in the background (``_refresh_soon``), so that a steady stream of
    requests never meets an expired entry; no entry is served past ``ttl`` after its read."""
    key = (dataset_id, choice.policy_names, spec.floor, spec.delta, spec.a, group)

    def read(session: Session) -> list[dict[str, Any]]:
        return repository.calibration_rows(session, dataset_id, policies=list(choice.policy_names), floor=spec.floor,
                                           delta=spec.delta, a=spec.a, group=group)

    def fresh() -> list[dict[str, Any]] | None:
        now, generation = time.monotonic(), replays.finished_generation()
        hit = _CALIBRATIONS.get(key)
        if hit is None or hit[0] <= now or hit[1] != generation:
            return None
        if factory is not None and hit[0] - now < REFRESH_SHARE * ttl:
            _refresh_soon(key, factory, read, ttl)
        return hit[2]

    rows = fresh()
    if rows is not None:
        return rows
    if cached_only:
        raise NeedsDatabase
    if ttl <= 0:
        return read(session_of())
    with _CALIBRATIONS.loading(key):
        rows = fresh()  # read by another request while this one waited
        if rows is not None:
            return rows
        now, generation = time.monotonic(), replays.finished_generation()
        rows = read(session_of())
        _CALIBRATIONS.put(key, (now + ttl, generation, rows))
    return rows


def decide(factory: sessionmaker[Session] | None, body: DecisionCreate, *, calibration_ttl: float = 0.0,
           cached_only: bool = False, settings: Settings | None = None) -> dict[str, Any]:
    """One stateless decision. Opens a (read-only) database session only for a dataset whose
    universe or calibration is not cached; ``cached_only`` raises ``NeedsDatabase`` instead
    (and ``factory`` then serves only the background refresh of calibration rows).
    With ``settings``, a dataset's universe is held to the same limits as an inline one."""
    try:
        check_systems(body.system_a, body.system_b)
        choice = resolve_rule(body, "bootstrap")
        spec = live_spec(body, choice, budgets=body.budgets, budget=body.budget, seed=body.seed)
        if body.dataset_id is None:
            if body.universe is None:
                raise LiveError("universe", "give the task universe or a dataset_id")
            universe = inline_universe(body.universe.task_ids, body.universe.groups)
            observed = observed_of(body, universe)
            out = live_decision(universe, observed, spec, forecast=body.forecast)
            out["calibration"] = None
            return out
        if body.universe is not None:
            raise LiveError("universe", "give the task universe or a dataset_id, not both")
        with ExitStack() as stack:
            opened: list[Session] = []

            def session_of() -> Session:
                if not opened:
                    if factory is None:
                        raise NeedsDatabase
                    opened.append(stack.enter_context(factory()))
                return opened[0]

            universe = cached_universe(body.dataset_id, body.group)
            if universe is None:
                if cached_only:
                    raise NeedsDatabase
                universe = dataset_universe(session_of(), body.dataset_id, body.group, settings)
            if settings is not None:
                limits.check_loaded_universe(universe.n, len(universe.group_names), body, settings)
            observed = observed_of(body, universe)
            cal = None
            if body.calibration:  # looked up before deciding: a cache miss costs no wasted decision
                rows = _calibration_rows(session_of, body.dataset_id, choice, spec, body.group, calibration_ttl,
                                         cached_only, factory)
                cal = calibration_of(rows, choice, spec, body.group, observed.k / universe.n)
            out = live_decision(universe, observed, spec, forecast=body.forecast)
            out["calibration"] = cal
            return out
    except LiveError as exc:
        raise unprocessable(exc) from None


def decision_json(factory: sessionmaker[Session] | None, body: DecisionCreate, *, calibration_ttl: float = 0.0,
                  cached_only: bool = False, settings: Settings | None = None) -> bytes:
    """``decide`` as the response bytes (the route and ``fastpath`` answer through this).

    pydantic-core's encoder: a third of ``json.dumps``'s time here. The engine emits only
    JSON types and UUIDs (non-finite floats are already None), so anything else fails
    loudly instead of turning into a string."""
    out = decide(factory, body, calibration_ttl=calibration_ttl, cached_only=cached_only, settings=settings)
    return to_json(out)  # type: ignore[arg-type]
