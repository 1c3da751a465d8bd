"""Database plumbing: declarative base, engine factory, transaction scopes, migrations.

SQLite is a real embedded default, not a toy: WAL (readers never block the writer),
foreign keys on, a busy timeout, and writers that take the write lock up front
(``BEGIN IMMEDIATE``) so a read-then-write transaction cannot fail on a stale snapshot.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import DateTime, Engine, MetaData, Select, create_engine, event
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import make_url
from sqlalchemy.orm import DeclarativeBase, Session, sessionmaker
from sqlalchemy.types import TypeDecorator

if TYPE_CHECKING:
    from service.config import Settings

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

IMMEDIATE = "sufficiency_begin_immediate"
"""Execution option: on SQLite, start the transaction with ``BEGIN IMMEDIATE``."""


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC timestamps on both backends (SQLite stores naive values)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: object) -> datetime | None:
        if value is not None and value.tzinfo is not None:
            value = value.astimezone(UTC)
        return value

    def process_result_value(self, value: datetime | None, dialect: object) -> datetime | None:
        if value is not None and value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value


def utcnow() -> datetime:
    return datetime.now(UTC)


def make_engine(url: str, *, pool_size: int = 5, max_overflow: int = 10, busy_timeout_ms: int = 30_000) -> Engine:
    """An engine for ``url`` with the per-backend settings this service relies on."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return create_engine(url, pool_size=pool_size, max_overflow=max_overflow, pool_pre_ping=True)
    if parsed.database and parsed.database != ":memory:":
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": busy_timeout_ms / 1000})

    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_conn, _record) -> None:  # noqa: ANN001
        dbapi_conn.isolation_level = None  # we emit BEGIN ourselves (below)
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.close()

    @event.listens_for(engine, "begin")
    def _begin(conn) -> None:  # noqa: ANN001
        conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get(IMMEDIATE) else "BEGIN")

    return engine


def engine_for(settings: Settings) -> Engine:
    """``make_engine`` with the pool and SQLite lock settings of ``settings``."""
    return make_engine(settings.sqlalchemy_url, pool_size=settings.db_pool_size,
                       max_overflow=settings.db_max_overflow, busy_timeout_ms=settings.sqlite_busy_timeout_ms)


def make_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


@contextlib.contextmanager
def transaction(factory: sessionmaker[Session], *, write: bool = True) -> Iterator[Session]:
    """One unit of work (a job's or a request's): commit on success, roll back on error.

    ``write=True`` takes SQLite's write lock at BEGIN (no effect on Postgres).
    """
    with factory() as session:
        if write:
            session.connection(execution_options={IMMEDIATE: True})
        try:
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise


def blob_rows(session: Session, stmt: Select[Any]) -> list[tuple[Any, ...]]:
    """The rows of ``stmt``, a select of large binary columns (and small plain ones beside them),
    in the session's transaction.

    On Postgres they are fetched in binary format: psycopg's default text format sends a
    ``bytea`` as hex, twice its size, that the server encodes and the client decodes. Reading
    the parsed records of a 134 x 500 board (3.8 MB) took 34-40 ms as text and 7-13 ms binary;
    a worker reads them once, the finalize every chunk's result. Select only columns that load
    the same either way and need no SQLAlchemy processing (bytea, integers, text, uuid: not
    JSON or the UTC timestamps), with parameters psycopg takes as they are (uuid, int, str)."""
    conn = session.connection()
    if conn.dialect.name != "postgresql" or conn.dialect.driver != "psycopg":
        return [tuple(row) for row in session.execute(stmt).all()]
    compiled = stmt.compile(dialect=conn.dialect)
    raw = conn.connection.driver_connection
    with raw.cursor(binary=True) as cur:
        cur.execute(str(compiled), compiled.params)
        return [tuple(row) for row in cur.fetchall()]


def insert_new_rows(session: Session, model: type[Base], rows: Sequence[dict[str, Any]], key: Sequence[str]) -> int:
    """Insert the rows whose ``key`` is not stored yet (``ON CONFLICT DO NOTHING`` on both
    backends) and return how many were added. The rows go in the order given (statements of
    ``INSERT_ROWS`` in turn), so their ids follow it: live sessions and placements read their sequence of observed tasks
    in id order, and that sequence is the one the harness sent (sorting the rows here, as it
    once did, made a batch's sequence its task ids' order).

    The caller serialises inserts under one parent (a lock on its row, held to the commit):
    overlapping requests in their own orders could otherwise deadlock on Postgres, and a
    request's answer must see every row stored before its own."""
    insert = pg_insert if session.get_bind().dialect.name == "postgresql" else sqlite_insert
    added = 0
    for start in range(0, len(rows), INSERT_ROWS):  # statements in turn: the ids still follow the rows
        stmt = insert(model).values(list(rows[start : start + INSERT_ROWS]))
        stmt = stmt.on_conflict_do_nothing(index_elements=list(key))
        added += len(session.execute(stmt.returning(*model.__table__.primary_key.columns)).all())
    return added


INSERT_ROWS = 5_000
"""Rows per statement of ``insert_new_rows``: Postgres takes at most 65,535 parameters in one
statement, and a row of observations carries six (one append of 20,000 tasks for two systems
was one statement of 240,000, refused: a 503 that no retry could mend)."""


def run_migrations(url: str, migrations_dir: Path, revision: str = "head") -> None:
    """``alembic upgrade head``: the only way the schema is created, on every backend."""
    from alembic import command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir))
    cfg.attributes["url"] = url
    command.upgrade(cfg, revision)
