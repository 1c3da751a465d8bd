"""Keep-alive connections spread evenly over ``sufficiency serve``'s worker processes.

Each worker listens on its own ``SO_REUSEPORT`` socket (``service.serving``), and the kernel
picks the worker of a new connection by a hash of its address pair. A harness keeps its
connection for the whole run, so an uneven draw lasts: of 32 connections, 20 / 12 and
19 / 13 splits were measured, and the worker with more queues each request behind more
others (its p99 sets the deployment's).

So the workers share one counter each (an array in shared memory, written by its owner,
read by all): the connections it holds and will keep. When a request arrives on a worker
that holds at least two more than the least loaded one, its response says
``Connection: close`` and the connection ends after it; the client opens a new one (every
HTTP/1.1 client must), which the kernel hashes afresh. One connection at a time, and only
while the difference is two or more, so the split settles within one and stays there.
Nothing is lost: the request is answered in full. (A client that pipelines requests must
send again those the close left unanswered, as HTTP/1.1 requires of it; no harness client does.)
"""

from __future__ import annotations

from collections.abc import MutableSequence

SPREAD = 2
"""A worker this many connections above the least loaded one sheds one."""


NOT_SERVING = -1
"""The slot of a worker that is not listening (starting, or dead until restarted): a
connection shed towards it would come back to the same workers, so it does not count."""


class ConnectionShare:
    """This worker's slot in the shared counters: opened and lost connections, and the
    decision to shed one (the counter counts only connections the worker keeps, so the
    others see a shed connection gone at once). Made once the worker's socket listens."""

    def __init__(self, counts: MutableSequence[int], index: int):
        self.counts, self.index = counts, index
        self.kept = 0
        counts[index] = 0  # a restarted worker starts with none; its predecessor's are gone

    def opened(self) -> None:
        self.kept += 1
        self.counts[self.index] = self.kept

    def lost(self, shed: bool) -> None:
        if not shed:  # a shed connection left the count when it was shed
            self.kept -= 1
            self.counts[self.index] = self.kept

    def shed(self) -> bool:
        """Whether to close the connection of the request now arriving after its response
        (and if so, it no longer counts)."""
        others = [c for i, c in enumerate(self.counts) if i != self.index and c != NOT_SERVING]
        if not others or self.kept - min(others) < SPREAD:
            return False
        self.kept -= 1
        self.counts[self.index] = self.kept
        return True


_SHARE: ConnectionShare | None = None


def install(counts: MutableSequence[int], index: int) -> None:
    """Called by a worker of ``sufficiency serve`` once its socket listens: its slot is ``index``."""
    global _SHARE
    _SHARE = ConnectionShare(counts, index)


def current() -> ConnectionShare | None:
    """This process's share, or ``None`` when it serves alone (one worker, tests, uvicorn's own)."""
    return _SHARE
