"""Budgets and coverage floors (SPEC §3).

``n_g`` is the number of tasks of each group in the pair's task set ``T`` (``N = sum n_g``).
The floor ``r_g(k)`` is how many tasks of group ``g`` a subset of ``k`` tasks must hold;
coverage is feasible at ``k`` iff ``sum_g r_g(k) <= k``.
"""

from __future__ import annotations

import math

import numpy as np

FLOORS = ("proportional", "slack", "one_per_group", "none")


def budget_k(b: float, n: int) -> int:
    """Tasks observed at budget fraction ``b``: ``ceil(b·N)``, guarded against float error."""
    return max(0, min(n, math.ceil(b * n - 1e-9)))


def required(floor: str, k: int | np.ndarray, n_g: np.ndarray) -> np.ndarray:
    """``r_g(k)`` for every group; ``k`` may be an array (result ``[len(k), G]``)."""
    n_g = np.asarray(n_g, dtype=np.int64)
    big_n = int(n_g.sum())
    kk = np.asarray(k, dtype=np.int64)
    scalar = kk.ndim == 0
    kk = np.atleast_1d(kk)[:, None]
    if floor == "proportional":
        r = np.maximum(1, np.minimum(n_g, (kk * n_g) // big_n))
    elif floor == "slack":
        r = np.maximum(1, np.minimum(n_g, (kk * n_g) // big_n - 1))
    elif floor == "one_per_group":
        r = np.ones((len(kk), len(n_g)), dtype=np.int64)
    elif floor == "none":
        r = np.zeros((len(kk), len(n_g)), dtype=np.int64)
    else:
        raise ValueError(f"unknown floor '{floor}'")
    # A group with no task in T needs nothing (cannot happen when n_g comes from T).
    r = np.where(n_g[None, :] > 0, r, 0)
    return r[0] if scalar else r


def feasible(floor: str, k: int | np.ndarray, n_g: np.ndarray) -> np.ndarray | bool:
    """Coverage is feasible at ``k`` iff ``sum_g r_g(k) <= k``."""
    r = required(floor, k, n_g)
    if np.ndim(k) == 0:
        return bool(r.sum() <= int(k))
    return r.sum(axis=1) <= np.asarray(k)


def meets(floor: str, k: int, n_g: np.ndarray, counts: np.ndarray) -> np.ndarray | bool:
    """Whether observed group counts (``[..., G]``, ``k`` tasks each) meet coverage."""
    r = required(floor, k, n_g)
    if r.sum() > k:
        return False if np.ndim(counts) == 1 else np.zeros(np.shape(counts)[:-1], dtype=bool)
    return np.all(np.asarray(counts) >= r, axis=-1)
