"""Session use cases: declare, append observations (idempotent), and the state at any time.

The state is recomputed from the stored observations on every read: the sequence of
observed tasks is the order in which each task got its last needed trial, by storage order,
which is the order of the requests and, within one, of its observations. Appends to one
session hold its row locked to their commit, so each answer's sequence is a prefix of every
later one (on Postgres, ids taken by a request that commits later could otherwise fall
before rows another request had already answered on).
"""

from __future__ import annotations

import copy
import hashlib
import uuid
from dataclasses import replace
from typing import Any

import numpy as np
from sqlalchemy.orm import Session

from service import limits
from service.config import Settings
from service.decisions import service as decisions
from service.engine import rules as R
from service.engine import schedule
from service.engine.coverage import budget_k, required
from service.engine.errors import FieldError
from service.engine.live import (
    LiveError,
    LiveSpec,
    Observed,
    Universe,
    aggregate_columns,
    live_decision,
    make_live_spec,
    make_universe,
    next_tasks,
    recommended_order,
)
from service.engine.spec import ANYTIME_RULES, schedule_tag
from service.errors import Conflict, NotFound
from service.lru import LRU
from service.sessions import repository
from service.sessions.models import LiveSession
from service.sessions.schemas import ObservationsCreate, SessionCreate

ROLES = ("A", "B")


def create(session: Session, body: SessionCreate, settings: Settings | None = None) -> LiveSession:
    """Validate the declaration, fix the recommended order, store it. With ``settings``, the
    checkpoints, the universe and one decision's work are held to the limits (every read
    recomputes the state, so a session is only as cheap as its declaration)."""
    if settings is not None:
        limits.check_checkpoints(len(body.budgets), settings)
        if body.universe is not None:
            limits.check_universe(len(body.universe.task_ids), settings)
    try:
        decisions.check_systems(body.system_a, body.system_b)
        choice = decisions.resolve_rule(body, "anytime")
        spec = decisions.live_spec(body, choice, budgets=body.budgets, budget=None, seed=0)
        if choice.rule == "mcnemar" and body.trials != 1:
            raise LiveError("trials", "mcnemar needs single-trial outcomes (trials = 1)")
        schedule.check_checkpoints(body.budgets, "budgets")
        spending = None
        if choice.rule not in ANYTIME_RULES or body.spending is not None:
            spending = schedule.check_spending(body.spending or schedule.DEFAULT_SPENDING, choice.rule)
        if body.dataset_id is None:
            if body.universe is None:
                raise LiveError("universe", "give the task universe or a dataset_id")
            universe = decisions.inline_universe(body.universe.task_ids, body.universe.groups)
        else:
            if body.universe is not None:
                raise LiveError("universe", "give the task universe or a dataset_id, not both")
            universe = decisions.dataset_universe(session, body.dataset_id, body.group, settings)
    except FieldError as exc:
        raise decisions.unprocessable(LiveError(exc.field, exc.message)) from None
    limits.check_task_ids(universe.task_ids)  # they are stored, per observation, in a 500-character column
    if settings is not None:
        limits.check_universe(universe.n, settings)
        n_trials = 2 * universe.n * body.trials  # a session ends with every task observed
        limits.check_decision_work(limits.decision_work(
            n_tasks=universe.n, n_observations=n_trials, n_groups=len(universe.group_names), rule=choice.rule,
            coverage_aware=choice.coverage_aware, bootstrap=spec.bootstrap), settings)
    seed = body.seed if body.seed is not None else int.from_bytes(universe.digest()[:6], "big")
    row = LiveSession(
        id=uuid.uuid4(),
        dataset_id=body.dataset_id,
        grouping=body.group if body.dataset_id is not None else None,
        system_a=body.system_a,
        system_b=body.system_b,
        policy=body.policy,
        rule=choice.rule,
        coverage_aware=choice.coverage_aware,
        delta=spec.delta,
        a=spec.a,
        floor=spec.floor,
        bootstrap=str(spec.bootstrap),
        budgets=list(spec.budgets),
        spending=spending,
        trials=body.trials,
        seed=seed,
        universe={"task_ids": list(universe.task_ids),
                  "groups": [universe.group_names[g] for g in universe.labels.tolist()]},
        task_order=recommended_order(universe, spec.floor, seed),
    )
    return repository.add(session, row)


def get(session: Session, session_id: uuid.UUID, *, lock: bool = False) -> LiveSession:
    row = repository.get(session, session_id, lock=lock)
    if row is None:
        raise NotFound(f"session {session_id} does not exist")
    return row


# ----------------------------------------------------------------------------- state


