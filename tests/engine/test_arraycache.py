"""The byte-bounded memo (``arraycache``): what it keeps never passes its bound, the least
recently used goes first, and a value too large to keep is still returned."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

from service.engine.arraycache import BOUNDS, bounded_cache


def test_the_memo_keeps_at_most_its_bytes_least_recently_used_first() -> None:
    calls: list[int] = []

    @bounded_cache(3 * 800)
    def table(n: int) -> np.ndarray:
        calls.append(n)
        return np.full(100, float(n))  # 800 bytes

    assert table(1)[0] == 1.0 and table(2)[0] == 2.0 and table(3)[0] == 3.0
    assert table.cache_bytes() == 2400 and table.cache_len() == 3
    table(1)  # a hit: 1 is now the most recently used
    table(4)  # evicts 2, the least recently used
    assert table.cache_bytes() == 2400 and calls == [1, 2, 3, 4]
    table(1), table(3), table(4)
    assert calls == [1, 2, 3, 4]
    table(2)
    assert calls == [1, 2, 3, 4, 2]
    table.cache_clear()
    assert table.cache_bytes() == 0 and table.cache_len() == 0
    assert BOUNDS[f"{__name__}.{table.__qualname__}"] == 2400


def test_a_value_larger_than_the_bound_is_returned_not_kept() -> None:
    @bounded_cache(1000)
    def pair(n: int) -> tuple[np.ndarray, np.ndarray]:
        return np.zeros(n), np.ones(n)

    a, b = pair(100)  # 1,600 bytes
    assert len(a) == 100 and b.sum() == 100 and pair.cache_len() == 0
    pair(10)
    assert pair.cache_bytes() == 160 and pair.cache_len() == 1


def test_threads_share_the_memo_within_its_bound() -> None:
    @bounded_cache(50 * 8 * 64)
    def row(n: int) -> np.ndarray:
        return np.arange(64, dtype=np.float64) + n

    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda n: float(row(n % 120)[0]), range(4000)))
    assert got == [float(n % 120) for n in range(4000)]
    assert row.cache_bytes() <= 50 * 8 * 64 and row.cache_len() == row.cache_bytes() // (8 * 64)
