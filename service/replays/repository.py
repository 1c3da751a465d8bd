"""All SQL about replays, chunks and metric rows. Functions only flush; the caller commits."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import case, func, select, update
from sqlalchemy import delete as sql_delete
from sqlalchemy.orm import Session, undefer

from service.db import blob_rows, utcnow
from service.replays.models import (
    CHUNK_DONE,
    CHUNK_PENDING,
    CHUNK_RUNNING,
    FINISHED,
    QUEUED,
    RUNNING,
    MetricRow,
    Replay,
    ReplayChunk,
    ReplayPairTable,
)


def get(session: Session, replay_id: uuid.UUID, *, lock: bool = False, report: bool = False) -> Replay | None:
    """``lock`` takes the row lock (Postgres ``FOR UPDATE``): used to serialize the steps
    that change a replay's status, so exactly one worker finalizes it."""
    stmt = select(Replay).where(Replay.id == replay_id)
    if lock:
        stmt = stmt.with_for_update()
    if report:
        stmt = stmt.options(undefer(Replay.report_json), undefer(Replay.report_csv))
    return session.scalars(stmt).one_or_none()


def page(
    session: Session, *, limit: int, offset: int, dataset_id: uuid.UUID | None = None, status: str | None = None
) -> tuple[list[Replay], int]:
    stmt = select(Replay)
    if dataset_id is not None:
        stmt = stmt.where(Replay.dataset_id == dataset_id)
    if status is not None:
        stmt = stmt.where(Replay.status == status)
    total = session.scalar(select(func.count()).select_from(stmt.subquery())) or 0
    rows = session.scalars(stmt.order_by(Replay.created_at.desc(), Replay.id).limit(limit).offset(offset)).all()
    return list(rows), total


def add(session: Session, replay: Replay, bounds: Sequence[tuple[int, int]]) -> Replay:
    session.add(replay)
    session.flush()
    session.add_all(
        ReplayChunk(replay_id=replay.id, chunk_index=i, start=a, stop=b) for i, (a, b) in enumerate(bounds)
    )
    session.flush()
    return replay


def done_counts(session: Session, replay_ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, tuple[int, float]]:
    """``{replay_id: (done chunks, pairs done)}``; pairs of running chunks count by their progress."""
    ids = list(replay_ids)
    if not ids:
        return {}
    done = case((ReplayChunk.status == CHUNK_DONE, 1), else_=0)
    rows = session.execute(
        select(
            ReplayChunk.replay_id,
            func.coalesce(func.sum(done), 0),
            func.coalesce(func.sum((ReplayChunk.stop - ReplayChunk.start) * ReplayChunk.progress), 0.0),
        )
        .where(ReplayChunk.replay_id.in_(ids))
        .group_by(ReplayChunk.replay_id)
    ).all()
    out: dict[uuid.UUID, tuple[int, float]] = {i: (0, 0.0) for i in ids}
    out.update({r[0]: (int(r[1]), float(r[2])) for r in rows})
    return out


def get_chunk(session: Session, replay_id: uuid.UUID, index: int) -> ReplayChunk | None:
    return session.scalars(
        select(ReplayChunk).where(ReplayChunk.replay_id == replay_id, ReplayChunk.chunk_index == index)
    ).one_or_none()


def unfinished_chunks(session: Session, replay_id: uuid.UUID) -> list[ReplayChunk]:
    return list(
        session.scalars(
            select(ReplayChunk)
            .where(ReplayChunk.replay_id == replay_id, ReplayChunk.status != CHUNK_DONE)
            .order_by(ReplayChunk.chunk_index)
        )
    )


def claim_chunk(session: Session, chunk: ReplayChunk) -> None:
    chunk.status = CHUNK_RUNNING
    chunk.attempts += 1
    chunk.heartbeat_at = utcnow()
    session.flush()


def heartbeat(session: Session, chunk_id: int, progress: float) -> None:
    session.execute(
        update(ReplayChunk)
        .where(ReplayChunk.id == chunk_id, ReplayChunk.status == CHUNK_RUNNING)
        .values(heartbeat_at=utcnow(), progress=min(max(progress, 0.0), 1.0))
    )


def status_of(session: Session, replay_id: uuid.UUID) -> str | None:
    return session.scalar(select(Replay.status).where(Replay.id == replay_id))


