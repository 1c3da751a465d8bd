"""Placement use cases: declare an entry against a stored board, append its outcomes
(idempotent per task and trial), and the state at any time.

The state is recomputed from the stored observations on every read (as sessions do): the
sequence of observed tasks is the order in which each task got its last needed trial, in the
order the requests and their observations came. Appends to one placement hold its row
locked to their commit, as sessions do; a dataset deleted meanwhile waits for them (its
placements go with it), and an append that comes after is a 404.
"""

from __future__ import annotations

import uuid
from dataclasses import asdict
from typing import Any

import numpy as np
from sqlalchemy.orm import Session

from service import limits
from service.config import Settings
from service.datasets import repository as datasets_repo
from service.datasets import service as datasets
from service.decisions import service as decisions
from service.engine.coverage import FLOORS
from service.engine.live import LiveError, Universe, make_live_spec
from service.engine.placement import (
    TRUE_RANK,
    Board,
    aggregate_entry,
    check_width,
    placement_order,
    placement_state,
)
from service.engine.spec import ANYTIME_RULES
from service.errors import Conflict, NotFound
from service.lru import LRU
from service.placements import repository
from service.placements.models import Placement
from service.placements.schemas import PlacementCreate, PlacementObservationsCreate


def _board(session: Session, dataset_id: uuid.UUID, group: str | None,
           settings: Settings | None = None) -> tuple[Universe, Board]:
    universe = decisions.dataset_universe(session, dataset_id, group, settings)
    records = datasets.load_records(session, dataset_id)
    y = np.where(records.observed, records.y, np.nan)
    return universe, Board(tuple(records.systems), y)


def create(session: Session, body: PlacementCreate, settings: Settings | None = None) -> Placement:
    """Validate the declaration (nothing is stored when it fails), fix the order, store it.
    With ``settings`` the universe and one answer's work are held to the limits: every read
    runs the rule once per board system over the whole run at worst."""
    try:
        if body.rule not in ANYTIME_RULES:
            raise LiveError(
                "rule",
                f"a placement is checked after every task: use an anytime-valid rule "
                f"({', '.join(ANYTIME_RULES)}), not '{body.rule}'",
            )
        if body.floor not in FLOORS:
            raise LiveError("floor", f"unknown floor '{body.floor}'; floors: {', '.join(FLOORS)}")
        check_width(body.width)
        if settings is not None:  # every read runs the rule per board system: counted before the board is built
            dataset = datasets_repo.get(session, body.dataset_id)
            if dataset is not None:
                limits.check_placement_board(dataset.n_systems, settings)
        try:
            universe, board = _board(session, body.dataset_id, body.group, settings)
        except NotFound:
            raise LiveError("dataset_id", f"there is no dataset {body.dataset_id}") from None
        if body.system in board.systems:
            raise LiveError(
                "system", f"'{body.system}' is already on the board of this dataset; name the new entry differently"
            )
    except LiveError as exc:
        raise decisions.unprocessable(exc) from None
    limits.check_task_ids(universe.task_ids, "dataset_id")
    if settings is not None:
        limits.check_universe(universe.n, settings, "dataset_id")
        per_system = limits.decision_work(
            n_tasks=universe.n,
            n_observations=universe.n * body.trials,
            n_groups=len(universe.group_names),
            rule=body.rule,
            coverage_aware=body.coverage_aware,
            bootstrap="exact",
        )
        limits.check_decision_work(len(board.systems) * per_system, settings, "dataset_id")
    seed = body.seed if body.seed is not None else int.from_bytes(universe.digest()[:6], "big")
    order = placement_order(universe, board, body.floor, seed)
    row = Placement(
        id=uuid.uuid4(),
        dataset_id=body.dataset_id,
        grouping=body.group,
        system=body.system,
        rule=body.rule,
        correction=body.correction,
        a=body.a,
        width=body.width,
        floor=body.floor,
        coverage_aware=body.coverage_aware,
        trials=body.trials,
        seed=seed,
        task_order=[universe.task_ids[i] for i in order],
    )
    return repository.add(session, row)


