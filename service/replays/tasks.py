"""Replay jobs. Each takes ids, opens its own sessions and is safe to run twice:

- ``replays.run``: mark the replay running and dispatch every unfinished chunk.
- ``replays.chunk``: replay pairs ``[start, stop)`` of one chunk and store the result once
  (the ``(replay_id, chunk_index)`` row is written only while not done); the last chunk to
  land merges all of them with ``build_report``.
- ``replays.sweep``: re-dispatch chunks a worker started and then stopped beating for
  (``stale_after_seconds``), send again what was never sent (the broker was down: the send
  failure cleared the row's dispatch time) and finalize replays whose last step was lost.
  A chunk merely waiting in the queue is never sent twice.

Results never depend on how pairs are chunked (engine contract), so a chunk computed twice,
or by another worker after a kill -9, stores the same bytes; the report equals an
uninterrupted run.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

from sqlalchemy.orm import Session

from service.db import transaction, utcnow
from service.engine.spec import SpecError
from service.jobs import TaskContext, enqueue, is_transient, on_undelivered, preload, task
from service.replays import repository
from service.replays import service as replays
from service.replays.models import CHUNK_DONE, FAILED, FINISHED, QUEUED, RUNNING, SUCCEEDED

log = logging.getLogger(__name__)


# the compiled short sum too (about 0.45 s and 90 MB, shared by the forked pool): a worker
# then computes every multi-trial or fractional bootstrap replay with it, not only the large
# ones that repay loading it (``lattice.kernel_loaded``)
# ``orders_kernel``: the stratified orders' step loop, compiled (``orders.COMPILED_STEPS_FROM``)
# ``betting_kernel``: the anytime rule's walk, compiled for large replays (``betting.compiled_walk``)
preload("service.engine.replay", "service.engine.pairs", "service.engine.report", "service.engine.lattice_kernel",
        "service.engine.orders_kernel", "service.engine.betting_kernel",
        "scipy.stats")  # scipy: the engine imports it on first use (engine/binom.py)


class Interrupted(Exception):
    """The replay was cancelled, or this process is stopping, while a chunk ran."""


@task("replays.run")
def run(ctx: TaskContext, replay_id: str) -> None:
    rid = uuid.UUID(replay_id)
    with transaction(ctx.sessionmaker) as session:
        replay = repository.get(session, rid, lock=True)
        if replay is None or replay.status in FINISHED:
            return
        if replay.status == QUEUED:
            replay.status = RUNNING
            replay.started_at = utcnow()
        pending = repository.unfinished_chunks(session, rid)
        now = utcnow()
        for chunk in pending:
            chunk.dispatched_at = now
            enqueue(session, "replays.chunk", replay_id, chunk.chunk_index)
    if not pending:
        finalize(ctx, rid)


class _Beat:
    """Shared between a running chunk and its heartbeat thread."""

    def __init__(self, total_cases: int):
        self.total = max(total_cases, 1)
        self.done = 0
        self.stop = threading.Event()

    @property
    def fraction(self) -> float:
        return self.done / self.total


@contextmanager
def _heartbeat(ctx: TaskContext, replay_id: uuid.UUID, chunk_id: int, total_cases: int) -> Iterator[_Beat]:
    """While a chunk runs, refresh its heartbeat and progress and watch for cancellation;
    ``beat.stop`` is set when the chunk should stop."""
    state = _Beat(total_cases)
    stop = state.stop
    done = threading.Event()

    def beat() -> None:
        while not done.wait(ctx.settings.heartbeat_seconds):
            try:
                with transaction(ctx.sessionmaker) as session:
                    repository.heartbeat(session, chunk_id, state.fraction)
                    if repository.status_of(session, replay_id) != RUNNING:
                        stop.set()
            except Exception:  # a missed beat is not fatal; the sweeper tolerates several
                log.warning("heartbeat of chunk %s failed", chunk_id, exc_info=True)

    thread = threading.Thread(target=beat, name=f"heartbeat-{chunk_id}", daemon=True)
    thread.start()
    try:
        yield state
    finally:
        done.set()
        thread.join(timeout=5)


@task("replays.chunk")
def run_chunk(ctx: TaskContext, replay_id: str, index: int) -> None:
    from service.engine.replay import run_chunk as engine_run_chunk
    from service.engine.replay import total_cases

    rid = uuid.UUID(replay_id)
    with transaction(ctx.sessionmaker) as session:
        replay = repository.get(session, rid, lock=True)  # a concurrent cancel must not be overwritten
        if replay is None or replay.status in FINISHED:
            return
        chunk = repository.get_chunk(session, rid, index)
        if chunk is None:
            return
        if chunk.status == CHUNK_DONE:
            already_done = True
        else:
            already_done = False
            if replay.status == QUEUED:
                replay.status, replay.started_at = RUNNING, utcnow()
            repository.claim_chunk(session, chunk)
        chunk_id, start, stop = chunk.id, chunk.start, chunk.stop
    if already_done:  # a redelivery: make sure the replay still gets finalized
        finalize(ctx, rid)
        return
    try:
        with ctx.sessionmaker() as session:
            plan = replays.plan_for(session, replay)
        per_pair = total_cases(plan) // max(plan.n_pairs, 1)
        with _heartbeat(ctx, rid, chunk_id, per_pair * (stop - start)) as beat:

            def progress(done_cases: int) -> None:
                beat.done += done_cases
                if beat.stop.is_set() or ctx.stop.is_set():
                    raise Interrupted

            result = engine_run_chunk(plan, start, stop, progress=progress)
    except Interrupted:
        log.info("chunk %s of replay %s stopped (cancelled or shutting down)", index, replay_id)
        return
    except Exception as exc:
        if is_transient(exc):
            raise
        _fail(ctx, rid, exc)
        return
    blob = result.to_bytes()
    with transaction(ctx.sessionmaker) as session:
        # the row lock orders this store and count after the other workers' (one commit per
        # chunk: the last chunk to land is the one that sees every other stored)
        replay = repository.get(session, rid, lock=True)
        repository.store_chunk_result(session, rid, index, blob)
        last = replay is not None and replay.status == RUNNING
        last = last and repository.count_done(session, rid) >= replay.n_chunks
    if last:
        finalize(ctx, rid)


def finalize(ctx: TaskContext, rid: uuid.UUID) -> None:
    """Merge the chunks once all are stored. The replay row lock makes exactly one of the
    workers that race here do it; the others see it succeeded and return."""
    from service.engine.pairs import pair_tables
    from service.engine.replay import ChunkResult, build_report
    from service.engine.report import metric_rows, report_csv, report_json

    try:
        with transaction(ctx.sessionmaker) as session:
            replay = repository.get(session, rid, lock=True)
            if replay is None or replay.status != RUNNING:
                return
            if repository.count_done(session, rid) < replay.n_chunks:
                return
            replays.note_finished()  # before the commit and after it: no cache keeps the old answer
            blobs = repository.chunk_results(session, rid)
            plan = replays.plan_for(session, replay)
            chunks = [ChunkResult.from_bytes(b) for b in blobs]
            del blobs
            report = build_report(plan, chunks, per_pair=False)  # the rows go to pair tables, served by page
            repository.add_pair_tables(session, rid, [(len(t), t.to_bytes()) for t in pair_tables(plan, chunks)])
            del chunks
            body = report_json(report)
            replay.report_json = body
            replay.report_csv = report_csv(report).encode()
            replay.report_etag = replays.etag_of(body)
            replay.status = SUCCEEDED
            replay.finished_at = utcnow()
            repository.add_metric_rows(session, rid, metric_rows(report))
        replays.note_finished()
    except Exception as exc:
        if is_transient(exc):
            raise
        _fail(ctx, rid, exc)


def _fail(ctx: TaskContext, rid: uuid.UUID, exc: BaseException) -> None:
    log.error("replay %s failed: %s", rid, exc, exc_info=exc)
    message = f"{exc.field}: {exc.message}" if isinstance(exc, SpecError) else f"{type(exc).__name__}: {exc}"
    with transaction(ctx.sessionmaker) as session:
        replay = repository.get(session, rid, lock=True)
        if replay is None or replay.status in FINISHED:
            return
        replay.status = FAILED
        replay.error = message[:2000]
        replay.finished_at = utcnow()


@task("replays.sweep")
def sweep(ctx: TaskContext) -> None:
    """Recover work a dead worker left behind (kill -9: a chunk it started and stopped
    beating for during ``stale_after_seconds``) or a message that never left (broker down at
    send time). Chunks that are only waiting in the queue are left alone."""
    now = utcnow()
    cutoff = now - timedelta(seconds=ctx.settings.stale_after_seconds)
    with transaction(ctx.sessionmaker) as session:
        for chunk in repository.stale_chunks(session, cutoff):
            log.warning("re-dispatching stale chunk %s of replay %s", chunk.chunk_index, chunk.replay_id)
            repository.release_chunk(chunk)
            chunk.dispatched_at = now
            enqueue(session, "replays.chunk", str(chunk.replay_id), chunk.chunk_index)
        for chunk in repository.undelivered_chunks(session):
            log.warning("re-sending chunk %s of replay %s (its send failed)", chunk.chunk_index, chunk.replay_id)
            chunk.dispatched_at = now
            enqueue(session, "replays.chunk", str(chunk.replay_id), chunk.chunk_index)
        for replay in repository.undelivered_replays(session):
            log.warning("re-sending replay %s (queued since %s)", replay.id, replay.created_at)
            replay.dispatched_at = now
            enqueue(session, "replays.run", str(replay.id))
        orphans = repository.running_replays_all_done(session)
    for rid in orphans:
        finalize(ctx, rid)


@on_undelivered("replays.run")
def _run_not_sent(session: Session, replay_id: str) -> None:
    repository.mark_replay_unsent(session, uuid.UUID(replay_id))


@on_undelivered("replays.chunk")
def _chunk_not_sent(session: Session, replay_id: str, index: int) -> None:
    repository.mark_chunk_unsent(session, uuid.UUID(replay_id), index)


def resume_all(ctx: TaskContext) -> int:
    """At start of the in-process runner (the only executor of the embedded default):
    whatever was queued or running when the process stopped is run again."""
    with transaction(ctx.sessionmaker) as session:
        unfinished = repository.unfinished_replays(session)
        for replay in unfinished:
            repository.reset_running_chunks(session, replay.id)
            replay.dispatched_at = utcnow()
            enqueue(session, "replays.run", str(replay.id))
    return len(unfinished)


__all__ = ["run", "run_chunk", "sweep", "finalize", "resume_all"]