_CACHE: LRU[uuid.UUID, tuple[Universe, np.ndarray]] = LRU(64, weigh=lambda _id, v: v[0].n, max_weight=800_000)
"""Up to 64 sessions' universes, 800,000 tasks in all (about 90 bytes a task with the rank)."""


def _universe(row: LiveSession) -> tuple[Universe, np.ndarray]:
    """The session's universe and the rank of each task in its recommended order (cached:
    both are fixed at creation)."""
    hit = _CACHE.get(row.id)
    if hit is not None:
        return hit
    universe = make_universe(row.universe["task_ids"], row.universe["groups"])
    rank = np.empty(universe.n, dtype=np.int64)
    rank[[universe.index[t] for t in row.task_order]] = np.arange(universe.n)
    _CACHE.put(row.id, (universe, rank))
    return universe, rank


def spec_of(row: LiveSession) -> LiveSpec:
    boot: int | str = row.bootstrap if row.bootstrap == "exact" else int(row.bootstrap)
    return make_live_spec(rule=row.rule, delta=row.delta, a=row.a, floor=row.floor, bootstrap=boot,
                          coverage_aware=row.coverage_aware, budgets=row.budgets, budget=max(row.budgets),
                          seed=row.seed)


def checkpoints(row: LiveSession, n: int) -> list[tuple[float, int]]:
    """``(budget, k)`` per declared budget, one per distinct ``k``, ascending."""
    out: dict[int, float] = {}
    for b in sorted(row.budgets):
        out.setdefault(max(1, budget_k(b, n)), b)
    return sorted(((b, k) for k, b in out.items()), key=lambda x: x[1])


def levels(row: LiveSession, points: list[tuple[float, int]]) -> list[float | None]:
    """The level of each checkpoint (SPEC §4.4): the increments of the spending function for a
    fixed-sample rule, none for anytime (valid after every task as it is)."""
    if row.rule in ANYTIME_RULES or not points:
        return [None] * len(points)
    return [float(x) for x in schedule.levels([k for _, k in points], row.a, row.spending or "none")]


def _guard(universe: Universe, observed: Observed, spec: LiveSpec, kj: int, level: float, result: dict[str, Any],
           rank: np.ndarray, k_cap: int) -> None:
    """A checkpoint's conclusion stands only if the schedule's guarded tail agrees
    (``schedule.GUARD``: what replay runs too); else the checkpoint defers."""
    if result["decision"] == "defer" or spec.rule not in ("bootstrap", "paired_normal"):
        return
    seq = observed.sequence[:kj]
    d = observed.y_a[seq] - observed.y_b[seq]
    lat = R.find_lattice(d) or 1
    v = np.round(d * lat).astype(np.int64)
    dec, _ = schedule.scheduled_paths(spec.rule, v[None, :], lat, [kj], [level], spec.theta, universe.n)
    if dec[0] == R.DEFER:
        result.update(decision="defer", reason="insufficient_evidence", rule_decision="defer",
                      next=next_tasks(universe, _prefix(observed, kj), spec, rank, k_cap))


def _prefix(observed: Observed, k: int) -> Observed:
    return replace(observed, sequence=observed.sequence[:k])


_CHECKPOINTS: LRU[tuple[Any, ...], dict[str, Any]] = LRU(4096)
ENTRY_FIELDS = ("decision", "reason", "mean_difference", "statistic")


def _checkpoint(sid: uuid.UUID, universe: Universe, observed: Observed, spec: LiveSpec, level: float,
                rank: np.ndarray, kj: int, ahead: list[tuple[int, float]], *, forecast: bool, k_cap: int,
                need_full: bool) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """A fixed-sample checkpoint on the first ``kj`` observed tasks, at its level: its history
    fields, and the whole decision (``None`` when a remembered deferral is enough).

    Every read of a session walks every passed checkpoint (4,000 of them once cost 6.9 s per
    GET); a passed checkpoint's verdict depends only on its prefix of the sequence (appends
    only extend it), so deferrals are remembered, keyed by every input (a digest of the prefix,
    the level, the checkpoints ahead). The whole decision is computed again when it is needed
    (a conclusion, or the checkpoint at ``k``): its counts and next tasks see every observation."""
    seq = observed.sequence[:kj]
    digest = hashlib.blake2b(b"".join((seq.tobytes(), observed.y_a[seq].tobytes(), observed.y_b[seq].tobytes())),
                             digest_size=16).digest()
    key = (sid, kj, level, tuple(ahead), forecast, k_cap, digest)
    hit = _CHECKPOINTS.get(key)
    if hit is not None and hit["decision"] == "defer" and not need_full:
        return copy.deepcopy(hit), None
    full = live_decision(universe, _prefix(observed, kj), replace(spec, a=level), rank, fixed_checkpoint=True,
                         checkpoints=ahead, forecast=forecast)
    _guard(universe, observed, spec, kj, level, full, rank, k_cap)
    fields = {f: full[f] for f in ENTRY_FIELDS}
    _CHECKPOINTS.put(key, copy.deepcopy(fields))
    return fields, full


