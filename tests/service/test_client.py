"""The shipped Python client and harness adapter, against the real app (both backends)."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Callable

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient

from sufficiency_client import (
    APIError,
    AsyncLiveMonitor,
    AsyncSufficiencyClient,
    AuthError,
    ConflictError,
    InvalidInputError,
    LiveMonitor,
    NotFoundError,
    ServerError,
    SufficiencyClient,
    SufficiencyError,
    TransportError,
    observation,
)

IDS = [f"task-{i:02d}" for i in range(48)]
UNIVERSE = {t: f"repo{i % 3}" for i, t in enumerate(IDS)}


def portal(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, text="<html>captive portal</html>", headers={"content-type": "text/html"})


def relay(client: TestClient, after: Callable[[httpx.Request], None] = lambda request: None) -> SufficiencyClient:
    """A client whose network reaches the real app; ``after(request)`` runs once the app has
    answered, before the answer comes back (it may hold it, or raise a transport fault)."""

    def handler(request: httpx.Request) -> httpx.Response:
        answer = client.send(request)
        after(request)
        return httpx.Response(answer.status_code, content=answer.content,
                              headers={"content-type": answer.headers["content-type"]})

    return SufficiencyClient("http://testserver", transport=httpx.MockTransport(handler))


def test_sync_client_decides_and_translates_errors(client: TestClient) -> None:
    api = SufficiencyClient(http=client)
    out = api.decide(universe={"task_ids": IDS}, outcomes={"A": {"task-00": 1.0}, "B": {"task-00": 0.0}},
                     rule="anytime")
    assert out["decision"] == "defer" and out["k"] == 1 and out["N"] == 48
    with pytest.raises(InvalidInputError) as err:
        api.decide(universe={"task_ids": IDS}, outcomes={}, rule="majority")
    assert err.value.status == 422 and err.value.code == "invalid_input" and err.value.fields == ["rule"]
    with pytest.raises(NotFoundError):
        api.get_session("00000000-0000-0000-0000-000000000000")
    s = api.create_session(universe={"task_ids": IDS}, system_a="x", system_b="y")
    api.observe(s["id"], [observation("task-01", "x", 1.0)])
    with pytest.raises(ConflictError) as conflict:
        api.observe(s["id"], [observation("task-01", "x", 0.0)])
    assert isinstance(conflict.value, APIError) and isinstance(conflict.value, SufficiencyError)
    assert api.get_session(s["id"])["current"]["counts"]["a_only"] == 1


def test_transport_and_server_errors_are_translated() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    with SufficiencyClient(transport=httpx.MockTransport(refuse)) as api, pytest.raises(TransportError):
        api.decide(universe={"task_ids": IDS})
    boom = httpx.MockTransport(lambda r: httpx.Response(503, json={"error": "unavailable", "detail": "db down"}))
    with SufficiencyClient(transport=boom) as api, pytest.raises(ServerError) as err:
        api.get_session("x")
    assert err.value.status == 503 and err.value.detail == "db down"
    def needs_key(request: httpx.Request) -> httpx.Response:
        if request.headers.get("authorization") != "Bearer k-123":
            return httpx.Response(401, json={"error": "unauthorized", "detail": "an API key is required"})
        return httpx.Response(200, json={"ok": True})

    with SufficiencyClient(transport=httpx.MockTransport(needs_key)) as api, pytest.raises(AuthError):
        api.get_session("x")
    with SufficiencyClient(transport=httpx.MockTransport(needs_key), api_key="k-123") as api:
        assert api.get_session("x") == {"ok": True}
    text = httpx.MockTransport(lambda r: httpx.Response(502, text="bad gateway"))
    with SufficiencyClient(transport=text) as api, pytest.raises(ServerError):
        api.get_session("x")


def test_harness_loop_stops_early_with_the_anytime_rule(client: TestClient) -> None:
    rng = np.random.default_rng(1)
    outcome = {t: (float(rng.random() < 0.9), float(rng.random() < 0.1)) for t in IDS}
    monitor = LiveMonitor(SufficiencyClient(http=client), system_a="new", system_b="base", universe=UNIVERSE)
    assert sorted(monitor.order) == IDS
    ran = []
    for task_id in monitor.tasks():
        ran.append(task_id)
        verdict = monitor.record(task_id, *outcome[task_id])
    assert verdict.stop and verdict.decision == "accept" and verdict.reason == "decided"
    assert verdict.k == len(ran) < len(IDS) and ran == monitor.order[: len(ran)]
    # resume by id; recording the same outcome again changes nothing
    again = LiveMonitor(SufficiencyClient(http=client), session_id=monitor.session_id)
    assert again.verdict.decision == "accept" and again.record(ran[0], *outcome[ran[0]]).k == verdict.k
    hook = again.record_outcomes(ran[1], {"new": outcome[ran[1]][0], "base": outcome[ran[1]][1]})
    assert hook.stop


def test_resumed_monitor_skips_what_the_session_holds(client: TestClient) -> None:
    """A harness restarted mid-run resumes by session id: ``tasks()`` offers only the tasks the
    session has not observed, still in the recommended order, and the answers it gets carry
    the interval, the forecast of further tasks and (the harness ran its own order) which
    groups are behind their floors."""
    first = LiveMonitor(SufficiencyClient(http=client), system_a="new", system_b="base", universe=UNIVERSE,
                        rule="bootstrap", budgets=[0.5, 1.0])
    own_order = [t for t in IDS if UNIVERSE[t] == "repo0"][:6]  # the harness's order: one repository first
    for t in own_order:
        v = first.record(t, 1.0, 0.0)
    assert not v.stop and v.state["observed_task_ids"] == own_order
    resumed = LiveMonitor(SufficiencyClient(http=client), session_id=first.session_id)
    offered = list(itertools.islice(resumed.tasks(), 5))
    assert not set(offered) & set(own_order) and offered == [t for t in first.order if t not in own_order][:5]
    current = v.state["current"]
    assert current["reason"] == "awaiting_checkpoint" and current["interval"] is None
    warn = current["coverage_warning"]
    assert {g["group"] for g in warn["groups"]} == {"repo1", "repo2"} and warn["missing"] == 4
    assert current["forecast"]["cap"] == 48 and 18 <= current["forecast"]["expected_more_tasks"] <= 42


def test_async_client_concurrent_appends_and_async_monitor(client: TestClient) -> None:
    app = client.app

    async def scenario() -> None:
        transport = httpx.ASGITransport(app=app)
        async with AsyncSufficiencyClient("http://app", transport=transport) as api:
            s = await api.create_session(universe={"task_ids": IDS, "groups": list(UNIVERSE.values())},
                                         rule="serfling", budgets=[0.5, 1.0])
            rows = [[observation(t, sys_, float(i % 2 == 0 or sys_ == "A"))] for i, t in enumerate(IDS)
                    for sys_ in ("A", "B")]
            results = await asyncio.gather(*(api.observe(s["id"], r) for r in rows + rows[:10]))
            assert sum(r["added"] for r in results) == 96
            final = await api.get_session(s["id"])
            assert final["k"] == 48 and [h["k"] for h in final["history"]][:1] == [24]
            with pytest.raises(InvalidInputError):
                await api.observe(s["id"], [observation("nope", "A", 1.0)])
            monitor = await AsyncLiveMonitor.start(api, universe=IDS, system_a="p", system_b="q")
            verdict = await monitor.record(monitor.order[0], 1.0, 0.0)
            assert verdict.k == 1 and not monitor.should_stop()
            assert (await monitor.refresh()).k == 1

    asyncio.run(scenario())


def test_upload_rows_names_the_dataset_as_the_caller_asks(client: TestClient) -> None:
    """``upload_rows(rows, name=...)`` stores that name; without one the server's default
    (``dataset-`` + 8 hex digits of the content hash), so two uploads are told apart."""
    rows = [{"system": s, "task_id": t, "outcome": float((i + j) % 2)}
            for i, s in enumerate("AB") for j, t in enumerate(IDS[:10])]
    other = [{**r, "task_id": r["task_id"] + "-b"} for r in rows]
    api = SufficiencyClient(http=client)
    named = api.upload_rows(rows, name="airline trial 3")
    assert named["name"] == "airline trial 3" and named["n_records"] == 20
    assert client.get(f"/v1/datasets/{named['id']}").json()["name"] == "airline trial 3"
    plain = api.upload_rows(other)
    assert plain["name"] == f"dataset-{plain['content_hash'][:8]}" and plain["id"] != named["id"]
    with pytest.raises(InvalidInputError) as err:
        api.upload_rows([{**r, "task_id": r["task_id"] + "-c"} for r in rows], name="x" * 201)
    assert err.value.fields == ["name"]

    async def scenario() -> None:
        async with AsyncSufficiencyClient("http://app", transport=httpx.ASGITransport(app=client.app)) as aapi:
            third = await aapi.upload_rows([{**r, "task_id": r["task_id"] + "-d"} for r in rows], name="async one")
            assert third["name"] == "async one"
            fourth = await aapi.upload_rows([{**r, "task_id": r["task_id"] + "-e"} for r in rows])
            assert fourth["name"] == f"dataset-{fourth['content_hash'][:8]}"

    asyncio.run(scenario())
    names = sorted(d["name"] for d in client.get("/v1/datasets").json()["items"])
    assert "airline trial 3" in names and "async one" in names and len(names) == 4


def test_a_2xx_that_is_not_json_is_an_api_error_naming_status_and_content_type() -> None:
    """A proxy or captive portal answering 200 with HTML was a bare JSONDecodeError."""
    with SufficiencyClient(transport=httpx.MockTransport(portal)) as api, pytest.raises(APIError) as err:
        api.get_session("x")
    assert type(err.value).__name__ == "UnexpectedResponseError"
    assert err.value.status == 200 and err.value.code == "not_json" and "text/html" in str(err.value)

    async def scenario() -> None:
        async with AsyncSufficiencyClient(transport=httpx.MockTransport(portal)) as api:
            with pytest.raises(APIError, match="text/html"):
                await api.observe("x", [observation("t", "A", 1.0)])

    asyncio.run(scenario())


def test_a_non_finite_outcome_is_refused_before_any_request(client: TestClient) -> None:
    sent: list[httpx.Request] = []
    api = relay(client, sent.append)
    monitor = LiveMonitor(api, system_a="new", system_b="base", universe=UNIVERSE)
    task, sent[:] = monitor.order[0], []
    for bad in (float("nan"), float("inf"), float("-inf")):
        with pytest.raises(InvalidInputError) as err:
            monitor.record(task, 1.0, bad)
        assert err.value.fields == ["outcome_b"] and str(bad) in str(err.value) and "base" in str(err.value)
    with pytest.raises(InvalidInputError, match="JSON"):  # the plain client: httpx's ValueError, translated
        api.observe(monitor.session_id, [observation(task, "new", float("nan"))])
    assert sent == [] and api.get_session(monitor.session_id)["current"]["counts"]["a_only"] == 0


def test_refresh_after_a_lost_answer_skips_what_the_server_stored(client: TestClient) -> None:
    """The server stored the observation but its answer timed out: ``refresh()`` reads the
    session's ``observed_task_ids``, so ``tasks()`` does not offer that task again."""
    lose: list[bool] = []

    def maybe_lose(request: httpx.Request) -> None:
        if lose and request.method == "POST":
            lose.clear()
            raise httpx.ReadTimeout("the answer was lost", request=request)

    monitor = LiveMonitor(relay(client, maybe_lose), system_a="new", system_b="base", universe=UNIVERSE)
    first = next(monitor.tasks())
    lose.append(True)
    with pytest.raises(TransportError):
        monitor.record(first, 1.0, 0.0)
    assert next(monitor.tasks()) == first  # the monitor cannot know yet
    assert monitor.refresh().k == 1 and next(monitor.tasks()) == monitor.order[1]


