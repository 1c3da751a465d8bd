"""Sessions on both backends: order, checkpoints, idempotent appends, conflicts, concurrency,
and the anytime monitoring simulation through the API."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from fastapi.testclient import TestClient

from service.engine import schedule
from service.engine.live import live_from_arrays

IDS = [f"t{i:02d}" for i in range(80)]
GROUPS = [f"g{i % 4}" for i in range(80)]


def _create(client: TestClient, **body: object) -> dict:
    body = {"universe": {"task_ids": IDS, "groups": GROUPS}, "system_a": "new", "system_b": "old", **body}
    r = client.post("/v1/sessions", json=body)
    assert r.status_code == 201, r.text
    assert r.headers["location"] == f"/v1/sessions/{r.json()['id']}"
    return r.json()


def _post(client: TestClient, sid: str, rows: list[dict]) -> dict:
    r = client.post(f"/v1/sessions/{sid}/observations", json={"observations": rows})
    assert r.status_code == 200, r.text
    return r.json()


def _pair(task: str, a: float, b: float) -> list[dict]:
    return [{"task_id": task, "system": "new", "outcome": a}, {"task_id": task, "system": "old", "outcome": b}]


def test_create_returns_a_seeded_stratified_order(client: TestClient) -> None:
    s = _create(client)
    assert sorted(s["order"]) == IDS and s["rule"] == "anytime" and s["status"] == "running" and s["k"] == 0
    assert s["checkpoints"] == [{"budget": b, "k": k, "level": None}
                                for b, k in ((0.25, 20), (0.5, 40), (0.75, 60), (1.0, 80))]
    assert s["spending"] is None
    assert _create(client)["order"] == s["order"]  # seeded by the universe
    assert _create(client, seed=7)["order"] != s["order"]
    group = dict(zip(IDS, GROUPS, strict=True))
    assert sorted(group[t] for t in s["order"][:4]) == ["g0", "g1", "g2", "g3"]  # prefixes meet coverage
    assert client.get(f"/v1/sessions/{s['id']}").json()["order"] == s["order"]
    assert client.get("/v1/sessions/00000000-0000-0000-0000-000000000000").status_code == 404


def test_fixed_sample_rules_conclude_only_at_checkpoints(client: TestClient) -> None:
    s = _create(client, rule="bootstrap", budgets=[0.25, 0.5, 1.0])
    for i, t in enumerate(s["order"][:19]):
        st = _post(client, s["id"], _pair(t, 1, 0))
        assert st["status"] == "running" and st["current"]["decision"] == "defer"
        assert st["current"]["reason"] == ("coverage_infeasible" if i < 3 else "awaiting_checkpoint") or i < 3
        assert st["history"] == [] and st["current"]["warning"] is None
    assert st["current"]["next"]["k"] == 20 and st["current"]["next"]["task_ids"] == [s["order"][19]]
    st = _post(client, s["id"], _pair(s["order"][19], 1, 0))
    assert st["status"] == "concluded" and st["current"]["decision"] == "accept" and st["current"]["k"] == 20
    assert [(h["event"], h["k"], h["decision"]) for h in st["history"]] == [("checkpoint", 20, "accept")]
    later = _post(client, s["id"], _pair(s["order"][20], 0, 1))  # after the conclusion: stored, verdict kept
    assert later["added"] == 2 and later["k"] == 21 and later["current"]["decision"] == "accept"


def test_anytime_may_conclude_between_checkpoints(client: TestClient) -> None:
    s = _create(client)
    for t in s["order"][:19]:
        st = _post(client, s["id"], _pair(t, 1, 0))
        if st["status"] == "concluded":
            break
    assert st["status"] == "concluded" and st["current"]["decision"] == "accept" and st["k"] < 20
    stop = st["current"]["statistic"]["stopped_at"]
    assert st["history"] == [{"event": "stop", "budget": None, "k": stop, "level": None, "decision": "accept",
                              "reason": "decided",
                              "mean_difference": 1.0, "statistic": st["current"]["statistic"]}]


def test_appends_are_idempotent_and_conflicts_store_nothing(client: TestClient) -> None:
    s = _create(client, trials=2)
    sid = s["id"]
    rows = [{"task_id": "t00", "system": "new", "trial": 0, "outcome": 1}, {"task_id": "t00", "system": "old",
                                                                           "trial": 0, "outcome": 0}]
    assert _post(client, sid, rows)["added"] == 2
    again = _post(client, sid, rows + rows)
    assert again["added"] == 0 and again["duplicates"] == 2 and again["k"] == 0  # 2 trials needed
    conflict = client.post(f"/v1/sessions/{sid}/observations", json={"observations": [
        {"task_id": "t01", "system": "new", "outcome": 1}, {"task_id": "t00", "system": "new", "outcome": 0}]})
    assert conflict.status_code == 409 and conflict.json()["error"] == "conflict"
    assert conflict.json()["detail"][0]["field"] == "observations[1]"
    inside = client.post(f"/v1/sessions/{sid}/observations", json={"observations": [
        {"task_id": "t02", "system": "new", "outcome": 1}, {"task_id": "t02", "system": "new", "outcome": 0}]})
    assert inside.status_code == 409
    done = _post(client, sid, [{"task_id": "t00", "system": s, "trial": 1, "outcome": 0.0} for s in ("new", "old")])
    assert done["added"] == 2 and done["k"] == 1 and done["current"]["counts"]["a_only"] == 0  # t01 never stored
    assert done["current"]["mean_difference"] == 0.5


def test_bad_observations_are_422_naming_the_field(client: TestClient) -> None:
    sid = _create(client)["id"]
    mc = _create(client, rule="mcnemar")["id"]

    def field(session_id: str, rows: list[dict]) -> str:
        r = client.post(f"/v1/sessions/{session_id}/observations", json={"observations": rows})
        assert r.status_code == 422, r.text
        return r.json()["detail"][0]["field"]

    assert field(sid, [{"task_id": "zz", "system": "new", "outcome": 1}]) == "observations[0].task_id"
    assert field(sid, [{"task_id": "t00", "system": "new", "outcome": 1},
                       {"task_id": "t00", "system": "x", "outcome": 1}]) == "observations[1].system"
    assert field(sid, [{"task_id": "t00", "system": "new", "outcome": 2}]) == "observations[0].outcome"
    assert field(sid, [{"task_id": "t00", "system": "new", "trial": 1, "outcome": 1}]) == "observations[0].trial"
    assert field(mc, [{"task_id": "t00", "system": "new", "outcome": 0.5}]) == "observations[0].outcome"
    for trial in (2**31, 2**70):  # past MAX_TRIAL, and past int64 (no bare OverflowError)
        row = {"task_id": "t00", "system": "new", "trial": trial, "outcome": 1}
        assert field(sid, [row]) == "observations[0].trial"
    r = client.post("/v1/sessions", json={"universe": {"task_ids": IDS}, "rule": "mcnemar", "delta": 5})
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "delta"
    r = client.post("/v1/sessions", json={"universe": {"task_ids": IDS}, "system_a": "x", "system_b": "x"})
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "system_b"
    r = client.post("/v1/sessions", json={"universe": {"task_ids": ["a", "a"]}})
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "universe.task_ids[1]"
    r = client.post("/v1/sessions", json={"universe": {"task_ids": []}})
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "universe"
    r = client.post("/v1/sessions", json={"universe": {"task_ids": IDS}, "rule": "vote"})
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "rule"
    r = client.post("/v1/sessions", json={"universe": {"task_ids": IDS}, "bootstrap": 2**70})  # unused by anytime,
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "bootstrap"  # but stored: refused alike
    assert client.post("/v1/sessions/00000000-0000-0000-0000-000000000000/observations",
                       json={"observations": [{"task_id": "t00", "system": "new", "outcome": 1}]}).status_code == 404


def test_concurrent_appends_lose_nothing(client: TestClient) -> None:
    s = _create(client, rule="bootstrap", budgets=[1.0])
    sid = s["id"]
    rng = np.random.default_rng(0)
    y = {(t, sys_): float(rng.random() < 0.5) for t in IDS for sys_ in ("new", "old")}
    batches = []
    for i in range(0, 80, 4):  # every row is posted by two different requests
        rows = [{"task_id": t, "system": s_, "outcome": y[(t, s_)]} for t in IDS[i:i + 4] for s_ in ("new", "old")]
        batches += [rows, rows[::-1]]
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda rows: client.post(f"/v1/sessions/{sid}/observations",
                                                         json={"observations": rows}), batches))
    assert all(r.status_code == 200 for r in results), [r.text for r in results if r.status_code != 200]
    assert sum(r.json()["added"] for r in results) == 160
    final = client.get(f"/v1/sessions/{sid}").json()
    assert final["k"] == 80 and final["history"][-1]["k"] == 80
    d = np.array([y[(t, "new")] - y[(t, "old")] for t in IDS])
    assert final["current"]["mean_difference"] == float(f"{d.mean():.12g}")


def test_anytime_monitoring_simulation_through_sessions(client: TestClient) -> None:
    """Null population (Δ_full = 0 at δ = 0): sessions fed one task at a time, checked after
    every task, stop exactly where the engine's anytime rule stops on the same sequence,
    and almost never accept; a fixed-sample session never concludes between checkpoints."""
    n = 30
    ids = IDS[:n]
    d = np.array([1.0] * 9 + [-1.0] * 9 + [0.0] * 12)
    rng = np.random.default_rng(7)
    false_accepts = 0
    for rep in range(10):
        rule = "bootstrap" if rep == 0 else "anytime"
        s = client.post("/v1/sessions", json={"universe": {"task_ids": ids}, "rule": rule, "seed": rep,
                                              "system_a": "new", "system_b": "old"}).json()
        perm = rng.permutation(n)
        ya = {ids[i]: (1.0 if d[i] >= 0 else 0.0) for i in range(n)}
        yb = {t: ya[t] - d[ids.index(t)] for t in ids}
        seq: list[str] = []
        for i in perm.tolist():
            t = ids[i]
            seq.append(t)
            st = _post(client, s["id"], _pair(t, ya[t], yb[t]))
            if rule == "bootstrap":
                ks = {c["k"] for c in s["checkpoints"]}
                assert st["current"]["reason"] == "awaiting_checkpoint" or len(seq) in ks or len(seq) < 2
            if st["status"] != "running":
                break
        if rule == "anytime":
            engine = live_from_arrays(ids, None, [ya[t] for t in seq], [yb[t] for t in seq], seq, rule="anytime")
            assert st["current"]["decision"] == engine["decision"]
            assert st["current"]["statistic"]["stopped_at"] == engine["statistic"]["stopped_at"]
            false_accepts += st["current"]["decision"] == "accept"
    assert false_accepts <= 1


def test_session_on_a_dataset_takes_its_tasks_and_groups(client: TestClient) -> None:
    from service.engine.records import parse_records
    from tests.service.conftest import synth_csv, upload

    content = synth_csv(seed=2)
    ds = upload(client, content)
    records = parse_records(content)
    a, b = records.systems[:2]
    s = _create(client, universe=None, dataset_id=ds["id"], group="group", system_a=a, system_b=b,
                policy="coverage_bootstrap")
    assert sorted(s["order"]) == sorted(records.tasks) and s["rule"] == "bootstrap" and s["group"] == "group"
    groups = {g["group"] for g in s["current"]["coverage"]["groups"]}
    assert groups == set(records.metadata["group"])
    t = s["order"][0]
    i = records.tasks.index(t)
    st = _post(client, s["id"], [{"task_id": t, "system": a, "outcome": float(records.y[0, i])},
                                 {"task_id": t, "system": b, "outcome": float(records.y[1, i])}])
    assert st["k"] == 1 and st["current"]["calibration"] is None  # no replay of this dataset yet
    r = client.post("/v1/sessions", json={"dataset_id": ds["id"], "group": "nope"})
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "group"


def test_checkpoints_spend_a_and_list_their_levels(client: TestClient) -> None:
    s = _create(client, rule="paired_normal", budgets=[0.25, 0.5, 1.0])
    assert s["spending"] == "obrien_fleming"
    want = schedule.levels([20, 40, 80], 0.05, "obrien_fleming")
    assert [c["level"] for c in s["checkpoints"]] == want.tolist() and sum(want) == np.float64(0.05)
    for t in s["order"][:20]:
        st = _post(client, s["id"], _pair(t, 1 if t < "t40" else 0, 0 if t < "t60" else 1))
    entry = st["history"][0]
    assert entry["level"] == want[0] and st["current"]["warning"] is None
    plain = _create(client, rule="bootstrap", spending="none", budgets=[0.25, 0.5, 1.0])
    assert [c["level"] for c in plain["checkpoints"]] == [0.05] * 3
    assert "optional stopping" in plain["current"]["warning"]
    pocock = _create(client, rule="mcnemar", spending="pocock")
    assert [c["level"] for c in pocock["checkpoints"]] == schedule.levels([20, 40, 60, 80], 0.05, "pocock").tolist()


def test_bad_schedules_are_422_naming_the_field(client: TestClient) -> None:
    def field(**body: object) -> str:
        r = client.post("/v1/sessions", json={"universe": {"task_ids": IDS}, **body})
        assert r.status_code == 422, r.text
        return r.json()["detail"][0]["field"]

    assert field(rule="bootstrap", spending="bonferroni") == "spending"
    assert field(rule="anytime", spending="pocock") == "spending"
    assert field(spending="obrien_fleming") == "spending"  # the default rule is anytime
    assert field(rule="bootstrap", budgets=[0.5, 0.25, 1.0]) == "budgets[1]"
    assert field(rule="bootstrap", budgets=[0.5, 0.5]) == "budgets[1]"
    assert field(rule="bootstrap", budgets=[0.0, 1.0]) == "budgets[0]"
    assert field(rule="bootstrap", budgets=[0.5, 1.2]) == "budgets[1]"
    assert field(budgets=[]) == "budgets"


def test_tie_population_sessions_follow_the_engine_schedule(client: TestClient) -> None:
    """Sessions fed in the harness's own random order, 4 tasks per append, 13 checkpoints, on
    a tie population and a clearly positive one:
    each one ends with the verdict and at the checkpoint of ``schedule.scheduled_paths`` on
    the same order (the engine simulation in tests/engine/test_schedule.py measures the
    rates), with and without spending."""
    n = 100
    ids = [f"u{i:03d}" for i in range(n)]
    tie = np.r_[np.ones(12), -np.ones(12), np.zeros(n - 24)].astype(np.int64)
    clear = np.r_[np.ones(40), -np.ones(4), np.zeros(n - 44)].astype(np.int64)
    fractions = [round(0.04 * i, 2) for i in range(1, 13)] + [1.0]
    ks = [int(round(f * n)) for f in fractions]
    rng = np.random.default_rng(5)
    concluded = 0
    for rep in range(12):
        spending = ("obrien_fleming", "none", "pocock")[rep % 3]
        rule = ("bootstrap", "paired_normal")[rep % 2]
        d = (tie, clear)[(rep // 2) % 2]
        ya = np.where(d < 0, 0.0, 1.0)
        s = client.post("/v1/sessions", json={"universe": {"task_ids": ids}, "rule": rule, "spending": spending,
                                              "budgets": fractions, "system_a": "new", "system_b": "old"}).json()
        order = rng.permutation(n)
        for start in range(0, n, 4):
            rows = [r for i in order[start:start + 4].tolist() for r in _pair(ids[i], ya[i], ya[i] - d[i])]
            st = _post(client, s["id"], rows)
            if st["status"] != "running":
                break
        want, stop = schedule.scheduled_paths(rule, d[order][None, :], 1, ks, schedule.levels(ks, 0.05, spending),
                                              0.0, n)
        assert st["current"]["decision"] == {1: "accept", -1: "reject", 0: "defer"}[int(want[0])]
        assert st["k"] == min(int(stop[0]), n) and st["history"][-1]["level"] == pytest.approx(
            schedule.levels(ks, 0.05, spending)[ks.index(min(int(stop[0]), n))], rel=1e-12)
        concluded += st["status"] == "concluded"
    assert concluded >= 4


@pytest.mark.parametrize("rule", ["serfling", "paired_normal", "bootstrap", "mcnemar"])
def test_a_checkpoint_that_spends_nothing_defers(client: TestClient, rule: str) -> None:
    """O'Brien-Fleming spends 0 of ``a`` at an early enough look (here k = 1 of 80 at a = 1e-10):
    the rule defers there, and the session goes on to its next checkpoint (serfling answered
    500 at every observation: ln(1/0))."""
    s = _create(client, rule=rule, a=1e-10, budgets=[0.0125, 1.0])
    assert s["checkpoints"][0]["k"] == 1 and s["checkpoints"][0]["level"] == 0.0
    st = _post(client, s["id"], _pair(s["order"][0], 1, 0))
    assert [(h["event"], h["k"], h["decision"]) for h in st["history"]] == [("checkpoint", 1, "defer")]
    assert st["status"] == "running"
    for t in s["order"][1:]:
        st = _post(client, s["id"], _pair(t, 1, 0))
    assert st["status"] == "concluded" and st["current"]["decision"] == "accept"


# --------------------------------------------------------------------------- the order a harness sends

# A null population whose task ids sort with its outcomes: A wins on the a-tasks, ties on the
# m-tasks, B wins on the z-tasks (Δ_full = -0.02). Sorted by id, the sequence opens with A's
# wins and the anytime rule accepts at once; in any order the harness sends, it must not.
ORDERED_IDS = [f"a{i:02d}" for i in range(30)] + [f"m{i:02d}" for i in range(38)] + [f"z{i:02d}" for i in range(32)]
ORDERED_Y = {t: ((1.0, 0.0) if t[0] == "a" else (0.0, 1.0) if t[0] == "z" else (1.0, 1.0)) for t in ORDERED_IDS}


def _ordered_session(client: TestClient) -> str:
    r = client.post("/v1/sessions", json={"universe": {"task_ids": ORDERED_IDS}, "rule": "anytime",
                                          "system_a": "new", "system_b": "old"})
    assert r.status_code == 201, r.text
    return r.json()["id"]


def test_a_batch_is_observed_in_the_order_it_was_sent(client: TestClient) -> None:
    """The rows of one append keep their order: the same state as one task per append, and
    the engine's decision on that sequence (the store once sorted a batch by task id)."""
    order = [ORDERED_IDS[i] for i in np.random.default_rng(3).permutation(len(ORDERED_IDS))]
    rows = [row for t in order for row in _pair(t, *ORDERED_Y[t])]
    batched = _post(client, _ordered_session(client), rows)
    one_by_one_id = _ordered_session(client)
    for t in order:
        one_by_one = _post(client, one_by_one_id, _pair(t, *ORDERED_Y[t]))
    assert batched["observed_task_ids"] == order == one_by_one["observed_task_ids"]
    assert batched["current"] == one_by_one["current"]
    engine = live_from_arrays(ORDERED_IDS, None, [ORDERED_Y[t][0] for t in order], [ORDERED_Y[t][1] for t in order],
                              order, rule="anytime")
    assert batched["current"]["decision"] == engine["decision"] != "accept"
    # sent in id order, the same rows do accept: what the sorted store made of every batch
    sorted_rows = [row for t in ORDERED_IDS for row in _pair(t, *ORDERED_Y[t])]
    assert _post(client, _ordered_session(client), sorted_rows)["current"]["decision"] == "accept"


