"""Alembic environment. The URL comes from ``config.attributes["url"]`` (set by
``service.db.run_migrations``) or, on the command line, from the service Settings."""

from __future__ import annotations

import logging.config

from alembic import context
from sqlalchemy import pool

import service.datasets.models  # noqa: F401  (registers tables on Base.metadata)
import service.replays.models  # noqa: F401
from service.db import Base, make_engine

config = context.config
if config.config_file_name is not None and config.attributes.get("url") is None:
    logging.config.fileConfig(config.config_file_name, disable_existing_loggers=False)

target_metadata = Base.metadata


def _url() -> str:
    url = config.attributes.get("url")
    if url:
        return url
    from service.config import Settings

    return Settings().sqlalchemy_url


def run_migrations_offline() -> None:
    url = _url()
    context.configure(url=url, target_metadata=target_metadata, literal_binds=True, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    url = _url()
    engine = make_engine(url) if url.startswith("sqlite") else None
    if engine is None:
        from sqlalchemy import create_engine

        engine = create_engine(url, poolclass=pool.NullPool)
    try:
        with engine.connect() as connection:
            context.configure(
                connection=connection,
                target_metadata=target_metadata,
                render_as_batch=connection.dialect.name == "sqlite",  # SQLite cannot ALTER most things
            )
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
