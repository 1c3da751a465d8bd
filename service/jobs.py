"""Background jobs: sent only after the enqueuing transaction commits.

Two runners share one contract (``send(name, *args)``) and the same task functions
(``TASKS``, registered by the domain ``tasks`` modules):

- ``CeleryRunner`` publishes to Redis; ``sufficiency worker`` (``workers/``) executes.
- ``InProcessRunner`` executes in a small thread pool inside the API process: the embedded
  default, with no broker or worker to start.

Code enqueues with ``enqueue(session, name, *args)``; the job goes out from the session's
``after_commit`` hook and is dropped if the transaction rolls back, so a worker never
looks for a row that is not committed yet.
"""

from __future__ import annotations

import importlib
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from sqlalchemy import event
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from service.config import Settings

if TYPE_CHECKING:
    from celery import Celery

log = logging.getLogger(__name__)

_PENDING = "sufficiency_pending_jobs"


class JobRunner(Protocol):
    def send(self, name: str, *args: Any) -> None: ...

    def ping(self) -> None: ...

    def close(self) -> None: ...


@dataclass
class TaskContext:
    """What a task needs: it opens its own sessions and may enqueue follow-up tasks."""

    settings: Settings
    sessionmaker: sessionmaker[Session]
    stop: threading.Event = field(default_factory=threading.Event)


TaskFn = Callable[..., None]
TASKS: dict[str, TaskFn] = {}


def task(name: str) -> Callable[[TaskFn], TaskFn]:
    """Register ``fn(ctx, *args)`` under a task name shared by both runners."""

    def register(fn: TaskFn) -> TaskFn:
        TASKS[name] = fn
        return fn

    return register


UNDELIVERED: dict[str, Callable[..., None]] = {}
"""``name -> mark(session, *args)``: record that a job's message did not leave (the outbox:
the row is committed, its dispatch time is cleared, and the next sweep sends it again)."""


def on_undelivered(name: str) -> Callable[[TaskFn], TaskFn]:
    def register(fn: TaskFn) -> TaskFn:
        UNDELIVERED[name] = fn
        return fn

    return register


def _mark_undelivered(factory: sessionmaker[Session], name: str, args: tuple[Any, ...]) -> None:
    mark = UNDELIVERED.get(name)
    if mark is None:
        return
    try:
        with factory() as session, session.begin():
            mark(session, *args)
    except Exception:  # the sweep still re-sends it, after stale_after_seconds instead of at once
        log.warning("could not mark %s%r as not sent", name, args, exc_info=True)


PRELOAD: list[str] = []
"""Modules a worker process imports at start, registered by task modules whose jobs import
them lazily (the API process need not load what only jobs use): otherwise the first job of
each worker pays them (the replay engine with scipy: about 0.5 s of its first chunk)."""


def preload(*modules: str) -> None:
    PRELOAD.extend(m for m in modules if m not in PRELOAD)


SLOW_START_SECONDS = 3.0
"""Start-up imports slower than this are logged with the likely reason (``import_modules``)."""


def import_modules(names: list[str] | tuple[str, ...], who: str, slow: float = SLOW_START_SECONDS) -> float:
    """Import ``names`` now, as a process starts; their seconds. Past ``slow`` it says so in
    the log: on a fresh install, the first process to import the engine's compiled kernels
    compiles them into numba's cache (11-15 s measured on two cores, once per install), and an
    operator otherwise sees a worker or a server that is silent that long before it is ready."""
    start = time.perf_counter()
    for name in names:
        importlib.import_module(name)
    took = time.perf_counter() - start
    if took > slow:
        log.warning("%s: start-up imports took %.1f s; on a fresh install numba compiles the engine's kernels "
                    "into its cache once (later starts read it)", who, took)
    return took


def import_preloaded() -> float:
    """``PRELOAD``'s modules (``import_modules``): a worker's, before its pool starts."""
    return import_modules(PRELOAD, "worker")


def load_tasks() -> None:
    import service.replays.tasks  # noqa: F401  (registers replays.*)


def is_transient(exc: BaseException) -> bool:
    """Errors worth a retry: the database was busy or the connection dropped."""
    return isinstance(exc, OperationalError) or (isinstance(exc, DBAPIError) and exc.connection_invalidated)


def enqueue(session: Session, name: str, *args: Any) -> None:
    """Send task ``name`` once ``session`` commits (never if it rolls back). Jobs belong to
    the outer transaction: enqueue outside savepoints that may roll back."""
    session.info.setdefault(_PENDING, []).append((name, args))


