"""Replay of partial runs over completed records (SPEC §2–§6), fast.

A *case* is (pair, sampled order, budget); a replay has millions of them. The engine never
visits a case alone:

* pairs sharing a task set ``T`` share each sampled order (drawn from a generator seeded by
  the replay seed, the seed index, the order kind and ``T`` itself, so a pair's result does
  not depend on which chunk it is replayed in);
* for an order, "observed at budget k" is a 0/1 matrix ``[N, R·J]``; prefix sums of the
  lattice-valued differences for all pairs are then one matrix product;
* each rule is a closed form of those sums (``rules.py``); the bootstrap with ``B``
  resamples uses its exact tail and one uniform per case (the count of resamples at or
  below θ is exactly ``Binomial(B, p)``).

``run_chunk`` replays a slice of pairs; ``build_report`` merges slices in pair order.
"""

from __future__ import annotations

import functools
import io
import math
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from service import __version__
from service.engine import classes, diagnostics, schedule, selection
from service.engine import rules as R
from service.engine.betting import betting_paths
from service.engine.coverage import budget_k, required
from service.engine.errors import FieldError
from service.engine.lattice import bootstrap_decisions
from service.engine.numbers import clean as _clean
from service.engine.orders import (
    cost_ascending_orders,
    grouped_shuffles,
    neyman_allocation,
    stratified_orders,
    uniform_orders,
)
from service.engine.pairs import pair_table
from service.engine.records import Records, filter_systems, group_labels, parse_group_key
from service.engine.spec import ANYTIME_RULES, Policy, ReplaySpec, SpecError

Progress = Callable[[int], None]
BLOCK_ELEMENTS = 6_000_000
"""Upper bound on pairs × orders × steps held at once (memory stays well under 1 GB)."""

PAIR_BLOCK_CASES = 2_000_000
"""Cases (pairs × orders × budgets) decided together for a shared order."""

_STREAM = {"uniform": 1, "stratified": 2, "cost_ascending": 3, "neyman": 4, "bootstrap": 5, "schedule": 6}


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
            cols = parse_group_key(g)
            for c in cols:
                if c not in filtered.metadata:
                    known = ", ".join(filtered.metadata) or "none"
                    raise SpecError("groups", f"group column '{c}' is not in the dataset (metadata: {known})")
        self.lattice = R.find_lattice(filtered.y[filtered.observed])
        kmax = max(1, budget_k(max(spec.budgets), filtered.n_tasks))
        # The exact resampling tail is a convolution on the lattice; past this size (or with
        # no lattice) finite B is replayed by literal resampling and "exact" is refused.
        self.fft_bootstrap = self.lattice is not None and 2 * self.lattice * kmax <= R.MAX_FFT
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
        self.pair_ts = np.array([self._taskset_id(a, b) for a, b in self.pairs], dtype=np.intp)
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

    # ------------------------------------------------------------------ pairs

    def _build_pairs(self) -> None:
        rec = self.records
        obs = rec.observed
        pairs: list[tuple[int, int]] = []
        n = rec.n_systems
        if self.spec.orientation == "directed":
            pairs = [(a, b) for a in range(n) for b in range(n) if a != b]
        else:
            for a in range(n):
                for b in range(a + 1, n):
                    t = obs[a] & obs[b]
                    diff = self._sum_units(rec.y[a, t] - rec.y[b, t])
                    # higher full mean is A; exact tie -> lexicographically smaller name (a < b).
                    pairs.append((b, a) if diff < 0 and not self._is_zero(diff) else (a, b))
        keep = [(a, b) for a, b in pairs if (obs[a] & obs[b]).any()]
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
        """``Σ D`` over ``T`` per pair (lattice units)."""
        return np.array([self.pair_values(p).sum() for p in range(self.n_pairs)], dtype=np.float64)

    def positive(self, delta: float) -> np.ndarray:
        """Full-benchmark decision per pair: ``Δ_full > δ/100`` (SPEC §2), exact on a lattice."""
        n = np.array([len(self.pair_tasks(p)) for p in range(self.n_pairs)], dtype=np.float64)
        return R.above(self.full_sums, n, delta / 100.0, self.lattice)

    def delta_full(self) -> np.ndarray:
        n = np.array([len(self.pair_tasks(p)) for p in range(self.n_pairs)], dtype=np.float64)
        return self.full_sums / (n * (self.lattice or 1))

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
            rng = self._rng(seed_index, _STREAM[kind], ts.key)
            out = uniform_orders(len(ts.tasks), reps, rng)
        elif kind == "stratified":
            rng = self._rng(seed_index, _STREAM[kind], ts.key, _crc(f"{group}|{floor}"))
            out = stratified_orders(self._labels(ts_id, group)[0], floor, reps, rng)
        else:
            rng = self._rng(seed_index, _STREAM[kind], ts.key, system_a)
            out = cost_ascending_orders(self.records.cost[system_a, ts.tasks], reps, rng)
        if len(self._order_cache) > 64:
            self._order_cache.clear()
        self._order_cache[key] = out
        return out

    def _neyman_draws(self, ts_id: int, seed_index: int, group: str | None) -> tuple[np.ndarray, np.ndarray]:
        key = (ts_id, seed_index, "neyman", group)
        if key not in self._order_cache:
            ts = self._tasksets[ts_id]
            rng = self._rng(seed_index, _STREAM["neyman"], ts.key, _crc(f"{group}"))
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