def store_chunk_result(session: Session, replay_id: uuid.UUID, index: int, result: bytes) -> bool:
    """Store a chunk's result once: a second delivery of the same chunk changes nothing.
    Returns whether this call stored it."""
    res = session.execute(
        update(ReplayChunk)
        .where(
            ReplayChunk.replay_id == replay_id,
            ReplayChunk.chunk_index == index,
            ReplayChunk.status != CHUNK_DONE,
        )
        .values(status=CHUNK_DONE, result=result, finished_at=utcnow(), progress=1.0)
    )
    return res.rowcount == 1


def count_done(session: Session, replay_id: uuid.UUID) -> int:
    return session.scalar(
        select(func.count()).where(ReplayChunk.replay_id == replay_id, ReplayChunk.status == CHUNK_DONE)
    ) or 0


def chunk_results(session: Session, replay_id: uuid.UUID) -> list[bytes]:
    rows = blob_rows(
        session,
        select(ReplayChunk.result)
        .where(ReplayChunk.replay_id == replay_id, ReplayChunk.status == CHUNK_DONE)
        .order_by(ReplayChunk.chunk_index),
    )
    return [r[0] for r in rows]


def stale_chunks(session: Session, older_than: datetime) -> list[ReplayChunk]:
    """Running chunks of running replays whose worker stopped sending heartbeats."""
    return list(
        session.scalars(
            select(ReplayChunk)
            .join(Replay, Replay.id == ReplayChunk.replay_id)
            .where(
                Replay.status == RUNNING,
                ReplayChunk.status == CHUNK_RUNNING,
                ReplayChunk.heartbeat_at < older_than,
            )
            .with_for_update(of=ReplayChunk, skip_locked=True)
        )
    )


def undelivered_chunks(session: Session) -> list[ReplayChunk]:
    """Pending chunks of running replays whose job never left (the send failed and cleared
    the dispatch time). A chunk that was sent and is merely waiting in the queue is not one:
    the broker holds it (and redelivers it if a worker takes it and dies before acking), so
    sending it again would only duplicate the queue (50 replays once made 4,015 messages
    for 300 chunks)."""
    return list(
        session.scalars(
            select(ReplayChunk)
            .join(Replay, Replay.id == ReplayChunk.replay_id)
            .where(Replay.status == RUNNING, ReplayChunk.status == CHUNK_PENDING, ReplayChunk.dispatched_at.is_(None))
            .with_for_update(of=ReplayChunk, skip_locked=True)
        )
    )


def undelivered_replays(session: Session) -> list[Replay]:
    """Queued replays whose ``replays.run`` never left (the send failed)."""
    return list(
        session.scalars(
            select(Replay)
            .where(Replay.status == QUEUED, Replay.dispatched_at.is_(None))
            .with_for_update(skip_locked=True)
        )
    )


def mark_replay_unsent(session: Session, replay_id: uuid.UUID) -> None:
    """The ``replays.run`` message did not leave: the next sweep sends it (queued replays only)."""
    session.execute(update(Replay).where(Replay.id == replay_id, Replay.status == QUEUED).values(dispatched_at=None))


def mark_chunk_unsent(session: Session, replay_id: uuid.UUID, index: int) -> None:
    session.execute(
        update(ReplayChunk)
        .where(ReplayChunk.replay_id == replay_id, ReplayChunk.chunk_index == index,
               ReplayChunk.status == CHUNK_PENDING)
        .values(dispatched_at=None)
    )


def release_chunk(chunk: ReplayChunk) -> None:
    chunk.status = CHUNK_PENDING


def unfinished_replays(session: Session) -> list[Replay]:
    return list(session.scalars(select(Replay).where(Replay.status.not_in(FINISHED)).order_by(Replay.created_at)))


def running_replays_all_done(session: Session) -> list[uuid.UUID]:
    """Running replays whose chunks are all stored but that were never finalized."""
    done = (
        select(func.count())
        .where(ReplayChunk.replay_id == Replay.id, ReplayChunk.status == CHUNK_DONE)
        .scalar_subquery()
    )
    return list(session.scalars(select(Replay.id).where(Replay.status == RUNNING, done >= Replay.n_chunks)))


def reset_running_chunks(session: Session, replay_id: uuid.UUID) -> None:
    session.execute(
        update(ReplayChunk)
        .where(ReplayChunk.replay_id == replay_id, ReplayChunk.status == CHUNK_RUNNING)
        .values(status=CHUNK_PENDING)
    )


