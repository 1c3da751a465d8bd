"""Large inline decisions in a separate process, so the event loop (and every other request
of the API process) never waits on them.

A thread is not enough: pydantic's JSON parser and most of the decision hold the GIL, so
four clients sending 100,000-task decisions delayed ``/healthz`` by 1.6 s even with the
work in threads. Here the raw body goes to a small process pool (``decision_processes``,
spawned on first use) that parses, checks the limits and decides; the answer (or the error
body, shaped as the app's handlers shape it) comes back as bytes. The pool also bounds how
many large decisions run at once. Small decisions, the common case of a harness, stay on
the event loop (``fastpath``); decisions on a dataset need the database and run in a thread.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing as mp
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from threading import Lock
from typing import Any

from pydantic import ValidationError

from service.config import Settings
from service.errors import ServiceError, ServiceUnavailable, validation_detail


def decide_raw(raw: bytes, limits: dict[str, Any]) -> tuple[int, Any]:
    """In the worker: ``(status, body)`` for a decision request's raw bytes; ``(0, request)``
    for one that names a dataset, with the parsed ``DecisionCreate`` (the caller decides it in
    a thread, with the database, and need not parse the body again: unpickling the model costs
    a small part of validating the JSON)."""
    from service import limits as checks
    from service.decisions import service
    from service.decisions.schemas import DecisionCreate

    settings = Settings.model_construct(**limits)
    try:
        body = DecisionCreate.model_validate_json(raw)
        if body.dataset_id is not None:
            return 0, body
        checks.check_decision(body, settings)
        return 200, service.decision_json(None, body, settings=settings)
    except ValidationError as exc:
        errors = [{**e, "loc": ("body", *e["loc"])} for e in exc.errors()]
        return 422, _json({"error": "invalid_input", "detail": validation_detail(errors)})
    except ServiceError as exc:
        return exc.status_code, _json({"error": exc.code, "detail": exc.detail})


def _json(body: dict[str, Any]) -> bytes:
    """As the app's handlers render an error (starlette's ``JSONResponse``)."""
    return json.dumps(body, ensure_ascii=False, allow_nan=False, separators=(",", ":"), default=str).encode()


class DecisionPool:
    """A lazily started process pool, one per app (closed with it)."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.limits = {k: getattr(settings, k) for k in ("max_universe_tasks", "max_decision_work")}
        self._pool: ProcessPoolExecutor | None = None
        self._pending = 0
        self._lock = Lock()

    def _executor(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ProcessPoolExecutor(
                    max_workers=self.settings.decision_processes, mp_context=mp.get_context("spawn")
                )
            return self._pool

    async def decide(self, raw: bytes) -> tuple[int, Any]:
        """``(status, body)`` (``decide_raw``'s); a 503 with Retry-After while
        ``max_pending_decisions`` are already queued or running (a flood of large decisions
        waits for no one)."""
        if self._pending >= self.settings.max_pending_decisions:
            raise ServiceUnavailable(
                f"{self._pending} large decisions are already being decided; retry shortly",
                headers={"Retry-After": "2"},
            )
        loop = asyncio.get_running_loop()
        self._pending += 1  # the event loop's own counter: no lock needed
        try:
            return await loop.run_in_executor(self._executor(), decide_raw, raw, self.limits)
        except BrokenProcessPool:  # a worker died (killed, out of memory): start afresh next time
            with self._lock:
                self._pool = None
            raise ServiceUnavailable("the decision worker stopped; retry", headers={"Retry-After": "1"}) from None
        finally:
            self._pending -= 1

    def close(self) -> None:
        with self._lock:
            if self._pool is not None:
                self._pool.shutdown(wait=False, cancel_futures=True)
                self._pool = None