# ------------------------------------------------------------------ chunk results


@dataclass
class ChunkResult:
    """Per (pair, configuration, seed, budget) tallies over the ``R`` orders."""

    start: int
    stop: int
    accept: np.ndarray  # int32 [P, C, S, J]
    reject: np.ndarray
    defer: np.ndarray
    coverage_fail: np.ndarray
    cost_sum: np.ndarray  # float64, Σ over orders of A's cost fraction (NaN when unknown)
    used_sum: np.ndarray  # int64, Σ over orders of tasks used (anytime: min(stop, k))

    FIELDS = ("accept", "reject", "defer", "coverage_fail", "cost_sum", "used_sum")

    def to_bytes(self) -> bytes:
        buf = io.BytesIO()
        np.savez_compressed(buf, start=self.start, stop=self.stop, **{f: getattr(self, f) for f in self.FIELDS})
        return buf.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> ChunkResult:
        with np.load(io.BytesIO(data)) as z:
            return cls(int(z["start"]), int(z["stop"]), *(z[f] for f in cls.FIELDS))


def _obs_matrix(order: np.ndarray, ks: np.ndarray) -> np.ndarray:
    """``[N, R·J]`` float32: task at position t is observed by order r at budget j."""
    rank = np.empty_like(order)
    reps, n = order.shape
    rank[np.arange(reps)[:, None], order] = np.arange(n)[None, :]
    obs = rank.T[:, :, None] < ks[None, None, :]
    return obs.reshape(n, -1).astype(np.float32)


def run_chunk(plan: Plan, start: int, stop: int, progress: Progress | None = None) -> ChunkResult:
    """Replay pairs ``[start, stop)`` for every configuration, seed and budget."""
    if not 0 <= start <= stop <= plan.n_pairs:
        raise ValueError(f"chunk [{start}, {stop}) outside [0, {plan.n_pairs})")
    n_p, n_c, n_s, n_j = stop - start, len(plan.configs), plan.spec.seeds, len(plan.spec.budgets)
    shape = (n_p, n_c, n_s, n_j)
    out = ChunkResult(
        start, stop,
        *(np.zeros(shape, dtype=np.int32) for _ in range(4)),
        np.zeros(shape, dtype=np.float64),
        np.zeros(shape, dtype=np.int64),
    )
    pairs = np.arange(start, stop)
    for ts_id in np.unique(plan.pair_ts[pairs]):
        members = pairs[plan.pair_ts[pairs] == ts_id]
        for s in range(n_s):
            _replay_taskset(plan, int(ts_id), members, s, out, progress)
    return out


def _config_groups(plan: Plan) -> dict[tuple, list[int]]:
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


Summer = Callable[[np.ndarray], np.ndarray]
"""Maps per-task values ``X [P, N]`` to their sums over each case's observed tasks ``[P, R, J]``."""


def _matrix_summer(order: np.ndarray, ks: np.ndarray) -> Summer:
    """Sums through one matrix product with the observation matrix of a shared order."""
    obs32 = _obs_matrix(order, ks)
    obs64: list[np.ndarray] = []
    reps, n_j = order.shape[0], len(ks)

    def summer(x: np.ndarray) -> np.ndarray:
        if x.dtype == np.float64:  # costs and non-lattice values keep full precision
            if not obs64:
                obs64.append(obs32.astype(np.float64))
            return (x @ obs64[0]).reshape(len(x), reps, n_j)
        return (x.astype(np.float32) @ obs32).astype(np.float64).reshape(len(x), reps, n_j)

    return summer


def _neyman_summer(within: np.ndarray, gstart: np.ndarray, alloc: np.ndarray) -> Summer:
    """Sums for neyman draws: the first ``alloc[p, j, g]`` tasks of each group's shuffled
    block, read off within-block prefix sums (the allocation is the pair's own)."""
    reps, n = within.shape
    idx = gstart[None, None, :] + alloc  # [P, J, G]

    def summer(x: np.ndarray) -> np.ndarray:
        x = np.asarray(x)  # float32 lattice values sum exactly; costs stay float64
        csum = np.zeros((len(x), reps, n + 1), dtype=x.dtype)
        np.cumsum(x[:, within], axis=2, out=csum[:, :, 1:])
        out = np.empty((len(x), reps, idx.shape[1]))
        for p in range(len(x)):
            ends = csum[p][:, idx[p]]  # [R, J, G]
            out[p] = ends.sum(axis=2) - csum[p][:, gstart].sum(axis=1)[:, None]
        return out

    return summer


