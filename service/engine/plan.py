"""The plan of a replay (SPEC §2–§4): everything fixed before any case runs.

``Plan`` validates a spec against a dataset (raising ``SpecError`` naming the field), fixes
the pairs (orientation, selection SPEC §5.1), the swept configurations in report order, the
lattice, and the task set ``T`` each pair is compared on. It also draws the sampled orders:
from a generator seeded by the replay seed, the seed index, the order kind and ``T`` itself,
so a pair's orders do not depend on which chunk replays it (``chunk.py`` reads them).
"""

from __future__ import annotations

import copy
import dataclasses
import zlib
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from service.engine import classes, selection
from service.engine import rules as R
from service.engine.coverage import budget_k
from service.engine.errors import FieldError
from service.engine.orders import (
    cost_ascending_orders,
    grouped_shuffles,
    neyman_allocation,
    stratified_orders,
    uniform_orders,
)
from service.engine.records import Records, filter_systems, group_labels, parse_group_key
from service.engine.spec import ANYTIME_RULES, Policy, ReplaySpec, SpecError

STREAM = {"uniform": 1, "stratified": 2, "cost_ascending": 3, "neyman": 4, "bootstrap": 5, "schedule": 6}
"""Random stream per use, part of every generator's seed (orders here, resamples in ``chunk``)."""


@dataclass(frozen=True)
class Config:
    """One swept combination; replayed at every budget."""

    policy: Policy
    group: str | None
    floor: str
    a: float
    bootstrap: int | str
    delta: float

    def describe(self) -> dict[str, object]:
        return {
            "policy": self.policy.describe(),
            "group": self.group,
            "floor": self.floor,
            "a": self.a,
            "bootstrap": self.bootstrap,
            "delta": self.delta,
        }


def _crc(text: str) -> int:
    return zlib.crc32(text.encode("utf-8"))


@dataclass
class _TaskSet:
    tasks: np.ndarray  # task indices into records.tasks
    ks: np.ndarray  # k per budget
    key: int  # stable id for seeding


