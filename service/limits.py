"""Every input that sizes work is checked here, against ``Settings``, before anything is
allocated: the answer is a 413 (too many bytes or records) or 422 (a spec that would be too
big) whose detail names the field, the estimate and the limit.

Each check computes its estimate from what the request says (the arithmetic of a budget
range, the tasks x orders x budgets the replay engine will hold, the tasks x groups of an
anytime coverage path), never by building the thing and measuring it. The domains call
these functions; the thresholds live in ``Settings`` (the "limits" block).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from service.config import Settings
from service.engine.records import RecordLimits
from service.errors import Unprocessable

if TYPE_CHECKING:
    from service.engine.plan import Plan
    from service.engine.spec import ReplaySpec

POLICY_NAME_MAX = 200
"""``metric_rows.policy``; a longer custom policy name would fail on the column."""
GROUP_KEY_MAX = 200
"""``metric_rows.grouping`` and ``live_sessions.grouping``."""
TASK_ID_MAX = 500
"""``live_observations.task_id``."""


def refuse(field: str, message: str) -> Unprocessable:
    return Unprocessable([{"field": field, "message": message}])


def record_limits(settings: Settings) -> RecordLimits:
    """What an upload may hold, checked by the parser as it reads (before any matrix)."""
    return RecordLimits(
        max_rows=settings.max_upload_rows,
        max_cells=settings.max_systems_x_tasks,
        max_systems=settings.max_upload_systems,
        max_columns=settings.max_upload_columns,
    )


# ------------------------------------------------------------------------- replays


def check_replay_options(options: dict[str, Any], settings: Settings) -> None:
    """Counts and lengths of a replay request, before the spec or the plan is built."""
    budgets = options.get("budgets")
    if isinstance(budgets, list) and len(budgets) > settings.max_replay_budgets:
        raise refuse("budgets", f"{len(budgets):,} budgets; the limit is {settings.max_replay_budgets}")
    orders = options.get("orders")
    if isinstance(orders, int) and not isinstance(orders, bool) and orders > settings.max_replay_orders:
        raise refuse("orders", f"{orders:,} orders; the limit is {settings.max_replay_orders:,}")
    for i, p in enumerate(options.get("policies") or []):  # a "k=v,name=..." string is checked once parsed
        name = p.get("name") if isinstance(p, dict) else None
        if isinstance(name, str) and len(name) > POLICY_NAME_MAX:
            raise refuse(
                f"policies[{i}]", f"a policy name is at most {POLICY_NAME_MAX} characters (this one has {len(name)})"
            )
    for i, g in enumerate(options.get("groups") or []):
        if isinstance(g, str) and len(g) > GROUP_KEY_MAX:
            raise refuse(
                f"groups[{i}]", f"a grouping key is at most {GROUP_KEY_MAX} characters (this one has {len(g)})"
            )
    for field in ("deltas", "a", "bootstrap", "floors", "groups"):  # each value is a configuration per policy
        values = options.get(field)
        if not isinstance(values, list):
            continue
        seen: set[Any] = set()
        for i, v in enumerate(values):
            key = (type(v) is bool, v) if isinstance(v, int | float | str) or v is None else (None, id(v))
            if key in seen:
                raise refuse(f"{field}[{i}]", f"{v!r} is listed twice: each value adds a configuration to every policy")
            seen.add(key)


def n_configs(spec: ReplaySpec) -> int:
    """Configurations of ``spec`` (as ``Plan`` enumerates them), without a dataset."""
    per_policy = sum(
        (1 if p.rule == "forced" else len(spec.a)) * (len(spec.bootstrap) if p.rule == "bootstrap" else 1)
        for p in spec.policies
    )
    return len(spec.groups) * len(spec.floors) * per_policy * len(spec.deltas)


def check_replay_spec(spec: ReplaySpec, n_systems: int, settings: Settings) -> None:
    """Before the plan: its pairs x configurations (what the plan itself allocates) within
    the case ceiling, counting every ordered pair of the dataset's systems."""
    for p in spec.policies:
        if len(p.name) > POLICY_NAME_MAX:
            raise refuse(
                "policies", f"a policy name is at most {POLICY_NAME_MAX} characters (this one has {len(p.name)})"
            )
    configs = n_configs(spec)
    if configs > settings.max_replay_configurations:
        raise refuse(
            "body",
            f"{configs:,} configurations (policies x thresholds x levels x resample counts x floors x groupings); "
            f"the limit is {settings.max_replay_configurations:,}: each is a report section and its metric rows",
        )
    bound = n_systems * max(n_systems - 1, 1) * configs
    if bound > settings.max_replay_cases:
        raise refuse(
            "body",
            f"{n_systems:,} systems give up to {n_systems * (n_systems - 1):,} pairs x "
            f"{n_configs(spec):,} configurations = {bound:,}; the limit of cases is "
            f"{settings.max_replay_cases:,}: use fewer policies, thresholds or systems",
        )


