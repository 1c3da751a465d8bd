"""Task orders (SPEC §4.1). Every function draws ``R`` orders at once from the caller's
generator and returns positions into the pair's task list ``T``: ``order[r, i]`` is the
``i``-th task observed in order ``r``. Budget ``k`` observes ``order[r, :k]``.
"""

from __future__ import annotations

import sys

import numpy as np

from service.engine.coverage import required

INF = np.iinfo(np.int64).max // 4
COMPILED_STEPS_FROM = 200_000
"""Orders × tasks × groups from which ``stratified_orders`` takes its step loop compiled
(``orders_kernel``), in a process that has numba loaded already (a Celery worker, the API, a
multi-trial replay): below it, or without numba, the numpy loop. The same orders either way."""


def uniform_orders(n: int, reps: int, rng: np.random.Generator) -> np.ndarray:
    """``reps`` uniformly random permutations of ``range(n)``."""
    return np.argsort(rng.random((reps, n)), axis=1, kind="stable")


def cost_ascending_orders(cost: np.ndarray, reps: int, rng: np.random.Generator) -> np.ndarray:
    """Cheapest first by A's cost; ties in random order. ``cost`` must be complete."""
    cost = np.asarray(cost, dtype=np.float64)
    if np.isnan(cost).any():
        raise ValueError("cost_ascending needs a cost for every task of T")
    tie = rng.random((reps, len(cost)))
    return np.lexsort((tie, np.broadcast_to(cost, tie.shape)), axis=-1)


def due_dates(labels: np.ndarray, floor: str) -> np.ndarray:
    """``due[g, j-1]``: first feasible ``k`` with ``r_g(k) >= j`` (``INF`` if none).

    Only feasible budgets impose deadlines; that is exactly what the prefix guarantee
    promises, and the count of tasks due by any ``k`` never exceeds ``k`` (so EDF meets all).
    """
    n_g = np.bincount(labels)
    big_n = len(labels)
    ks = np.arange(1, big_n + 1)
    r = required(floor, ks, n_g)  # [N, G]
    feas = r.sum(axis=1) <= ks
    m = np.where(feas[:, None], r, 0)
    m = np.maximum.accumulate(m, axis=0)  # best floor demanded by any feasible k' <= k
    due = np.full((len(n_g), max(int(n_g.max()), 1)), INF, dtype=np.int64)
    for g in range(len(n_g)):
        j = np.arange(1, n_g[g] + 1)
        pos = np.searchsorted(m[:, g], j, side="left")
        due[g, : n_g[g]] = np.where(pos < big_n, pos + 1, INF)
    return due


def stratified_orders(labels: np.ndarray, floor: str, reps: int, rng: np.random.Generator) -> np.ndarray:
    """Within-group shuffles interleaved earliest-deadline-first (SPEC §4.1).

    Step ``k`` serves the group whose next task is due soonest, then the group furthest
    below its exact share ``k·n_g/N`` (compared in integers), then a random per-order group
    priority. Every prefix of length ``k`` then meets the floor whenever it is feasible at
    ``k``. Vectorised over the ``reps`` orders; the loop runs over the ``N`` steps.
    """
    labels = np.asarray(labels, dtype=np.intp)
    big_n = len(labels)
    n_g = np.bincount(labels)
    n_groups = len(n_g)
    due = due_dates(labels, floor)
    due_pad = np.concatenate([due, np.full((n_groups, 1), INF, dtype=np.int64)], axis=1)
    # Tasks grouped by label, shuffled within each group: sort by label + U[0,1).
    within = np.argsort(labels[None, :] + rng.random((reps, big_n)), axis=1, kind="stable")
    start = np.concatenate([[0], np.cumsum(n_g)[:-1]])
    prio = rng.random((reps, n_groups))
    if n_groups == 1:  # every step serves the one group: its shuffle is the order (the draws as below)
        return within.astype(np.intp, copy=False)
    if "numba" in sys.modules and reps * big_n * n_groups >= COMPILED_STEPS_FROM:
        from service.engine.orders_kernel import edf_orders

        return edf_orders(within, start, n_g, due_pad, prio)
    taken = np.zeros((reps, n_groups), dtype=np.int64)
    out = np.empty((reps, big_n), dtype=np.intp)
    rows = np.arange(reps)
    gidx = np.arange(n_groups)
    for k in range(1, big_n + 1):
        open_ = taken < n_g
        nxt = np.where(open_, due_pad[gidx[None, :], np.minimum(taken, due_pad.shape[1] - 1)], INF + 1)
        cand = nxt == nxt.min(axis=1, keepdims=True)
        # deficit·N = k·n_g - taken·N (integers); larger = further below share.
        deficit = np.where(cand, k * n_g[None, :] - taken * big_n, np.iinfo(np.int64).min)
        cand &= deficit == deficit.max(axis=1, keepdims=True)
        g = np.argmax(np.where(cand, prio, -1.0), axis=1)
        out[:, k - 1] = within[rows, start[g] + taken[rows, g]]
        taken[rows, g] += 1
    return out


def grouped_shuffles(labels: np.ndarray, reps: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """For neyman draws: tasks grouped by label, shuffled within groups, and group starts."""
    labels = np.asarray(labels, dtype=np.intp)
    n_g = np.bincount(labels)
    within = np.argsort(labels[None, :] + rng.random((reps, len(labels))), axis=1, kind="stable")
    return within, np.concatenate([[0], np.cumsum(n_g)[:-1]])


def largest_remainder(total: int, weights: np.ndarray, caps: np.ndarray) -> np.ndarray:
    """Share ``total`` in proportion to ``weights`` (largest remainder, ties to the lower
    group index), capped at ``caps``; overflow goes to the uncapped groups, and when no
    uncapped group has weight, in proportion to the remaining capacity."""
    weights = np.asarray(weights, dtype=np.float64)
    caps = np.asarray(caps, dtype=np.int64)
    alloc = np.zeros(len(caps), dtype=np.int64)
    left = int(min(total, caps.sum()))
    while left > 0:
        room = caps - alloc
        w = np.where(room > 0, weights, 0.0)
        if w.sum() <= 0:
            w = room.astype(np.float64)
        quota = left * w / w.sum()
        base = np.floor(quota + 1e-12).astype(np.int64)
        rest = left - int(base.sum())
        if rest > 0:
            frac = quota - base
            order = np.lexsort((np.arange(len(w)), -frac))
            base[order[:rest]] += 1
        add = np.minimum(base, room)
        alloc += add
        left -= int(add.sum())
    return alloc


def neyman_allocation(k: int, n_g: np.ndarray, s_g: np.ndarray, floor: str) -> np.ndarray:
    """Tasks per group at budget ``k`` (SPEC §4.1 ``neyman``): the floor first, the rest in
    proportion to ``n_g·S_g`` (to ``n_g`` when every ``S_g`` is 0), capped at ``n_g``.

    When the floor is infeasible at ``k`` it cannot be given; then all ``k`` tasks are
    shared in proportion to ``n_g`` (documented choice, the SPEC leaves it open).
    """
    n_g = np.asarray(n_g, dtype=np.int64)
    r = required(floor, k, n_g)
    if r.sum() > k:
        return largest_remainder(k, n_g.astype(np.float64), n_g)
    w = n_g * np.asarray(s_g, dtype=np.float64)
    if not np.any(w > 0):
        w = n_g.astype(np.float64)
    return r + largest_remainder(k - int(r.sum()), w, n_g - r)