class Plan:
    """Everything fixed before any case runs: systems, pairs, configurations, lattice."""

    def __init__(self, records: Records, spec: ReplaySpec):
        self.spec = spec
        filtered, dropped = filter_systems(records, spec.min_task_coverage)
        if filtered.n_systems < 2:
            raise SpecError(
                "min_task_coverage",
                f"only {filtered.n_systems} system(s) have outcomes for at least "
                f"{spec.min_task_coverage:.0%} of the {records.n_tasks} tasks; need 2",
            )
        self.records = filtered
        self.dropped_systems = dropped
        for g in spec.groups:
            try:
                cols = parse_group_key(g)
            except ValueError as exc:
                raise SpecError("groups", str(exc)) from None
            for c in cols:
                if c not in filtered.metadata:
                    known = ", ".join(filtered.metadata) or "none"
                    raise SpecError("groups", f"group column '{c}' is not in the dataset (metadata: {known})")
        self.lattice = R.find_lattice(filtered.y[filtered.observed])
        self.kmax = max(1, budget_k(max(spec.budgets), filtered.n_tasks))  # tasks at the largest budget
        # The exact resampling tail is a convolution on the lattice; past this size (or with
        # no lattice) finite B is replayed by literal resampling and "exact" is refused.
        self.fft_bootstrap = self.lattice is not None and 2 * self.lattice * self.kmax <= R.MAX_FFT
        if not self.fft_bootstrap and any(p.rule == "bootstrap" for p in spec.policies) and "exact" in spec.bootstrap:
            why = f"no grid of step 1/L with L <= {R.MAX_LATTICE}" if self.lattice is None else f"L = {self.lattice}"
            raise SpecError(
                "bootstrap",
                f"the exact bootstrap needs outcomes on a small grid of step 1/L ({why} here); use a finite "
                "number of resamples such as 200",
            )
        for p in spec.policies:
            if p.rule == "mcnemar" and not filtered.binary_single_trial:
                raise SpecError(
                    "policies",
                    f"policy '{p.name}' uses mcnemar, which needs binary single-trial outcomes; "
                    "this dataset has fractional or repeated-trial outcomes",
                )
        self.configs: list[Config] = [
            Config(p, g, f, float(a), b, float(d))
            for g in spec.groups
            for f in spec.floors
            for p in spec.policies
            for a in (spec.a if p.rule not in ("forced",) else spec.a[:1])
            for b in (spec.bootstrap if p.rule == "bootstrap" else spec.bootstrap[:1])
            for d in spec.deltas
        ]
        self._build_pairs()
        self._tasksets: list[_TaskSet] = []
        self._ts_index: dict[bytes, int] = {}
        self.pair_ts = self._pair_tasksets()
        self._label_cache: dict[tuple[int, str | None], tuple[np.ndarray, int]] = {}
        self._order_cache: dict[tuple, np.ndarray] = {}
        costs = self.records.cost
        self.cost_complete_system = np.array(
            [not np.isnan(costs[s][self.records.observed[s]]).any() and self.records.observed[s].any()
             for s in range(self.records.n_systems)]
        )
        self.applicable = np.ones((len(self.pairs), len(self.configs)), dtype=bool)
        for c, cfg in enumerate(self.configs):
            if cfg.policy.order == "cost_ascending":
                for p, (a, _b) in enumerate(self.pairs):
                    ts = self._tasksets[self.pair_ts[p]]
                    self.applicable[p, c] = not np.isnan(costs[a, ts.tasks]).any()
        if not self.applicable.any():
            raise SpecError(
                "policies",
                "every policy orders tasks by A's cost, but no system has a cost for every task of its pairs",
            )
        for p in spec.policies:
            if p.checkpoints is not None and p.rule == "bootstrap" and not self.fft_bootstrap:
                raise SpecError("checkpoints", f"policy '{p.name}': a scheduled bootstrap needs outcomes on a small "
                                               "grid of step 1/L (its tails are exact convolutions)")
            if p.rule in ANYTIME_RULES and p.order == "neyman":
                raise SpecError("policies", f"policy '{p.name}': anytime needs a single task order, not neyman")

    def with_orders(self, orders: int, seeds: int | None = None) -> Plan:
        """This plan with ``orders`` sampled orders per pair (and ``seeds`` seeds). Nothing built
        here depends on either (pairs, task sets, configurations, applicability), so it is
        shared, and only the orders drawn later are new: the submission estimate's sample plan
        without a second ``plan_replay`` (about 60 ms on a 134 x 500 board)."""
        out = copy.copy(self)
        out.spec = dataclasses.replace(self.spec, orders=orders, seeds=self.spec.seeds if seeds is None else seeds)
        out._order_cache = {}
        return out

    # ------------------------------------------------------------------ pairs

    def _build_pairs(self) -> None:
        rec = self.records
        obs = rec.observed
        pairs: list[tuple[int, int]] = []
        n = rec.n_systems
        if self.spec.orientation == "directed":
            # each pair beside its mirror: (a, b) and (b, a) see the same tasks in the same orders,
            # so a lattice bootstrap computes one resampling law for both (``lattice_decisions``)
            pairs = [p for a in range(n) for b in range(a + 1, n) for p in ((a, b), (b, a))]
        else:
            for a in range(n):
                for b in range(a + 1, n):
                    t = obs[a] & obs[b]
                    diff = self._sum_units(rec.y[a, t] - rec.y[b, t])
                    # higher full mean is A; exact tie -> lexicographically smaller name (a < b).
                    pairs.append((b, a) if diff < 0 and not self._is_zero(diff) else (a, b))
        shared = obs.astype(np.float32) @ obs.T.astype(np.float32)  # tasks both observed (exact counts)
        keep = [(a, b) for a, b in pairs if shared[a, b] > 0]
        self.empty_pairs = len(pairs) - len(keep)
        self.pairs_before_selection = len(keep)
        keep = self._select(keep)
        self.pairs = keep
        self.n_unordered = len({frozenset(p) for p in keep})

    def _select(self, pairs: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """The pairs the spec's selection keeps (SPEC §5.1); none kept is a spec error."""
        terms = selection.parse_selection(self.spec.pairs)
        if not terms:
            return pairs
        rec = self.records
        obs = rec.observed

        def gap(a: int, b: int) -> float:
            t = obs[a] & obs[b]
            return abs(float(classes.gap_pp(self._sum_units(rec.y[a, t] - rec.y[b, t]), t.sum(), self.lattice)))

        try:
            kept = selection.select_pairs(terms, pairs, rec.systems, rec.scores(), gap, self.dropped_systems)
        except FieldError as exc:
            raise SpecError(exc.field, exc.message) from None
        if not kept:
            raise SpecError("pairs", f"the selection '{self.spec.pairs}' keeps none of the {len(pairs)} pairs")
        return kept

    def _units(self, d: np.ndarray) -> np.ndarray:
        """Differences in lattice units (ints) when a lattice exists, else floats."""
        if self.lattice is None:
            return np.asarray(d, dtype=np.float64)
        return np.round(np.asarray(d) * self.lattice).astype(np.int64)

    def _sum_units(self, d: np.ndarray) -> float:
        return float(self._units(d).sum())

    def _is_zero(self, s: float) -> bool:
        return s == 0 if self.lattice is not None else abs(s) <= R.TOL

    def _pair_tasksets(self) -> np.ndarray:
        """Each pair's task-set id. A pair's set depends only on which tasks each of its two
        systems observed, and boards have few such patterns (a complete one has one): the
        set is built once per pair of patterns, not once per pair (17,822 on 134 systems)."""
        _, pattern = np.unique(self.records.observed, axis=0, return_inverse=True)
        pattern = pattern.ravel().tolist()
        ids: dict[tuple[int, int], int] = {}
        out = np.empty(len(self.pairs), dtype=np.intp)
        for p, (a, b) in enumerate(self.pairs):
            key = (pattern[a], pattern[b])
            ts = ids.get(key)
            if ts is None:
                ts = ids[key] = self._taskset_id(a, b)
            out[p] = ts
        return out

    def _taskset_id(self, a: int, b: int) -> int:
        tasks = np.flatnonzero(self.records.observed[a] & self.records.observed[b])
        key = tasks.tobytes()
        if key not in self._ts_index:
            ks = np.array([budget_k(bb, len(tasks)) for bb in self.spec.budgets], dtype=np.int64)
            ks = np.maximum(ks, 1)
            self._ts_index[key] = len(self._tasksets)
            self._tasksets.append(_TaskSet(tasks, ks, zlib.crc32(key)))
        return self._ts_index[key]

    @property
    def n_pairs(self) -> int:
        return len(self.pairs)

    def pair_tasks(self, p: int) -> np.ndarray:
        return self._tasksets[self.pair_ts[p]].tasks

    def ks(self, p: int) -> list[int]:
        return [int(k) for k in self._tasksets[self.pair_ts[p]].ks]

    def pair_values(self, p: int) -> np.ndarray:
        """``D`` over ``T`` in lattice units."""
        a, b = self.pairs[p]
        t = self.pair_tasks(p)
        return self._units(self.records.y[a, t] - self.records.y[b, t])

    def labels(self, p: int, group: str | None) -> np.ndarray:
        return self._labels(int(self.pair_ts[p]), group)[0]

    def _labels(self, ts_id: int, group: str | None) -> tuple[np.ndarray, int]:
        key = (ts_id, group)
        if key not in self._label_cache:
            lab_all, _names = group_labels(self.records, group)
            lab = lab_all[self._tasksets[ts_id].tasks]
            _, lab = np.unique(lab, return_inverse=True)  # only groups present in T
            self._label_cache[key] = (lab.astype(np.intp), int(lab.max()) + 1)
        return self._label_cache[key]

    @cached_property
    def full_sums(self) -> np.ndarray:
        """``Σ D`` over ``T`` per pair (lattice units). On a lattice each outcome is an integer
        number of units, so ``Σ (y_a - y_b) = Σ y_a - Σ y_b`` exactly: one sum per system and
        task set instead of one ``pair_values`` per pair (a report of 17,822 pairs spent
        0.1 s on them)."""
        if self.lattice is None:
            return np.array([self.pair_values(p).sum() for p in range(self.n_pairs)], dtype=np.float64)
        out = np.empty(self.n_pairs, dtype=np.float64)
        ends = np.asarray(self.pairs, dtype=np.intp).reshape(-1, 2)
        for ts_id, ts in enumerate(self._tasksets):
            members = np.flatnonzero(self.pair_ts == ts_id)
            systems = np.unique(ends[members])
            units = self._units(self.records.y[np.ix_(systems, ts.tasks)]).sum(axis=1)  # int64 per system
            a, b = np.searchsorted(systems, ends[members, 0]), np.searchsorted(systems, ends[members, 1])
            out[members] = units[a] - units[b]
        return out

    @cached_property
    def pair_n(self) -> np.ndarray:
        """Tasks in each pair's ``T`` (float64)."""
        sizes = np.array([len(ts.tasks) for ts in self._tasksets], dtype=np.float64)
        return sizes[self.pair_ts] if self.n_pairs else np.zeros(0)

    def positive(self, delta: float) -> np.ndarray:
        """Full-benchmark decision per pair: ``Δ_full > δ/100`` (SPEC §2), exact on a lattice."""
        return R.above(self.full_sums, self.pair_n, delta / 100.0, self.lattice)

    def delta_full(self) -> np.ndarray:
        return self.full_sums / (self.pair_n * (self.lattice or 1))

    # ----------------------------------------------------------------- orders

    def _rng(self, *key: int) -> np.random.Generator:
        return np.random.Generator(np.random.PCG64(np.random.SeedSequence([self.spec.seed, *key])))

    def _orders(self, ts_id: int, seed_index: int, policy: Policy, group: str | None, floor: str,
                system_a: int) -> np.ndarray:
        """``[R, N]`` positions into ``T`` for a non-neyman order kind (cached)."""
        kind = policy.order
        if kind == "uniform":
            key: tuple = (ts_id, seed_index, kind)
        elif kind == "stratified":
            key = (ts_id, seed_index, kind, group, floor)
        elif kind == "cost_ascending":
            key = (ts_id, seed_index, kind, system_a)
        else:
            raise ValueError("neyman has no single order")
        if key in self._order_cache:
            return self._order_cache[key]
        ts = self._tasksets[ts_id]
        reps = self.spec.orders
        if kind == "uniform":
            rng = self._rng(seed_index, STREAM[kind], ts.key)
            out = uniform_orders(len(ts.tasks), reps, rng)
        elif kind == "stratified":
            rng = self._rng(seed_index, STREAM[kind], ts.key, _crc(f"{group}|{floor}"))
            out = stratified_orders(self._labels(ts_id, group)[0], floor, reps, rng)
        else:
            rng = self._rng(seed_index, STREAM[kind], ts.key, system_a)
            out = cost_ascending_orders(self.records.cost[system_a, ts.tasks], reps, rng)
        if len(self._order_cache) > 64:
            self._order_cache.clear()
        self._order_cache[key] = out
        return out

    def _neyman_draws(self, ts_id: int, seed_index: int, group: str | None) -> tuple[np.ndarray, np.ndarray]:
        key = (ts_id, seed_index, "neyman", group)
        if key not in self._order_cache:
            ts = self._tasksets[ts_id]
            rng = self._rng(seed_index, STREAM["neyman"], ts.key, _crc(f"{group}"))
            self._order_cache[key] = grouped_shuffles(self._labels(ts_id, group)[0], self.spec.orders, rng)
        return self._order_cache[key]

    def neyman_alloc(self, p: int, cfg: Config) -> np.ndarray:
        """``[J, G]`` tasks per group at each budget for pair ``p`` (SPEC §4.1)."""
        ts_id = int(self.pair_ts[p])
        lab, n_groups = self._labels(ts_id, cfg.group)
        d = self.pair_values(p) / (self.lattice or 1)
        n_g = np.bincount(lab, minlength=n_groups)
        s_g = np.array([d[lab == g].std() for g in range(n_groups)])
        return np.stack([neyman_allocation(int(k), n_g, s_g, cfg.floor) for k in self._tasksets[ts_id].ks])

    def case_order(self, p: int, seed_index: int, config_index: int) -> np.ndarray:
        cfg = self.configs[config_index]
        return self._orders(int(self.pair_ts[p]), seed_index, cfg.policy, cfg.group, cfg.floor, self.pairs[p][0])

    def case_observed(self, p: int, seed_index: int, config_index: int, budget_index: int) -> np.ndarray:
        """``[R, k]`` positions into ``T`` observed at a budget, in observation order."""
        cfg = self.configs[config_index]
        if cfg.policy.order != "neyman":
            k = self._tasksets[self.pair_ts[p]].ks[budget_index]
            return self.case_order(p, seed_index, config_index)[:, :k]
        within, start = self._neyman_draws(int(self.pair_ts[p]), seed_index, cfg.group)
        alloc = self.neyman_alloc(p, cfg)[budget_index]
        cols = np.concatenate([np.arange(start[g], start[g] + alloc[g]) for g in range(len(alloc))]).astype(np.intp)
        return within[:, cols]


def plan_replay(records: Records, spec: ReplaySpec) -> Plan:
    """Validate the spec against the dataset and fix pairs and configurations."""
    return Plan(records, spec)


def config_groups(plan: Plan) -> dict[tuple, list[int]]:
    """Configurations that share an order (and so its observation matrix)."""
    groups: dict[tuple, list[int]] = {}
    for c, cfg in enumerate(plan.configs):
        kind = cfg.policy.order
        if kind == "uniform":
            key: tuple = (kind,)
        elif kind in ("stratified", "neyman"):
            key = (kind, cfg.group, cfg.floor)
        else:
            key = (kind,)
        groups.setdefault(key, []).append(c)
    return groups