def check_replay_plan(plan: Plan, settings: Settings) -> None:
    """After the plan, before any case runs: the case count, the draws of literal resampling
    (``literal_draws``: a case count does not bound them) and a chunk's peak memory."""
    from service.engine.footprint import chunk_footprint
    from service.engine.replay import literal_draws, total_cases

    cases = total_cases(plan)
    spec = plan.spec
    if cases > settings.max_replay_cases:
        raise refuse(
            "body",
            (
                f"this replay would evaluate {cases:,} cases ({plan.n_pairs} pairs x {spec.orders} orders x "
                f"{len(spec.budgets)} budgets x {len(plan.configs)} configurations x {spec.seeds} seed(s)); the limit "
                f"is {settings.max_replay_cases:,}: use fewer orders, budgets, policies or thresholds"
            ),
        )
    draws = literal_draws(plan)
    if draws > settings.max_replay_resample_draws:
        raise refuse("bootstrap", _literal_message(plan, draws, settings.max_replay_resample_draws))
    fp = chunk_footprint(plan, settings.chunk_pairs)
    if fp.total > settings.max_replay_memory_bytes:
        raise refuse(
            "orders",
            (
                f"a chunk of this replay would hold about {_mib(fp.total)} MiB (mostly {fp.largest()}: "
                f"{plan.records.n_tasks:,} tasks, {spec.orders:,} orders, {len(spec.budgets)} budgets); the limit is "
                f"{_mib(settings.max_replay_memory_bytes)} MiB: use fewer orders or budgets"
            ),
        )


