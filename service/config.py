"""The one settings object. Only this module reads the environment (prefix ``SUFFICIENCY_``).

Defaults are the embedded setup: a SQLite file under ``data_dir`` and an in-process job
runner, so a fresh checkout serves without any other server. Production sets
``SUFFICIENCY_DATABASE_URL`` (Postgres) and ``SUFFICIENCY_BROKER_URL`` (Redis, Celery).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

REPO_ROOT = Path(__file__).resolve().parents[1]


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SUFFICIENCY_", env_file=None, extra="ignore")

    environment: Literal["development", "production", "test"] = "development"
    data_dir: Path = Path("./data")
    database_url: str | None = Field(
        default=None, description="SQLAlchemy URL; default: a SQLite file in data_dir."
    )
    broker_url: str | None = Field(
        default=None, description="Celery broker (redis://...); unset = in-process job runner."
    )
    celery_queue: str = "sufficiency"
    visibility_timeout: int = Field(
        default=3600, ge=1, description="Seconds before Redis redelivers an unacknowledged task."
    )
    migrate_on_start: bool | None = Field(
        default=None, description="Run `alembic upgrade head` at app start; default: only on SQLite."
    )
    migrations_dir: Path = REPO_ROOT / "migrations"

    max_upload_bytes: int = Field(default=32 * 1024 * 1024, ge=1)
    chunk_pairs: int = Field(default=200, ge=1, description="Pairs per replay chunk (one job each).")
    runner_threads: int = Field(default=1, ge=1, description="Threads of the in-process job runner.")
    heartbeat_seconds: float = Field(default=5.0, gt=0)
    stale_after_seconds: float = Field(
        default=300.0, gt=0, description="A running chunk without heartbeat this long is re-dispatched."
    )
    sweep_seconds: float = Field(default=30.0, gt=0, description="How often a worker looks for stale chunks.")
    task_max_retries: int = Field(default=3, ge=0)

    auth: Literal["off", "required"] = Field(
        default="off", description="`required`: every route but the probes and docs needs an API key."
    )
    auth_cache_seconds: float = Field(
        default=5.0, ge=0, description="How long a verified key is trusted before the database is asked again."
    )
    cors_origins: str = Field(default="", description="Comma-separated origins allowed by CORS; empty = closed.")
    rate_limit_per_second: float = Field(default=100.0, ge=0, description="Per key and process; 0 = no limit.")
    rate_limit_burst: int = Field(default=200, ge=1)
    max_request_bytes: int = Field(default=4 * 1024 * 1024, ge=1, description="Body cap of non-upload requests.")
    decision_fast_path: bool = Field(
        default=True, description="Answer inline-universe decisions before FastAPI's routing (same bytes, less CPU)."
    )

    # Limits (issue 12): every input that sizes work is checked against one of these before
    # anything is allocated (service.limits); a request over one answers 413/422 naming it.
    max_upload_rows: int = Field(default=2_000_000, ge=1)
    max_systems_x_tasks: int = Field(default=1_000_000, ge=1)
    max_upload_systems: int = Field(
        default=10_000, ge=2, description="Systems of a dataset: its stored summary lists each (about 150 bytes)."
    )
    max_upload_columns: int = Field(default=200, ge=3, description="Columns of an uploaded CSV (or keys of a row).")
    max_concurrent_uploads: int = Field(
        default=2, ge=1, description="Uploads parsed at once per process (each peaks at ~17x its bytes); others wait."
    )
    upload_slot_wait_seconds: float = Field(
        default=30.0, gt=0, description="How long a received upload waits for a parsing slot before a 503 (retry)."
    )
    parse_process_bytes: int = Field(
        default=1024 * 1024, ge=0, description="Uploads larger than this are parsed in a separate process."
    )
    max_replay_cases: int = Field(
        default=1_000_000_000, ge=1, description="Ceiling of pairs x orders x budgets x configurations x seeds."
    )
    max_replay_resample_draws: int = Field(
        default=50_000_000_000, ge=1,
        description="Ceiling of the task draws of a replay's finite bootstraps on outcomes off a small lattice, "
                    "resampled literally (pairs x orders x seeds x B x tasks summed over budgets).",
    )
    max_replay_budgets: int = Field(default=200, ge=1, description="Budgets of one replay (a range is counted first).")
    max_replay_orders: int = Field(default=100_000, ge=1, description="Sampled orders R of one replay.")
    max_replay_configurations: int = Field(
        default=2_000, ge=1,
        description="Configurations of one replay: policies x thresholds x levels x resamples x floors x groupings.",
    )
    max_replay_memory_bytes: int = Field(
        default=2 * 1024**3, ge=1, description="Estimated peak memory of one replay chunk (tasks x orders x budgets)."
    )
    max_universe_tasks: int = Field(default=100_000, ge=1, description="Tasks of an inline or dataset universe.")
    max_leaderboard_systems: int = Field(
        default=300, ge=2, description="Systems of a leaderboard (every pair is tested: S(S-1)/2 of them)."
    )
    max_pair_bootstrap_draws: int = Field(
        default=200_000_000, ge=1, description="boot x tasks of one /pairs request (about 9 ns a draw: 1.8 s)."
    )
    max_decision_work: int = Field(
        default=4_000_000, ge=1, description="Estimated cells of one decision (e.g. anytime: tasks x groups)."
    )
    decision_inline_work: int = Field(
        default=20_000, ge=0, description="Decisions this small run on the event loop; larger ones in a thread."
    )
    decision_inline_bytes: int = Field(
        default=64 * 1024, ge=0, description="Decision bodies larger than this are parsed in a thread."
    )
    decision_processes: int = Field(
        default=1, ge=1, description="Processes deciding large inline decisions (off the API's event loop and GIL)."
    )
    max_pending_decisions: int = Field(
        default=8, ge=1, description="Large decisions queued or running at once per process (503 past it)."
    )
    max_session_checkpoints: int = Field(
        default=200, ge=1, description="Budgets (checkpoints) of a live session or of a decision's grid."
    )
    max_header_bytes: int = Field(default=64 * 1024, ge=1024, description="Request line and headers, per request.")
    header_timeout_seconds: float = Field(
        default=10.0, gt=0, description="A connection must send a request's headers within this time, or is closed."
    )
    max_connections: int = Field(default=1000, ge=1, description="Open connections and tasks per process (503 over).")
    keep_alive_seconds: float = Field(default=5.0, gt=0, description="Idle keep-alive connections close after this.")
    event_loop: Literal["asyncio", "uvloop"] = Field(
        default="asyncio", description="The API's event loop. uvloop's libuv accepts one connection per loop "
        "iteration, so under load a burst of new connections waits an iteration each (see service/http_limits.py)."
    )
    balance_connections: bool = Field(
        default=True, description="Workers of `serve --workers N` even out their keep-alive connections "
        "(a worker two above the least loaded closes one, a second old, after its response; one per 0.1 s)."
    )
    forwarded_allow_ips: str = Field(
        default="", description="Proxies whose X-Forwarded-For is trusted (comma-separated); empty = none."
    )
    rate_limit_max_addresses: int = Field(
        default=10_000, ge=1, description="Per-address buckets kept (least recently used are evicted)."
    )

    # Serving under load (issue 13): per-process caches of what changes rarely or never.
    calibration_cache_seconds: float = Field(
        default=5.0, ge=0, description="How long a dataset decision's calibration rows are reused (0 = ask each time)."
    )
    report_cache_bytes: int = Field(
        default=64 * 1024 * 1024, ge=0, description="Finished reports kept in memory per process (bytes; 0 = none)."
    )
    shared_tails_dir: str | Path = Field(
        default="auto", description="Directory (this user's alone) where the API and worker processes of a host "
        "share the 0/1 tails a replay computes (engine/tail_tables.py); 'auto': /dev/shm/sufficiency-tails-<uid> "
        "where /dev/shm exists; 'off': each process keeps its own.")
    shared_tails_mb: int = Field(default=256, ge=1, description="The shared tails are deleted past this size (MB).")

    db_pool_size: int = Field(default=5, ge=1)
    db_max_overflow: int = Field(default=10, ge=0)
    sqlite_busy_timeout_ms: int = Field(default=30_000, ge=0)

    @model_validator(mode="after")
    def _production_is_explicit(self) -> Settings:
        # Production must not silently fall back to a local SQLite file or in-process jobs.
        if self.environment == "production" and (self.database_url is None or self.broker_url is None):
            raise ValueError("production needs SUFFICIENCY_DATABASE_URL and SUFFICIENCY_BROKER_URL")
        return self

    @property
    def sqlalchemy_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'sufficiency.db').resolve()}"

    @property
    def cors_origin_list(self) -> list[str]:
        return [o.strip() for o in self.cors_origins.split(",") if o.strip()]

    @property
    def is_sqlite(self) -> bool:
        return self.sqlalchemy_url.startswith("sqlite")

    @property
    def shared_tails_path(self) -> Path | None:
        if self.shared_tails_dir == "off":
            return None
        if self.shared_tails_dir == "auto":
            shm = Path("/dev/shm")
            return shm / f"sufficiency-tails-{os.getuid()}" if shm.is_dir() and hasattr(os, "getuid") else None
        return Path(self.shared_tails_dir)

    def share_tails(self) -> Path | None:
        """Share this process's 0/1 tail tables as these settings say (``tail_tables.share``)."""
        from service.engine import tail_tables

        return tail_tables.share(self.shared_tails_path, self.shared_tails_mb << 20)

    @property
    def should_migrate_on_start(self) -> bool:
        return self.is_sqlite if self.migrate_on_start is None else self.migrate_on_start
