"""``orders.stratified_orders``' step loop compiled (numba), for processes that have numba
loaded already (Celery workers, the API, replays of multi-trial records) and orders large
enough to repay this module's load.

Why: the numpy loop runs ``N`` steps of a dozen array operations over ``[orders, groups]``, so
its time is ``N`` times their fixed cost: 64 ms for 500 orders of the 134 × 500 × 12 board,
paid by each worker once per replay, and about 0.4 s for 2,000 tasks in 50 groups. Here each
order is one pass over its steps and groups. The arithmetic is the loop's (integer deadlines
and deficits, the first group of the highest priority among the tied), so the orders are the
same to the last index; tests/engine/test_orders_property.py compares them.
"""

from __future__ import annotations

import numpy as np

from service.engine.lattice_short import compiled
from service.engine.orders import INF

_CLOSED = INF + 1  # past any deadline: a group with no task left


@compiled
def edf_orders(within, start, n_g, due_pad, prio):  # pragma: no cover - compiled
    """``stratified_orders``' step loop: ``within`` the within-group shuffles ``[orders, N]``,
    ``start`` each group's first column there, ``due_pad`` the deadlines padded with ``INF``,
    ``prio`` the per-order group priorities ``[orders, groups]``."""
    reps, big_n = within.shape
    n_groups = len(n_g)
    last = due_pad.shape[1] - 1
    out = np.empty((reps, big_n), dtype=np.intp)
    taken = np.empty(n_groups, dtype=np.int64)
    for r in range(reps):
        taken[:] = 0
        for k in range(1, big_n + 1):
            best_due = _CLOSED
            for g in range(n_groups):
                if taken[g] < n_g[g]:
                    due = due_pad[g, min(taken[g], last)]
                    if due < best_due:
                        best_due = due
            best_deficit = np.iinfo(np.int64).min
            for g in range(n_groups):
                if taken[g] < n_g[g] and due_pad[g, min(taken[g], last)] == best_due:
                    deficit = k * n_g[g] - taken[g] * big_n
                    if deficit > best_deficit:
                        best_deficit = deficit
            pick = -1
            best_prio = -1.0
            for g in range(n_groups):
                if (taken[g] < n_g[g] and due_pad[g, min(taken[g], last)] == best_due
                        and k * n_g[g] - taken[g] * big_n == best_deficit and prio[r, g] > best_prio):
                    best_prio = prio[r, g]
                    pick = g
            out[r, k - 1] = within[r, start[pick] + taken[pick]]
            taken[pick] += 1
    return out


def warm() -> None:
    """Load (or compile) the kernel now, with the argument types ``stratified_orders`` passes."""
    edf_orders(np.array([[0, 1, 2]], dtype=np.intp), np.array([0, 1]), np.array([1, 2]),
               np.array([[1, 9], [2, 3]], dtype=np.int64), np.array([[0.5, 0.25]]))


warm()
