"""``service.connection_share``: the counters that even out connections over workers.

Several workers' shares over one list (as over the shared array): each keeps its own count,
sheds a connection only while it holds two or more above the least loaded, and a shed
connection leaves the count when shed, not again when it is lost.
"""

from __future__ import annotations

import random

from service.connection_share import NOT_SERVING, ConnectionShare


def test_a_worker_two_above_the_least_loaded_sheds_one() -> None:
    counts = [0, 0]
    a, b = ConnectionShare(counts, 0), ConnectionShare(counts, 1)
    for _ in range(3):
        a.opened()
    b.opened()
    assert counts == [3, 1]
    assert not b.shed()  # below the other: never
    assert a.shed() and counts == [2, 1]  # 3 - 1 >= 2
    assert not a.shed()  # 2 - 1 < 2
    a.lost(shed=True)  # the shed connection closes: already out of the count
    assert counts == [2, 1]
    a.lost(shed=False)
    assert counts == [1, 1]


def test_a_restarted_worker_starts_from_zero() -> None:
    counts = [5, 2]
    ConnectionShare(counts, 0)
    assert counts == [0, 2]


def test_one_worker_alone_never_sheds() -> None:
    share = ConnectionShare([0], 0)
    for _ in range(10):
        share.opened()
    assert not share.shed()


def test_random_hashing_with_shedding_settles_within_one() -> None:
    """Connections hashed to random workers; each request on an over-loaded worker sheds its
    connection, which the client opens again (hashed afresh): the split ends within one, and
    no connection is lost."""
    rng = random.Random(7)
    for workers in (2, 3, 4):
        counts = [0] * workers
        shares = [ConnectionShare(counts, i) for i in range(workers)]
        conns = []
        for _ in range(32):
            w = rng.randrange(workers)
            shares[w].opened()
            conns.append(w)
        for _ in range(50):  # rounds of one request per connection
            for i, w in enumerate(conns):
                if shares[w].shed():
                    shares[w].lost(shed=True)
                    conns[i] = rng.randrange(workers)
                    shares[conns[i]].opened()
        assert sum(counts) == 32 and max(counts) - min(counts) <= 1, counts
        assert counts == [conns.count(w) for w in range(workers)]


def test_a_worker_not_serving_draws_no_connections() -> None:
    """While the other worker starts or is dead (its slot ``NOT_SERVING``), a shed connection
    would come straight back: so none is shed, however many this worker holds."""
    counts = [NOT_SERVING, NOT_SERVING]
    share = ConnectionShare(counts, 0)
    for _ in range(10):
        share.opened()
    assert not share.shed()
    ConnectionShare(counts, 1)  # the other listens now, with none
    assert share.shed() and counts == [9, 0]
    counts[1] = NOT_SERVING  # and died: the supervisor marks its slot
    assert not share.shed()
