"""How a replay is cut into chunks (replays/service.chunk_bounds, limits.largest_chunk): big
replays start with large chunks and end with ``chunk_pairs``-sized ones; memory caps the
large ones; the report is the same however it is cut."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from service.engine.footprint import chunk_footprint
from service.engine.records import parse_records
from service.engine.replay import plan_replay
from service.engine.spec import make_spec
from service.limits import LARGEST_CHUNK_FACTOR, largest_chunk
from service.main import create_app
from service.replays.service import GUIDED_PARTS, chunk_bounds
from tests.service.conftest import SMALL_SPEC, make_settings, synth_csv
from tests.service.test_replays import _submit, upload, wait_for


@pytest.mark.parametrize(("n_pairs", "base", "top"), [(17_822, 200, 800), (90, 2, 8), (12, 4, 16), (1, 200, 800),
                                                      (5_000, 7, 7), (0, 5, 20)])
def test_chunks_cover_the_pairs_in_order_large_first_and_base_sized_last(n_pairs, base, top):
    bounds = chunk_bounds(n_pairs, base, top)
    if n_pairs == 0:
        assert bounds == []
        return
    assert [a for a, _ in bounds] == [0] + [b for _, b in bounds[:-1]]  # contiguous, in order
    assert bounds[-1][1] == n_pairs
    sizes = [b - a for a, b in bounds]
    assert all(s <= top for s in sizes) and all(s >= base for s in sizes[:-1])
    assert sizes == sorted(sizes, reverse=True)
    for (a, b) in bounds[:-1]:  # each takes 1/GUIDED_PARTS of what is left, within [base, top]
        assert b - a == min(top, max(base, (n_pairs - a) // GUIDED_PARTS))
    if n_pairs > GUIDED_PARTS * base and top > base:
        assert sizes[0] > base and sizes[-2] == base  # larger first, base-sized at the end
    assert chunk_bounds(n_pairs, base) == [(a, min(a + base, n_pairs)) for a in range(0, n_pairs, base)]


def test_the_largest_chunk_is_what_the_memory_limit_allows():
    plan = plan_replay(parse_records(synth_csv(n_systems=6), fmt="csv"),
                       make_spec(policies=["anytime_coverage"], deltas=[0, 5], orders=200))
    base = 10
    sizes = {f: chunk_footprint(plan, f * base).total for f in range(1, LARGEST_CHUNK_FACTOR + 1)}
    assert sizes[1] < sizes[2] < sizes[LARGEST_CHUNK_FACTOR]  # the anytime rule's arrays grow with the pairs
    assert largest_chunk(plan, make_settings(chunk_pairs=base)) == LARGEST_CHUNK_FACTOR * base
    between = make_settings(chunk_pairs=base, max_replay_memory_bytes=(sizes[2] + sizes[3]) // 2)
    assert largest_chunk(plan, between) == 2 * base
    assert largest_chunk(plan, make_settings(chunk_pairs=base, max_replay_memory_bytes=sizes[1])) == base


def test_a_replay_cut_into_growing_chunks_gives_the_report_of_equal_ones(backend: dict) -> None:
    content = synth_csv(seed=9, n_systems=10)  # 90 pairs
    bodies, counts = [], []
    for base, factor in ((2, 1), (2, LARGEST_CHUNK_FACTOR)):
        app = create_app(make_settings(**backend, chunk_pairs=base, runner_threads=2))
        with TestClient(app) as c, pytest.MonkeyPatch.context() as mp:
            mp.setattr("service.limits.LARGEST_CHUNK_FACTOR", factor)
            ds = upload(c, content)
            rid = _submit(c, ds["id"], **SMALL_SPEC)["id"]
            state = wait_for(c, rid)
            assert state["status"] == "succeeded"
            counts.append(state["n_chunks"])
            bodies.append(c.get(f"/v1/replays/{rid}/report").content)
    assert counts[0] == 45 and counts[1] < counts[0]
    assert bodies[0] == bodies[1]