def add_metric_rows(session: Session, replay_id: uuid.UUID, rows: Iterable[dict[str, Any]]) -> int:
    values = [
        {
            "replay_id": replay_id,
            "policy": str(r["policy"]),
            "grouping": None if r.get("group") is None else str(r["group"]),
            "floor": str(r["floor"]),
            "a": float(r["a"]),
            "bootstrap": str(r["bootstrap"]),
            "delta": float(r["delta"]),
            "budget": None if r.get("budget") is None else float(r["budget"]),
            "metric": str(r["metric"]),
            "value": None if r.get("value") is None else float(r["value"]),
        }
        for r in rows
    ]
    if values:
        session.execute(MetricRow.__table__.insert(), values)
    return len(values)


def metric_page(
    session: Session, replay_id: uuid.UUID, filters: dict[str, Any], *, limit: int, offset: int
) -> tuple[list[MetricRow], int]:
    stmt = select(MetricRow).where(MetricRow.replay_id == replay_id)
    for name in ("policy", "metric", "floor", "bootstrap"):
        if filters.get(name) is not None:
            stmt = stmt.where(getattr(MetricRow, name) == filters[name])
    if filters.get("group") is not None:
        stmt = stmt.where(MetricRow.grouping == filters["group"])
    for name in ("delta", "budget", "a"):  # floats from JSON: compare with a tolerance
        if filters.get(name) is not None:
            col = getattr(MetricRow, name)
            stmt = stmt.where(col.between(filters[name] - 1e-9, filters[name] + 1e-9))
    total = session.scalar(select(func.count()).select_from(stmt.subquery())) or 0
    rows = session.scalars(stmt.order_by(MetricRow.id).limit(limit).offset(offset)).all()
    return list(rows), total


def sufficient_budgets(session: Session, replay_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, list[MetricRow]]:
    """Each replay's ``minimum_sufficient_budget`` rows, one per configuration in report order
    (for lists: one indexed query instead of loading every report)."""
    out: dict[uuid.UUID, list[MetricRow]] = {rid: [] for rid in replay_ids}
    if not replay_ids:
        return out
    stmt = (select(MetricRow)
            .where(MetricRow.replay_id.in_(list(replay_ids)), MetricRow.metric == "minimum_sufficient_budget")
            .order_by(MetricRow.replay_id, MetricRow.id))
    for row in session.scalars(stmt):
        out[row.replay_id].append(row)
    return out


@dataclass(frozen=True)
class DatasetUse:
    id: uuid.UUID
    status: str
    finished: bool
    visible: bool
    """False for a replay of another owner (the request's scope hides it)."""


def uses_of_dataset(session: Session, dataset_id: uuid.UUID) -> list[DatasetUse]:
    """Every replay of a dataset, whoever owns it (a Core query: the owner scope filters
    ORM entities only), marked visible when the request's owner scope lets it through."""
    table = Replay.__table__
    rows = session.execute(
        select(table.c.id, table.c.status).where(table.c.dataset_id == dataset_id).order_by(table.c.created_at)
    ).all()
    visible = set(session.scalars(select(Replay.id).where(Replay.dataset_id == dataset_id)))
    return [DatasetUse(r[0], r[1], r[1] in FINISHED, r[0] in visible) for r in rows]


def delete_replays(session: Session, replay_ids: Sequence[uuid.UUID]) -> None:
    """Delete replays with their chunks and metric rows (explicitly: SQLite may not enforce
    ``ON DELETE CASCADE``)."""
    ids = list(replay_ids)
    if not ids:
        return
    from service.replays.report_cache import CACHE

    CACHE.forget(ids)  # this process stops serving their reports at once (others within the cache TTL)
    session.execute(sql_delete(MetricRow.__table__).where(MetricRow.__table__.c.replay_id.in_(ids)))
    session.execute(sql_delete(ReplayPairTable.__table__).where(ReplayPairTable.__table__.c.replay_id.in_(ids)))
    session.execute(sql_delete(ReplayChunk.__table__).where(ReplayChunk.__table__.c.replay_id.in_(ids)))
    session.execute(sql_delete(Replay.__table__).where(Replay.__table__.c.id.in_(ids)))


def add_pair_tables(session: Session, replay_id: uuid.UUID, tables: Sequence[tuple[int, bytes]]) -> None:
    """``tables``: ``(pairs, PairTable bytes)`` per configuration, in configuration order."""
    session.add_all(
        ReplayPairTable(replay_id=replay_id, config_index=i, n_pairs=n, data=data) for i, (n, data) in enumerate(tables)
    )
    session.flush()


def pair_table_bytes(session: Session, replay_id: uuid.UUID, config_index: int) -> bytes | None:
    rows = blob_rows(
        session,
        select(ReplayPairTable.data).where(
            ReplayPairTable.replay_id == replay_id, ReplayPairTable.config_index == config_index
        ),
    )
    return rows[0][0] if rows else None
