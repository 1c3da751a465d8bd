"""Replay of partial runs over completed records (SPEC §2–§6): the engine's entry point.

``plan_replay`` (``plan.py``) fixes pairs and configurations, ``run_chunk`` (``chunk.py``)
replays a slice of pairs, ``build_report`` (``metrics.py``) merges slices in pair order;
``run_replay`` does all three, in processes if asked. The report does not depend on how the
pairs are chunked.
"""

from __future__ import annotations

import os
import threading

import numpy as np

from service.engine.blas import blas_single_thread, one_blas_thread
from service.engine.chunk import ChunkResult, Progress, block_pairs, lattice_valued, run_chunk
from service.engine.malloc import keep_freed_memory
from service.engine.metrics import build_report, sufficiency_table
from service.engine.plan import Plan, plan_replay
from service.engine.records import Records
from service.engine.spec import ReplaySpec


def _chunk_bounds(n_pairs: int, n_chunks: int) -> list[tuple[int, int]]:
    """``n_chunks`` contiguous ranges of pairs, cut at even pair indices where the sizes allow
    (a pair and its mirror sit side by side and share their bootstrap's work in one block)."""
    n_chunks = max(1, min(n_chunks, n_pairs))
    edges = np.linspace(0, n_pairs, n_chunks + 1)
    edges = np.unique(np.r_[0, (edges[1:-1] / 2).round().astype(int) * 2, n_pairs]) if n_pairs > 1 else edges.round()
    edges = edges.astype(int)
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:], strict=True) if b > a] or [(0, 0)]


def _pool_process() -> None:
    """A ``--jobs`` process: one BLAS thread (they share the cores) and freed memory kept
    (spawned processes do not inherit the parent's malloc settings)."""
    one_blas_thread()
    keep_freed_memory()


def _worker(args: tuple) -> bytes:
    records, spec, start, stop = args
    return run_chunk(Plan(records, spec), start, stop).to_bytes()


MAX_THREADS = 4
"""Threads of a lone replay (``_lone_threads``); past a few, the interpreter's lock leaves
them waiting."""


def _lone_threads() -> int:
    """Threads on which a one-process replay (``jobs=1``) runs its chunks: the cores it may
    use. numpy releases the interpreter's lock in the array work, so chunks side by side use
    the cores, each on one BLAS thread. For lattice-valued records the products are small and
    the lattice bootstrap has no BLAS in it; for 0/1 records, letting BLAS spread the products
    over the cores instead left the rest on one: on ``swebench_lite`` (500 orders, two cores)
    the ``anytime`` rule, which has no products, replayed in 12.6 s that way and 6.7 s on two
    threads, and the bootstrap in 0.9-1.3 s against 0.8 s (with 1.3 s of CPU time, not 1.8-2.4:
    idle BLAS threads spin). An ``OPENBLAS_NUM_THREADS`` in the environment (an operator's, or
    ``one_blas_thread``'s in a process that replays beside others) caps it."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    cap = os.environ.get("OPENBLAS_NUM_THREADS", "")
    if cap.isdigit() and int(cap) > 0:
        cores = min(cores, int(cap))
    return max(1, min(cores, MAX_THREADS))


def _lone_chunks(plan: Plan, threads: int) -> int:
    """Chunks of a one-process replay of lattice-valued records: whole blocks of pairs (a
    chunk of one block and a bit would replay the bit as a block of its own, whose per-block
    work is nearly that of a full one) and a multiple of ``threads`` (none waits at the end).
    On terminal_bench_core_0.1.1 (156 pairs, two threads) four chunks took 0.55-0.58 s where
    eight took 0.83-0.85 s."""
    blocks = -(-plan.n_pairs // block_pairs(plan, len(plan.spec.budgets)))
    return max(1, -(-blocks // threads) * threads)


def _in_threads(plan: Plan, bounds: list[tuple[int, int]], threads: int,
                progress: Progress | None) -> list[ChunkResult]:
    """``run_chunk`` over ``bounds`` on ``threads`` threads, results in the order of ``bounds``
    (the report does not depend on which thread ran what)."""
    import concurrent.futures as cf

    lock = threading.Lock()
    stopping = threading.Event()

    def heard(n: int) -> None:  # one caller at a time: a callback need not be thread-safe
        if stopping.is_set():  # the caller has stopped waiting (an error, Ctrl-C): stop here
            raise _Stopped
        if progress is not None:
            with lock:
                progress(n)

    # one BLAS thread set once around the pool: the chunks' own (nested) settings then
    # change nothing, whichever order the threads enter and leave them
    with blas_single_thread():
        pool = cf.ThreadPoolExecutor(max_workers=threads)
        try:
            futures: list = [None] * len(bounds)
            for i in _costliest_first(plan, bounds):  # results stay in the order of bounds
                futures[i] = pool.submit(run_chunk, plan, *bounds[i], heard)
            return [f.result() for f in futures]
        finally:  # on an error or Ctrl-C: chunks not started are dropped, running ones stop
            stopping.set()  # at their next progress report (a block of pairs at most)
            pool.shutdown(wait=True, cancel_futures=True)


def _costliest_first(plan: Plan, bounds: list[tuple[int, int]]) -> list[int]:
    """The chunks in the order a lone replay's threads start them: those likely to cost most
    first (longest processing time first), so that no thread is left with a long one at the
    end. On lattice-valued records a chunk costs more the more of its pairs are near a
    threshold (their cases reach the short sums): on ``terminal_bench_core_0.1.1`` (exact,
    500 orders, six chunks of 26 pairs) the chunks with 20-26 pairs within 4 standard errors of
    δ took 61-64 ms, those with 8-12 took 44-48 ms. Started in their own order, the two threads
    finished 28-38 ms apart (six fresh processes); in this order 2-8 ms apart (one 19), and the
    fastest four of six replays took 129-139 ms against 140-209 ms. On 0/1 records the chunks
    cost about the same: their order is kept."""
    if not lattice_valued(plan) or len(bounds) <= 1:
        return list(range(len(bounds)))
    deltas = sorted({c.delta / 100.0 for c in plan.configs})
    lat = float(plan.lattice)
    close = np.zeros(plan.n_pairs)
    for p in range(plan.n_pairs):
        d = plan.pair_values(p) / lat
        sd = max(float(d.std()), 1e-9) / np.sqrt(max(len(d), 1))
        close[p] = min(abs(float(d.mean()) - t) / sd for t in deltas) < 4.0
    cost = [(b - a) + 0.6 * float(close[a:b].sum()) for a, b in bounds]
    return sorted(range(len(bounds)), key=lambda i: -cost[i])


class _Stopped(Exception):
    """A threaded replay's chunk stopping because the caller stopped waiting for it."""


