"""Keep-alive connections spread evenly over ``sufficiency serve``'s worker processes.

Each worker listens on its own ``SO_REUSEPORT`` socket (``service.serving``), and the kernel
picks the worker of a new connection by a hash of its address pair. A harness keeps its
connection for the whole run, so an uneven draw lasts: of 32 connections, a 20 / 12 split
was measured (``ss -tnp`` during the load benchmark), and the worker with more queues each
request behind more others.

So the workers share one counter each (an array in shared memory, written by its owner,
read by all): the connections it holds and will keep. When a request arrives on a worker
that holds at least two more than the least loaded one, its response says
``Connection: close`` and the connection ends after it; the client opens a new one (every
HTTP/1.1 client must), which the kernel hashes afresh. Only while the difference is two or
more, so the split settles within one and stays there; only connections open for
``MIN_AGE_S`` (a burst of new connections is still arriving, and the counts it leaves on the
way are not the split), and one at a time per worker, ``INTERVAL_S`` apart (the next decision
sees where the last connection went). Without the two, a load client's 32 connections opened
at once were shed 11-33 times in their first 0.1 s, each a reconnect at the busiest moment.
Nothing is lost: the request is answered in full. (A client that pipelines requests must
send again those the close left unanswered, as HTTP/1.1 requires of it; no harness client does.)
"""

from __future__ import annotations

import time
from collections.abc import Callable, MutableSequence

SPREAD = 2
"""A worker this many connections above the least loaded one sheds one."""
MIN_AGE_S = 1.0
"""A connection younger than this is not shed."""
INTERVAL_S = 0.1
"""A worker sheds at most one connection in this time."""


NOT_SERVING = -1
"""The slot of a worker that is not listening (starting, or dead until restarted): a
connection shed towards it would come back to the same workers, so it does not count."""


class ConnectionShare:
    """This worker's slot in the shared counters: opened and lost connections, and the
    decision to shed one (the counter counts only connections the worker keeps, so the
    others see a shed connection gone at once). Made once the worker's socket listens."""

    def __init__(self, counts: MutableSequence[int], index: int, clock: Callable[[], float] = time.monotonic):
        self.counts, self.index, self.clock = counts, index, clock
        self.kept = 0
        self.last_shed = -INTERVAL_S
        counts[index] = 0  # a restarted worker starts with none; its predecessor's are gone

    def opened(self) -> None:
        self.kept += 1
        self.counts[self.index] = self.kept

    def lost(self, shed: bool) -> None:
        if not shed:  # a shed connection left the count when it was shed
            self.kept -= 1
            self.counts[self.index] = self.kept

    def shed(self, opened_at: float) -> bool:
        """Whether to close the connection (opened at ``opened_at`` on ``clock``) of the request
        now arriving, after its response (and if so, it no longer counts)."""
        now = self.clock()
        if now - opened_at < MIN_AGE_S or now - self.last_shed < INTERVAL_S:
            return False
        others = [c for i, c in enumerate(self.counts) if i != self.index and c != NOT_SERVING]
        if not others or self.kept - min(others) < SPREAD:
            return False
        self.kept -= 1
        self.counts[self.index] = self.kept
        self.last_shed = now
        return True


_SHARE: ConnectionShare | None = None


def install(counts: MutableSequence[int], index: int) -> None:
    """Called by a worker of ``sufficiency serve`` once its socket listens: its slot is ``index``."""
    global _SHARE
    _SHARE = ConnectionShare(counts, index)


def current() -> ConnectionShare | None:
    """This process's share, or ``None`` when it serves alone (one worker, tests, uvicorn's own)."""
    return _SHARE
