"""``npz.savez_fast``: archives that ``np.load`` reads as ``np.savez_compressed``'s, so results
stored before it (chunks of a replay running across an upgrade, pair tables) still load."""

from __future__ import annotations

import io

import numpy as np
import pytest

from service.engine.chunk import ChunkResult
from service.engine.npz import savez_fast


def test_savez_fast_round_trips_every_array_and_is_smaller_than_raw():
    rng = np.random.default_rng(0)
    arrays = {"a": rng.integers(0, 50, (300, 4, 19)).astype(np.int32), "b": rng.random(7), "s": np.array(["x", "yz"]),
              "n": 3}
    data = savez_fast(**arrays)
    with np.load(io.BytesIO(data), allow_pickle=False) as z:
        assert sorted(z.files) == sorted(arrays)
        for k, v in arrays.items():
            np.testing.assert_array_equal(z[k], v)
            assert z[k].dtype == np.asarray(v).dtype
    assert len(data) < arrays["a"].nbytes  # deflated
    with pytest.raises(ValueError):
        savez_fast(o=np.array([{}, None], dtype=object))


def test_a_chunk_result_stored_by_the_previous_format_still_loads():
    rng = np.random.default_rng(1)
    shape = (5, 2, 1, 3)
    res = ChunkResult(10, 15, *(rng.integers(0, 9, shape).astype(np.int32) for _ in range(4)), rng.random(shape),
                      rng.integers(0, 99, shape))
    buf = io.BytesIO()
    np.savez_compressed(buf, start=res.start, stop=res.stop, **{f: getattr(res, f) for f in res.FIELDS})
    for data in (buf.getvalue(), res.to_bytes()):
        back = ChunkResult.from_bytes(data)
        assert (back.start, back.stop) == (10, 15)
        for f in res.FIELDS:
            np.testing.assert_array_equal(getattr(back, f), getattr(res, f))