def total_cases(plan: Plan) -> int:
    return plan.n_pairs * len(plan.configs) * plan.spec.seeds * plan.spec.orders * len(plan.spec.budgets)


def literal_draws(plan: Plan) -> int:
    """Task draws of the replay's finite bootstraps where they are resampled literally (outcomes
    off a small lattice, ``Plan.fft_bootstrap`` false): per such configuration, pairs x seeds x
    orders x ``B`` x the budgets' ``k`` summed (at most: a block of pairs none of which the
    configuration applies to draws nothing). A case's cost there grows with ``B·k``, where a
    lattice case's barely does: 12 x 300 synthetic records off any lattice, B = 200 and 500
    orders, drew 3.8e10 tasks in 216 s on two threads (425 s of CPU, 11 ns a draw: 340 µs a
    case, thousands of times a ``swebench_lite`` case), so the case count alone does not
    bound such a replay's work (``service.limits``)."""
    if plan.fft_bootstrap:
        return 0
    per_order = sum(int(plan._tasksets[t].ks.sum()) for t in plan.pair_ts.tolist())  # every pair's k summed
    resamples = sum(int(cfg.bootstrap) for cfg in plan.configs if cfg.policy.rule == "bootstrap")
    return per_order * resamples * plan.spec.orders * plan.spec.seeds


def threads_error(threads: int | None, jobs: int) -> str | None:
    """Why ``threads`` cannot be asked for with ``jobs`` (``run_replay``'s and the CLI's check),
    or None when it can."""
    if threads is None:
        return None
    if not 1 <= threads <= MAX_THREADS:
        return f"threads must be from 1 to {MAX_THREADS}, got {threads}"
    if jobs > 1:
        return "threads is for a one-process replay; with jobs above 1 each process runs one thread"
    return None


def run_replay(records: Records, spec: ReplaySpec, jobs: int = 1, progress: Progress | None = None,
               chunks: int | None = None, per_pair: bool = True, threads: int | None = None) -> dict:
    """Plan, replay every chunk (in ``jobs`` processes; with one, on ``threads`` threads, by
    default the process's cores up to ``MAX_THREADS``: ``_lone_threads``) and build the report.

    The report does not depend on ``jobs``, ``threads`` or ``chunks``.
    """
    if why := threads_error(threads, jobs):
        raise ValueError(why)
    plan = plan_replay(records, spec)
    threads = 1 if jobs > 1 else threads or _lone_threads()
    if chunks is None:
        if jobs > 1:
            chunks = jobs * 4
        else:  # two a thread for 0/1 records (on two threads, eight chunks took no less time than four)
            chunks = _lone_chunks(plan, threads) if lattice_valued(plan) else max(4, 2 * threads)
    bounds = _chunk_bounds(plan.n_pairs, chunks)
    if jobs <= 1 and threads > 1:
        results = _in_threads(plan, bounds, threads, progress)
    elif jobs <= 1:
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


__all__ = ["Plan", "ChunkResult", "plan_replay", "run_chunk", "build_report", "run_replay", "threads_error",
           "total_cases", "literal_draws", "sufficiency_table"]
