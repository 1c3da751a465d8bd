"""Sums of per-task values over each case's observed tasks, for a chunk of pairs (``chunk.py``).

A case observes the first ``k_j`` tasks of order ``r``; a rule needs, per pair, the sums of
its per-task values (differences, their squares, costs) over those tasks, for every order
and budget at once. With an order shared by all pairs that is one matrix product with a 0/1
observation matrix (``MatrixSummer``, kept across chunks by ``shared_summer``); with the
neyman draw each pair has its own allocation (``NeymanSummer``).
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict

import numpy as np

from service.engine.plan import Plan


def obs_matrix(order: np.ndarray, ks: np.ndarray) -> np.ndarray:
    """``[N, R·J]`` float32: task at position t is observed by order r at budget j."""
    rank = np.empty_like(order)
    reps, n = order.shape
    rank[np.arange(reps)[:, None], order] = np.arange(n)[None, :]
    obs = rank.T[:, :, None] < ks[None, None, :]
    return obs.reshape(n, -1).astype(np.float32)


class Summer:
    """Maps per-task values ``X [P, N]`` to their sums over each case's observed tasks
    ``[P, R, J]`` (``summer(x)``), and to those sums added over the orders ``[P, J]``
    (``rep_sums(x)``: what the cost tallies need, without the ``[P, R, J]`` array).
    ``shared``: every pair's case ``(r, j)`` observes the same tasks, so equal rows of ``X``
    have equal sums (the lattice bootstrap then computes a pair and its mirror once)."""

    reps: int
    shared = False

    def __call__(self, x: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def rep_sums(self, x: np.ndarray) -> np.ndarray:
        return self(x).sum(axis=1)

    def sum32(self, x: np.ndarray) -> np.ndarray:
        """``self(x)`` in float32, for sums of small integers (exact below 2**24)."""
        return self(x).astype(np.float32)


class MatrixSummer(Summer):
    """Sums through one matrix product with the observation matrix of a shared order; sums
    over the orders through its column totals (how many orders observe each task at each
    budget: ``R`` times fewer products)."""

    shared = True

    def __init__(self, order: np.ndarray, ks: np.ndarray):
        self.order, self.ks = order, ks  # what lattice_kernel.count_words counts along
        self.obs32 = obs_matrix(order, ks)
        self._obs64: np.ndarray | None = None
        self.reps, self.n_j = order.shape[0], len(ks)
        self.seen = self.obs32.reshape(len(self.obs32), self.reps, self.n_j).sum(axis=1, dtype=np.float64)  # [N, J]

    def __call__(self, x: np.ndarray) -> np.ndarray:
        if x.dtype == np.float64:  # costs and non-lattice values keep full precision
            if self._obs64 is None:
                self._obs64 = self.obs32.astype(np.float64)
            return (x @ self._obs64).reshape(len(x), self.reps, self.n_j)
        return self.sum32(x).astype(np.float64)

    def sum32(self, x: np.ndarray) -> np.ndarray:
        return (x.astype(np.float32) @ self.obs32).reshape(len(x), self.reps, self.n_j)

    def rep_sums(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(x, dtype=np.float64) @ self.seen


_SUMMERS: weakref.WeakKeyDictionary[Plan, OrderedDict[int, tuple[np.ndarray, MatrixSummer]]] = (
    weakref.WeakKeyDictionary()
)
_SUMMERS_KEPT = 2
_summers_lock = threading.Lock()


def shared_summer(plan: Plan, order: np.ndarray, ks: np.ndarray) -> MatrixSummer:
    """The summer of an order shared by all pairs, kept with its plan across chunks. A Celery
    worker replays chunk after chunk of one plan, and their observation matrix is the same
    (the 134 x 500 board: 19 MB built in 11 ms, for chunks of 100 ms); a few are kept, for
    the orders (``plan._orders`` returns the same array for the same order) met last."""
    with _summers_lock:
        kept = _SUMMERS.setdefault(plan, OrderedDict())
        hit = kept.get(id(order))
        if hit is not None and hit[0] is order:
            kept.move_to_end(id(order))
            return hit[1]
    summer = MatrixSummer(order, ks)
    with _summers_lock:
        kept[id(order)] = (order, summer)  # the order is held, so its id is not reused
        while len(kept) > _SUMMERS_KEPT:
            kept.popitem(last=False)
    return summer


class NeymanSummer(Summer):
    """Sums for neyman draws: the first ``alloc[p, j, g]`` tasks of each group's shuffled
    block, read off within-block prefix sums (the allocation is the pair's own)."""

    def __init__(self, within: np.ndarray, gstart: np.ndarray, alloc: np.ndarray):
        self.within, self.gstart = within, gstart
        self.reps, self.n = within.shape
        self.idx = gstart[None, None, :] + alloc  # [P, J, G]

    def __call__(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x)  # float32 lattice values sum exactly; costs stay float64
        csum = np.zeros((len(x), self.reps, self.n + 1), dtype=x.dtype)
        np.cumsum(x[:, self.within], axis=2, out=csum[:, :, 1:])
        out = np.empty((len(x), self.reps, self.idx.shape[1]))
        for p in range(len(x)):
            ends = csum[p][:, self.idx[p]]  # [R, J, G]
            out[p] = ends.sum(axis=2) - csum[p][:, self.gstart].sum(axis=1)[:, None]
        return out


__all__ = ["MatrixSummer", "NeymanSummer", "Summer", "obs_matrix", "shared_summer"]
