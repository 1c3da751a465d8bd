"""How long a replay will take, said when it is submitted: its case count times a measured cost.

The per-case cost varies a hundredfold between a 0/1 single-trial dataset (closed forms on
prefix sums) and a multi-trial one (the bootstrap tail over a lattice of differences, or
literal resamples off it), and with the number of tasks (each case sums over them), so no
fixed rate predicts it. Two measurements, best first:

1. **History**: replays of the same kind (outcome lattice and rules, ``cost_kind``) that
   succeeded on this deployment: the median of their seconds per (case x task), times this
   replay's cases x tasks. Free, and it includes what the deployment really does (queueing,
   number of workers).
2. **Sample** (no history yet): the replay's first chunk run with about 50 orders per pair
   instead of its R and one seed (at most ``SAMPLE_CASES`` cases: fewer orders and pairs
   where a pair has many configurations and budgets), twice, timed and scaled by R / 50, the
   seeds and the number of chunks
   (``from_sample``), for one worker. It costs at most 2 x 50 / R of a chunk (20 % at 500
   orders; the second run finds the first one's tails, and costs far less), paid only by the
   first replay of its kind; it errs high rather than low (at most 6 % low where measured:
   ``SAMPLE_ORDERS``). It is taken once the replay is stored and its job sent
   (``service.create``), so the workers do not wait for it. It is timed in CPU seconds of its
   own thread, on one BLAS thread as a worker runs: where the workers share the API's cores
   they slow the sample down, and a wall clock would count that as replay time (15x high
   instead of 4-5x on the 134 x 500 board, on a two-core host, when the sample had 20 orders).

Replays below ``MIN_CASES_TO_MEASURE`` cases take about a second: no estimate (null).
"""

from __future__ import annotations

import logging
import statistics
import time
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

log = logging.getLogger(__name__)

MIN_CASES_TO_MEASURE = 200_000
SAMPLE_ORDERS = 50
"""Orders per pair of the timing sample (the replay's own orders / k, k an integer). A case's
cost falls with the orders (tails met again, per-pair work that does not grow with them), so
the fewer the sample's, the higher the estimate: on five replays of 500 orders (2026-12-04,
against their CPU time on one worker), 20 orders said 1.05-7.2x for a sample of 0.04-0.21 s
of CPU; 50 orders 0.94-1.8x, and 3.3-3.8x on the 134 x 500 board (5-7x at 20), for 0.08-0.21 s;
100 orders about 3x on the board, for up to 0.34 s."""
SAMPLE_CASES = 500_000
"""Most cases one run of the sample replays (pairs x orders x configurations x budgets, one
seed): fewer orders and pairs where a pair has many configurations and budgets. Before, only
the orders were cut: 20 systems x 200 tasks at 50 orders and 1,000 seeds sampled 28.5 M cases
twice, and the POST took 47.6 s. The 134 x 500 board's sample (190 cases a pair) is unchanged."""
ONE_TIME_GROWTH = 4.0
"""How much more of what a process computes once (0/1 tails met for the first time) a whole
replay needs than its timing sample: the 134 x 500 board met 161,000 distinct tails in all,
about 5x its sample's."""
HISTORY = 5
"""Recent succeeded replays of the same kind whose rate is used (median)."""


def cost_kind(plan: Any) -> str:
    """What the per-case cost depends on beyond the case and task counts."""
    rules = sorted({c.policy.rule + ("+cov" if c.policy.coverage_aware else "") for c in plan.configs})
    lattice = "binary" if plan.records.binary_single_trial else f"lattice{plan.lattice or 'off'}"
    boot = sorted({str(c.bootstrap) for c in plan.configs if c.policy.rule == "bootstrap"})
    return f"{lattice}|{','.join(rules)}|B={','.join(boot)}"[:120]


def _units(plan: Any, cases: int) -> float:
    return float(cases) * max(plan.records.n_tasks, 1)


def from_history(session: Session, kind: str, units: float) -> float | None:
    from service.datasets.models import Dataset
    from service.replays.models import SUCCEEDED, Replay

    rows = session.execute(
        select(Replay.started_at, Replay.finished_at, Replay.n_cases, Dataset.n_tasks)
        .join(Dataset, Dataset.id == Replay.dataset_id)
        .where(
            Replay.status == SUCCEEDED,
            Replay.cost_kind == kind,
            Replay.n_cases.is_not(None),
            Replay.started_at.is_not(None),
            Replay.finished_at.is_not(None),
        )
        .order_by(Replay.finished_at.desc())
        .limit(HISTORY)
    ).all()
    rates = [(f - s).total_seconds() / (n * max(t, 1)) for s, f, n, t in rows if n]
    return statistics.median(rates) * units if rates else None