def _literal_message(plan: Plan, draws: int, limit: int) -> str:
    """Why a replay's literal resampling is refused, and the ways out: fewer draws, or outcomes
    on a grid the exact convolutions take (``Plan.fft_bootstrap``)."""
    from service.engine import rules as R

    spec, kmax = plan.spec, plan.kmax
    grid = min(R.MAX_FFT // (2 * kmax), R.MAX_LATTICE)  # the largest L with Plan.fft_bootstrap
    where = "on no grid of step 1/L" if plan.lattice is None else f"on a grid of step 1/{plan.lattice}"
    return (
        f"these outcomes lie {where}, too fine for exact convolutions over {kmax:,} tasks, so each case of a finite "
        f"bootstrap draws its B resamples task by task: this replay would draw {draws:,} tasks ({plan.n_pairs} pairs x "
        f"{spec.orders:,} orders x {spec.seeds} seed(s) x B x the budgets' tasks); the limit is {limit:,}: use fewer "
        f"orders, resamples, budgets or systems, or outcomes rounded to a grid of step 1/L with L <= {grid:,}"
    )


LARGEST_CHUNK_FACTOR = 4
"""Chunks of a big replay start at up to this many times ``chunk_pairs`` (``chunk_bounds``)."""


def largest_chunk(plan: Plan, settings: Settings) -> int:
    """The most pairs a chunk of ``plan`` may take: ``LARGEST_CHUNK_FACTOR`` x ``chunk_pairs``,
    or fewer where that chunk's memory would pass the limit (the anytime rule's and the
    tallies' arrays grow with a chunk's pairs)."""
    from service.engine.footprint import chunk_footprint

    for factor in range(LARGEST_CHUNK_FACTOR, 1, -1):
        if chunk_footprint(plan, factor * settings.chunk_pairs).total <= settings.max_replay_memory_bytes:
            return factor * settings.chunk_pairs
    return settings.chunk_pairs


def _mib(n: int) -> str:
    return f"{n / 2**20:,.0f}"


def check_pair_bootstrap(boot: int, n_tasks: int, settings: Settings) -> None:
    """``/pairs`` resamples the two systems' tasks ``boot`` times: ``boot x tasks`` draws,
    held to ``MAX_PAIR_BOOTSTRAP_DRAWS`` (2 x 500,000 tasks at boot = 20,000 took 88.6 s of
    CPU, about 9 ns a draw; the default boot = 2,000 stays allowed up to 100,000 tasks)."""
    work = boot * n_tasks
    limit = settings.max_pair_bootstrap_draws
    if work > limit:
        raise refuse(
            "boot",
            f"{boot:,} resamples of {n_tasks:,} tasks are {work:,} draws; the limit is {limit:,}: "
            f"use boot <= {limit // max(n_tasks, 1):,}",
        )


def check_placement_board(n_systems: int, settings: Settings) -> None:
    """A placement's every read runs the rule against each board system (Python work per
    system, which ``decision_work``'s cells do not count): the board's systems are held to the
    leaderboard's limit. A board of 500,000 systems x 2 tasks took 185 s to create."""
    if n_systems > settings.max_leaderboard_systems:
        raise refuse(
            "dataset_id",
            f"the board has {n_systems:,} systems; a placement compares the entry with each of them after "
            f"every task, and the limit is {settings.max_leaderboard_systems:,} systems",
        )


def check_leaderboard(n_systems: int, settings: Settings, field: str = "dataset_id") -> None:
    """A leaderboard tests every pair of systems (and then looks for letters among them): its
    work and memory grow with S(S-1)/2 pairs, so the systems are counted first."""
    if n_systems > settings.max_leaderboard_systems:
        pairs = n_systems * (n_systems - 1) // 2
        raise refuse(
            field,
            f"{n_systems:,} systems ({pairs:,} pairs to test); a leaderboard's limit is "
            f"{settings.max_leaderboard_systems:,} systems: compare fewer, or use /pairs for one pair",
        )


# ----------------------------------------------------------------------- decisions


def check_universe(n_tasks: int, settings: Settings, field: str = "universe.task_ids") -> None:
    if n_tasks > settings.max_universe_tasks:
        raise refuse(field, f"{n_tasks:,} tasks; the limit is {settings.max_universe_tasks:,}")


def decision_work(
    *, n_tasks: int, n_observations: int, n_groups: int, rule: str | None, coverage_aware: bool, bootstrap: int | str
) -> int:
    """Cells a decision touches, from the request's sizes: the universe and the observations,
    plus the rule's own term: anytime's coverage path is observed tasks x groups (three int64
    matrices), a finite bootstrap off a lattice draws B x observed tasks indices."""
    k = min(n_tasks, n_observations)
    work = n_tasks + n_observations
    if rule in ("anytime", "anytime_eb") and coverage_aware:
        work += k * n_groups
    if rule in (None, "bootstrap") and bootstrap != "exact" and isinstance(bootstrap, int):
        work += bootstrap * k
    return work


def check_decision_work(work: int, settings: Settings, field: str = "body") -> None:
    if work > settings.max_decision_work:
        raise refuse(
            field,
            f"this decision would touch about {work:,} cells (tasks x groups for anytime coverage, "
            f"resamples x tasks for a finite bootstrap); the limit is {settings.max_decision_work:,}: "
            "use fewer groups, bootstrap 'exact' or a smaller universe",
        )


def n_observations(observations: Sequence[object] | None, outcomes: dict[str, dict[str, Any]] | None) -> int:
    """Observation rows, or (compact form) observed tasks per system: the work terms grow with
    tasks; trials of a task are bounded by the body's size."""
    if observations is not None:
        return len(observations)
    if outcomes is None:
        return 0
    return sum(len(per) for per in outcomes.values())


def check_checkpoints(n_budgets: int, settings: Settings) -> None:
    if n_budgets > settings.max_session_checkpoints:
        raise refuse("budgets", f"{n_budgets:,} checkpoints; the limit is {settings.max_session_checkpoints}")


def check_task_ids(task_ids: Sequence[str], field: str = "universe.task_ids") -> None:
    """Task ids a session stores must fit ``live_observations.task_id``."""
    for i, t in enumerate(task_ids):
        if len(t) > TASK_ID_MAX:
            raise refuse(f"{field}[{i}]", f"a task id is at most {TASK_ID_MAX} characters (this one has {len(t)})")


def check_decision(body: Any, settings: Settings) -> int:
    """The size of a decision request (``DecisionCreate``) from its own fields, refused
    (422) over the limits; returns the work estimate (cells), which decides whether it runs
    on the event loop. A dataset's universe is checked once loaded (``check_loaded_universe``).
    ``budgets`` are checkpoints, as a session's are: each is a look of the forecast's paths
    (50,000 of them took 11.6 s and 343 MiB on 100,000 tasks) and part of a memo's key."""
    budgets = getattr(body, "budgets", None)
    if budgets is not None:
        check_checkpoints(len(budgets), settings)
    if body.universe is None:
        return n_observations(body.observations, body.outcomes)
    groups = body.universe.groups
    # the groups matter only to anytime's coverage path: not counted for the common case
    return _check_decision_size(len(body.universe.task_ids), lambda: len(set(groups)) if groups else 1, body,
                                settings, "universe.task_ids")


def check_loaded_universe(n_tasks: int, n_groups: int, body: Any, settings: Settings) -> None:
    """The same limits for a universe taken from a dataset (too many tasks names ``dataset_id``)."""
    _check_decision_size(n_tasks, lambda: n_groups, body, settings, "dataset_id")


def _check_decision_size(n_tasks: int, n_groups: Callable[[], int], body: Any, settings: Settings,
                         universe_field: str) -> int:
    """The universe's size, then the work of a decision on it (``decision_work``), which is
    returned. ``n_groups`` is asked only for anytime's coverage path, after the size check."""
    check_universe(n_tasks, settings, field=universe_field)
    rule, coverage_aware = _rule_of(body), body.coverage_aware is not False
    work = decision_work(
        n_tasks=n_tasks,
        n_observations=n_observations(getattr(body, "observations", None), getattr(body, "outcomes", None)),
        n_groups=n_groups() if rule in ("anytime", "anytime_eb") and coverage_aware else 1,
        rule=rule,
        coverage_aware=coverage_aware,
        bootstrap=body.bootstrap,
    )
    check_decision_work(work, settings)
    return work


def _rule_of(body: Any) -> str | None:
    """The rule a request names (directly or through a named policy); ``None`` = the default."""
    if body.rule is not None:
        return body.rule
    if body.policy is not None:
        from service.engine.spec import NAMED_POLICIES

        policy = NAMED_POLICIES.get(body.policy)
        return policy.rule if policy is not None else None
    return None