def test_a_late_answer_does_not_undo_a_concluded_verdict(client: TestClient) -> None:
    """Concurrent records: the answer to the first one (k=1, running) arrives after the session
    concluded; the verdict kept is the newest by k (the sync monitor from threads here)."""
    gate, held = threading.Event(), threading.Event()

    def hold_first(request: httpx.Request) -> None:
        if request.method == "POST" and request.url.path.endswith("/observations") and not held.is_set():
            held.set()
            assert gate.wait(30)

    monitor = LiveMonitor(relay(client, hold_first), system_a="new", system_b="base", universe=UNIVERSE)
    late = threading.Thread(target=monitor.record, args=(monitor.order[0], 1.0, 0.0))
    late.start()
    assert held.wait(30)
    for task in monitor.order[1:]:
        if monitor.record(task, 1.0, 0.0).stop:
            break
    concluded = monitor.verdict
    gate.set()
    late.join(30)
    assert concluded.stop and monitor.verdict == concluded
    assert (monitor.refresh().k, monitor.verdict.decision) == (concluded.k, "accept")


def test_a_late_answer_does_not_undo_a_concluded_async_verdict(client: TestClient) -> None:
    class HoldFirst(httpx.ASGITransport):
        def __init__(self) -> None:
            super().__init__(app=client.app)
            self.gate, self.held = asyncio.Event(), False

        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            answer = await super().handle_async_request(request)
            if request.url.path.endswith("/observations") and not self.held:
                self.held = True
                await self.gate.wait()
            return answer

    async def scenario() -> None:
        transport = HoldFirst()
        async with AsyncSufficiencyClient("http://app", transport=transport) as api:
            amonitor = await AsyncLiveMonitor.start(api, system_a="new", system_b="base", universe=UNIVERSE)
            first = asyncio.create_task(amonitor.record(amonitor.order[0], 1.0, 0.0))
            deadline = time.monotonic() + 30
            while not transport.held and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            for task in amonitor.order[1:]:
                if (await amonitor.record(task, 1.0, 0.0)).stop:
                    break
            done = amonitor.verdict
            transport.gate.set()
            assert (await first).k == done.k and done.stop and amonitor.verdict == done

    asyncio.run(scenario())
