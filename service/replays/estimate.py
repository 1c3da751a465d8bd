"""How long a replay will take, said before it starts: its case count times a measured cost.

The per-case cost varies a hundredfold between a 0/1 single-trial dataset (closed forms on
prefix sums) and a multi-trial one (the bootstrap tail over a lattice of differences, or
literal resamples off it), and with the number of tasks (each case sums over them), so no
fixed rate predicts it. Two measurements, best first:

1. **History**: replays of the same kind (outcome lattice and rules, ``cost_kind``) that
   succeeded on this deployment: the median of their seconds per (case x task), times this
   replay's cases x tasks. Free, and it includes what the deployment really does (queueing,
   number of workers).
2. **Sample** (no history yet): after a warm-up pair (orders, imports), time 1 pair then 3,
   which separates the set-up a chunk pays once (observation matrices, per-configuration
   tables) from the cost per pair: ``chunks x setup + pairs x per_pair``, for one worker. It
   costs about three set-ups and five pairs (2-4 s for the 12 x 300 demo on the shared 2-core
   machine), paid only by the first replay of its kind; the in-process runner reuses the
   warmed plan.

Replays below ``MIN_CASES_TO_MEASURE`` cases take about a second: no estimate (null).
"""

from __future__ import annotations

import math
import statistics
import time
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

MIN_CASES_TO_MEASURE = 200_000
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
        .where(Replay.status == SUCCEEDED, Replay.cost_kind == kind, Replay.n_cases.is_not(None),
               Replay.started_at.is_not(None), Replay.finished_at.is_not(None))
        .order_by(Replay.finished_at.desc())
        .limit(HISTORY)
    ).all()
    rates = [(f - s).total_seconds() / (n * max(t, 1)) for s, f, n, t in rows if n]
    return statistics.median(rates) * units if rates else None


def from_sample(plan: Any, chunk_pairs: int) -> float:
    from service.engine.replay import run_chunk

    def timed(a: int, b: int) -> float:
        start = time.perf_counter()
        run_chunk(plan, a, b)
        return time.perf_counter() - start

    if plan.n_pairs < 5:
        return timed(0, plan.n_pairs)
    timed(0, 1)  # warm-up: the orders (cached on the plan), lazy imports, first-touch allocations
    t1, t3 = timed(1, 2), timed(2, 5)
    per_pair = (t3 - t1) / 2
    setup = t1 - per_pair
    if per_pair <= 0 or setup < 0:  # noise swamped the difference: an upper bound, every pair as dear
        per_pair, setup = max(t1, t3 / 3), 0.0
    return math.ceil(plan.n_pairs / chunk_pairs) * setup + plan.n_pairs * per_pair


def estimate(session: Session, plan: Any, chunk_pairs: int) -> tuple[int, str, float | None]:
    """``(cases, cost kind, estimated seconds or None)`` for a replay about to be stored."""
    from service.engine.replay import total_cases

    cases = total_cases(plan)
    kind = cost_kind(plan)
    if cases < MIN_CASES_TO_MEASURE or plan.n_pairs == 0:
        return cases, kind, None
    seconds = from_history(session, kind, _units(plan, cases))
    if seconds is None:
        seconds = from_sample(plan, chunk_pairs)
    return cases, kind, round(seconds, 1)


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
