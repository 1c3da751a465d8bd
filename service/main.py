"""The FastAPI application factory.

``create_app(settings)`` wires routers and error handlers; the lifespan builds what holds
resources (engine, sessionmaker, job runner) so tests and workers can build their own.
On the embedded default (SQLite) the lifespan also applies the migrations, so one
command gives a working service.
"""

from __future__ import annotations

import gc
import importlib
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from sqlalchemy import text

from service import __version__
from service.auth.middleware import install_trust
from service.auth.ownership import bind_owner_scope
from service.config import Settings
from service.db import engine_for, make_sessionmaker, run_migrations
from service.docs import install_docs
from service.engine.blas import one_blas_thread
from service.errors import ErrorBody, install_handlers
from service.jobs import CeleryRunner, InProcessRunner, JobRunner, TaskContext, bind_runner, import_modules

log = logging.getLogger(__name__)

ROUTERS = (
    "service.decisions.router",
    "service.sessions.router",
    "service.placements.router",
    "service.datasets.router",
    "service.replays.router",
    "service.stats.router",
    "service.reports.router",
    "service.reports.pages",
    "service.auth.router",
)
"""Modules exposing ``router``; a domain adds itself here (missing modules are skipped).
Routes are matched in this order, one router after another, so the endpoints harnesses call
after every task come first (the paths do not overlap, so the order changes nothing else)."""


def build_runner(settings: Settings, ctx: TaskContext) -> JobRunner:
    if settings.broker_url:
        return CeleryRunner(settings)
    one_blas_thread()  # replays run on this process's threads, beside the requests
    return InProcessRunner(ctx, settings.runner_threads)


def freeze_startup_objects() -> None:
    """Move every object that exists after start-up (modules, the app, SQLAlchemy and
    pydantic metadata: about 150,000 of them) out of the cyclic garbage collector's reach.
    They live as long as the process; left in the oldest generation, each full collection
    walks them all, a pause of about 0.1 s on the development machine that lands on
    whatever requests are in flight (the 100-150 ms maxima of the load benchmark).

    Once per process: frozen objects that later become cyclic garbage are never freed, and a
    test process builds hundreds of apps."""
    global _FROZEN
    if _FROZEN:
        return
    _FROZEN = True
    gc.collect()
    gc.freeze()


_FROZEN = False


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    settings: Settings = app.state.settings
    if settings.should_migrate_on_start:
        run_migrations(settings.sqlalchemy_url, settings.migrations_dir)
    engine = engine_for(settings)
    factory = make_sessionmaker(engine)
    bind_owner_scope(factory)
    ctx = TaskContext(settings=settings, sessionmaker=factory)
    runner = build_runner(settings, ctx)
    bind_runner(factory, runner)
    app.state.engine, app.state.sessionmaker, app.state.runner = engine, factory, runner
    if isinstance(runner, CeleryRunner):
        runner.warm()  # a submission's job then leaves at once
    if isinstance(runner, InProcessRunner):
        from service.replays.tasks import resume_all

        resumed = resume_all(ctx)
        if resumed:
            log.info("resumed %d unfinished replay(s)", resumed)
    # the engine imports scipy.stats on first use (engine/binom.py); a server pays its second
    # of import here rather than in the first request that needs an interval. Likewise the
    # replay engine, which a replay's submission imports before its job can be sent (70 ms
    # where no bytecode is cached): not its compiled lattice kernels, which only workers run.
    # The anytime rule's compiled confidence sequence is the API's own (0.3 s with numba's
    # cache, about 30 MB of this process's private memory); with numba loaded, a replay's
    # estimate sample takes the stratified orders compiled (``orders_kernel``, 5 ms more).
    import_modules(("scipy.stats", "service.engine.replay", "service.engine.report", "service.engine.pairs",
                    "service.engine.betting_kernel", "service.engine.orders_kernel"), "API")
    settings.share_tails()  # a replay's estimate sample and in-process jobs meet the workers' tails
    freeze_startup_objects()
    try:
        yield
    finally:
        pool = getattr(app.state, "decision_pool", None)
        if pool is not None:
            pool.close()
        runner.close()
        engine.dispose()


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    app = FastAPI(
        title="Sufficiency",
        version=__version__,
        summary="When is a partial agent-benchmark run enough? Datasets, replays, reports.",
        lifespan=lifespan,
        docs_url=None,  # served by service.docs, without a CDN
        redoc_url=None,
    )
    app.state.settings = settings
    install_docs(app)
    install_handlers(app)
    from service.replays.report_fastpath import ReportFastPath

    app.add_middleware(ReportFastPath)  # added before the trust middleware: it wraps them
    if settings.decision_fast_path:
        from service.decisions.fastpath import DecisionFastPath

        app.add_middleware(DecisionFastPath, calibration_ttl=settings.calibration_cache_seconds)
    install_trust(app, settings)
    for name in ROUTERS:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue
        app.include_router(module.router)

    @app.get("/healthz", tags=["health"], summary="The process is up")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get(
        "/readyz",
        tags=["health"],
        summary="The database (and the broker, when configured) answer",
        responses={503: {"model": ErrorBody}},
    )
    def readyz(request: Request) -> Any:
        checks: dict[str, str] = {}
        try:
            with request.app.state.engine.connect() as conn:
                conn.execute(text("SELECT 1"))
            checks["database"] = "ok"
        except Exception as exc:  # report, do not raise: this endpoint exists to say what is down
            checks["database"] = f"error: {type(exc).__name__}"
        if settings.broker_url:
            try:
                request.app.state.runner.ping()
                checks["broker"] = "ok"
            except Exception as exc:
                checks["broker"] = f"error: {type(exc).__name__}"
        if all(v == "ok" for v in checks.values()):
            return {"status": "ok", "checks": checks}
        return JSONResponse({"error": "not_ready", "detail": checks}, status_code=503, headers={"Retry-After": "5"})

    return app
