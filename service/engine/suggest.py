"""What a live answer suggests running next (SPEC §7): the tasks that meet coverage at the
next budget point, the default tie-breaking rank, and a recommended stratified order.

A harness asks after every task, so ``next_tasks`` is on the hot path of every deferred
decision: the budget points of a grid are computed once per ``(grid, N, cap)``, the floors
come from the universe's cache, and the slots beyond the floors are dealt with a heap (the
same picks as handing them out one by one, in ``O(slots·log G)``).
"""

from __future__ import annotations

import heapq
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from service.engine.coverage import budget_k
from service.engine.numbers import clean as _clean
from service.engine.orders import stratified_orders

SEEDS_KEPT = 8
"""Seeds whose task ranks a universe keeps (harnesses use one; each costs 8 bytes per task)."""

if TYPE_CHECKING:  # live imports this module: the types only
    from service.engine.live import LiveSpec
    from service.engine.observations import Observed, Universe


def default_priority(universe: Universe, seed: int = 0) -> np.ndarray:
    """Rank per task: a shuffle seeded by the universe's hash (stable across calls)."""
    h = np.frombuffer(universe.digest()[:16], dtype=np.uint32)
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([int(seed), *h.tolist()])))
    return rng.permutation(universe.n)


def recommended_order(universe: Universe, floor: str, seed: int) -> list[str]:
    """One stratified order (SPEC §4.1) seeded by ``seed`` and the universe's hash: every
    prefix meets the floor whenever it is feasible."""
    h = np.frombuffer(universe.digest()[:16], dtype=np.uint32)
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([int(seed), 7, *h.tolist()])))
    order = stratified_orders(universe.labels, floor, 1, rng)[0]
    return [universe.task_ids[i] for i in order.tolist()]


@lru_cache(maxsize=1024)
def budget_points(budgets: tuple[float, ...], n: int, k_cap: int) -> tuple[int, ...]:
    """The task counts of the budget grid and the cap, ascending, each at least 1."""
    return tuple(sorted({max(1, budget_k(b, n)) for b in budgets} | {k_cap}))


def next_point(spec: LiveSpec, universe: Universe, k: int, k_cap: int) -> int | None:
    """The smallest budget point ``k' > k`` (grid points and the cap, at most the cap) at
    which coverage is feasible; else the largest point ``> k`` within the cap; else None."""
    points = [p for p in budget_points(spec.budgets, universe.n, k_cap) if k < p <= k_cap]
    if not points:
        return None
    for p in points:
        if universe.required(spec.floor, p).sum() <= p:
            return p
    return points[-1]


def deal_slots(deficit: np.ndarray, room: np.ndarray, n: int, slots: int) -> np.ndarray:
    """Slots per group when ``slots`` are handed out one by one, each to the group with the
    largest ``deficit`` among those with ``room`` left (ties: the lower group index), a pick
    lowering its group's deficit by ``n``. A group's deficits fall with each pick, so the picks
    are the ``slots`` largest ``(deficit − j·n, −g)`` over groups and picks ``j``: a heap."""
    extra = [0] * len(deficit)
    room_l = room.tolist()
    heap = [(-d, g) for g, d in enumerate(deficit.tolist()) if room_l[g] > 0]
    heapq.heapify(heap)
    for _ in range(slots):
        if not heap:
            break
        neg, g = heapq.heappop(heap)
        extra[g] += 1
        if extra[g] < room_l[g]:
            heapq.heappush(heap, (neg + n, g))
    return np.array(extra, dtype=np.int64)


def group_order(universe: Universe, seed: int) -> np.ndarray:
    """The universe's tasks by group, and within a group by ``default_priority(universe, seed)``; kept
    on the universe (read-only), which outlives the request, for ``SEEDS_KEPT`` seeds."""
    cache = universe.__dict__.setdefault("_group_order", {})
    if seed not in cache:
        if len(cache) >= SEEDS_KEPT:
            cache.clear()
        order = np.lexsort((default_priority(universe, seed), universe.labels))
        order.flags.writeable = False
        cache[seed] = order
    return cache[seed]


def next_tasks(universe: Universe, observed: Observed, spec: LiveSpec, priority: np.ndarray | None,
               k_cap: int) -> dict[str, object] | None:
    """Which unobserved tasks to run so that coverage is met at the next budget point.

    Each group first gets what it lacks of ``r_g(k')``; remaining slots (up to ``k' - k``)
    go one by one to the group furthest below its exact share ``k'·n_g/N`` (ties: lower
    group index). Within a group, tasks already half-done (one system observed) come
    first, then by ``priority``. Task ids are interleaved across groups by the position of
    each pick within its group.
    """
    n = universe.n
    n_g = universe.n_g
    k = observed.k
    kp = next_point(spec, universe, k, k_cap)
    if kp is None:
        return None
    labels = universe.labels
    observed_mask = np.zeros(n, dtype=bool)
    observed_mask[observed.sequence] = True
    have = np.bincount(labels[observed.sequence], minlength=len(n_g))
    avail = n_g - have
    req = universe.required(spec.floor, kp)
    need = np.minimum(np.maximum(req - have, 0), avail)
    slots = kp - k - int(need.sum())
    alloc = need + deal_slots(kp * n_g - (have + need) * n, avail - need, n, slots) if slots > 0 else need
    # candidates by group: unobserved, half-done first, then by priority
    order = group_order(universe, spec.seed) if priority is None else np.lexsort((priority, labels))
    free = ~observed_mask[order]
    cand, cand_labels = order[free], labels[order[free]]
    half = ((observed.trials_a > 0) | (observed.trials_b > 0))[cand]
    if half.any():  # half-done first within each group (the sort is stable: priority order stays)
        first = np.argsort(cand_labels * 2 + ~half, kind="stable")
        cand, cand_labels = cand[first], cand_labels[first]
    starts = np.concatenate(([0], np.cumsum(np.bincount(cand_labels, minlength=len(n_g)))))
    picks: list[tuple[float, int, int]] = []
    groups = []
    task_ids, names = universe.task_ids, universe.group_names
    for g, (run, missing) in enumerate(zip(alloc.tolist(), need.tolist(), strict=True)):
        if run == 0 and missing == 0:
            continue
        tasks_g = cand[starts[g] : starts[g] + run].tolist()
        groups.append({"group": names[g], "missing": missing, "run": run, "task_ids": [task_ids[t] for t in tasks_g]})
        picks.extend(((j + 1) / (run + 1), g, t) for j, t in enumerate(tasks_g))
    picks.sort()
    return {
        "k": kp,
        "budget_fraction": _clean(kp / n),
        "feasible": bool(req.sum() <= kp),
        "reachable": bool(np.all(req - have <= avail) and int(need.sum()) <= kp - k),
        "groups": groups,
        "task_ids": [task_ids[t] for _, _, t in picks],
    }


__all__ = ["budget_points", "deal_slots", "default_priority", "group_order", "next_point", "next_tasks",
           "recommended_order"]