def _entry(event: str, budget: float | None, k: int, result: dict[str, Any],
           level: float | None = None) -> dict[str, Any]:
    return {"event": event, "budget": budget, "k": k, "level": level, "decision": result["decision"],
            "reason": result["reason"], "mean_difference": result["mean_difference"],
            "statistic": result["statistic"]}


def _coverage_reason(universe: Universe, observed: Observed, spec: LiveSpec, k: int) -> str:
    n_g = universe.n_g
    req = required(spec.floor, k, n_g)
    have = np.bincount(universe.labels[observed.sequence[:k]], minlength=len(n_g))
    if spec.coverage_aware and req.sum() > k:
        return "coverage_infeasible"
    if spec.coverage_aware and np.any(have < req):
        return "coverage_unmet"
    return "insufficient_evidence"


def state(row: LiveSession, rows: list[tuple[str, str, int, float]]) -> dict[str, Any]:
    """Status, the current decision and the history at the checkpoints (and the anytime stop)."""
    universe, rank = _universe(row)
    spec = spec_of(row)
    cols = list(zip(*rows, strict=True)) if rows else [(), (), (), ()]
    observed = aggregate_columns(universe, cols[0], cols[1], cols[2], cols[3], ROLES, trials_needed=row.trials)
    n = universe.n
    k = observed.k
    points = checkpoints(row, n)
    k_cap = points[-1][1]
    history: list[dict[str, Any]] = []
    if spec.rule in ANYTIME_RULES:
        current = live_decision(universe, observed, spec, rank, forecast=True)
        stop = current["statistic"].get("stopped_at")
        for b, kj in points:
            if kj > k:
                break
            concluded = stop is not None and stop <= kj
            d = observed.y_a[observed.sequence[:kj]] - observed.y_b[observed.sequence[:kj]]
            history.append({
                "event": "checkpoint", "budget": b, "k": kj,
                "decision": current["decision"] if concluded else "defer",
                "reason": "decided" if concluded else _coverage_reason(universe, observed, spec, kj),
                "mean_difference": float(f"{d.mean():.12g}"), "statistic": {"stopped_at": stop if concluded else None},
            })
        if stop is not None:
            history.append(_entry("stop", None, stop, current))
            history.sort(key=lambda e: (e["k"], e["event"] == "checkpoint"))
        concluded = current["decision"] != "defer"
    else:
        final = last = None
        lvls = levels(row, points)
        ahead = [(kj, lv) for (_, kj), lv in zip(points, lvls, strict=True) if kj > k]
        reached = len(points) - len(ahead)
        for j, ((b, kj), level) in enumerate(zip(points, lvls, strict=True)):
            if kj > k:
                break
            # Each checkpoint spends its share of a (SPEC §4.4): the rule is consulted at that level.
            fields, last = _checkpoint(row.id, universe, observed, spec, level, rank, kj, ahead,
                                       forecast=j == reached - 1, k_cap=k_cap, need_full=kj == k)
            history.append(_entry("checkpoint", b, kj, fields, level))
            if fields["decision"] != "defer":
                final = last
                break
        concluded = final is not None
        if final is not None:
            current = final
        elif last is not None and history[-1]["k"] == k:
            current = last
        else:
            # Between checkpoints the rule is not consulted: that is what pre-registration means.
            current = live_decision(universe, observed, spec, rank, fixed_checkpoint=True, checkpoints=ahead,
                                    forecast=True)
            current.update(decision="defer", reason="awaiting_checkpoint", rule_decision=None, statistic={},
                           budget_exhausted=False, interval=None)
            current["next"] = next_tasks(universe, observed, spec, rank, k_cap)
        if row.spending == "none":
            current["warning"] = schedule.NO_SPENDING_WARNING.format(m=len(points))
    if concluded:
        status = "concluded"
    elif k >= k_cap:
        status = "exhausted"
    else:
        status = "running"
    current["calibration"] = None
    observed_ids = [universe.task_ids[i] for i in observed.sequence.tolist()]
    return {"status": status, "k": k, "N": n, "observed_task_ids": observed_ids, "current": current,
            "history": history}