def test_appends_to_one_session_wait_for_each_other(client: TestClient) -> None:
    """An append holds the session until it commits: a second append waits, then sees the
    first one's rows before its own, so every answer's sequence is a prefix of the later ones
    (on Postgres a later request's rows could take ids before an answered one's)."""
    import concurrent.futures as cf
    import uuid

    from service.db import transaction
    from service.sessions import service
    from service.sessions.schemas import ObservationsCreate

    sid = _ordered_session(client)
    first = ORDERED_IDS[40:50]
    second = ORDERED_IDS[:5]
    pool = cf.ThreadPoolExecutor(1)
    try:
        with transaction(client.app.state.sessionmaker) as db:
            body = ObservationsCreate(observations=[row for t in first for row in _pair(t, *ORDERED_Y[t])])
            assert service.append(db, uuid.UUID(sid), body)["observed_task_ids"] == first
            later = pool.submit(_post, client, sid, [row for t in second for row in _pair(t, *ORDERED_Y[t])])
            done, _ = cf.wait([later], timeout=1.0)
            assert not done, "a second append went ahead while the first held the session"
        assert later.result(timeout=60)["observed_task_ids"] == first + second
    finally:
        pool.shutdown(wait=True)
    assert client.get(f"/v1/sessions/{sid}").json()["observed_task_ids"] == first + second


