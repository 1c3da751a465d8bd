"""The submission estimate's sample (service/replays/estimate.py), on a fake clock: the second
run of the sample is the rate that scales; what the first run paid more is counted a bounded
number of times, not scaled by the orders and chunks."""

from __future__ import annotations

import pytest

from service import examples
from service.engine import replay as engine_replay
from service.engine.records import load_records
from service.engine.replay import plan_replay
from service.engine.spec import make_spec
from service.replays import estimate


def test_from_sample_scales_the_second_run_and_counts_the_first_runs_extra_once(monkeypatch):
    plan = plan_replay(load_records(str(examples.path())), make_spec(policies=["coverage_bootstrap"], orders=500))
    clock = [0.0]
    runs: list[tuple[int, int, int]] = []
    took = iter([0.0, 10.0, 2.0])  # the warm-up pair, the first run, the second run

    def fake_run_chunk(small, start, stop, progress=None):
        runs.append((small.spec.orders, start, stop))
        clock[0] += next(took)

    monkeypatch.setattr(engine_replay, "run_chunk", fake_run_chunk)
    monkeypatch.setattr(estimate.time, "thread_time", lambda: clock[0])
    m = min(plan.n_pairs, 5)  # chunks of 5 pairs: the rate is scaled by pairs / m, the extra is not
    got = estimate.from_sample(plan, m)
    s = estimate.SAMPLE_ORDERS
    assert runs == [(s, 0, 1), (s, 0, m), (s, 0, m)]  # 500 orders sampled at SAMPLE_ORDERS
    scale = 500 / s
    want = 2.0 * scale * plan.n_pairs / m + (10.0 - 2.0) * min(scale, estimate.ONE_TIME_GROWTH)
    assert got == pytest.approx(want)
    # the old rule, the first run scaled whole, would have said 10 x scale x pairs / m
    assert got < 10.0 * scale * plan.n_pairs / m / 3


def test_from_sample_counts_the_cpu_its_thread_spent_not_the_time_it_waited(monkeypatch):
    """Workers on the API's cores slow the sample down; the waiting is not replay time. Each
    sampled run here waits 0.2 s and computes almost nothing: a wall clock would say at
    least 0.2 x (500 / SAMPLE_ORDERS) x pairs / 40 seconds."""
    import time

    plan = plan_replay(load_records(str(examples.path())), make_spec(policies=["coverage_bootstrap"], orders=500))

    def waiting_run_chunk(small, start, stop, progress=None):
        time.sleep(0.2)

    monkeypatch.setattr(engine_replay, "run_chunk", waiting_run_chunk)
    m = min(plan.n_pairs, 40)
    wall_would_say = 0.2 * (500 / estimate.SAMPLE_ORDERS) * plan.n_pairs / m
    assert estimate.from_sample(plan, m) < wall_would_say / 20


BIG = {"policies": ["coverage_bootstrap"], "deltas": [0], "orders": 1000, "groups": ["group"], "seed": 1}


def test_the_sample_is_taken_once_the_replay_is_stored_and_a_failed_one_fails_nothing(client, monkeypatch):
    """The replay is committed (its job sent) before its estimate's sample runs, so workers do
    not wait for it; a sample that raises leaves the estimate null and the replay runs."""
    from sqlalchemy import select

    from service.replays.models import Replay
    from tests.service.conftest import synth_csv, upload, wait_for

    ds = upload(client, synth_csv(seed=41, trials=3))
    stored_when_sampled: list[int] = []

    def sample(plan, chunk_pairs):
        with client.app.state.sessionmaker() as other:  # another connection: sees committed rows only
            stored_when_sampled.append(len(other.scalars(select(Replay.id)).all()))
        return 12.34

    monkeypatch.setattr(estimate, "from_sample", sample)
    r = client.post("/v1/replays", json={"dataset_id": ds["id"], **BIG})
    assert r.status_code == 202, r.text
    assert stored_when_sampled == [1] and r.json()["estimated_seconds"] == 12.3
    assert client.get(f"/v1/replays/{r.json()['id']}").json()["estimated_seconds"] == 12.3  # stored too
    assert wait_for(client, r.json()["id"])["status"] == "succeeded"

    def broken(plan, chunk_pairs):
        raise RuntimeError("a bug in the sample")

    monkeypatch.setattr(estimate, "from_sample", broken)
    monkeypatch.setattr(estimate, "from_history", lambda *a: None)  # no history: the sample is taken
    r = client.post("/v1/replays", json={"dataset_id": ds["id"], **{**BIG, "seed": 2}})
    assert r.status_code == 202 and r.json()["estimated_seconds"] is None
    assert wait_for(client, r.json()["id"])["status"] == "succeeded"


def test_the_sample_takes_one_seed_and_at_most_sample_cases(monkeypatch):
    """Only the orders were cut: 50 orders x 1,000 seeds sampled the whole first chunk 1,000
    times over (a 47.6 s POST). The sample runs one seed and scales by the seeds; where a pair
    has many configurations and budgets it takes fewer orders and pairs."""
    records = load_records(str(examples.path()))
    runs: list[tuple[int, int, int, int]] = []
    clock = [0.0]

    def fake_run_chunk(small, start, stop, progress=None):
        runs.append((small.spec.orders, small.spec.seeds, start, stop))
        clock[0] += 1.0

    monkeypatch.setattr(engine_replay, "run_chunk", fake_run_chunk)
    monkeypatch.setattr(estimate.time, "thread_time", lambda: clock[0])
    seeded = plan_replay(records, make_spec(policies=["coverage_bootstrap"], orders=50, seeds=1000))
    m = min(seeded.n_pairs, 5)
    got = estimate.from_sample(seeded, m)
    assert runs == [(50, 1, 0, 1), (50, 1, 0, m), (50, 1, 0, m)]
    assert got == pytest.approx(1.0 * 1000 * seeded.n_pairs / m)  # the second run's rate, times the seeds
    runs.clear()
    wide = plan_replay(records, make_spec(policies=["coverage_bootstrap", "bootstrap", "uniform_forced"],
                                          deltas=[0, 1, 2, 3, 5], a=[0.01, 0.05, 0.1], bootstrap=[100, 200],
                                          budgets=[i / 200 for i in range(1, 201)], orders=500))
    per_order = len(wide.configs) * len(wide.spec.budgets)
    estimate.from_sample(wide, 200)
    orders, seeds, _, stop = runs[1]
    assert orders * per_order * stop <= estimate.SAMPLE_CASES < estimate.SAMPLE_ORDERS * per_order * min(
        wide.n_pairs, 200)
