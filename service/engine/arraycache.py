"""A memo of functions that return numpy arrays, bounded by the bytes it holds.

``functools.lru_cache`` bounds the number of entries, not their size. The Fourier tails'
tables (``lattice._tables``: ``[V, m]`` cosines and sines) grow with the lattice and the
tasks: on outcomes of step 1/100 over 1,000 tasks one replay left 41 of them, 187 MB, in the
process, and 256 entries of up to 420 MB each were allowed. A replay's footprint
(``footprint.py``) cannot count what earlier replays left behind, so these memos keep at most
``max_bytes`` each, the least recently used going first; a value larger than that is
returned without being kept.
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

F = TypeVar("F", bound=Callable[..., Any])

BOUNDS: dict[str, int] = {}
"""Each bounded memo's name and its bound: what a process can keep in them, at most."""


def _nbytes(value: object) -> int:
    if isinstance(value, np.ndarray):
        return value.nbytes
    if isinstance(value, tuple):
        return sum(_nbytes(v) for v in value)
    return 64


def bounded_cache(max_bytes: int) -> Callable[[F], F]:
    """Memoize a function of hashable positional arguments, keeping at most ``max_bytes`` of
    its results (arrays, or tuples of them). Thread-safe: a replay's threads share it, and two
    threads that miss the same key both compute it (the same value)."""

    def wrap(fn: F) -> F:
        entries: OrderedDict[tuple, tuple[object, int]] = OrderedDict()
        lock = threading.Lock()
        held = 0

        @functools.wraps(fn)
        def cached(*args: object) -> object:
            nonlocal held
            with lock:
                hit = entries.get(args)
                if hit is not None:
                    entries.move_to_end(args)
                    return hit[0]
            value = fn(*args)
            size = _nbytes(value)
            if size > max_bytes:
                return value
            with lock:
                if args not in entries:
                    entries[args] = (value, size)
                    held += size
                    while held > max_bytes:
                        _, (_, gone) = entries.popitem(last=False)
                        held -= gone
            return value

        def cache_clear() -> None:
            nonlocal held
            with lock:
                entries.clear()
                held = 0

        cached.cache_clear = cache_clear  # type: ignore[attr-defined]
        cached.cache_bytes = lambda: held  # type: ignore[attr-defined]
        cached.cache_len = lambda: len(entries)  # type: ignore[attr-defined]
        BOUNDS[f"{fn.__module__}.{fn.__qualname__}"] = max_bytes
        return cached  # type: ignore[return-value]

    return wrap


def bound_total() -> int:
    """The bytes every bounded memo of the process may hold together."""
    return sum(BOUNDS.values())


__all__ = ["BOUNDS", "bound_total", "bounded_cache"]
