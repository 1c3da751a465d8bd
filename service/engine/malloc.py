"""Keep freed memory in processes that replay, instead of handing it back to the kernel.

A replay allocates and frees arrays of tens of MB for every block of cases. With glibc's
defaults such arrays get mappings of their own (past a threshold that only grows to 32 MB)
and the heap gives its top back past 128 kB, so each block faults in, and the kernel zeroes,
its pages again. On the 134 x 500 board (benchmarks/service_replay.py) that was 530,000 page
faults and 2 s of kernel time in an 11 s replay, and two replays side by side (two Celery
workers on two cores) each took 1.2x their time alone: the zeroing is memory traffic that
the cores share. Keeping freed memory: 59,000 faults, 0.2 s, and 1.04x side by side.

The cost is that a process holds on to its peak heap (the board: 456 against 430 MB at
peak; the footprint limits bound it). This is set only by the processes that exist to
replay (``sufficiency replay``, Celery workers, ``--jobs`` pools), never on import, and an
operator who sets glibc's ``MALLOC_*`` variables keeps them. Elsewhere than glibc it does
nothing.

The pages themselves are still faulted in once, on the first replay of each process, 4 kB at a
time. So the heap's first ``_HUGE_HEAP`` is marked for transparent huge pages (``madvise``:
where the kernel offers them only on request, as on this host), and every thread allocates from
that heap (one arena: a threaded replay's blocks otherwise come from each thread's own), so a
first replay faults 2 MB at a time. Only what is touched becomes resident, as before. Twelve
fresh processes each (2026-12-05, two threads, exact bootstrap, medians):
terminal_bench_core_0.1.1 24,700 -> 410 faults, 0.049 -> 0.022 s of system time, CPU 0.450 ->
0.397 s; terminal_bench_1_fractional 25,400 -> 900 faults, 0.058 -> 0.028 s, CPU 1.54 -> 1.50 s
(the least of each: 1.23 against 1.35; the host was noisy); swebench_lite 13,600 -> 1,300.
"""

from __future__ import annotations

import ctypes
import os
import platform

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8
_KEEP = 1 << 30
"""Bytes: arrays up to 1 GiB come from the heap, and up to 1 GiB of free heap top is kept."""
_MADV_HUGEPAGE = 14
_HUGE_PAGE = 2 << 20
_HUGE_HEAP = 512 << 20
"""Bytes of heap (address space, not memory) marked for huge pages: above a replay's blocks
(the 134 x 500 board's workers peak at some 310 MB in all)."""

_done = False


def keep_freed_memory() -> bool:
    """Tune glibc's malloc for this process (idempotent); True when the setting is in force."""
    global _done
    if _done:
        return True
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    if any(v in os.environ for v in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES")):
        return False
    libc = ctypes.CDLL(None)
    mallopt = getattr(libc, "mallopt", None)
    if mallopt is None:
        return False
    _done = bool(mallopt(_M_MMAP_THRESHOLD, _KEEP)) and bool(mallopt(_M_TRIM_THRESHOLD, _KEEP))
    if _done and mallopt(_M_ARENA_MAX, 1):
        _huge_heap(libc)
    return _done


def _huge_heap(libc: ctypes.CDLL) -> bool:
    """Grow the heap by ``_HUGE_HEAP`` (untouched: no memory), mark its whole huge pages for
    transparent huge pages and free it again: kept (the trim threshold), it is where the next
    allocations come from. False where the kernel or the allocator says no (nothing changes)."""
    malloc, free, madvise = libc.malloc, libc.free, getattr(libc, "madvise", None)
    if madvise is None:
        return False
    malloc.restype, malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    free.restype, free.argtypes = None, [ctypes.c_void_p]
    madvise.restype, madvise.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    start = malloc(_HUGE_HEAP)
    if not start:
        return False
    try:
        first = -(-start // _HUGE_PAGE) * _HUGE_PAGE
        end = (start + _HUGE_HEAP) // _HUGE_PAGE * _HUGE_PAGE
        return madvise(first, end - first, _MADV_HUGEPAGE) == 0
    finally:
        free(start)


__all__ = ["keep_freed_memory"]
