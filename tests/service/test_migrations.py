"""The migrations are the schema: they build it from nothing, match the models, and go down."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, inspect

import service.main  # noqa: F401  (imports every mounted domain, hence every model)
from service.config import Settings
from service.db import Base


def _config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(Settings().migrations_dir))
    cfg.attributes["url"] = url
    return cfg


def _url(backend: dict) -> str:
    return str(backend.get("database_url") or f"sqlite:///{Path(backend['data_dir']) / 'm.db'}")


def test_models_match_migrations_and_downgrade_works(backend: dict) -> None:
    url = _url(backend)
    if url.startswith("sqlite"):
        Path(backend["data_dir"]).mkdir(parents=True, exist_ok=True)
        command.upgrade(_config(url), "head")
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), Base.metadata)
        assert diff == [], f"models and migrations disagree (write a migration): {diff}"
        command.downgrade(_config(url), "base")
        assert set(inspect(engine).get_table_names()) <= {"alembic_version"}
    finally:
        command.upgrade(_config(url), "head")
        engine.dispose()


def test_postgres_stores_the_deflated_blobs_without_compressing_them_again(pg_url: str) -> None:
    from sqlalchemy import text

    engine = create_engine(pg_url)
    try:
        with engine.connect() as conn:
            storage = dict(conn.execute(text(
                "SELECT c.relname || '.' || a.attname, a.attstorage FROM pg_attribute a "
                "JOIN pg_class c ON c.oid = a.attrelid WHERE a.attname IN ('result', 'data', 'parsed') "
                "AND c.relname IN ('replay_chunks', 'replay_pair_tables', 'datasets')")).all())
        # 'e': external, not compressed (already deflated); the parsed records are not deflated
        assert storage == {"replay_chunks.result": "e", "replay_pair_tables.data": "e", "datasets.parsed": "x"}
    finally:
        engine.dispose()
