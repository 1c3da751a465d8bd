"""Harness adapter: record each finished task, ask whether to stop.

An evaluation loop that compares two systems on one benchmark calls the monitor after each
task; the monitor keeps a session on the service (``/v1/sessions``), so the decision is
anytime-valid by default (checking after every task is then allowed), and it hands out the
recommended stratified task order::

    from sufficiency_client import LiveMonitor, SufficiencyClient

    with SufficiencyClient("http://127.0.0.1:8000") as client:
        monitor = LiveMonitor(client, system_a="new-agent", system_b="baseline",
                              universe={"task-1": "django", "task-2": "flask", ...}, delta=0)
        for task_id in monitor.tasks():            # recommended order; ends when the run may stop
            a = run_agent(new_agent, task_id)      # your harness: outcome in [0, 1]
            b = run_agent(baseline, task_id)
            verdict = monitor.record(task_id, a, b)
        print(verdict.decision, verdict.reason)    # accept / reject / defer

For a harness that scores samples itself (an inspect_ai-style early-stopping hook), hand
the scores of both systems per sample to ``record_outcomes`` and stop when it says so::

    def on_sample_scored(sample_id: str, scores: dict[str, float]) -> bool:
        return monitor.record_outcomes(sample_id, scores).stop   # True: stop the evaluation

With a fixed-sample rule (``rule="bootstrap"``, ...) the session concludes only at the
declared checkpoints (``budgets``), so the same loop stays honest. ``AsyncLiveMonitor`` records
and answers the same for asyncio harnesses (``monitor = await AsyncLiveMonitor.start(client, ...)``)
but has no ``tasks()`` and does not track recorded tasks: iterate ``monitor.order``, and after a
resume (``session_id=``) skip ``monitor.verdict.state["observed_task_ids"]`` yourself.
No dependency on any harness framework.

Both monitors may be called concurrently (threads, tasks): the verdict they keep is the newest
state by ``k``, whatever order the answers arrive in, so a concluded verdict stays concluded.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from sufficiency_client.client import AsyncSufficiencyClient, SufficiencyClient, _finite

Universe = Mapping[str, str | None] | Sequence[str]


@dataclass(frozen=True)
class Verdict:
    """The session after the last record: ``stop`` is true once it concluded (accept or
    reject) or used its last checkpoint's budget without concluding."""

    stop: bool
    decision: str
    reason: str
    status: str
    k: int
    n: int
    next_task_ids: list[str] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, state: Mapping[str, Any]) -> Verdict:
        current = state["current"]
        nxt = current.get("next") or {}
        return cls(
            stop=state["status"] != "running",
            decision=current["decision"],
            reason=current["reason"],
            status=state["status"],
            k=state["k"],
            n=state["N"],
            next_task_ids=list(nxt.get("task_ids") or []),
            state=dict(state),
        )


class _State(Protocol):
    @property
    def k(self) -> int: ...
    @property
    def stop(self) -> bool: ...


_S = TypeVar("_S", bound=_State)


def _newest(current: _S | None, new: _S) -> _S:
    """The later of two answers of one session: the server's states only grow in ``k`` (observed
    tasks), but concurrent calls' answers can arrive in any order; keeping the last one to arrive
    could turn a concluded verdict back into a running one."""
    if current is None or new.k > current.k or (new.k == current.k and new.stop >= current.stop):
        return new
    return current


def _session_body(system_a: str, system_b: str, universe: Universe | None, options: Mapping[str, Any]) -> dict:
    body: dict[str, Any] = {"system_a": system_a, "system_b": system_b, **options}
    if universe is not None:
        if isinstance(universe, Mapping):
            body["universe"] = {"task_ids": list(universe), "groups": list(universe.values())}
        else:
            body["universe"] = {"task_ids": list(universe)}
    return body


def _rows(system_a: str, system_b: str, task_id: str, outcome_a: float | None, outcome_b: float | None,
          trial: int) -> list[dict[str, Any]]:
    rows = []
    for system, outcome, name in ((system_a, outcome_a, "outcome_a"), (system_b, outcome_b, "outcome_b")):
        if outcome is not None:
            value = _finite(outcome, name, f"task {task_id!r} of {system}")
            rows.append({"task_id": task_id, "system": system, "trial": trial, "outcome": value})
    if not rows:
        raise ValueError("record at least one outcome")
    return rows