def _replay_taskset(plan: Plan, ts_id: int, members: np.ndarray, s: int, out: ChunkResult,
                    progress: Progress | None) -> None:
    ts = plan._tasksets[ts_id]
    reps, n_j = plan.spec.orders, len(ts.ks)
    values = np.stack([plan.pair_values(p) for p in members])  # [P, N]
    for key, cfgs in _config_groups(plan).items():
        kind = key[0]
        if kind == "cost_ascending":
            for a in np.unique([plan.pairs[p][0] for p in members]):
                sub = np.array([i for i, p in enumerate(members) if plan.pairs[p][0] == a])
                live = [c for c in cfgs if plan.applicable[members[sub[0]], c]]
                if not live:
                    continue
                cfg = plan.configs[live[0]]
                order = plan._orders(ts_id, s, cfg.policy, cfg.group, cfg.floor, int(a))
                _replay_order(plan, ts_id, members[sub], values[sub], order, _matrix_summer(order, ts.ks), live, s,
                              out)
            if progress:
                progress(len(members) * reps * n_j * len(cfgs))
        elif kind == "neyman":
            cfg = plan.configs[cfgs[0]]
            within, gstart = plan._neyman_draws(ts_id, s, cfg.group)
            block = max(1, BLOCK_ELEMENTS // (reps * len(ts.tasks)))
            for i in range(0, len(members), block):
                sub = members[i : i + block]
                alloc = np.stack([plan.neyman_alloc(int(p), cfg) for p in sub])  # [P, J, G]
                _replay_order(plan, ts_id, sub, values[i : i + block], None, _neyman_summer(within, gstart, alloc),
                              cfgs, s, out, neyman_counts=alloc, progress=progress)
        else:
            cfg = plan.configs[cfgs[0]]
            order = plan._orders(ts_id, s, cfg.policy, cfg.group, cfg.floor, -1)
            summer = _matrix_summer(order, ts.ks)
            # Blocks of pairs bound memory (cases × a few arrays) and pace progress / cancellation.
            block = max(1, PAIR_BLOCK_CASES // (reps * n_j))
            for i in range(0, len(members), block):
                sub = members[i : i + block]
                _replay_order(plan, ts_id, sub, values[i : i + block], order, summer, cfgs, s, out, progress=progress)


def _coverage_met(plan: Plan, ts_id: int, cfg: Config, summer: Summer, reps: int,
                  counts: np.ndarray | None) -> np.ndarray:
    """``[P or 1, R, J]``: the observed subset meets the configuration's floor (SPEC §3)."""
    ts = plan._tasksets[ts_id]
    lab, n_groups = plan._labels(ts_id, cfg.group)
    n_g = np.bincount(lab, minlength=n_groups)
    req = required(cfg.floor, ts.ks, n_g)  # [J, G]
    feas = req.sum(axis=1) <= ts.ks
    if counts is not None:  # neyman: the allocation [P, J, G], the same for every order
        met = np.all(counts >= req[None], axis=2) & feas[None, :]
        return np.broadcast_to(met[:, None, :], (len(counts), reps, len(ts.ks)))
    onehot = np.zeros((n_groups, len(lab)), dtype=np.float32)
    onehot[lab, np.arange(len(lab))] = 1.0
    cnt = summer(onehot)  # [G, R, J]
    return (np.all(cnt >= req.T[:, None, :], axis=0) & feas[None, :])[None]


def _replay_order(plan: Plan, ts_id: int, members: np.ndarray, values: np.ndarray, order: np.ndarray | None,
                  summer: Summer, cfgs: Sequence[int], s: int, out: ChunkResult,
                  neyman_counts: np.ndarray | None = None, progress: Progress | None = None) -> None:
    """Decide the cases of ``members`` under each configuration of ``cfgs``; ``progress`` hears
    of each configuration's cases as they are done (a chunk that is one block of pairs still
    reports progress, and cancellation is seen, between configurations)."""
    ts = plan._tasksets[ts_id]
    reps, n_j = plan.spec.orders, len(ts.ks)
    n = len(ts.tasks)
    lat = plan.lattice
    exact32 = lat is not None and float(lat) * lat * n < 2**24  # Σv² stays exact in float32
    vf = values.astype(np.float32 if exact32 else np.float64)
    ssum = summer(vf)
    need_q = any(plan.configs[c].policy.rule in ("paired_normal", "mcnemar", "bootstrap") for c in cfgs)
    qsum = summer(vf * vf) if need_q else None
    k = ts.ks[None, None, :].astype(np.float64)
    # A's cost fraction of the observed tasks
    a_idx = np.array([plan.pairs[p][0] for p in members])
    cost = plan.records.cost[a_idx][:, ts.tasks]
    cost_ok = ~np.isnan(cost).any(axis=1)
    total = np.where(cost_ok, np.nansum(cost, axis=1), np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        frac = np.where(cost_ok[:, None], np.nan_to_num(cost) / np.where(total > 0, total, 1.0)[:, None], np.nan)
        zero_total = cost_ok & (total <= 0)
    if cost_ok.any():
        cost_frac = summer(np.nan_to_num(frac).astype(np.float64))
    else:  # no complete costs in this block: nothing to sum
        cost_frac = np.full(ssum.shape, np.nan)
    if zero_total.any():  # all-free tasks: the observed share of cost is the share of tasks
        cost_frac[zero_total] = (ts.ks / n)[None, :]
    cost_frac[~cost_ok] = np.nan
    hist_cache: dict[str, tuple] = {}
    anytime_cache: dict[tuple, tuple] = {}
    for c in cfgs:
        cfg = plan.configs[c]
        rows = members - out.start
        appl = plan.applicable[members, c]
        if not appl.any():
            if progress:
                progress(len(members) * reps * n_j)
            continue
        cov = _coverage_met(plan, ts_id, cfg, summer, reps, neyman_counts)  # [P or 1, R, J]
        theta = cfg.delta / 100.0
        rule = cfg.policy.rule
        used = None
        if rule in ANYTIME_RULES:
            akey = (rule, cfg.a, cfg.policy.coverage_aware, cfg.group, cfg.floor)
            if (akey, theta) not in anytime_cache:  # every threshold of this kind in one pass
                thetas = sorted({plan.configs[c2].delta / 100.0 for c2 in cfgs
                                 if plan.configs[c2].policy.rule == rule
                                 and (rule, plan.configs[c2].a, plan.configs[c2].policy.coverage_aware,
                                      plan.configs[c2].group, plan.configs[c2].floor) == akey})
                for th, res in zip(thetas, _anytime(plan, ts_id, values, order, cfg, thetas), strict=True):
                    anytime_cache[(akey, th)] = res
            dec, used, cov_at_stop = anytime_cache[(akey, theta)]
            covfail = (dec != 0) & ~cov_at_stop
        elif cfg.policy.checkpoints is not None:
            dec, used, cov_at_stop = _scheduled(plan, ts_id, members, values, order, cfg, c, s)
            covfail = (dec != 0) & ~cov_at_stop
        else:
            if rule == "forced":
                dec = R.forced(ssum, k, theta, lat)
            elif rule == "paired_normal":
                dec = R.paired_normal(ssum, qsum, k, theta, cfg.a, lat)
            elif rule == "mcnemar":
                dec = R.mcnemar((qsum + ssum) / 2, (qsum - ssum) / 2, cfg.a)
            elif rule == "serfling":
                dec = R.serfling(ssum, k, n, theta, cfg.a, lat)
            elif rule == "bootstrap" and not plan.fft_bootstrap:
                dec = _bootstrap_literal(plan, ts_id, members, values, order, c, s, theta)
            elif rule == "bootstrap" and not set(np.unique(values).tolist()) <= {-1, 0, 1}:
                u = None if cfg.bootstrap == "exact" else np.stack([
                    plan._rng(s, _STREAM["bootstrap"], *plan.pairs[p], c).random((reps, n_j)) for p in members
                ])
                dec = bootstrap_decisions(values, summer, ssum, ts.ks, theta, lat, cfg.a, cfg.bootstrap, u, hist_cache)
            elif rule == "bootstrap":
                p_low, pos, inv = _bootstrap_tail(values, summer, ssum, qsum, ts.ks, theta, lat, hist_cache)
                if cfg.bootstrap == "exact":
                    dec = R.bootstrap_from_tail(p_low, pos, cfg.a, "exact")[inv]
                else:
                    q = R.bootstrap_conclude_prob(p_low, pos, cfg.a, int(cfg.bootstrap))[inv]
                    u = np.stack([
                        plan._rng(s, _STREAM["bootstrap"], *plan.pairs[p], c).random((reps, n_j)) for p in members
                    ])
                    dec = np.where(u < q, np.where(pos[inv], R.ACCEPT, R.REJECT), R.DEFER).astype(np.int8)
            else:
                raise ValueError(rule)
            if cfg.policy.coverage_aware:
                dec = np.where(cov, dec, R.DEFER)
            covfail = (dec != 0) & ~cov
        sel = rows[appl]
        dec = dec[appl]
        out.accept[sel, c, s] = (dec == R.ACCEPT).sum(axis=1)
        out.reject[sel, c, s] = (dec == R.REJECT).sum(axis=1)
        out.defer[sel, c, s] = (dec == R.DEFER).sum(axis=1)
        out.coverage_fail[sel, c, s] = np.broadcast_to(covfail, (len(members), reps, n_j))[appl].sum(axis=1)
        out.cost_sum[sel, c, s] = cost_frac[appl].sum(axis=1)
        out.used_sum[sel, c, s] = (used[appl] if used is not None else np.broadcast_to(ts.ks, dec.shape)).sum(axis=1)
        if progress:
            progress(len(members) * reps * n_j)


def _bootstrap_literal(plan: Plan, ts_id: int, members: np.ndarray, values: np.ndarray, order: np.ndarray | None,
                       c: int, s: int, theta: float) -> np.ndarray:
    """``B`` literal resamples per case, for outcomes off a small lattice (slow, exact in law)."""
    ts = plan._tasksets[ts_id]
    cfg = plan.configs[c]
    reps, big_b = plan.spec.orders, int(cfg.bootstrap)
    lat = plan.lattice
    dec = np.zeros((len(members), reps, len(ts.ks)), dtype=np.int8)
    for i, p in enumerate(members):
        rng = plan._rng(s, _STREAM["bootstrap"], *plan.pairs[p], c)
        v = values[i]
        for j, k in enumerate(ts.ks):
            k = int(k)
            pos = order[:, :k] if order is not None else plan.case_observed(int(p), s, c, j)
            obs = v[pos]  # [R, k]
            positive = R.above(obs.sum(axis=1).astype(np.float64), k, theta, lat)
            low = np.zeros(reps, dtype=np.int64)
            step = max(1, 4_000_000 // (big_b * k))
            for r0 in range(0, reps, step):
                draws = rng.integers(0, k, size=(min(step, reps - r0), big_b, k))
                sums = np.take_along_axis(obs[r0 : r0 + step, None, :], draws, axis=2).sum(axis=2)
                low[r0 : r0 + step] = (~R.above(sums.astype(np.float64), k, theta, lat)).sum(axis=1)
            c_max = math.floor(cfg.a * big_b + 1e-9)
            acc = positive & (low <= c_max)
            rej = ~positive & (big_b - low <= c_max)
            dec[i, :, j] = np.where(acc, R.ACCEPT, np.where(rej, R.REJECT, R.DEFER))
    return dec


def _bootstrap_tail(values: np.ndarray, summer: Summer, ssum: np.ndarray, qsum: np.ndarray, ks: np.ndarray,
                    theta: float, lat: int, cache: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Exact resampling tails ``P(m* <= θ)`` per distinct observed sample.

    Returns ``(p_low, pos, inverse)``: tail and ``m > θ`` per distinct (k, histogram), and
    each case's index into them. A replay repeats the same few thousand samples millions
    of times, so every tail is computed once.
    """
    key = f"{theta!r}"
    if key in cache:
        return cache[key]
    p_n, reps, n_j = ssum.shape
    jj = np.broadcast_to(np.arange(n_j)[None, None, :], ssum.shape)
    vals = np.unique(values)
    if set(vals.tolist()) <= {-1, 0, 1}:
        n_plus = np.rint((qsum + ssum) / 2).astype(np.int64)
        n_minus = np.rint((qsum - ssum) / 2).astype(np.int64)
        kmax = int(ks.max()) + 1
        code = (jj * kmax + n_plus) * kmax + n_minus
        present = np.bincount(code.ravel(), minlength=n_j * kmax * kmax) > 0
        uniq = np.flatnonzero(present)
        lookup = np.cumsum(present) - 1
        inv = lookup[code]
        uj, rest = np.divmod(uniq, kmax * kmax)
        un_plus, un_minus = np.divmod(rest, kmax)
        uk = ks[uj]
        p_low = R.tail_binary(uk, un_plus, un_minus, R.bootstrap_threshold(theta, uk, lat))
        pos = R.above((un_plus - un_minus).astype(np.float64), uk.astype(np.float64), theta, lat)
    else:
        hist = np.stack([summer((values == v).astype(np.float32)) for v in vals], axis=-1)  # [P, R, J, V]
        hist = np.rint(hist).astype(np.int32)
        rows = np.concatenate([hist, jj[..., None].astype(np.int32)], axis=-1).reshape(-1, len(vals) + 1)
        uniq, inv = np.unique(rows, axis=0, return_inverse=True)
        inv = inv.reshape(ssum.shape)
        uk = ks[uniq[:, -1]]
        p_low = R.tail_lattice(uniq[:, :-1], vals, R.bootstrap_threshold(theta, uk, lat))
        s_u = (uniq[:, :-1].astype(np.int64) * vals[None, :]).sum(axis=1)
        pos = R.above(s_u.astype(np.float64), uk.astype(np.float64), theta, lat)
    cache[key] = (p_low, pos, inv)
    return cache[key]


def _anytime(plan: Plan, ts_id: int, values: np.ndarray, order: np.ndarray | None, cfg: Config,
             thetas: Sequence[float]) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per threshold: decisions, tasks used and coverage-at-stop ``[P, R, J]`` (anytime rule)."""
    ts = plan._tasksets[ts_id]
    if order is None:
        raise SpecError("policies", "the anytime rule needs a single task order (not neyman)")
    reps, n = order.shape
    kmax = int(ts.ks.max())
    lab, n_groups = plan._labels(ts_id, cfg.group)
    n_g = np.bincount(lab, minlength=n_groups)
    steps = np.arange(1, kmax + 1)
    req = required(cfg.floor, steps, n_g)  # [kmax, G]
    feas = req.sum(axis=1) <= steps
    onehot = np.eye(n_groups, dtype=np.int32)[lab[order[:, :kmax]]]  # [R, kmax, G]
    counts = np.cumsum(onehot, axis=1)
    cov_step = np.all(counts >= req[None], axis=2) & feas[None, :]  # coverage met after t+1 observations
    p_n, n_th = len(values), len(thetas)
    dec = np.zeros((n_th, p_n, reps), dtype=np.int8)
    stop = np.zeros((n_th, p_n, reps), dtype=np.int64)
    block = max(1, BLOCK_ELEMENTS // (reps * kmax))
    for i in range(0, p_n, block):
        v = values[i : i + block][:, order[:, :kmax]]  # [b, R, kmax]
        b = v.shape[0]
        cov_ok = np.tile(cov_step, (b, 1)) if cfg.policy.coverage_aware else None
        paths = betting_paths if cfg.policy.rule == "anytime" else R.anytime_paths
        d, st = paths(v.reshape(b * reps, kmax), plan.lattice, n, list(thetas), cfg.a, kmax, cov_ok)
        dec[:, i : i + b] = d.reshape(n_th, b, reps)
        stop[:, i : i + b] = st.reshape(n_th, b, reps)
    ks = ts.ks[None, None, :]
    out = []
    for t in range(n_th):
        reached = stop[t][:, :, None] <= ks
        decisions = np.where(reached, dec[t][:, :, None], R.DEFER).astype(np.int8)
        used = np.minimum(stop[t][:, :, None], ks)
        idx = np.clip(stop[t] - 1, 0, kmax - 1)
        cov_at = np.take_along_axis(np.broadcast_to(cov_step, (p_n, reps, kmax)), idx[:, :, None], axis=2)[:, :, 0]
        out.append((decisions, used, np.broadcast_to(cov_at[:, :, None], decisions.shape)))
    return out


def _scheduled(plan: Plan, ts_id: int, members: np.ndarray, values: np.ndarray, order: np.ndarray | None,
               cfg: Config, c: int, s: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Decisions, tasks used and coverage-at-stop ``[P, R, J]`` of a policy with a schedule
    (SPEC §4.4): the rule at its checkpoints with their levels (``schedule.scheduled_paths``,
    what a live session runs); at budget ``k`` the first conclusive checkpoint ``<= k``."""
    ts = plan._tasksets[ts_id]
    if order is None:
        raise SpecError("checkpoints", "a schedule needs a single task order (not neyman)")
    reps, n = order.shape
    cks = sorted({max(1, budget_k(f, n)) for f in cfg.policy.checkpoints or ()})
    lvls = schedule.levels(cks, cfg.a, cfg.policy.spending or schedule.DEFAULT_SPENDING)
    k_m = cks[-1]
    lab, n_groups = plan._labels(ts_id, cfg.group)
    n_g = np.bincount(lab, minlength=n_groups)
    req = required(cfg.floor, np.array(cks), n_g)  # [m, G]
    onehot = np.eye(n_groups, dtype=np.int32)[lab[order[:, :k_m]]]  # [R, k_m, G]
    counts = np.cumsum(onehot, axis=1)[:, np.array(cks) - 1]  # [R, m, G]
    cov_ck = np.all(counts >= req[None], axis=2) & (req.sum(axis=1) <= np.array(cks))[None, :]  # [R, m]
    p_n, m = len(values), len(cks)
    dec = np.zeros((p_n, reps), dtype=np.int8)
    stop = np.zeros((p_n, reps), dtype=np.int64)
    block = max(1, BLOCK_ELEMENTS // (reps * k_m))
    for i in range(0, p_n, block):
        v = values[i : i + block][:, order[:, :k_m]]  # [b, R, k_m]
        b = v.shape[0]
        cov_ok = np.tile(cov_ck, (b, 1)) if cfg.policy.coverage_aware else None
        u = None
        if cfg.policy.rule == "bootstrap" and cfg.bootstrap != "exact":
            u = np.concatenate([plan._rng(s, _STREAM["schedule"], *plan.pairs[p], c).random((reps, m))
                                for p in members[i : i + b]])
        d, st = schedule.scheduled_paths(cfg.policy.rule, v.reshape(b * reps, k_m), plan.lattice, cks, lvls,
                                         cfg.delta / 100.0, n, cov_ok, cfg.bootstrap, u)
        dec[i : i + b] = d.reshape(b, reps)
        stop[i : i + b] = st.reshape(b, reps)
    ks = ts.ks[None, None, :]
    reached = stop[:, :, None] <= ks
    decisions = np.where(reached, dec[:, :, None], R.DEFER).astype(np.int8)
    used = np.minimum(stop[:, :, None], ks)
    at = np.clip(np.searchsorted(np.array(cks), stop), 0, m - 1)  # the concluding checkpoint
    cov_at = np.take_along_axis(np.broadcast_to(cov_ck, (p_n, reps, m)), at[:, :, None], axis=2)[:, :, 0]
    return decisions, used, np.broadcast_to(cov_at[:, :, None], decisions.shape)


# ------------------------------------------------------------------------- report


def _rate(num: float, den: float) -> float | None:
    return None if den == 0 else _clean(num / den)


METRICS = ("false_accept_rate", "false_reject_rate", "decision_error", "defer_rate", "coverage_failure",
           "cost_fraction", "task_fraction")


def build_report(plan: Plan, chunks: Sequence[ChunkResult], *, per_pair: bool = True) -> dict:
    """Merge chunk tallies in pair order and compute SPEC §5 metrics and §6 sufficiency.

    ``per_pair=False`` leaves out each configuration's ``per_pair`` rows (the service keeps
    them as ``pairs.PairTable`` and serves them by page); nothing else changes."""
    chunks = sorted(chunks, key=lambda ch: ch.start)
    pos = 0
    for ch in chunks:
        if ch.start != pos:
            raise ValueError(f"chunks do not cover the pairs: gap or overlap at pair {pos}")
        pos = ch.stop
    if pos != plan.n_pairs:
        raise ValueError(f"chunks cover pairs [0, {pos}) of {plan.n_pairs}")
    cat = {f: np.concatenate([getattr(ch, f) for ch in chunks], axis=0) for f in ChunkResult.FIELDS}
    spec = plan.spec
    reps, n_s = spec.orders, spec.seeds
    rec = plan.records
    names = rec.systems
    n_tasks = np.array([len(plan.pair_tasks(p)) for p in range(plan.n_pairs)], dtype=np.float64)
    ks = np.array([plan._tasksets[plan.pair_ts[p]].ks for p in range(plan.n_pairs)], dtype=np.float64)
    dfull = plan.delta_full()
    gaps = classes.gap_pp(plan.full_sums, n_tasks, plan.lattice)  # signed Δ_full in pp
    configurations = []
    for c, cfg in enumerate(plan.configs):
        appl = plan.applicable[:, c]
        full_pos = plan.positive(cfg.delta)
        positive = full_pos & appl
        negative = ~full_pos & appl
        n_app = int(appl.sum())
        rows_for = functools.partial(_budget_rows, plan, cat, c, cfg, full_pos=full_pos, ks=ks, n_tasks=n_tasks)
        budgets = rows_for(appl)
        msb, ecb = classes.sufficient_budgets(budgets)
        gap_cls, outside = classes.gap_classes(spec.gap_classes, np.abs(gaps), appl, full_pos, rows_for)
        oc = _operating_characteristic(plan, cat, c, cfg, gaps, full_pos, appl, budgets)
        conf = cfg.describe()
        conf.update({
            "n_pairs": n_app,
            "n_positive": int(positive.sum()),
            "n_negative": int(negative.sum()),
            "cases_per_budget": n_app * reps * n_s,
            "pairs_excluded": int((~appl).sum()),
            "note": None if cfg.policy.order != "cost_ascending" or n_app == plan.n_pairs else (
                "cost_ascending applies only to pairs whose A has a cost for every task of T; "
                f"{int((~appl).sum())} of {plan.n_pairs} pairs are excluded"),
            "diagnostics": [],
            "budgets": budgets,
            "minimum_sufficient_budget": msb,
            "error_coverage_budget": ecb,
            "gap_classes": gap_cls,
            "pairs_outside_gap_classes": outside,
            "operating_characteristic": oc,
        })
        if per_pair:
            conf["per_pair"] = pair_table(plan, cat, c, dfull, positive, appl).rows()
        conf["diagnostics"] = diagnostics.configuration(plan, cfg, appl, conf)
        configurations.append(conf)
    return {
        "version": __version__,
        "spec": spec.to_dict(),
        "dataset": {
            "systems": len(names),
            "system_names": list(names),
            "dropped_systems": plan.dropped_systems,
            "tasks": rec.n_tasks,
            "binary": rec.binary,
            "single_trial": rec.single_trial,
            "lattice": plan.lattice,
            "group_columns": list(rec.group_columns),
            "cost_complete_systems": int(plan.cost_complete_system.sum()),
        },
        "pairs": {
            "orientation": spec.orientation,
            "ordered": plan.n_pairs,
            "unordered": plan.n_unordered,
            "without_common_tasks": plan.empty_pairs,
            "selection": spec.pairs,
            "not_selected": plan.pairs_before_selection - plan.n_pairs,
            "positive_by_delta": {f"{d:g}": int(plan.positive(d).sum()) for d in spec.deltas},
            "negative_by_delta": {f"{d:g}": int((~plan.positive(d)).sum()) for d in spec.deltas},
        },
        "targets": {
            "alpha": spec.alpha,
            "gamma": spec.gamma,
            "eta": spec.eta,
            "null_rule": "a rate whose denominator is empty is null and counts as meeting its target",
        },
        "diagnostics": diagnostics.report(plan, names),
        "configurations": configurations,
    }


def _budget_rows(plan: Plan, cat: dict, c: int, cfg: Config, mask: np.ndarray, full_pos: np.ndarray,
                 ks: np.ndarray, n_tasks: np.ndarray) -> list[dict]:
    """A configuration's rows per budget (SPEC §5, §6) over the pairs of ``mask``: the whole
    configuration, or one gap class of it."""
    spec = plan.spec
    reps, n_s = spec.orders, spec.seeds
    positive = full_pos & mask
    negative = ~full_pos & mask
    n_app = int(mask.sum())
    cost_known = bool(np.all(~np.isnan(cat["cost_sum"][mask, c]))) if n_app else False
    budgets = []
    for j, b in enumerate(spec.budgets):
        per_seed = []
        if n_s > 1:
            for s in range(n_s):
                per_seed.append(_metrics(cat, c, s, j, positive, negative, mask, reps, ks[:, j] / n_tasks, cost_known))
        pooled = _metrics(cat, c, slice(None), j, positive, negative, mask, reps * n_s, ks[:, j] / n_tasks,
                          cost_known)
        k_mean = _clean(float(ks[mask, j].mean())) if n_app else None
        entry: dict[str, object] = {"budget": b, "k_mean": k_mean}
        entry.update(pooled)
        if cfg.policy.rule in ANYTIME_RULES or cfg.policy.checkpoints is not None:
            entry["mean_tasks_used"] = _clean(
                float(cat["used_sum"][mask, c, :, j].sum()) / max(1, n_app * reps * n_s))
        misses = _misses(pooled, spec) if pooled["cases"] else ["no_cases"]
        entry["sufficient"] = not misses
        entry["misses"] = misses
        if n_s > 1:
            entry["seed_intervals"] = {
                m: _interval([ps[m] for ps in per_seed]) for m in METRICS if pooled[m] is not None
            }
        budgets.append(entry)
    return budgets


def _operating_characteristic(plan: Plan, cat: dict, c: int, cfg: Config, gaps: np.ndarray, full_pos: np.ndarray,
                              appl: np.ndarray, budgets: list[dict]) -> dict:
    """SPEC §5.1: rates against ``Δ_full − δ`` in signed gap classes; tasks used when sequential."""
    sequential = bool(budgets) and "mean_tasks_used" in budgets[0]
    tallies = [cat[f][:, c].sum(axis=1) for f in ("accept", "reject", "defer")]  # [P, J] over seeds
    used = cat["used_sum"][:, c].sum(axis=1) if sequential else None
    rows = classes.operating_characteristic(plan.spec.gap_classes, gaps - cfg.delta, full_pos, appl, *tallies, used,
                                            plan.spec.orders * plan.spec.seeds)
    return {"x": "delta_full - delta (pp)", "budgets": list(plan.spec.budgets), "classes": rows}


def _metrics(cat: dict, c: int, s, j: int, positive: np.ndarray, negative: np.ndarray, appl: np.ndarray,
             reps: int, task_frac: np.ndarray, cost_known: bool) -> dict[str, object]:
    acc = cat["accept"][:, c, s, j]
    rej = cat["reject"][:, c, s, j]
    dfr = cat["defer"][:, c, s, j]
    cvf = cat["coverage_fail"][:, c, s, j]
    cst = cat["cost_sum"][:, c, s, j]
    if acc.ndim > 1:
        acc, rej, dfr, cvf, cst = (x.sum(axis=1) for x in (acc, rej, dfr, cvf, cst))
    cases = int(appl.sum()) * reps
    n_pos = int(positive.sum()) * reps
    n_neg = int(negative.sum()) * reps
    fa = int(acc[negative].sum())
    fr = int(rej[positive].sum())
    return {
        "cases": cases,
        "n_positive": n_pos,
        "n_negative": n_neg,
        "accept": int(acc[appl].sum()),
        "reject": int(rej[appl].sum()),
        "defer": int(dfr[appl].sum()),
        "false_accept_rate": _rate(fa, n_neg),
        "false_reject_rate": _rate(fr, n_pos),
        "decision_error": _rate(fa + fr, cases),
        "defer_rate": _rate(int(dfr[appl].sum()), cases),
        "coverage_failure": _rate(int(cvf[appl].sum()), cases),
        "cost_fraction": _rate(float(cst[appl].sum()), cases) if cost_known else None,
        "task_fraction": _rate(float((task_frac[appl] * reps).sum()), cases),
    }


def _misses(m: dict[str, object], spec: ReplaySpec) -> list[str]:
    def over(key: str, target: float) -> bool:
        v = m[key]
        return v is not None and v > target + 1e-12  # type: ignore[operator]

    out = []
    if over("false_accept_rate", spec.alpha):
        out.append("false_accept_rate")
    if over("false_reject_rate", spec.alpha):
        out.append("false_reject_rate")
    if over("coverage_failure", spec.gamma):
        out.append("coverage_failure")
    if over("defer_rate", spec.eta):
        out.append("defer_rate")
    return out


def _interval(values: list[object]) -> dict[str, float | None]:
    v = np.array([x for x in values if x is not None], dtype=np.float64)
    if not len(v):
        return {"mean": None, "low": None, "high": None}
    return {
        "mean": _clean(float(v.mean())),
        "low": _clean(float(np.percentile(v, 2.5))),
        "high": _clean(float(np.percentile(v, 97.5))),
    }


# ------------------------------------------------------------------------ driver


def _chunk_bounds(n_pairs: int, n_chunks: int) -> list[tuple[int, int]]:
    n_chunks = max(1, min(n_chunks, n_pairs))
    edges = np.linspace(0, n_pairs, n_chunks + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:], strict=True) if b > a] or [(0, 0)]


def _worker(args: tuple) -> bytes:
    records, spec, start, stop = args
    return run_chunk(Plan(records, spec), start, stop).to_bytes()


def total_cases(plan: Plan) -> int:
    return plan.n_pairs * len(plan.configs) * plan.spec.seeds * plan.spec.orders * len(plan.spec.budgets)


def run_replay(records: Records, spec: ReplaySpec, jobs: int = 1, progress: Progress | None = None,
               chunks: int | None = None, per_pair: bool = True) -> dict:
    """Plan, replay every chunk (in ``jobs`` processes) and build the report.

    The report does not depend on ``jobs`` or ``chunks``.
    """
    plan = plan_replay(records, spec)
    bounds = _chunk_bounds(plan.n_pairs, chunks or max(1, jobs) * 4)
    if jobs <= 1:
        results = [run_chunk(plan, a, b, progress) for a, b in bounds]
    else:
        import concurrent.futures as cf
        import multiprocessing as mp

        ctx = mp.get_context("spawn" if mp.get_start_method(allow_none=True) == "spawn" else "fork")
        results = []
        with cf.ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
            futs = {pool.submit(_worker, (records, spec, a, b)): (a, b) for a, b in bounds}
            for fut in cf.as_completed(futs):
                a, b = futs[fut]
                results.append(ChunkResult.from_bytes(fut.result()))
                if progress:
                    progress((b - a) * len(plan.configs) * spec.seeds * spec.orders * len(spec.budgets))
    return build_report(plan, results, per_pair=per_pair)


def sufficiency_table(report: dict) -> list[dict[str, object]]:
    """One row per configuration: the budgets a reader looks for first."""
    return [
        {
            "policy": c["policy"]["name"],
            "group": c["group"],
            "floor": c["floor"],
            "a": c["a"],
            "bootstrap": c["bootstrap"],
            "delta": c["delta"],
            "minimum_sufficient_budget": c["minimum_sufficient_budget"],
            "error_coverage_budget": c["error_coverage_budget"],
        }
        for c in report["configurations"]
    ]


__all__ = ["Config", "Plan", "ChunkResult", "plan_replay", "run_chunk", "build_report", "run_replay",
           "total_cases", "sufficiency_table"]