def bind_runner(factory: sessionmaker[Session], runner: JobRunner) -> None:
    """Make sessions from ``factory`` hand their enqueued jobs to ``runner`` after commit."""
    load_tasks()  # the producer too needs the tasks' undelivered-marks

    @event.listens_for(factory, "after_commit")
    def _send(session: Session) -> None:
        if session.in_nested_transaction():  # a savepoint was released; the real commit is to come
            return
        jobs = session.info.pop(_PENDING, [])
        for name, args in jobs:
            try:
                runner.send(name, *args)
            except Exception:  # the rows are committed: a worker's sweeper re-sends what never left
                log.exception("could not send %s%r; it will be re-sent by a sweep", name, args)
                _mark_undelivered(factory, name, args)

    @event.listens_for(factory, "after_rollback")
    def _drop(session: Session) -> None:
        if not session.in_nested_transaction():  # the outer transaction is gone: so are its jobs
            session.info.pop(_PENDING, None)


# --------------------------------------------------------------------------- Celery


def celery_config(settings: Settings) -> dict[str, Any]:
    """Celery settings for the producer (API) and the worker alike."""
    return {
        "broker_url": settings.broker_url,
        "task_default_queue": settings.celery_queue,
        "task_acks_late": True,  # a task killed mid-run is redelivered, not lost
        "task_reject_on_worker_lost": True,
        "task_ignore_result": True,  # results live in the database
        "worker_prefetch_multiplier": 1,
        "broker_transport_options": {"visibility_timeout": settings.visibility_timeout},
        "broker_connection_retry_on_startup": True,
        "worker_enable_remote_control": False,
        "worker_send_task_events": False,
        "worker_hijack_root_logger": False,
        "task_serializer": "json",
        "accept_content": ["json"],
    }


def make_celery(settings: Settings) -> Celery:
    from celery import Celery

    app = Celery("sufficiency", set_as_current=False)
    app.conf.update(celery_config(settings))
    return app


class CeleryRunner:
    def __init__(self, settings: Settings):
        self.settings = settings
        self.app = make_celery(settings)

    def send(self, name: str, *args: Any) -> None:
        self.app.send_task(name, args=list(args), queue=self.settings.celery_queue)

    def ping(self) -> None:
        with self.app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=2)

    def warm(self) -> None:
        """Open the producer pool's broker connection now: a process's first send otherwise
        pays it, about 55 ms here, before the job it sends can start. A broker that is down
        is not an error here (sends retry and sweeps re-send)."""
        try:
            with self.app.producer_or_acquire() as producer:
                producer.connection.ensure_connection(max_retries=1, timeout=2)
        except Exception:
            log.warning("could not reach the broker to warm the producer", exc_info=True)

    def close(self) -> None:
        self.app.close()


# --------------------------------------------------------------------------- in-process


class InProcessRunner:
    """Runs tasks on threads of this process, retrying transient errors a bounded number
    of times like the Celery tasks do."""

    def __init__(self, ctx: TaskContext, threads: int):
        self.ctx = ctx
        self.pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="sufficiency-job")
        self._inflight = 0
        self._idle = threading.Condition()
        load_tasks()

    def send(self, name: str, *args: Any) -> None:
        if name not in TASKS:
            raise KeyError(f"unknown task {name}")
        if self.ctx.stop.is_set():  # shutting down: recovered at the next start
            return
        with self._idle:
            self._inflight += 1
        self.pool.submit(self._run, name, args)

    def _run(self, name: str, args: tuple[Any, ...]) -> None:
        try:
            for attempt in range(self.ctx.settings.task_max_retries + 1):
                if self.ctx.stop.is_set():
                    return
                try:
                    TASKS[name](self.ctx, *args)
                    return
                except Exception as exc:
                    if not is_transient(exc) or attempt == self.ctx.settings.task_max_retries:
                        log.exception("task %s%r failed", name, args)
                        return
                    time.sleep(0.2 * 2**attempt)
        finally:
            with self._idle:
                self._inflight -= 1
                self._idle.notify_all()

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until no task is queued or running (tests, the demo)."""
        with self._idle:
            return self._idle.wait_for(lambda: self._inflight == 0, timeout)

    def ping(self) -> None:
        return None

    def close(self) -> None:
        self.ctx.stop.set()
        self.pool.shutdown(wait=True, cancel_futures=True)