def test_an_append_past_one_statements_parameters_is_stored_whole_and_in_order(client: TestClient,
                                                                              monkeypatch) -> None:
    """Postgres takes at most 65,535 parameters in a statement: 6,000 tasks for two systems
    (72,000) were refused as a 503. Rows go in statements of ``INSERT_ROWS``, in order."""
    import service.db

    ids = [f"w{i:05d}" for i in range(6_000)]
    r = client.post("/v1/sessions", json={"universe": {"task_ids": ids}, "system_a": "new", "system_b": "old"})
    order = [ids[i] for i in np.random.default_rng(5).permutation(len(ids))]
    big = _post(client, r.json()["id"], [row for t in order for row in _pair(t, 1.0, 0.0)])
    assert big["added"] == 12_000 and big["k"] == 6_000 and big["observed_task_ids"] == order
    monkeypatch.setattr(service.db, "INSERT_ROWS", 7)  # many statements: the order holds across them
    sid = _ordered_session(client)
    order = [ORDERED_IDS[i] for i in np.random.default_rng(6).permutation(len(ORDERED_IDS))][:40]
    rows = [row for t in order for row in _pair(t, *ORDERED_Y[t])]
    assert _post(client, sid, rows[:20])["added"] == 20
    st = _post(client, sid, rows)  # half of them again: duplicates, counted apart
    assert (st["added"], st["duplicates"], st["observed_task_ids"]) == (60, 20, order)