def with_calibration(session: Session, row: LiveSession, st: dict[str, Any]) -> dict[str, Any]:
    if row.dataset_id is None:
        return st
    choice = decisions.rule_choice(row.policy, row.rule, row.coverage_aware, "anytime")
    spec, fraction = spec_of(row), st["k"] / st["N"]
    found = None
    if row.rule not in ANYTIME_RULES and row.spending:
        # The replay of this very schedule is the calibration (SPEC §4.4); any other is second best.
        tag = schedule_tag(sorted(row.budgets), row.spending)
        own = replace(choice, policy_names=tuple(f"{p}[{tag}]" for p in choice.policy_names))
        found = decisions.calibration(session, row.dataset_id, own, spec, row.grouping, fraction)
    if found is None:
        found = decisions.calibration(session, row.dataset_id, choice, spec, row.grouping, fraction)
    st["current"]["calibration"] = found
    return st


def read(session: Session, row: LiveSession) -> dict[str, Any]:
    st = with_calibration(session, row, state(row, repository.observations(session, row.id)))
    points = checkpoints(row, st["N"])
    return {
        **st,
        "id": row.id, "dataset_id": row.dataset_id, "group": row.grouping, "system_a": row.system_a,
        "system_b": row.system_b, "policy": row.policy, "rule": row.rule, "coverage_aware": row.coverage_aware,
        "delta": row.delta, "a": row.a, "floor": row.floor,
        "bootstrap": row.bootstrap if row.bootstrap == "exact" else int(row.bootstrap),
        "budgets": row.budgets, "spending": row.spending, "trials": row.trials, "seed": row.seed,
        "checkpoints": [{"budget": b, "k": k, "level": lv}
                        for (b, k), lv in zip(points, levels(row, points), strict=True)],
        "order": row.task_order, "created_at": row.created_at,
    }


# ----------------------------------------------------------------------------- appends


def append(session: Session, session_id: uuid.UUID, body: ObservationsCreate) -> dict[str, Any]:
    """Store new observations; the same (task, system, trial) again with the same outcome is
    a no-op, with another outcome a 409 (and nothing of the request is stored)."""
    row = get(session, session_id, lock=True)  # appends to one session one at a time, to the commit
    universe, _ = _universe(row)
    names = {row.system_a: "A", row.system_b: "B"}
    posted: dict[tuple[str, str, int], tuple[int, float]] = {}
    conflicts: list[dict[str, Any]] = []
    for i, o in enumerate(body.observations):
        role = names.get(o.system)
        key = (role or o.system, o.task_id, o.trial)
        if key in posted and posted[key][1] != o.outcome:
            conflicts.append({"field": f"observations[{i}]", "message": f"task '{o.task_id}', system '{o.system}', "
                              f"trial {o.trial}: outcome {o.outcome} differs from {posted[key][1]} in this request"})
        posted.setdefault(key, (i, o.outcome))
    if conflicts:
        raise Conflict(conflicts)
    items = list(posted.items())
    obs = body.observations
    try:
        aggregate_columns(universe, [obs[i].system for _, (i, _) in items], [k[1] for k, _ in items],
                          [k[2] for k, _ in items], [v for _, (_, v) in items], (row.system_a, row.system_b),
                          where=lambda j: f"observations[{items[j][1][0]}]")
        for (_, _, trial), (i, value) in items:
            if trial >= row.trials:
                raise LiveError(f"observations[{i}].trial", f"this session declared {row.trials} trial(s) per task: "
                                                            f"trial is 0..{row.trials - 1}")
            if row.rule == "mcnemar" and value not in (0.0, 1.0):
                raise LiveError(f"observations[{i}].outcome", "mcnemar needs binary outcomes (0 or 1)")
    except LiveError as exc:
        raise decisions.unprocessable(exc) from None
    new_rows = [(role, task, trial, value) for (role, task, trial), (_, value) in items]
    added = repository.insert_new(session, row.id, new_rows)
    stored = repository.observations(session, row.id)
    values = {(s, t, tr): o for s, t, tr, o in stored}
    for (role, task, trial), (i, value) in items:
        have = values.get((role, task, trial))
        if have is not None and have != value:
            conflicts.append({"field": f"observations[{i}]", "message": f"task '{task}', system "
                              f"'{obs[i].system}', trial {trial} is already recorded with outcome {have}"})
    if conflicts:
        raise Conflict(conflicts)
    st = with_calibration(session, row, state(row, stored))
    return {**st, "added": added, "duplicates": len(items) - added}

