"""How long a replay will take, said before it starts: its case count times a per-case cost
measured on its own first pairs (same plan, same policies, same outcome lattice).

Why measure instead of a fixed rate: the per-case cost varies a hundredfold between a 0/1
single-trial dataset (closed forms on prefix sums) and a multi-trial one (the bootstrap tail
over a lattice of differences, or literal resamples off it), so only the replay's own work
predicts it. The sample is at most ``SAMPLE_PAIRS`` pairs and at most ~1/20 of the pairs, so
it costs a small share of the run; it includes the set-up a chunk pays once (orders,
observation matrices), so light replays are over-estimated rather than under-estimated.
The estimate is for one worker; N workers divide the chunked part by up to N.
"""

from __future__ import annotations

import time
from typing import Any

SAMPLE_PAIRS = 2
MIN_CASES_TO_MEASURE = 200_000
"""Below this many cases a replay takes about a second: not worth measuring."""


def measure(plan: Any) -> tuple[int, float | None]:
    """``(cases, estimated seconds on one worker)``; the estimate is None for tiny replays."""
    from service.engine.replay import run_chunk, total_cases

    cases = total_cases(plan)
    if cases < MIN_CASES_TO_MEASURE or plan.n_pairs == 0:
        return cases, None
    sample = max(1, min(SAMPLE_PAIRS, plan.n_pairs // 20))
    start = time.perf_counter()
    run_chunk(plan, 0, sample)
    elapsed = time.perf_counter() - start
    per_case = elapsed / (cases * sample / plan.n_pairs)
    return cases, round(per_case * cases, 1)


def eta_seconds(status: str, progress: float, elapsed: float | None, estimated: float | None) -> float | None:
    """Seconds left: from the measured rate once some progress is in (elapsed x (1 - p) / p),
    else the submission estimate while queued; None once finished or when nothing is known."""
    if status == "queued":
        return estimated
    if status != "running":
        return None
    if elapsed is not None and progress > 0.0:
        return round(max(elapsed * (1.0 - progress) / progress, 0.0), 1)
    if estimated is not None and elapsed is not None:
        return round(max(estimated - elapsed, 0.0), 1)
    return estimated
