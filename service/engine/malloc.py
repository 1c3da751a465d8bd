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
"""

from __future__ import annotations

import ctypes
import os
import platform

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_KEEP = 1 << 30
"""Bytes: arrays up to 1 GiB come from the heap, and up to 1 GiB of free heap top is kept."""

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
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    if mallopt is None:
        return False
    _done = bool(mallopt(_M_MMAP_THRESHOLD, _KEEP)) and bool(mallopt(_M_TRIM_THRESHOLD, _KEEP))
    return _done


__all__ = ["keep_freed_memory"]
