"""Harness adapter for placing a new entry on a stored leaderboard (``/v1/placements``).

Only the new system runs; the board's outcomes are on the service. Ask for tasks in the
placement's order, record each outcome, stop when the rank interval is narrow enough::

    from sufficiency_client import PlacementMonitor, SufficiencyClient

    with SufficiencyClient("http://127.0.0.1:8000") as client:
        monitor = PlacementMonitor(client, dataset_id=board_id, system="my-agent", width=3)
        for task_id in monitor.tasks():              # the placement order; ends when it may stop
            monitor.record(task_id, run_agent(my_agent, task_id))
        print(monitor.placement.rank_low, monitor.placement.rank_high, monitor.placement.k)

The order is fixed when the placement is created and does not depend on the entry's
outcomes: that is what keeps the anytime guarantee whenever the loop stops. As with
``LiveMonitor``, the placement kept is the newest by ``k`` whatever order concurrent answers
arrive in; ``AsyncPlacementMonitor`` has neither ``tasks()`` nor ``refresh()``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from sufficiency_client.client import AsyncSufficiencyClient, SufficiencyClient, _finite
from sufficiency_client.harness import _newest


@dataclass(frozen=True)
class Placement:
    """The placement after the last record: ``stop`` once it concluded or ran out of tasks."""

    stop: bool
    status: str
    k: int
    n: int
    rank_low: int
    rank_high: int
    next_task_ids: list[str] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, state: Mapping[str, Any]) -> Placement:
        nxt = state.get("next") or {}
        return cls(
            stop=state["status"] != "running",
            status=state["status"],
            k=state["k"],
            n=state["N"],
            rank_low=state["rank_low"],
            rank_high=state["rank_high"],
            next_task_ids=list(nxt.get("task_ids") or []),
            state=dict(state),
        )


def _row(task_id: str, outcome: float, trial: int) -> dict[str, Any]:
    return {"task_id": task_id, "trial": trial, "outcome": _finite(outcome, "outcome", f"task {task_id!r}")}


class PlacementMonitor:
    """Synchronous adapter over a placement; keywords are placement options (``group``,
    ``width``, ``a``, ``correction``, ``trials``, ``seed``...). ``placement_id=`` resumes one."""

    def __init__(
        self,
        client: SufficiencyClient,
        *,
        dataset_id: str | None = None,
        system: str | None = None,
        placement_id: str | None = None,
        **options: Any,
    ):
        self.client = client
        if placement_id is None:
            if dataset_id is None or system is None:
                raise ValueError("give dataset_id and system, or the placement_id of an existing placement")
            state = client.place(dataset_id, system, **options)
        else:
            state = client.get_placement(placement_id)
        self.placement_id: str = str(state["id"])
        self.order: list[str] = list(state["order"])
        self.placement = Placement.of(state)
        self._recorded: set[str] = set()
        self._lock = threading.Lock()
        self._sync(state)

    def _sync(self, state: Mapping[str, Any]) -> Placement:
        """Keep the newer placement and every task the server holds (see ``LiveMonitor._sync``)."""
        with self._lock:
            self._recorded.update(state.get("observed_task_ids") or ())
            self.placement = _newest(self.placement, Placement.of(state))
            return self.placement

    def record(self, task_id: str, outcome: float, *, trial: int = 0) -> Placement:
        """Record one outcome of the entry (re-recording the same one is harmless); a NaN or
        infinite outcome is an ``InvalidInputError`` before any request."""
        state = self.client.observe_placement(self.placement_id, [_row(task_id, outcome, trial)])
        self._recorded.add(task_id)
        return self._sync(state)

    def should_stop(self) -> bool:
        return self.placement.stop

    def tasks(self) -> Iterator[str]:
        """The placement order, skipping recorded tasks, until the placement says stop."""
        for task_id in self.order:
            if self.placement.stop:
                return
            if task_id not in self._recorded:
                yield task_id

    def refresh(self) -> Placement:
        """Read the placement again, e.g. after a ``TransportError`` from ``record``: the server
        may have stored that outcome, and ``tasks()`` then no longer offers it."""
        return self._sync(self.client.get_placement(self.placement_id))


class AsyncPlacementMonitor:
    """Asynchronous adapter; build it with ``await AsyncPlacementMonitor.start(client, ...)``."""

    def __init__(self, client: AsyncSufficiencyClient, state: Mapping[str, Any]):
        self.client = client
        self.placement_id: str = str(state["id"])
        self.order: list[str] = list(state["order"])
        self.placement = Placement.of(state)

    @classmethod
    async def start(
        cls,
        client: AsyncSufficiencyClient,
        *,
        dataset_id: str | None = None,
        system: str | None = None,
        placement_id: str | None = None,
        **options: Any,
    ) -> AsyncPlacementMonitor:
        if placement_id is None:
            if dataset_id is None or system is None:
                raise ValueError("give dataset_id and system, or the placement_id of an existing placement")
            state = await client.place(dataset_id, system, **options)
        else:
            state = await client.get_placement(placement_id)
        return cls(client, state)

    async def record(self, task_id: str, outcome: float, *, trial: int = 0) -> Placement:
        state = await self.client.observe_placement(self.placement_id, [_row(task_id, outcome, trial)])
        self.placement = _newest(self.placement, Placement.of(state))
        return self.placement

    def should_stop(self) -> bool:
        return self.placement.stop


__all__ = ["PlacementMonitor", "AsyncPlacementMonitor", "Placement"]