def from_sample(plan: Any, chunk_pairs: int) -> float:
    """Seconds on one worker, from the replay's first chunk run with 1/k of its orders.

    Most of a chunk's time grows with the number of orders (observation matrices, every
    case's decision), so the first chunk (its pairs, configurations and lattice) replayed at
    ``orders / k`` takes about 1/k of its time: times k, times the number of chunks. What a
    process computes once and keeps (the 0/1 tails it meets for the first time) does not
    grow that way: the sample is run twice, the second run's time is the one scaled, and the
    difference is added ``ONE_TIME_GROWTH`` times at most. A warm-up pair first pays the
    one-time costs of a process (lazy imports, first allocations). What does not grow with
    the orders (per block and pair) is multiplied by k too, so the estimate errs high
    (``SAMPLE_ORDERS``: 0.94-1.8x on swebench_lite with two policies and thresholds,
    terminal_bench_1_fractional, terminal_bench_core_0.1.1 with the bootstrap and with the
    anytime rule; 3.3-3.8x on the 134 x 500 board, which one run scaled whole had put at 57x). A
    two-point fit (10 and 30 orders) was tried and dropped: its noise there gave 0.26-2.3x at
    twice the sampling cost."""
    from service.engine.blas import blas_single_thread
    from service.engine.replay import run_chunk

    k = max(1, plan.spec.orders // SAMPLE_ORDERS)
    per_order = len(plan.configs) * len(plan.spec.budgets)  # a pair's cases per order and seed
    orders = max(1, min(plan.spec.orders // k, SAMPLE_CASES // max(per_order, 1)))
    small = plan.with_orders(orders, seeds=1)
    m = max(1, min(plan.n_pairs, chunk_pairs, SAMPLE_CASES // max(per_order * orders, 1)))
    with blas_single_thread():  # all of the sample's work on this thread, whose CPU time is read
        run_chunk(small, 0, 1)
        start = time.thread_time()
        run_chunk(small, 0, m)
        first = time.thread_time() - start
        start = time.thread_time()
        run_chunk(small, 0, m)  # the same pairs again: what a process computes once is kept
        again = time.thread_time() - start
    scale = plan.spec.orders / small.spec.orders * plan.spec.seeds
    return again * scale * plan.n_pairs / m + max(first - again, 0.0) * min(scale, ONE_TIME_GROWTH)


def known(session: Session, plan: Any) -> tuple[int, str, float | None, bool]:
    """``(cases, cost kind, seconds from history or None, whether to sample)`` for a replay
    about to be stored: what costs nothing to say. The sample (``sampled``) is taken only
    without history and at ``MIN_CASES_TO_MEASURE`` cases or more."""
    from service.engine.replay import total_cases

    cases = total_cases(plan)
    kind = cost_kind(plan)
    if cases < MIN_CASES_TO_MEASURE or plan.n_pairs == 0:
        return cases, kind, None, False
    seconds = from_history(session, kind, _units(plan, cases))
    return cases, kind, (None if seconds is None else round(seconds, 1)), seconds is None


def sampled(plan: Any, chunk_pairs: int) -> float | None:
    """``from_sample``, rounded; None (no estimate) if the sample fails: the replay it is for
    is already stored and running, so an error here must not fail the submission."""
    try:
        return round(from_sample(plan, chunk_pairs), 1)
    except Exception:
        log.exception("the submission estimate's sample failed")
        return None


def eta_seconds(status: str, progress: float, elapsed: float | None, estimated: float | None) -> float | None:
    """Seconds left: from the measured rate once some progress is in (elapsed x (1 - p) / p),
    else the submission estimate (less the time spent); None once finished or when unknown."""
    if status == "queued":
        return estimated
    if status != "running":
        return None
    if elapsed is not None and progress > 0.0:
        return round(max(elapsed * (1.0 - progress) / progress, 0.0), 1)
    if estimated is not None and elapsed is not None:
        return round(max(estimated - elapsed, 0.0), 1)
    return estimated
