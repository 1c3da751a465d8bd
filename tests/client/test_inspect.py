"""inspect_ai end to end: real evals of two mock models against a real ``sufficiency serve``.

The mock benchmark is the example's (examples/inspect_paired.py): fixed pass/fail tables, so
the differences the session should have seen can be recomputed here from the tables and the
session's recommended order, independently of the integration's bookkeeping.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from inspect_ai import Task, eval
from inspect_ai.log import read_eval_log
from inspect_ai.scorer import match
from inspect_ai.solver import generate

from sufficiency_client import InvalidInputError, SufficiencyClient
from sufficiency_client.inspect import MANAGER, PairedEarlyStopping
from tests.service import procs

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:The 'initial' parameter is deprecated:DeprecationWarning"),
]
REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("inspect_paired", REPO / "examples" / "inspect_paired.py")
assert _spec is not None and _spec.loader is not None
example = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(example)
A, B = example.MODEL_A, example.MODEL_B


class Server:
    def __init__(self, tmp: Path):
        self.port = procs.free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = procs.start(
            ["serve", "--port", str(self.port)], procs.env_for(data_dir=tmp / "data"), tmp / "serve.log"
        )
        procs.wait_http(f"{self.url}/healthz", proc=self.proc)

    def session(self, session_id: str) -> dict[str, Any]:
        return httpx.get(f"{self.url}/v1/sessions/{session_id}", timeout=10).json()

    def kill(self) -> None:
        procs.kill9(self.proc)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = Server(tmp_path_factory.mktemp("serve"))
    yield s
    procs.stop(s.proc)


def read_back(logs: list[Any]) -> dict[str, Any]:
    """Each model's log as inspect_ai's reader gives it back from disk."""
    return {log.eval.model: read_eval_log(log.location) for log in logs}


def run_eval(task: Any, models: list[Any], log_dir: Path, **kwargs: Any) -> dict[str, Any]:
    logs = eval(task, model=models, log_dir=str(log_dir), display="none", **kwargs)
    assert all(log.status == "success" for log in logs), [log.error for log in logs]
    return read_back(logs)


def differences(table: dict[str, dict[str, bool]], task_ids: list[str]) -> float:
    return sum(float(table[A][t]) - float(table[B][t]) for t in task_ids) / len(task_ids)


def test_an_eval_stops_both_models_once_the_session_concludes(server: Server, tmp_path: Path) -> None:
    samples, table = example.mock_benchmark(200)
    stopping = PairedEarlyStopping(server.url, model_a=A, model_b=B, group="repo")
    task = example.paired_task(samples, stopping)
    logs = run_eval(task, example.mock_models(table), tmp_path, max_samples=8)
    state = server.session(stopping.session_id)
    assert state["status"] == "concluded" and state["current"]["decision"] == "accept"
    for model, log in logs.items():
        summary = log.results.early_stopping
        assert summary is not None and summary.manager == MANAGER
        meta = summary.metadata
        assert meta["session_id"] == stopping.session_id and meta["model"] == model
        assert (meta["decision"], meta["reason"], meta["k"], meta["stopped"]) == ("accept", "decided", state["k"], True)
        ran = [s.id for s in log.samples]
        # Fewer samples ran than the task has; the rest are the early stops, and together they are all of it.
        assert len(ran) < len(samples) == log.results.total_samples
        assert sorted(ran + [e.id for e in summary.early_stops]) == sorted(s.id for s in samples)
        # inspect followed the recommended order: what ran is a prefix of it.
        assert set(ran) == set(state["order"][: len(ran)])
        assert all(stop.metadata["session_id"] == stopping.session_id for stop in summary.early_stops)
    # The session saw the first k tasks of that order, paired by id: its mean difference is the tables'.
    assert state["current"]["mean_difference"] == pytest.approx(differences(table, state["order"][: state["k"]]))


def test_the_service_going_away_mid_run_leaves_a_full_eval_that_says_so(tmp_path: Path) -> None:
    doomed = Server(tmp_path)
    samples, table = example.mock_benchmark(60)
    answered: set[str] = set()

    def pull_the_plug(sample_id: str) -> None:
        answered.add(sample_id)
        if len(answered) == 12 and doomed.proc.poll() is None:
            doomed.kill()

    models = [example.mock_model(A, table[A], pull_the_plug), example.mock_model(B, table[B])]
    stopping = PairedEarlyStopping(doomed.url, model_a=A, model_b=B, group="repo", timeout=5)
    try:
        logs = run_eval(example.paired_task(samples, stopping), models, tmp_path / "logs", max_samples=4)
    finally:
        procs.stop(doomed.proc)
    for log in logs.values():
        meta = log.results.early_stopping.metadata
        assert len(log.samples) == len(samples)
        assert meta["status"] == "unavailable" and meta["stopped"] is False
        assert "could not be reached" in meta["error"] and meta["session_id"] == stopping.session_id
        assert meta["tasks_sent"] < 12 and any("switched off" in n for n in meta["notes"])


def test_no_service_at_all_runs_everything(tmp_path: Path) -> None:
    samples, table = example.mock_benchmark(40)
    stopping = PairedEarlyStopping(f"http://127.0.0.1:{procs.free_port()}", model_a=A, model_b=B, group="repo")
    task = example.paired_task(samples, stopping)  # recommended_order: no service, the dataset unchanged
    logs = run_eval(task, example.mock_models(table), tmp_path, max_samples=4)
    for log in logs.values():
        meta = log.results.early_stopping.metadata
        assert len(log.samples) == 40 and meta["status"] == "unavailable" and meta["session_id"] is None
        assert "could not be declared" in meta["error"]


def test_resuming_without_the_service_keeps_the_dataset_and_runs_everything(tmp_path: Path) -> None:
    samples, table = example.mock_benchmark(20)
    stopping = PairedEarlyStopping(
        f"http://127.0.0.1:{procs.free_port()}", model_a=A, model_b=B, session_id="5b0c1a52-0000-4000-8000-000000000000"
    )
    dataset = stopping.recommended_order(samples)  # the docstring's promise: the dataset unchanged
    assert [s.id for s in dataset] == [s.id for s in samples]
    task = Task(dataset=dataset, solver=generate(), scorer=match(), early_stopping=stopping)
    for log in run_eval(task, example.mock_models(table), tmp_path, max_samples=4).values():
        meta = log.results.early_stopping.metadata
        assert len(log.samples) == 20 and meta["status"] == "unavailable" and "could not be read" in meta["error"]
        assert any("recommended order not applied" in n for n in meta["notes"])


def test_a_portal_answering_200_html_mid_run_leaves_a_full_eval_that_says_so(server: Server, tmp_path: Path) -> None:
    """After the declaration and two appends, something else answers 200 with HTML (a captive
    portal): the eval runs to the end without early stopping, as when the service is down."""
    calls = 0

    async def portal_after_three(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        if calls > 3:
            return httpx.Response(200, text="<html>captive portal</html>", headers={"content-type": "text/html"})
        async with httpx.AsyncClient() as http:
            answer = await http.send(request)
        return httpx.Response(answer.status_code, content=answer.content, headers={"content-type": "application/json"})

    samples, table = example.mock_benchmark(60)
    stopping = PairedEarlyStopping(server.url, model_a=A, model_b=B, group="repo",
                                   transport=httpx.MockTransport(portal_after_three))
    logs = run_eval(example.paired_task(samples, stopping, recommended=False), example.mock_models(table), tmp_path,
                    max_samples=4)
    for log in logs.values():
        meta = log.results.early_stopping.metadata
        assert len(log.samples) == 60 and meta["status"] == "unavailable" and meta["stopped"] is False
        assert "text/html" in meta["error"] and meta["tasks_sent"] >= 1


def test_a_sample_errored_without_a_score_holds_the_later_pairs_and_the_summary_says_so(
    server: Server, tmp_path: Path
) -> None:
    samples, table = example.mock_benchmark(60)
    stopping = PairedEarlyStopping(server.url, model_a=A, model_b=B, group="repo")
    dataset = stopping.recommended_order(samples)
    assert stopping.order is not None
    bad = stopping.order[2]

    def crash(sample_id: str) -> None:
        if sample_id == bad:
            raise RuntimeError("the agent crashed")

    models = [example.mock_model(A, table[A], crash), example.mock_model(B, table[B])]
    task = Task(dataset=dataset, solver=generate(), scorer=match(), early_stopping=stopping)
    logs = eval(task, model=models, log_dir=str(tmp_path), display="none", max_samples=4, fail_on_error=False)
    held, notes = [], []
    for log in logs:
        meta = read_eval_log(log.location).results.early_stopping.metadata
        assert meta["status"] == "running" and meta["tasks_sent"] == 2
        held.append(meta["pairs_held"])
        notes += [n for n in meta["notes"] if f"behind sample {bad!r}" in n and A in n]
    # Once both models are done, every pair after the errored one (the first model to finish may
    # see fewer: "... wait behind ..., not yet scored by" when the other still runs it).
    assert max(held) == len(samples) - 3 and min(held) > 0
    assert len(notes) == 2 and any(f"{len(samples) - 3} scored pair(s) held" in n for n in notes), notes


def test_a_refused_declaration_fails_the_task_before_any_sample(server: Server, tmp_path: Path) -> None:
    samples, table = example.mock_benchmark(40)
    stopping = PairedEarlyStopping(server.url, model_a=A, model_b=B, group="repo", delta=500)
    task = example.paired_task(samples, stopping, recommended=False)
    logs = eval(task, model=example.mock_models(table), log_dir=str(tmp_path), display="none", max_samples=4)
    for log in logs:
        back = read_eval_log(log.location)
        assert back.status == "error" and not back.samples
        assert "422" in back.error.message and "delta" in back.error.message
    with pytest.raises(InvalidInputError, match="delta"):  # the same refusal, before the eval, in the ordered mode
        example.paired_task(samples, PairedEarlyStopping(server.url, model_a=A, model_b=B, delta=500))


def test_two_evals_share_one_server(server: Server, tmp_path: Path) -> None:
    samples, table = example.mock_benchmark(160)
    accept = PairedEarlyStopping(server.url, model_a=A, model_b=B, group="repo", delta=0)
    reject = PairedEarlyStopping(server.url, model_a=A, model_b=B, group="repo", delta=60)
    tasks = [example.paired_task(samples, accept), example.paired_task(samples, reject, recommended=False)]
    logs = eval(
        tasks, model=example.mock_models(table), log_dir=str(tmp_path), display="none", max_samples=6, max_tasks=4
    )
    assert len(logs) == 4 and all(log.status == "success" for log in logs)
    by_session: dict[str, list[Any]] = {}
    for log in logs:
        back = read_eval_log(log.location)
        by_session.setdefault(back.results.early_stopping.metadata["session_id"], []).append(back)
    assert set(by_session) == {accept.session_id, reject.session_id}
    for stopping, decision in ((accept, "accept"), (reject, "reject")):
        state = server.session(stopping.session_id)
        assert state["current"]["decision"] == decision
        pair = by_session[stopping.session_id]
        assert sorted(b.eval.model for b in pair) == [A, B]
        for back in pair:
            assert back.results.early_stopping.metadata["decision"] == decision
            assert len(back.samples) < len(samples)
        # Dataset order (no recommended order): the session saw the dataset's first k tasks.
        order = [s.id for s in samples] if stopping is reject else state["order"]
        assert state["current"]["mean_difference"] == pytest.approx(differences(table, order[: state["k"]]))


def test_models_run_one_after_the_other_save_on_the_second_only(server: Server, tmp_path: Path) -> None:
    samples, table = example.mock_benchmark(120)
    stopping = PairedEarlyStopping(server.url, model_a=A, model_b=B, group="repo", sequence="completion")
    logs = run_eval(
        example.paired_task(samples, stopping), example.mock_models(table), tmp_path, max_samples=6, max_tasks=1
    )
    first, second = (logs[m] for m in sorted(logs, key=lambda m: logs[m].stats.started_at))
    assert len(first.samples) == len(samples)  # nothing to pair with yet: it runs in full
    assert any("only" in n for n in first.results.early_stopping.metadata["notes"])
    assert len(second.samples) < len(samples)
    assert second.results.early_stopping.metadata["decision"] == "accept"


def test_a_concluded_session_runs_one_sample_per_model_and_keeps_the_summary(server: Server, tmp_path: Path) -> None:
    samples, table = example.mock_benchmark(40)
    with SufficiencyClient(server.url) as api:
        s = api.create_session(system_a=A, system_b=B, universe={"task_ids": [x.id for x in samples]})
        rows = [{"task_id": x.id, "system": m, "trial": 0, "outcome": float(m == A)} for x in samples for m in (A, B)]
        assert api.observe(s["id"], rows)["status"] == "concluded"
    stopping = PairedEarlyStopping(server.url, model_a=A, model_b=B, session_id=s["id"])
    logs = run_eval(example.paired_task(samples, stopping), example.mock_models(table), tmp_path, max_samples=4)
    for log in logs.values():
        # inspect drops the summary of a run whose every sample stopped: the first one always runs.
        assert len(log.samples) == 1 and len(log.results.early_stopping.early_stops) == 39
        assert log.results.early_stopping.metadata["decision"] == "accept"


def test_epochs_are_the_sessions_trials(server: Server, tmp_path: Path) -> None:
    samples, table = example.mock_benchmark(80)
    stopping = PairedEarlyStopping(server.url, model_a=A, model_b=B, group="repo")
    dataset = stopping.recommended_order(samples, epochs=2)
    task = Task(dataset=dataset, solver=generate(), scorer=match(), early_stopping=stopping, epochs=2)
    logs = run_eval(task, example.mock_models(table), tmp_path, max_samples=6)
    state = server.session(stopping.session_id)
    assert state["trials"] == 2 and state["status"] == "concluded"
    for log in logs.values():
        # Epoch 1 of every sample is scheduled before epoch 2 of any: a task counts once its second is in.
        assert {s.epoch for s in log.samples} == {1, 2} and len(log.samples) < 2 * len(samples)
        assert log.results.early_stopping.metadata["k"] == state["k"]
    assert state["current"]["mean_difference"] == pytest.approx(differences(table, state["order"][: state["k"]]))


def test_the_example_prints_one_json_line(server: Server, tmp_path: Path) -> None:
    out = (
        subprocess.run(
            [
                sys.executable,
                str(REPO / "examples" / "inspect_paired.py"),
                "--url",
                server.url,
                "--log-dir",
                str(tmp_path),
                "--samples",
                "120",
                "--max-samples",
                "4",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        .stdout.strip()
        .splitlines()
    )
    assert len(out) == 1
    line = json.loads(out[0])
    assert line["decision"] == "accept" and line["samples_total"] == 120
    assert all(n < 120 for n in line["samples_run"].values())
    assert line["session_id"] and server.session(line["session_id"])["status"] == "concluded"


@pytest.mark.parametrize("recommended", [True, False], ids=["recommended-order", "dataset-order"])
def test_resuming_skips_the_tasks_the_session_holds_and_posts_nothing_again(
    server: Server, tmp_path: Path, recommended: bool
) -> None:
    """A session already holds 10 tasks for both models, one of them with an outcome the new run
    would not give (a non-deterministic model): resumed with ``session_id=``, neither model runs
    them again, nothing of them is posted again (no 409), and early stopping stays on."""
    samples, table = example.mock_benchmark(160)
    with SufficiencyClient(server.url) as api:
        s = api.create_session(system_a=A, system_b=B, universe={
            "task_ids": [x.id for x in samples], "groups": [x.metadata["repo"] for x in samples]})
        held = s["order"][:10]
        stored = {m: {t: float(table[m][t]) for t in held} for m in (A, B)}
        stored[A][held[3]] = 1.0 - stored[A][held[3]]  # the earlier run of that sample went the other way
        rows = [{"task_id": t, "system": m, "trial": 0, "outcome": stored[m][t]} for t in held for m in (A, B)]
        first = api.observe(s["id"], rows)
        assert first["k"] == 10 and first["observed_task_ids"] == held and first["status"] == "running"

    posted: list[dict[str, Any]] = []

    async def recording(request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and request.url.path.endswith("/observations"):
            posted.extend(json.loads(request.content)["observations"])
        async with httpx.AsyncClient() as http:
            answer = await http.send(request)
        return httpx.Response(answer.status_code, content=answer.content, headers=answer.headers)

    stopping = PairedEarlyStopping(server.url, model_a=A, model_b=B, session_id=s["id"], group="repo",
                                   transport=httpx.MockTransport(recording))
    task = example.paired_task(samples, stopping, recommended=recommended)
    logs = run_eval(task, example.mock_models(table), tmp_path, max_samples=8)
    state = server.session(s["id"])
    assert posted and not {r["task_id"] for r in posted} & set(held)  # nothing held was sent again
    assert state["observed_task_ids"][:10] == held and state["status"] == "concluded"
    for model, log in logs.items():
        summary = log.results.early_stopping
        meta = summary.metadata
        assert meta["status"] == "concluded" and meta["error"] is None and meta["decision"] == "accept", meta
        assert meta["already_observed"] == 10 and meta["stopped"] is True
        ran = {x.id for x in log.samples}
        assert not ran & set(held), model  # not run again
        again = [e for e in summary.early_stops if e.id in held]
        assert sorted(e.id for e in again) == sorted(held)
        assert all("already holds" in (e.reason or "") for e in again)
        assert sorted(ran | {e.id for e in summary.early_stops}) == sorted(x.id for x in samples)
    # The session's difference counts the held outcomes as stored (the flipped one too), then the new pairs.
    seen = state["observed_task_ids"][: state["k"]]
    expected = sum(stored[A].get(t, float(table[A][t])) - stored[B].get(t, float(table[B][t])) for t in seen)
    assert state["current"]["mean_difference"] == pytest.approx(expected / len(seen))
