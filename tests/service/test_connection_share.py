"""``service.connection_share``: the counters that even out connections over workers.

Several workers' shares over one list (as over the shared array), on a clock the test moves:
each keeps its own count, sheds a connection only while it holds two or more above the least
loaded, only one old enough and one at a time, and a shed connection leaves the count when
shed, not again when it is lost.
"""

from __future__ import annotations

import random

from service.connection_share import INTERVAL_S, MIN_AGE_S, NOT_SERVING, ConnectionShare


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


OLD = 0.0
"""An opening time long before the clock's: the connection is old enough to shed."""


def test_a_worker_two_above_the_least_loaded_sheds_one() -> None:
    clock = Clock()
    counts = [0, 0]
    a, b = ConnectionShare(counts, 0, clock), ConnectionShare(counts, 1, clock)
    for _ in range(4):
        a.opened()
    b.opened()
    assert counts == [4, 1]
    assert not b.shed(OLD)  # below the other: never
    assert a.shed(OLD) and counts == [3, 1]  # 4 - 1 >= 2
    assert not a.shed(OLD)  # 3 - 1 >= 2, but one at a time
    clock.now += 1.5 * INTERVAL_S
    assert a.shed(OLD) and counts == [2, 1]
    clock.now += 1.5 * INTERVAL_S
    assert not a.shed(OLD)  # 2 - 1 < 2
    a.lost(shed=True)  # the shed connections close: already out of the count
    a.lost(shed=True)
    assert counts == [2, 1]
    a.lost(shed=False)
    assert counts == [1, 1]


def test_a_young_connection_is_kept() -> None:
    """A burst of connections is still arriving while its first ones ask: not shed yet."""
    clock = Clock()
    counts = [0, 0]
    a = ConnectionShare(counts, 0, clock)
    ConnectionShare(counts, 1, clock)
    for _ in range(5):
        a.opened()
    opened_at = clock.now
    clock.now += MIN_AGE_S / 2
    assert not a.shed(opened_at)
    clock.now += 0.6 * MIN_AGE_S
    assert a.shed(opened_at)


def test_a_restarted_worker_starts_from_zero() -> None:
    counts = [5, 2]
    ConnectionShare(counts, 0)
    assert counts == [0, 2]


def test_one_worker_alone_never_sheds() -> None:
    share = ConnectionShare([0], 0)
    for _ in range(10):
        share.opened()
    assert not share.shed(OLD)


def test_a_worker_not_serving_draws_no_connections() -> None:
    """While the other worker starts or is dead (its slot ``NOT_SERVING``), a shed connection
    would come straight back: so none is shed, however many this worker holds."""
    counts = [NOT_SERVING, NOT_SERVING]
    share = ConnectionShare(counts, 0)
    for _ in range(10):
        share.opened()
    assert not share.shed(OLD)
    ConnectionShare(counts, 1)  # the other listens now, with none
    assert share.shed(OLD) and counts == [9, 0]
    counts[1] = NOT_SERVING  # and died: the supervisor marks its slot
    assert not share.shed(OLD)


def test_random_hashing_with_shedding_settles_within_one() -> None:
    """Connections hashed to random workers; a request on an over-loaded worker sheds its
    connection (one per worker per interval), which the client opens again, hashed afresh:
    the split ends within one, and no connection is lost."""
    rng = random.Random(7)
    for workers in (2, 3, 4):
        clock = Clock()
        counts = [0] * workers
        shares = [ConnectionShare(counts, i, clock) for i in range(workers)]
        conns = []  # (worker, opened at)
        for _ in range(32):
            w = rng.randrange(workers)
            shares[w].opened()
            conns.append((w, clock.now))
        for _ in range(400):  # rounds of one request per connection, INTERVAL_S / 4 apart
            clock.now += INTERVAL_S / 4
            for i, (w, opened_at) in enumerate(conns):
                if shares[w].shed(opened_at):
                    shares[w].lost(shed=True)
                    conns[i] = (rng.randrange(workers), clock.now)
                    shares[conns[i][0]].opened()
        assert sum(counts) == 32 and max(counts) - min(counts) <= 1, counts
        assert counts == [[w for w, _ in conns].count(w) for w in range(workers)]