def get(session: Session, placement_id: uuid.UUID, *, lock: bool = False) -> Placement:
    row = repository.get(session, placement_id, lock=lock)
    if row is None:
        raise NotFound(f"placement {placement_id} does not exist")
    return row


_RANKS: LRU[uuid.UUID, np.ndarray] = LRU(64)


def _order_rank(row: Placement, universe: Universe) -> np.ndarray:
    """Each task's position in the placement order (fixed at creation: kept per placement)."""
    hit = _RANKS.get(row.id)
    if hit is not None:
        return hit
    rank = np.empty(universe.n, dtype=np.int64)
    rank[[universe.index[t] for t in row.task_order]] = np.arange(universe.n)
    _RANKS.put(row.id, rank)
    return rank


def state(session: Session, row: Placement, rows: list[tuple[str, int, float]]) -> dict[str, Any]:
    universe, board = _board(session, row.dataset_id, row.grouping)
    spec = make_live_spec(rule=row.rule, a=row.a, floor=row.floor, coverage_aware=row.coverage_aware)
    entry = aggregate_entry(universe, rows, row.trials)
    st = placement_state(universe, board, entry, spec, row.correction, row.width, _order_rank(row, universe))
    out = asdict(st)
    out["board"] = out.pop("comparisons")
    out["observed_task_ids"] = [universe.task_ids[i] for i in entry.sequence.tolist()]
    return out


def read(session: Session, row: Placement) -> dict[str, Any]:
    st = state(session, row, repository.observations(session, row.id))
    return {
        **st,
        "id": row.id,
        "dataset_id": row.dataset_id,
        "group": row.grouping,
        "system": row.system,
        "rule": row.rule,
        "a": row.a,
        "correction": row.correction,
        "requested_width": row.width,
        "floor": row.floor,
        "coverage_aware": row.coverage_aware,
        "trials": row.trials,
        "seed": row.seed,
        "order": row.task_order,
        "true_rank_definition": TRUE_RANK,
        "created_at": row.created_at,
    }


def append(session: Session, placement_id: uuid.UUID, body: PlacementObservationsCreate) -> dict[str, Any]:
    """Store new outcomes; the same (task, trial) again with the same outcome is a no-op, with
    another outcome a 409; any error stores nothing of the request (the caller rolls back)."""
    row = get(session, placement_id, lock=True)  # appends to one placement one at a time, to the commit
    universe = decisions.dataset_universe(session, row.dataset_id, row.grouping)  # the board is read by state()
    posted: dict[tuple[str, int], tuple[int, float]] = {}
    conflicts: list[dict[str, Any]] = []
    for i, o in enumerate(body.observations):
        if o.task_id not in universe.index:
            raise decisions.unprocessable(
                LiveError(f"observations[{i}].task_id", f"task '{o.task_id}' is not in the board's dataset")
            )
        if o.trial >= row.trials:
            raise decisions.unprocessable(
                LiveError(
                    f"observations[{i}].trial",
                    f"this placement declared {row.trials} trial(s) per task: trial is 0..{row.trials - 1}",
                )
            )
        key = (o.task_id, o.trial)
        if key in posted and posted[key][1] != o.outcome:
            conflicts.append(
                {
                    "field": f"observations[{i}]",
                    "message": f"task '{o.task_id}', trial {o.trial}: "
                    f"outcome {o.outcome} differs from {posted[key][1]} in this request",
                }
            )
        posted.setdefault(key, (i, o.outcome))
    if conflicts:
        raise Conflict(conflicts)
    rows = [(t, tr, v) for (t, tr), (_, v) in posted.items()]
    added = repository.insert_new(session, row.id, rows)
    stored = repository.observations(session, row.id)
    values = {(t, tr): o for t, tr, o in stored}
    for (task, trial), (i, value) in posted.items():
        have = values[(task, trial)]
        if have != value:
            conflicts.append(
                {
                    "field": f"observations[{i}]",
                    "message": f"task '{task}', trial {trial} is already recorded with outcome {have}",
                }
            )
    if conflicts:
        raise Conflict(conflicts)
    return {**state(session, row, stored), "added": added, "duplicates": len(rows) - added}