class LiveMonitor:
    """Synchronous adapter over a session. ``universe``: ``{task_id: group}`` or task ids
    (or pass ``dataset_id=`` and ``group=``); other keywords are session options (``rule``,
    ``delta``, ``a``, ``floor``, ``budgets``, ``trials``, ``policy``, ``seed``). Pass
    ``session_id=`` to resume a session created earlier."""

    def __init__(self, client: SufficiencyClient, *, system_a: str = "A", system_b: str = "B",
                 universe: Universe | None = None, session_id: str | None = None, **options: Any):
        self.client = client
        if session_id is None:
            state = client.create_session(**_session_body(system_a, system_b, universe, options))
        else:
            state = client.get_session(session_id)
        self.session_id: str = str(state["id"])
        self.system_a: str = state["system_a"]
        self.system_b: str = state["system_b"]
        self.order: list[str] = list(state["order"])
        self.verdict = Verdict.of(state)
        self._recorded: set[str] = set()
        self._lock = threading.Lock()  # threads' answers: compare and keep under one lock
        self._sync(state)

    def _sync(self, state: Mapping[str, Any]) -> Verdict:
        """Keep the newer verdict, and every task the server holds (a resumed session, or a record
        whose answer was lost to a timeout after the server stored it): tasks() skips them."""
        with self._lock:
            self._recorded.update(state.get("observed_task_ids") or ())
            self.verdict = _newest(self.verdict, Verdict.of(state))
            return self.verdict

    def record(self, task_id: str, outcome_a: float | None = None, outcome_b: float | None = None, *,
               trial: int = 0) -> Verdict:
        """Record the outcomes of one task (either side may come later) and return the newest
        verdict. Re-recording the same outcome is harmless (idempotent); a NaN or infinite
        outcome is an ``InvalidInputError`` before any request."""
        state = self.client.observe(self.session_id, _rows(self.system_a, self.system_b, task_id, outcome_a,
                                                           outcome_b, trial))
        self._recorded.add(task_id)
        return self._sync(state)

    def record_outcomes(self, task_id: str, outcomes: Mapping[str, float], *, trial: int = 0) -> Verdict:
        """``outcomes`` keyed by system name (``{system_a: 1.0, system_b: 0.0}``)."""
        return self.record(task_id, outcomes.get(self.system_a), outcomes.get(self.system_b), trial=trial)

    def should_stop(self) -> bool:
        return self.verdict.stop

    def tasks(self) -> Iterator[str]:
        """The recommended order, skipping recorded tasks, until the verdict says stop."""
        for task_id in self.order:
            if self.verdict.stop:
                return
            if task_id not in self._recorded:
                yield task_id

    def refresh(self) -> Verdict:
        """Read the session again, e.g. after a ``TransportError`` from ``record``: the server may
        have stored that observation, and ``tasks()`` then no longer offers it."""
        return self._sync(self.client.get_session(self.session_id))


class AsyncLiveMonitor:
    """Asynchronous adapter; build it with ``await AsyncLiveMonitor.start(client, ...)``.
    Unlike ``LiveMonitor`` it has no ``tasks()`` and keeps no set of recorded tasks: iterate
    ``order`` and skip ``verdict.state["observed_task_ids"]`` (after ``refresh()``) yourself."""

    def __init__(self, client: AsyncSufficiencyClient, state: Mapping[str, Any]):
        self.client = client
        self.session_id: str = str(state["id"])
        self.system_a: str = state["system_a"]
        self.system_b: str = state["system_b"]
        self.order: list[str] = list(state["order"])
        self.verdict = Verdict.of(state)

    @classmethod
    async def start(cls, client: AsyncSufficiencyClient, *, system_a: str = "A", system_b: str = "B",
                    universe: Universe | None = None, session_id: str | None = None,
                    **options: Any) -> AsyncLiveMonitor:
        if session_id is None:
            state = await client.create_session(**_session_body(system_a, system_b, universe, options))
        else:
            state = await client.get_session(session_id)
        return cls(client, state)

    async def record(self, task_id: str, outcome_a: float | None = None, outcome_b: float | None = None, *,
                     trial: int = 0) -> Verdict:
        """As ``LiveMonitor.record``: the newest verdict by ``k`` (concurrent calls' answers may
        arrive in any order)."""
        state = await self.client.observe(self.session_id, _rows(self.system_a, self.system_b, task_id,
                                                                 outcome_a, outcome_b, trial))
        self.verdict = _newest(self.verdict, Verdict.of(state))
        return self.verdict

    async def record_outcomes(self, task_id: str, outcomes: Mapping[str, float], *, trial: int = 0) -> Verdict:
        return await self.record(task_id, outcomes.get(self.system_a), outcomes.get(self.system_b), trial=trial)

    def should_stop(self) -> bool:
        return self.verdict.stop

    async def refresh(self) -> Verdict:
        self.verdict = _newest(self.verdict, Verdict.of(await self.client.get_session(self.session_id)))
        return self.verdict


__all__ = ["LiveMonitor", "AsyncLiveMonitor", "Verdict"]
