"""A small bounded LRU mapping, safe to share between threads.

The service keeps a few derived things per process (parsed datasets, plans, decoded pair
tables, rendered figures): each is fixed once computed, and a request or a worker thread
may ask for it. One class bounds them all by entry count, evicting the least recently used
first; a hit refreshes an entry, a miss costs nothing. A missing value is computed outside
the map's lock. Where that is costly (parsing a dataset) ``get_or_load`` computes it once
while the threads that miss meanwhile wait for it: a worker's first second under load, every
connection asking for the same dataset at once, parsed it 16 times over, holding the GIL
from the event loop. Elsewhere two threads may compute the same value once each and the
second ``put`` wins, which is harmless for values that never change.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from threading import Lock
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LRU(Generic[K, V]):
    """At most ``size`` entries; ``get`` and ``put`` make an entry the most recent.

    ``weigh(key, value)`` and ``max_weight``: entries also fit within ``max_weight`` together
    (the newest is always kept), for values whose size the request chooses: 32 universes of a
    4 MiB body each would be about half a gigabyte."""

    def __init__(self, size: int, weigh: Callable[[K, V], int] | None = None, max_weight: int | None = None):
        if size < 1:
            raise ValueError(f"an LRU holds at least 1 entry, not {size}")
        if (weigh is None) != (max_weight is None):
            raise ValueError("give both weigh and max_weight, or neither")
        self.size = size
        self._items: OrderedDict[K, V] = OrderedDict()
        self._lock = Lock()
        self._loads = tuple(Lock() for _ in range(16))
        self._weigh, self.max_weight = weigh, max_weight
        self._weights: dict[K, int] = {}
        self.weight = 0

    def get(self, key: K) -> V | None:
        """The value of ``key`` (``None`` when absent), now the most recently used."""
        with self._lock:
            if key not in self._items:
                return None
            self._items.move_to_end(key)
            return self._items[key]

    def put(self, key: K, value: V) -> None:
        w = self._weigh(key, value) if self._weigh is not None else 0
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            self.weight += w - self._weights.get(key, 0)
            self._weights[key] = w
            while len(self._items) > self.size or (
                self.max_weight is not None and self.weight > self.max_weight and len(self._items) > 1
            ):
                gone, _ = self._items.popitem(last=False)
                self.weight -= self._weights.pop(gone, 0)

    def loading(self, key: K) -> Lock:
        """The lock under which a missing ``key`` is computed (striped: a few keys may share
        one), for callers that check again under it before they compute."""
        return self._loads[hash(key) % len(self._loads)]

    def get_or_load(self, key: K, load: Callable[[], V]) -> V:
        """The value of ``key``; on a miss ``load()``'s, computed once however many threads
        miss together (they wait for it, then find it)."""
        hit = self.get(key)
        if hit is not None:
            return hit
        with self.loading(key):
            hit = self.get(key)  # loaded while this thread waited
            if hit is None:
                hit = load()
                self.put(key, hit)
        return hit

    def pop(self, key: K) -> V | None:
        """Remove ``key`` (a value that must not be served again); its value or ``None``."""
        with self._lock:
            self.weight -= self._weights.pop(key, 0)
            return self._items.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._weights.clear()
            self.weight = 0

    def __contains__(self, key: object) -> bool:
        """Membership without refreshing the entry."""
        with self._lock:
            return key in self._items

    def __len__(self) -> int:
        with self._lock:  # not between a put's insert and its eviction (one entry over the bound)
            return len(self._items)

    def keys(self) -> list[K]:
        """The keys, least recently used first (a copy)."""
        with self._lock:
            return list(self._items)


__all__ = ["LRU"]
