"""Replay of partial runs over completed records (SPEC §2–§6): the engine's entry point.

``plan_replay`` (``plan.py``) fixes pairs and configurations, ``run_chunk`` (``chunk.py``)
replays a slice of pairs, ``build_report`` (``metrics.py``) merges slices in pair order;
``run_replay`` does all three, in processes if asked. The report does not depend on how the
pairs are chunked.
"""

from __future__ import annotations

import numpy as np

from service.engine.blas import one_blas_thread
from service.engine.chunk import ChunkResult, Progress, run_chunk
from service.engine.malloc import keep_freed_memory
from service.engine.metrics import build_report, sufficiency_table
from service.engine.plan import Plan, plan_replay
from service.engine.records import Records
from service.engine.spec import ReplaySpec


def _chunk_bounds(n_pairs: int, n_chunks: int) -> list[tuple[int, int]]:
    n_chunks = max(1, min(n_chunks, n_pairs))
    edges = np.linspace(0, n_pairs, n_chunks + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:], strict=True) if b > a] or [(0, 0)]


def _pool_process() -> None:
    """A ``--jobs`` process: one BLAS thread (they share the cores) and freed memory kept
    (spawned processes do not inherit the parent's malloc settings)."""
    one_blas_thread()
    keep_freed_memory()


def _worker(args: tuple) -> bytes:
    records, spec, start, stop = args
    return run_chunk(Plan(records, spec), start, stop).to_bytes()


def total_cases(plan: Plan) -> int:
    return plan.n_pairs * len(plan.configs) * plan.spec.seeds * plan.spec.orders * len(plan.spec.budgets)


def run_replay(records: Records, spec: ReplaySpec, jobs: int = 1, progress: Progress | None = None,
               chunks: int | None = None, per_pair: bool = True) -> dict:
    """Plan, replay every chunk (in ``jobs`` processes) and build the report.

    The report does not depend on ``jobs`` or ``chunks``.
    """
    plan = plan_replay(records, spec)
    bounds = _chunk_bounds(plan.n_pairs, chunks or max(1, jobs) * 4)
    if jobs <= 1:
        results = [run_chunk(plan, a, b, progress) for a, b in bounds]
    else:
        import concurrent.futures as cf
        import multiprocessing as mp

        ctx = mp.get_context("spawn" if mp.get_start_method(allow_none=True) == "spawn" else "fork")
        results = []
        with cf.ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, initializer=_pool_process) as pool:
            futs = {pool.submit(_worker, (records, spec, a, b)): (a, b) for a, b in bounds}
            for fut in cf.as_completed(futs):
                a, b = futs[fut]
                results.append(ChunkResult.from_bytes(fut.result()))
                if progress:
                    progress((b - a) * len(plan.configs) * spec.seeds * spec.orders * len(spec.budgets))
    return build_report(plan, results, per_pair=per_pair)


__all__ = ["Plan", "ChunkResult", "plan_replay", "run_chunk", "build_report", "run_replay",
           "total_cases", "sufficiency_table"]
