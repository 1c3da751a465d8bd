"""Replay use cases: submit (validate, plan, chunk, enqueue), read, cancel, report."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Sequence
from datetime import UTC
from threading import Lock
from typing import Any

from sqlalchemy.orm import Session

from service import limits
from service.config import Settings
from service.datasets import repository as datasets_repo
from service.datasets import service as datasets
from service.db import utcnow
from service.engine.spec import SpecError, make_spec, parse_budgets
from service.errors import Conflict, NotFound, Unprocessable
from service.jobs import enqueue
from service.lru import LRU
from service.replays import estimate, repository
from service.replays.models import CANCELLED, FINISHED, SUCCEEDED, Replay
from service.replays.schemas import ReplayCreate, ReplayLinks, ReplayRead


def spec_error_detail(exc: SpecError) -> list[dict[str, Any]]:
    return [{"field": exc.field, "message": exc.message}]


GUIDED_PARTS = 8
"""A chunk takes at most this fraction of the pairs left to cut (and at least ``chunk_pairs``).
Eight rather than sixteen: the 134 x 500 board in 33 chunks instead of 44, each of which costs a
worker its claim, store and Celery round trip (8-12 ms between one chunk's store and the next
one's claim, on a loaded two-core host), and the last chunks are ``chunk_pairs`` either way."""


def chunk_bounds(n_pairs: int, chunk_pairs: int, max_pairs: int | None = None) -> list[tuple[int, int]]:
    """Split pairs ``[0, n_pairs)`` into contiguous chunks, large first and ``chunk_pairs``
    last: each takes 1/``GUIDED_PARTS`` of the pairs still to be cut, between ``chunk_pairs``
    and ``max_pairs`` (default ``chunk_pairs``: all equal). Every chunk is a job with its own
    claim, store and commit (about 11 ms on Postgres), so a big replay in few large chunks
    spends less on them, and small chunks at the end let the workers finish together. The
    report does not depend on the chunks."""
    top = max(chunk_pairs, max_pairs or chunk_pairs)
    out, a = [], 0
    while a < n_pairs:
        size = min(top, max(chunk_pairs, (n_pairs - a) // GUIDED_PARTS))
        out.append((a, min(a + size, n_pairs)))
        a += size
    return out


def options_of(body: ReplayCreate, max_budgets: int | None = None) -> dict[str, Any]:
    """The ``make_spec`` keyword arguments for a request, JSON-ready (stored on the row). A
    budget range is counted before it is expanded (at most ``max_budgets``)."""
    options = body.model_dump(mode="json", exclude_none=True, exclude={"dataset_id"})
    if "groups" in body.model_fields_set and body.groups is not None:
        options["groups"] = body.groups  # keep explicit nulls: null = one group
    if isinstance(options.get("budgets"), str):
        try:
            options["budgets"] = list(parse_budgets(options["budgets"], max_budgets))
        except SpecError as exc:
            raise Unprocessable(spec_error_detail(exc)) from None
    if "policies" in options:
        options["policies"] = [
            p if isinstance(p, str) else {k: v for k, v in p.items() if v is not None} for p in options["policies"]
        ]
    return options


def build_spec(options: dict[str, Any]):  # noqa: ANN201  (ReplaySpec)
    return make_spec(**options)


# Plans are deterministic functions of (dataset, options): cache a few per process so the
# chunks of one replay that land on the same worker do not rebuild it.
_PLANS: LRU[uuid.UUID, Any] = LRU(4)


def plan_for(session: Session, replay: Replay) -> Any:
    plan = _PLANS.get(replay.id)
    if plan is not None:
        return plan
    from service.engine.replay import plan_replay

    records = datasets.load_records(session, replay.dataset_id)
    plan = plan_replay(records, build_spec(replay.options))
    _PLANS.put(replay.id, plan)
    return plan


def create(session: Session, body: ReplayCreate, settings: Settings) -> Replay:
    """Validate the spec against the dataset now (bad specs are a 422, not a failed job),
    store the replay and its chunks, and enqueue ``replays.run`` for after the commit."""
    from service.engine.replay import plan_replay

    dataset = datasets_repo.get(session, body.dataset_id)
    if dataset is None:
        raise Unprocessable([{"field": "dataset_id", "message": f"dataset {body.dataset_id} does not exist"}])
    options = options_of(body, settings.max_replay_budgets)
    limits.check_replay_options(options, settings)  # counts and lengths, before anything is built
    try:
        spec = build_spec(options)
        limits.check_replay_spec(spec, dataset.n_systems, settings)  # what the plan itself holds
        plan = plan_replay(datasets.load_records(session, body.dataset_id), spec)
    except SpecError as exc:
        raise Unprocessable(spec_error_detail(exc)) from None
    limits.check_replay_plan(plan, settings)  # cases and a chunk's memory, before any case runs
    n_cases, kind, estimated, sample = estimate.known(session, plan)
    bounds = chunk_bounds(plan.n_pairs, settings.chunk_pairs, limits.largest_chunk(plan, settings))
    replay = Replay(
        id=uuid.uuid4(),
        dataset_id=body.dataset_id,
        options=options,
        spec=spec.to_dict(),
        n_pairs=plan.n_pairs,
        n_chunks=len(bounds),
        n_cases=n_cases,
        cost_kind=kind,
        estimated_seconds=estimated,
        dispatched_at=utcnow(),
    )
    repository.add(session, replay, bounds)
    _PLANS.put(replay.id, plan)
    enqueue(session, "replays.run", str(replay.id))
    if sample:
        # the workers start on the replay now (its job is sent at this commit), while its
        # first chunk is sampled here for the estimate the answer carries
        session.commit()
        replay.estimated_seconds = estimate.sampled(plan, settings.chunk_pairs)
    return replay


def get(session: Session, replay_id: uuid.UUID, *, report: bool = False) -> Replay:
    replay = repository.get(session, replay_id, report=report)
    if replay is None:
        raise NotFound(f"replay {replay_id} does not exist")
    return replay


def to_read(replay: Replay, done: tuple[int, float]) -> ReplayRead:
    chunks_done, pairs_done = done
    base = f"/v1/replays/{replay.id}"
    progress = 1.0 if replay.status == SUCCEEDED else (pairs_done / replay.n_pairs if replay.n_pairs else 0.0)
    progress = min(progress, 1.0)
    elapsed = None
    if replay.started_at is not None:
        started = replay.started_at if replay.started_at.tzinfo else replay.started_at.replace(tzinfo=UTC)
        elapsed = (utcnow() - started).total_seconds()
    return ReplayRead(
        id=replay.id,
        dataset_id=replay.dataset_id,
        status=replay.status,  # type: ignore[arg-type]
        progress=round(progress, 6),
        n_cases=replay.n_cases,
        estimated_seconds=replay.estimated_seconds,
        eta_seconds=estimate.eta_seconds(replay.status, progress, elapsed, replay.estimated_seconds),
        n_pairs=replay.n_pairs,
        n_chunks=replay.n_chunks,
        chunks_done=chunks_done,
        created_at=replay.created_at,
        started_at=replay.started_at,
        finished_at=replay.finished_at,
        error=replay.error,
        spec=replay.spec,
        links=ReplayLinks(
            self=base, report=f"{base}/report", report_csv=f"{base}/report.csv", metrics=f"{base}/metrics",
            pairs=f"{base}/pairs",
        ),
    )


def read(session: Session, replay: Replay) -> ReplayRead:
    return to_read(replay, done_counts(session, [replay])[replay.id])


def done_counts(session: Session, replays: Sequence[Replay]) -> dict[uuid.UUID, tuple[int, float]]:
    """``repository.done_counts`` of ``replays``, with a query only for those not succeeded: a
    replay is finalized only once every chunk is done, so a succeeded one has all its chunks
    and pairs done. Saves a status read's second query once the replay has succeeded (the
    read that ends a wait, and most of a listing)."""
    out = {r.id: (r.n_chunks, float(r.n_pairs)) for r in replays if r.status == SUCCEEDED}
    out.update(repository.done_counts(session, [r.id for r in replays if r.status != SUCCEEDED]))
    return out


def cancel(session: Session, replay_id: uuid.UUID) -> Replay:
    """Queued or running → cancelled (409 once finished). Workers see it at their next
    heartbeat and stop."""
    replay = _locked(session, replay_id)
    if replay.status in FINISHED:
        raise Conflict(f"replay {replay_id} is already {replay.status}")
    return _cancelled(session, replay)


def cancel_or_delete(session: Session, replay_id: uuid.UUID) -> Replay | None:
    """``DELETE /v1/replays/{id}``: a queued or running replay is cancelled and returned (it
    stays stored, so its end can be read); a finished one (succeeded, failed or cancelled) is
    deleted with everything stored for it, and ``None`` returned. Under the row lock, so a
    replay finishing meanwhile is either cancelled before or deleted after."""
    replay = _locked(session, replay_id)
    if replay.status not in FINISHED:
        return _cancelled(session, replay)
    remove(session, [replay.id])
    return None


def remove(session: Session, replay_ids: Sequence[uuid.UUID]) -> None:
    """Delete finished replays with their chunks, report, metric rows and per-pair tables (the
    caller checks they are finished), and forget what this process derived from them: the
    served report bytes and the plan at once, decision calibrations (built from finished
    replays' metric rows) at their next look-up; other processes within their cache TTL."""
    repository.delete_replays(session, replay_ids)
    for rid in replay_ids:
        _PLANS.pop(rid)
    note_finished()


def _locked(session: Session, replay_id: uuid.UUID) -> Replay:
    replay = repository.get(session, replay_id, lock=True)
    if replay is None:
        raise NotFound(f"replay {replay_id} does not exist")
    return replay


def _cancelled(session: Session, replay: Replay) -> Replay:
    replay.status = CANCELLED
    replay.finished_at = utcnow()
    session.flush()
    return replay


def finished_report(session: Session, replay_id: uuid.UUID) -> Replay:
    replay = get(session, replay_id, report=True)
    if replay.status != SUCCEEDED:
        raise Conflict(f"replay {replay_id} is {replay.status}; the report exists once it has succeeded")
    return replay


_FINISHED = [0]
_FINISHED_LOCK = Lock()


def finished_generation() -> int:
    """Bumped whenever this process finishes a replay: caches of data derived from finished
    replays (decision calibration) compare it to drop what a new replay may change."""
    return _FINISHED[0]


def note_finished() -> None:
    with _FINISHED_LOCK:
        _FINISHED[0] += 1


def etag_of(body: bytes) -> str:
    return f'"{hashlib.sha256(body).hexdigest()[:32]}"'
