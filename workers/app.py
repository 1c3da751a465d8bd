"""The Celery worker: ``sufficiency worker`` builds it from Settings.

Tasks are the functions in ``service.jobs.TASKS`` (``replays.run``, ``replays.chunk``,
``replays.sweep``), wrapped to ack late, retry transient database errors a bounded number
of times, and open their own sessions. Each process builds its engine lazily on first use,
so nothing holding a connection crosses the prefork pool's fork.

A sweeper thread in the worker's main process re-dispatches chunks whose worker died
(kill -9, OOM) once their heartbeat is older than ``stale_after_seconds``; together with
late acks and Redis' visibility timeout this means a job is never lost.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

from celery import Celery
from celery.signals import worker_process_init, worker_ready, worker_shutting_down
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from service.config import Settings
from service.db import engine_for, make_sessionmaker
from service.engine.blas import one_blas_thread
from service.engine.malloc import keep_freed_memory
from service.jobs import (
    TASKS,
    CeleryRunner,
    TaskContext,
    bind_runner,
    import_preloaded,
    is_transient,
    load_tasks,
    make_celery,
)

log = logging.getLogger(__name__)


class _ProcessState:
    """The per-process task context, built on first use (after any fork)."""

    def __init__(self, settings: Settings, *, null_pool: bool = False):
        self.settings = settings
        self.null_pool = null_pool
        self._ctx: TaskContext | None = None
        self._lock = threading.Lock()
        self.runner: CeleryRunner | None = None

    def ctx(self) -> TaskContext:
        with self._lock:
            if self._ctx is None:
                s = self.settings
                if self.null_pool and not s.is_sqlite:
                    engine = create_engine(s.sqlalchemy_url, poolclass=NullPool)
                else:
                    engine = engine_for(s)
                factory = make_sessionmaker(engine)
                self.runner = CeleryRunner(s)
                bind_runner(factory, self.runner)
                self._ctx = TaskContext(settings=s, sessionmaker=factory)
            return self._ctx

    def warm(self) -> None:
        """In a pool process, before its first job: the context, a database connection and
        the broker connection its jobs send through. A first job otherwise pays them (70-80 ms
        here before a replay's first chunk could start); nothing is opened before the fork."""
        try:
            with self.ctx().sessionmaker() as session:
                session.execute(text("SELECT 1"))
        except Exception:
            log.warning("could not reach the database to warm the worker", exc_info=True)
        if self.runner is not None:  # None only if the context itself could not be built
            self.runner.warm()


def create_worker_app(settings: Settings) -> Celery:
    if not settings.broker_url:
        raise ValueError("the Celery worker needs SUFFICIENCY_BROKER_URL (redis://...)")
    load_tasks()
    import_preloaded()  # before the pool forks: no job pays the engine's imports
    one_blas_thread()  # several worker processes share the cores (see service/engine/blas.py)
    keep_freed_memory()  # workers exist to replay (see service/engine/malloc.py); forks inherit it
    settings.share_tails()  # the processes of a host compute each 0/1 tail once (engine/tail_tables.py)
    app = make_celery(settings)
    state = _ProcessState(settings)

    @worker_process_init.connect(weak=False)
    def _pool_process(**_kwargs: Any) -> None:
        one_blas_thread()  # a pool started by spawn does not inherit these
        keep_freed_memory()
        settings.share_tails()
        state.warm()

    def wrap(name: str) -> None:
        fn = TASKS[name]

        @app.task(
            name=name, bind=True, acks_late=True, reject_on_worker_lost=True, max_retries=settings.task_max_retries
        )
        def _task(self: Any, *args: Any) -> None:
            try:
                fn(state.ctx(), *args)
            except Exception as exc:
                if is_transient(exc):
                    raise self.retry(exc=exc, countdown=min(2**self.request.retries, 30)) from exc
                raise

    for name in TASKS:
        wrap(name)
    app.conf.sufficiency_settings = settings
    return app


class Sweeper:
    """Runs ``replays.sweep`` every ``sweep_seconds`` in the worker's main process."""

    def __init__(self, settings: Settings, alive_file: str | None = None):
        self.settings = settings
        self.alive_file = alive_file
        self.state = _ProcessState(settings, null_pool=True)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="sufficiency-sweeper", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _loop(self) -> None:
        while True:
            self._touch()
            if self.stop.wait(self.settings.sweep_seconds):
                return
            try:
                TASKS["replays.sweep"](self.state.ctx())
            except Exception:
                log.warning("sweep failed", exc_info=True)

    def _touch(self) -> None:
        """Container healthchecks look at this file's age (the worker's main loop is alive)."""
        if self.alive_file:
            Path(self.alive_file).touch()


def install_sweeper(app: Celery, settings: Settings, alive_file: str | None = None) -> None:
    """Start the sweeper once the worker (and its pool) is up; stop it on shutdown."""
    sweeper = Sweeper(settings, alive_file)

    @worker_ready.connect(weak=False)
    def _start(**_kwargs: Any) -> None:
        sweeper.start()

    @worker_shutting_down.connect(weak=False)
    def _stop(**_kwargs: Any) -> None:
        sweeper.stop.set()
