"""All SQL about datasets. Functions only flush; the caller commits."""

from __future__ import annotations

import uuid

from sqlalchemy import delete as sql_delete
from sqlalchemy import exists, func, select, update
from sqlalchemy.orm import Session, undefer

from service.datasets.models import Dataset
from service.db import blob_rows


def get(session: Session, dataset_id: uuid.UUID, *, with_content: bool = False) -> Dataset | None:
    stmt = select(Dataset).where(Dataset.id == dataset_id)
    if with_content:
        stmt = stmt.options(undefer(Dataset.content))
    return session.scalars(stmt).one_or_none()


def parsed_bytes(session: Session, dataset_id: uuid.UUID) -> tuple[bytes | None] | None:
    """``(parsed records,)`` of the dataset (null for one stored before they were kept), or
    None when there is no such dataset; not its content, read only if needed."""
    rows = blob_rows(session, select(Dataset.parsed).where(Dataset.id == dataset_id))
    return rows[0] if rows else None


def get_by_hash(session: Session, content_hash: str) -> Dataset | None:
    return session.scalars(select(Dataset).where(Dataset.content_hash == content_hash)).one_or_none()


LIST_SYSTEMS = 20_000
"""Systems listed in one page of datasets, summed over its datasets' summaries (about 150
bytes each): at ``MAX_UPLOAD_SYSTEMS`` a page of 500 could otherwise be 750 MB
(and the index page, which reads 200 of them, 300 MB)."""


def page(
    session: Session, *, limit: int, offset: int, max_systems: int | None = None
) -> tuple[list[Dataset], int, int]:
    """A page of datasets, newest first, and the total. Each one's summary lists its systems,
    so with ``max_systems`` the page stops before the systems of its datasets pass it (one
    dataset at least): the page size used is returned, and the next page starts after it."""
    total = session.scalar(select(func.count()).select_from(Dataset)) or 0
    order = (Dataset.created_at.desc(), Dataset.id)
    if max_systems is not None:
        sizes = session.scalars(select(Dataset.n_systems).order_by(*order).limit(limit).offset(offset)).all()
        fit = held = 0
        for n in sizes:
            if fit and held + n > max_systems:
                limit = fit
                break
            held += n
            fit += 1
    rows = session.scalars(select(Dataset).order_by(*order).limit(limit).offset(offset)).all()
    return list(rows), total, limit


def add(session: Session, dataset: Dataset) -> Dataset:
    session.add(dataset)
    session.flush()
    return dataset


def name_taken(session: Session, name: str) -> bool:
    return bool(session.scalar(select(exists().where(Dataset.name == name))))


def delete(session: Session, dataset: Dataset) -> None:
    """Delete the row; live sessions that came from it keep their copied universe."""
    from service.sessions.models import LiveSession

    session.execute(update(LiveSession.__table__).where(LiveSession.__table__.c.dataset_id == dataset.id)
                    .values(dataset_id=None))
    session.execute(sql_delete(Dataset.__table__).where(Dataset.__table__.c.id == dataset.id))
    session.expunge(dataset)
