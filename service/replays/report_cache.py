"""Finished reports kept in memory and served like static files.

A report never changes once its replay has succeeded, and harnesses and dashboards fetch the
same few again and again. Read from the database each time, a fetch is a thread hop and a
dozen ORM steps, each of which waits for the GIL behind whatever the event loop is computing
(decisions): hundreds of milliseconds under load for a 100 kB body. Here the encoded bytes
and their ETag are kept per process, bounded in bytes, and answered from the event loop.

An entry remembers its replay's owner, so a key of another owner is not served from it (as
the database scope would not find the row). Entries are checked against the database again
after ``ttl`` seconds: a replay deleted through another process stops being served by then
(one deleted through this process stops at once: ``CACHE.forget``).
"""

from __future__ import annotations

import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from threading import Lock


@dataclass(frozen=True)
class CachedReport:
    owner: str | None
    etag: str
    body: bytes
    expires: float


class ReportCache:
    def __init__(self, max_bytes: int, ttl: float = 30.0):
        self.max_bytes, self.ttl = max_bytes, ttl
        self._items: OrderedDict[tuple[uuid.UUID, str], CachedReport] = OrderedDict()
        self._bytes = 0
        self._lock = Lock()

    def get(self, replay_id: uuid.UUID, kind: str, owner: str | None) -> CachedReport | None:
        """The entry, if fresh and visible to ``owner`` (``None``: no principal, sees all)."""
        with self._lock:
            hit = self._items.get((replay_id, kind))
            if hit is None or hit.expires < time.monotonic():
                return None
            if owner is not None and hit.owner != owner:
                return None
            self._items.move_to_end((replay_id, kind))
            return hit

    def put(self, replay_id: uuid.UUID, kind: str, owner: str | None, etag: str, body: bytes) -> None:
        if self.max_bytes <= 0 or len(body) > self.max_bytes // 4:  # a few big reports must not flush everything else
            return
        entry = CachedReport(owner, etag, body, time.monotonic() + self.ttl)
        with self._lock:
            old = self._items.pop((replay_id, kind), None)
            self._bytes -= len(old.body) if old else 0
            self._items[(replay_id, kind)] = entry
            self._bytes += len(body)
            while self._bytes > self.max_bytes and self._items:
                _, dropped = self._items.popitem(last=False)
                self._bytes -= len(dropped.body)

    def forget(self, replay_ids: list[uuid.UUID]) -> None:
        with self._lock:
            for key in [k for k in self._items if k[0] in set(replay_ids)]:
                self._bytes -= len(self._items.pop(key).body)


CACHE = ReportCache(64 * 1024 * 1024)
"""This process's cache (replay ids are unique, so the apps a test process builds can share
it; the route sets its size from ``Settings.report_cache_bytes``)."""


def not_modified(if_none_match: str | None, etag: str) -> bool:
    """``If-None-Match`` names ``etag`` (weak or strong) or is ``*``."""
    if not if_none_match:
        return False
    tags = {t.strip().removeprefix("W/") for t in if_none_match.split(",")}
    return "*" in tags or etag in tags


__all__ = ["CACHE", "CachedReport", "ReportCache", "not_modified"]
