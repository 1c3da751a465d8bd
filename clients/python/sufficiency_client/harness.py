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
declared checkpoints (``budgets``), so the same loop stays honest. ``AsyncLiveMonitor`` is
the same for asyncio harnesses (``monitor = await AsyncLiveMonitor.start(client, ...)``).
No dependency on any harness framework.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sufficiency_client.client import AsyncSufficiencyClient, SufficiencyClient

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
    if outcome_a is not None:
        rows.append({"task_id": task_id, "system": system_a, "trial": trial, "outcome": float(outcome_a)})
    if outcome_b is not None:
        rows.append({"task_id": task_id, "system": system_b, "trial": trial, "outcome": float(outcome_b)})
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
        self._adopt(state)

    def _adopt(self, state: Mapping[str, Any]) -> None:
        self.session_id: str = str(state["id"])
        self.system_a: str = state["system_a"]
        self.system_b: str = state["system_b"]
        self.order: list[str] = list(state["order"])
        self.verdict = Verdict.of(state)
        # A resumed session already holds some tasks: tasks() must not offer them again.
        self._recorded: set[str] = set(state.get("observed_task_ids") or ())

    def record(self, task_id: str, outcome_a: float | None = None, outcome_b: float | None = None, *,
               trial: int = 0) -> Verdict:
        """Record the outcomes of one task (either side may come later) and return the verdict.
        Re-recording the same outcome is harmless (idempotent)."""
        state = self.client.observe(self.session_id, _rows(self.system_a, self.system_b, task_id, outcome_a,
                                                           outcome_b, trial))
        self._recorded.add(task_id)
        self.verdict = Verdict.of(state)
        return self.verdict

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
        self.verdict = Verdict.of(self.client.get_session(self.session_id))
        return self.verdict


class AsyncLiveMonitor:
    """Asynchronous adapter; build it with ``await AsyncLiveMonitor.start(client, ...)``."""

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
        state = await self.client.observe(self.session_id, _rows(self.system_a, self.system_b, task_id,
                                                                 outcome_a, outcome_b, trial))
        self.verdict = Verdict.of(state)
        return self.verdict

    async def record_outcomes(self, task_id: str, outcomes: Mapping[str, float], *, trial: int = 0) -> Verdict:
        return await self.record(task_id, outcomes.get(self.system_a), outcomes.get(self.system_b), trial=trial)

    def should_stop(self) -> bool:
        return self.verdict.stop

    async def refresh(self) -> Verdict:
        self.verdict = Verdict.of(await self.client.get_session(self.session_id))
        return self.verdict


__all__ = ["LiveMonitor", "AsyncLiveMonitor", "Verdict"]
