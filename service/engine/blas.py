"""One BLAS thread in processes that replay alongside others.

The engine's matrix products are many and small. Where several replay processes (Celery
workers, ``--jobs`` pools) or the API's job threads share the cores, OpenBLAS's own threads
wait for busy cores by spinning: on a loaded two-core host a fractional-records replay took 3x
the wall time and the CPU of the same replay on one thread (benchmarks/multitrial_speed.py).
Parallelism comes from the processes instead. A lone replay on an idle machine (the CLI with
``--jobs 1``) keeps the default.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from threadpoolctl import ThreadpoolController, threadpool_limits

_limit: threadpool_limits | None = None
_controller: tuple[int, ThreadpoolController] | None = None


def one_blas_thread() -> None:
    """Limit BLAS to one thread in this process, for the rest of its life (idempotent).

    ``threadpool_limits`` reaches the libraries loaded so far, so numpy's and scipy's BLAS are
    loaded first; the environment variables cover any loaded later and child processes. An
    operator who sets ``OPENBLAS_NUM_THREADS`` chooses for themselves: nothing changes then."""
    global _limit
    if _limit is None and "OPENBLAS_NUM_THREADS" not in os.environ:
        for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ.setdefault(var, "1")
        import numpy  # noqa: F401
        import scipy.linalg  # noqa: F401  (scipy may bundle its own BLAS)

        _limit = threadpool_limits(limits=1, user_api="blas")


@contextmanager
def blas_single_thread() -> Iterator[None]:
    """One BLAS thread for a stretch of small matrix products, then the process's setting
    again. OpenBLAS hands each product to its threads, which then spin for a while after it;
    where the work between products is not BLAS (``run_chunk`` on lattice-valued records:
    products of tens of pairs, then the lattice bootstrap), they only burn a core: on
    terminal_bench_1_fractional one thread gave the same wall time for 25-40 % less CPU."""
    with _blas_controller().limit(limits=1, user_api="blas"):
        yield


def _blas_controller() -> ThreadpoolController:
    """The thread pools of the libraries loaded so far, looked up once: ``threadpool_limits``
    looks them up at every call (1.6 ms; a few calls per replay, 2-3 % of a small multi-trial
    one). Looked up again once more modules have been imported, one of which may have loaded
    another BLAS (scipy bundles its own)."""
    global _controller
    n_modules = len(sys.modules)
    if _controller is None or _controller[0] != n_modules:
        _controller = (n_modules, ThreadpoolController())
    return _controller[1]


__all__ = ["blas_single_thread", "one_blas_thread"]
