"""inspect_ai integration: stop an A-versus-B evaluation once a live session concludes.

``PairedEarlyStopping`` implements inspect_ai's ``EarlyStopping`` protocol for one task run on
two models in one ``eval`` call. Sample ids pair the two runs; a sample's group comes from its
metadata; the rule (``anytime`` by default: it may be consulted after every sample), δ and
checkpoints are the session's (``/v1/sessions``). Once the session concludes (or exhausts its
last checkpoint) every sample not yet started is skipped, for both models; samples in flight
finish. Continuing a session (``session_id=``), the samples whose task it already holds for both
models are skipped too and not posted again (``already_observed`` in the summary counts them),
with or without ``recommended_order``. The early-stopping summary of each model's log
(``EvalLog.results.early_stopping``) carries the decision, the reason, ``k`` and the session id.
The step at which an ``anytime`` session stops follows the plan order
(``current.statistic.stopped_at`` of the session); ``k``, the tasks the session had observed when
the concluding answer came, can be larger and vary from run to run, since pairs scored
concurrently reach the session in one batch::

    from inspect_ai import Task, eval
    from sufficiency_client.inspect import PairedEarlyStopping

    stopping = PairedEarlyStopping("http://127.0.0.1:8000", model_a="openai/new", model_b="openai/old",
                                   group="repo", delta=0)
    task = Task(dataset=stopping.recommended_order(dataset), solver=..., scorer=..., early_stopping=stopping)
    eval(task, model=["openai/new", "openai/old"], max_samples=8)

Observations reach the session in the order inspect schedules the samples (dataset order, epoch
by epoch), not in the order they finish: a sample's pair is sent once it and every sample
scheduled before it are scored for both models. Finishing order depends on how long a sample
takes, which often depends on its outcome; the rules' guarantees assume an order that does not
(SPEC §4.4). A sample that errors without a score therefore holds every later pair (skipping
it could depend on its outcome); the summary then counts the pairs held (``pairs_held``) and
names the sample. ``sequence="completion"`` sends each pair as soon as it is complete instead
(no waiting behind a sample that errored without a score, at that cost).

The service is advice, never a dependency of the eval: if it cannot be reached (or something
else answers, with a body that is not JSON), or refuses an observation, mid-run, the eval runs
to the end without early stopping and the summary says so.
A refused declaration (e.g. a bad δ: a 4xx when the session is created) fails the task before
any sample runs, since that is a configuration error to fix.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import anyio
import httpx
from inspect_ai.dataset import Dataset, MemoryDataset, Sample
from inspect_ai.scorer import value_to_float
from inspect_ai.util import EarlyStop

from sufficiency_client.client import (
    DEFAULT_URL,
    APIError,
    AsyncSufficiencyClient,
    SufficiencyClient,
    TransportError,
    UnexpectedResponseError,
)
from sufficiency_client.harness import Verdict

if TYPE_CHECKING:
    from inspect_ai.log import EvalSpec
    from inspect_ai.scorer import SampleScore

logger = logging.getLogger(__name__)

MANAGER = "sufficiency"
_to_float = value_to_float()

# The model of the task run a hook is called for: inspect calls ``start_task`` once per model and
# the other hooks without one, from tasks spawned after ``start_task`` returned in that run.
_current_model: contextvars.ContextVar[str | None] = contextvars.ContextVar("sufficiency_model", default=None)

# The service is out of reach: a failed connection, or a non-JSON answer from whatever stands in its place.
_UNREACHABLE = (TransportError, UnexpectedResponseError)

Grouping = str | Callable[[Sample], str | None] | None
Outcome = Callable[[Mapping[str, "SampleScore"]], float]


@dataclass
class _Pending:
    """Outcomes of one planned (sample, epoch) entry, by side, until its pair is sent."""

    a: float | None = None
    b: float | None = None
    sent: bool = False


class PairedEarlyStopping:
    """An inspect_ai ``EarlyStopping`` comparing ``model_a`` with ``model_b`` as a live session.

    ``group``: a sample metadata key (or a function of the sample) naming its group, for the
    coverage floors; ``scorer``: which score is the outcome when the task has several (default:
    the only one); ``outcome``: a function of a sample's scores to an outcome in [0, 1] instead.
    Other keywords are session options (``rule``, ``delta``, ``a``, ``floor``, ``budgets``,
    ``policy``, ``seed``). ``session_id=`` continues a session declared earlier, skipping the
    samples whose task it already holds for both models.
    """

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        model_a: object,
        model_b: object,
        group: Grouping = None,
        scorer: str | None = None,
        outcome: Outcome | None = None,
        rule: str = "anytime",
        sequence: Literal["schedule", "completion"] = "schedule",
        session_id: str | None = None,
        api_key: str | None = None,
        timeout: float = 10.0,
        transport: httpx.AsyncBaseTransport | None = None,
        **session_options: Any,
    ):
        self.model_a, self.model_b = str(model_a), str(model_b)
        if self.model_a == self.model_b:
            raise ValueError("model_a and model_b must be two different models")
        if sequence not in ("schedule", "completion"):
            raise ValueError("sequence must be 'schedule' or 'completion'")
        self.url, self.api_key, self.timeout, self.transport = url, api_key, timeout, transport
        self.group, self.scorer, self.outcome, self.sequence = group, scorer, outcome, sequence
        self.options: dict[str, Any] = {"rule": rule, **session_options}
        self.session_id: str | None = session_id
        self.verdict: Verdict | None = None
        self.order: list[str] | None = None  # the session's recommended order
        self._client: AsyncSufficiencyClient | None = None
        self._active: set[str] = set()
        self._started: set[str] = set()
        self._scheduled: dict[str, int] = {}
        self._skipped: dict[str, int] = {}
        self._observed: set[str] = set()  # tasks the session held for both models when adopted
        self._resumed: dict[str, int] = {}  # per model: samples skipped because the session held them
        self._plan: list[tuple[str, int]] = []
        self._pending: dict[tuple[str, int], _Pending] = {}
        self._cursor = 0
        self._sent = 0
        self._trials = 1
        self._problem: dict[str, Any] | None = None
        self._notes: list[str] = []
        self._setup_lock: anyio.Lock | None = None
        self._send_lock: anyio.Lock | None = None

    # -- declaring the session ------------------------------------------------------------

    def _group_of(self, sample: Sample) -> str | None:
        if self.group is None:
            return None
        if callable(self.group):
            value = self.group(sample)
        else:
            metadata = sample.metadata or {}
            if self.group not in metadata:
                raise ValueError(f"sample {sample.id!r} has no metadata key {self.group!r} (group=)")
            value = metadata[self.group]
        return None if value is None else str(value)

    def _declaration(self, samples: Sequence[Sample], trials: int) -> dict[str, Any]:
        ids = [str(s.id) for s in samples]
        if any(s.id is None for s in samples):
            raise ValueError("every sample needs an id: the two models' runs are paired by it")
        if len(set(ids)) != len(ids):
            raise ValueError("sample ids must stay distinct as strings (they are the session's task ids)")
        universe: dict[str, Any] = {"task_ids": ids}
        if self.group is not None:
            universe["groups"] = [self._group_of(s) for s in samples]
        return {
            "system_a": self.model_a,
            "system_b": self.model_b,
            "universe": universe,
            "trials": trials,
            **self.options,
        }

    def recommended_order(self, dataset: Dataset | Sequence[Sample], epochs: int = 1) -> Dataset:
        """Declare the session now and return the dataset in its recommended order (stratified
        and seeded: every prefix meets the coverage floors), so inspect schedules the samples in
        that order. Call it before building the ``Task`` (``epochs``: the eval's, one trial per
        epoch); without the service the dataset comes back unchanged (and the session is declared
        when the eval starts). Resuming (``session_id=``), the tasks the session already holds stay
        in the dataset and are skipped when inspect schedules them."""
        samples = list(dataset)
        try:
            with SufficiencyClient(self.url, timeout=self.timeout, api_key=self.api_key) as client:
                if self.session_id is None:
                    state = client.create_session(**self._declaration(samples, epochs))
                else:
                    state = client.get_session(self.session_id)
        except _UNREACHABLE as exc:
            logger.warning("sufficiency: %s; the dataset keeps its own order", exc)
            self._notes.append(f"recommended order not applied: {exc}")
            return dataset if isinstance(dataset, Dataset) else MemoryDataset(samples)
        self._adopt(state)
        assert self.order is not None
        by_id = {str(s.id): s for s in samples}
        missing = [t for t in self.order if t not in by_id]
        if missing or len(by_id) != len(self.order):
            raise ValueError(f"the dataset's sample ids differ from the session's tasks (e.g. {missing[:3]})")
        name = getattr(dataset, "name", None)
        return MemoryDataset([by_id[t] for t in self.order], name=name, shuffled=False)

    def _adopt(self, state: Mapping[str, Any]) -> None:
        if (state["system_a"], state["system_b"]) != (self.model_a, self.model_b):
            raise ValueError(
                f"session {state['id']} compares {state['system_a']} with {state['system_b']}, "
                f"not {self.model_a} with {self.model_b}"
            )
        self.session_id = str(state["id"])
        self.order = list(state["order"])
        self._trials = int(state.get("trials", 1))
        self._observed = {str(t) for t in state.get("observed_task_ids") or ()}
        self.verdict = Verdict.of(state)
        self._mark_observed()

    def _mark_observed(self) -> None:
        """The planned entries of tasks the session already holds count as sent: they are neither
        run nor posted again, and the pairs after them do not wait for them."""
        for key in self._plan:
            if key[0] in self._observed:
                self._pending.setdefault(key, _Pending()).sent = True

    # -- the EarlyStopping protocol --------------------------------------------------------

    async def start_task(self, task: EvalSpec, samples: list[Sample], epochs: int) -> str:
        model = str(task.model)
        if model not in (self.model_a, self.model_b):
            raise ValueError(f"PairedEarlyStopping compares {self.model_a} with {self.model_b}; this eval runs {model}")
        if model in self._active:
            raise ValueError(f"{model} is already running with this PairedEarlyStopping (one task per instance)")
        _current_model.set(model)
        if self._setup_lock is None or self._send_lock is None:
            self._setup_lock, self._send_lock = anyio.Lock(), anyio.Lock()
        self._active.add(model)
        try:
            async with self._setup_lock:
                await self._start(model, task, samples, epochs)
        except BaseException:
            await self._leave(model)
            raise
        return MANAGER

    async def _start(self, model: str, task: EvalSpec, samples: list[Sample], epochs: int) -> None:
        self._started.add(model)
        self._scheduled[model] = 0
        self._skipped[model] = 0
        self._resumed[model] = 0
        if self._client is None:
            self._client = AsyncSufficiencyClient(
                self.url, timeout=self.timeout, api_key=self.api_key, transport=self.transport
            )
        if task.config.max_samples is None:
            self._note(
                "max_samples is not set: inspect may start every sample before any finishes, leaving nothing to stop"
            )
        plan = [(str(s.id), epoch) for epoch in range(1, epochs + 1) for s in samples]
        if not self._plan:
            self._plan = plan
            self._mark_observed()  # when recommended_order adopted the session before the plan was known
        elif sorted(plan) != sorted(self._plan):
            raise ValueError("the two models run different samples; they cannot be paired")
        if self._problem is not None:
            return
        if self.session_id is None:
            try:
                state = await self._client.create_session(**self._declaration(samples, epochs))
            except _UNREACHABLE as exc:
                self._fail("unavailable", f"the session could not be declared: {exc}")
                return
            # an APIError (e.g. 422 for a bad delta) propagates: the task fails before any sample runs
            self._adopt(state)
        elif self.verdict is None:
            try:
                self._adopt(await self._client.get_session(self.session_id))
            except _UNREACHABLE as exc:
                self._fail("unavailable", f"the session could not be read: {exc}")
                return
        if self._trials != epochs:
            raise ValueError(f"the session counts {self._trials} trial(s) per task; the eval runs {epochs} epoch(s)")

    async def schedule_sample(self, id: str | int, epoch: int) -> EarlyStop | None:
        model = self._model()
        first = self._scheduled.get(model, 0) == 0
        self._scheduled[model] = self._scheduled.get(model, 0) + 1
        v = self.verdict
        stop = v is not None and v.stop and self._problem is None
        # The first sample of a run that would skip them all runs: inspect drops the summary when
        # every sample stops (a concluded session, or one that already holds every planned task).
        if first and (stop or all(t in self._observed for t, _ in self._plan)):
            return None
        if str(id) in self._observed:
            self._resumed[model] = self._resumed.get(model, 0) + 1
            return EarlyStop(
                id=id,
                epoch=epoch,
                reason=f"sufficiency session {self.session_id} already holds this task for both models",
                metadata={"session_id": self.session_id, "already_observed": True},
            )
        if not stop:
            return None
        assert v is not None
        self._skipped[model] = self._skipped.get(model, 0) + 1
        return EarlyStop(
            id=id,
            epoch=epoch,
            reason=f"sufficiency session {self.session_id}: {v.decision} ({v.reason}) at k={v.k} of {v.n}",
            metadata={"session_id": self.session_id, "decision": v.decision, "reason": v.reason, "k": v.k},
        )

    async def complete_sample(self, id: str | int, epoch: int, scores: dict[str, SampleScore]) -> None:
        if self._problem is not None or self.session_id is None or (self.verdict and self.verdict.stop):
            return
        if str(id) in self._observed:
            return  # held already (the one sample run to keep the summary): never posted again
        model = self._model()
        try:
            value = self._outcome(scores)
        except ValueError as exc:
            self._fail("error", f"sample {id!r} of {model}: {exc}")
            return
        entry = self._pending.setdefault((str(id), epoch), _Pending())
        if model == self.model_a:
            entry.a = value
        else:
            entry.b = value
        assert self._send_lock is not None
        async with self._send_lock:  # batches reach the service in the order they were formed
            if self._problem is not None or (self.verdict and self.verdict.stop):
                return  # decided (or switched off) while this call waited: nothing more to send
            rows = self._ready()
            if not rows:
                return
            assert self._client is not None
            try:
                state = await self._client.observe(self.session_id, rows)
            except _UNREACHABLE as exc:
                self._fail("unavailable", f"the service could not be reached after {self._sent} tasks: {exc}")
                return
            except APIError as exc:
                self._fail("error", f"the service refused an observation: {exc}")
                return
            self._sent += len(rows) // 2
            if not (self.verdict and self.verdict.stop):
                self.verdict = Verdict.of(state)

    async def complete_task(self) -> dict[str, Any]:
        model = self._model()
        await self._leave(model)
        return self.summary(model)

    async def _leave(self, model: str) -> None:
        """Once no run is active, drop what belongs to this event loop: each ``eval()`` has its own."""
        self._active.discard(model)
        if not self._active:
            self._setup_lock = self._send_lock = None
            if self._client is not None:
                client, self._client = self._client, None
                await client.aclose()

    # -- helpers ---------------------------------------------------------------------------

    def _model(self) -> str:
        model = _current_model.get()
        if model is None:
            from inspect_ai.model import get_model

            model = str(get_model())
        return model

    def _outcome(self, scores: Mapping[str, SampleScore]) -> float:
        if self.outcome is not None:
            value = float(self.outcome(scores))
        else:
            if self.scorer is not None:
                if self.scorer not in scores:
                    raise ValueError(f"no score named {self.scorer!r} (scorer=); scores: {sorted(scores)}")
                score = scores[self.scorer]
            elif len(scores) == 1:
                score = next(iter(scores.values()))
            else:
                raise ValueError(f"several scores {sorted(scores)}: name one with scorer=")
            if isinstance(score.score.value, Mapping | list):
                raise ValueError("the score value is not a scalar: pass outcome= to map it into [0, 1]")
            value = _to_float(score.score.value)
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"outcome {value} is outside [0, 1]: pass outcome= to map the score")
        return value

    def _ready(self) -> list[dict[str, Any]]:
        """Rows of the pairs that may be sent now, in plan order (``schedule``) or any (``completion``)."""
        rows: list[dict[str, Any]] = []

        def take(key: tuple[str, int], entry: _Pending) -> None:
            entry.sent = True
            trial = key[1] - 1
            rows.append({"task_id": key[0], "system": self.model_a, "trial": trial, "outcome": entry.a})
            rows.append({"task_id": key[0], "system": self.model_b, "trial": trial, "outcome": entry.b})

        if self.sequence == "schedule":
            while (i := self._past_sent()) < len(self._plan):
                entry = self._pending.get(self._plan[i])
                if entry is None or entry.a is None or entry.b is None:
                    break
                take(self._plan[i], entry)
        else:
            for key, entry in self._pending.items():
                if not entry.sent and entry.a is not None and entry.b is not None:
                    take(key, entry)
        return rows

    def _past_sent(self) -> int:
        """The cursor, moved past the planned entries already sent (or held by a resumed session)."""
        while self._cursor < len(self._plan):
            entry = self._pending.get(self._plan[self._cursor])
            if entry is None or not entry.sent:
                break
            self._cursor += 1
        return self._cursor

    def _held(self) -> tuple[int, str | None]:
        """``schedule`` only: how many scored pairs wait behind the first planned entry not scored by
        both models, and a note naming that sample (none when a model that lacks it has not started:
        the "only ... has run" note covers that)."""
        if self.sequence != "schedule" or (cursor := self._past_sent()) >= len(self._plan):
            return 0, None
        held = sum(1 for key in self._plan[cursor + 1:]
                   if (e := self._pending.get(key)) is not None and not e.sent and e.a is not None and e.b is not None)
        sample, epoch = self._plan[cursor]
        entry = self._pending.get((sample, epoch), _Pending())
        lacking = [m for m, value in ((self.model_a, entry.a), (self.model_b, entry.b)) if value is None]
        if not held or not lacking or not set(lacking) <= self._started:  # lacking none: that pair is being sent
            return held, None
        who, where = " and ".join(lacking), f"behind sample {sample!r} (epoch {epoch})"
        if set(lacking) & self._active:
            return held, f"{held} scored pair(s) wait {where}, not yet scored by {who}"
        return held, (f"{held} scored pair(s) held {where}, which {who} ended without scoring (an error?): "
                      "sequence='schedule' sends pairs in the scheduled order only; 'completion' would not wait")

    def _note(self, text: str) -> None:
        if text not in self._notes:
            logger.warning("sufficiency: %s", text)
            self._notes.append(text)

    def _fail(self, status: str, message: str) -> None:
        if self._problem is None:
            self._problem = {"status": status, "error": message}
            logger.warning("sufficiency: %s; the eval goes on without early stopping", message)

    def summary(self, model: str | None = None) -> dict[str, Any]:
        """What this log's ``results.early_stopping.metadata`` says."""
        v = self.verdict
        out: dict[str, Any] = {
            "session_id": self.session_id,
            "url": self.url,
            "model": model,
            "model_a": self.model_a,
            "model_b": self.model_b,
            "rule": self.options.get("rule"),
            "delta": self.options.get("delta", 0.0),
            "sequence": self.sequence,
            "status": v.status if v else None,
            "decision": v.decision if v else None,
            "reason": v.reason if v else None,
            "k": v.k if v else 0,
            "N": v.n if v else len({t for t, _ in self._plan}),
            "stopped": self._skipped.get(model or "", 0) > 0,
            "already_observed": self._resumed.get(model or "", 0),
            "tasks_sent": self._sent,
            "pairs_held": 0,
            "error": None,
            "notes": list(self._notes),
        }
        if v is not None:
            out["mean_difference"] = v.state["current"].get("mean_difference")
        if self._problem is not None:
            out.update(self._problem)
            resumed = self._resumed.get(model or "", 0)
            out["notes"].append("early stopping was switched off for the rest of the run; every sample ran"
                                + (f" but the {resumed} the session already held" if resumed else ""))
        elif v is not None and not v.stop and self._active:
            out["notes"].append(
                f"the session had not concluded when {model} finished; {', '.join(sorted(self._active))} still running"
            )
        elif v is not None and not v.stop and len(self._started) < 2:
            out["notes"].append(f"only {model} has run: a pair needs both models (run them in one eval call)")
        if self._problem is None and v is not None and not v.stop:
            out["pairs_held"], note = self._held()
            if note is not None:
                logger.warning("sufficiency: %s", note)
                out["notes"].append(note)
        return out


__all__ = ["PairedEarlyStopping", "MANAGER"]
