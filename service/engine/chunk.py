"""Replaying a slice of pairs (SPEC §2–§4), fast: ``run_chunk`` and its kernels.

A *case* is (pair, sampled order, budget); a replay has millions of them. The engine never
visits a case alone:

* pairs sharing a task set ``T`` share each sampled order (``plan.py`` draws them);
* for an order, "observed at budget k" is a 0/1 matrix ``[N, R·J]``; prefix sums of the
  lattice-valued differences for all pairs are then one matrix product (``summers.py``);
* each rule is a closed form of those sums (``rules.py``); the bootstrap with ``B``
  resamples uses its exact tail and one uniform per case (the count of resamples at or
  below θ is exactly ``Binomial(B, p)``).

A chunk's result is tallies per (pair, configuration, seed, budget); ``metrics.py`` merges
them into the report.
"""

from __future__ import annotations

import functools
import io
import math
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass

import numpy as np

from service.engine import rules as R
from service.engine import schedule
from service.engine.betting import betting_paths, betting_walks, compiled_walk
from service.engine.blas import blas_single_thread
from service.engine.coverage import budget_k, required
from service.engine.lattice_decisions import bootstrap_decisions, compiled_stages
from service.engine.npz import savez_fast
from service.engine.plan import STREAM, Config, Plan, config_groups
from service.engine.spec import ANYTIME_RULES, SpecError
from service.engine.summers import MatrixSummer, NeymanSummer, Summer, shared_summer

Progress = Callable[[int], None]
BLOCK_ELEMENTS = 6_000_000
"""Upper bound on pairs × orders × steps held at once (memory stays well under 1 GB)."""

_PACK = 4096
"""Base of the packed 0/1 counts ``n+ + _PACK·n-``: exact in float32 below ``_PACK`` tasks."""

PAIR_BLOCK_CASES = 2_000_000
"""Cases (pairs × orders × budgets) decided together for a shared order."""

LATTICE_BLOCK_CASES = 250_000
"""The same for lattice-valued records (several trials, fractional outcomes): their bootstrap
holds some thirty arrays per case, so smaller blocks lower the peak memory and the first
touches of fresh pages. A quarter of the block halved the peak (terminal_bench_1_fractional:
480 -> 250 MB) and ran 8 % faster; half of that again (2026-12-04, eight alternating fresh
processes each, both bootstrap rules, both multi-trial datasets): peak RSS 315-384 -> 280-294
MB, least CPU 7-13 % lower in one set of runs and 1 % higher to 9 % lower in a second (a
5-trial replay's first run spent 12-15 % of its CPU in the system, some 20,000 page faults).
numpy's stages (below ``lattice.COMPILED_FROM``) neither gain nor lose CPU by it. 0/1 records
keep large blocks, whose per-block tail look-ups amortize (swebench_lite took 1.6x the time
in blocks of 500,000)."""


def lattice_valued(plan: Plan) -> bool:
    """The records' differences are on a lattice finer than {-1, 0, 1} (several trials or
    fractional outcomes): their bootstrap is the staged one of ``lattice_decisions``."""
    return plan.lattice is not None and not plan.records.binary_single_trial


def block_cases(plan: Plan) -> int:
    """Cases per block of pairs for ``plan``'s records."""
    return LATTICE_BLOCK_CASES if lattice_valued(plan) else PAIR_BLOCK_CASES


def block_pairs(plan: Plan, n_budgets: int) -> int:
    """Pairs per block of a shared order with ``n_budgets`` budgets: an even number, so that a
    pair and its mirror (side by side) share a block."""
    return max(2, block_cases(plan) // (plan.spec.orders * max(1, n_budgets)) // 2 * 2)


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
        return savez_fast(start=self.start, stop=self.stop, **{f: getattr(self, f) for f in self.FIELDS})

    @classmethod
    def from_bytes(cls, data: bytes) -> ChunkResult:
        with np.load(io.BytesIO(data)) as z:
            return cls(int(z["start"]), int(z["stop"]), *(z[f] for f in cls.FIELDS))


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
    # Lattice-valued records (several trials, fractional outcomes): the matrix products are
    # small ([pairs, tasks] @ [tasks, orders·budgets] with tens of pairs) and the lattice
    # bootstrap that follows them is single-threaded, so BLAS threads only spin there.
    with blas_single_thread() if lattice_valued(plan) else nullcontext():
        for ts_id in np.unique(plan.pair_ts[pairs]):
            members = pairs[plan.pair_ts[pairs] == ts_id]
            for s in range(n_s):
                _replay_taskset(plan, int(ts_id), members, s, out, progress)
    return out


def _replay_taskset(plan: Plan, ts_id: int, members: np.ndarray, s: int, out: ChunkResult,
                    progress: Progress | None) -> None:
    ts = plan._tasksets[ts_id]
    reps, n_j = plan.spec.orders, len(ts.ks)
    values = np.stack([plan.pair_values(p) for p in members])  # [P, N]
    for key, cfgs in config_groups(plan).items():
        kind = key[0]
        if kind == "cost_ascending":
            for a in np.unique([plan.pairs[p][0] for p in members]):
                sub = np.array([i for i, p in enumerate(members) if plan.pairs[p][0] == a])
                live = [c for c in cfgs if plan.applicable[members[sub[0]], c]]
                if not live:
                    continue
                cfg = plan.configs[live[0]]
                order = plan._orders(ts_id, s, cfg.policy, cfg.group, cfg.floor, int(a))
                _replay_order(plan, ts_id, members[sub], values[sub], order, MatrixSummer(order, ts.ks), live, s,
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
                _replay_order(plan, ts_id, sub, values[i : i + block], None, NeymanSummer(within, gstart, alloc),
                              cfgs, s, out, neyman_counts=alloc, progress=progress)
        else:
            cfg = plan.configs[cfgs[0]]
            order = plan._orders(ts_id, s, cfg.policy, cfg.group, cfg.floor, -1)
            summer = shared_summer(plan, order, ts.ks)
            # Blocks of pairs bound memory (cases × a few arrays) and pace progress / cancellation.
            block = block_pairs(plan, n_j)
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
    if n_groups == 1:  # case (r, j) holds ks[j] tasks, all of the one group: met wherever feasible
        return np.broadcast_to(feas[None, None, :], (1, reps, len(ts.ks)))
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
    hist_cache: dict = {}
    need_q = any(plan.configs[c].policy.rule in ("paired_normal", "mcnemar", "bootstrap") for c in cfgs)
    ssum = qsum = None
    if need_q and lat is not None and n < _PACK and np.abs(values).max(initial=0) <= 1:
        # 0/1 outcomes: n+ and n- from one product (n+ + 4096·n-, exact in float32, and so are
        # the counts split off it); every rule then decides per distinct (budget, n+, n-)
        packed = summer.sum32(np.where(values > 0, 1.0, np.where(values < 0, float(_PACK), 0.0)).astype(np.float32))
        n_minus = np.floor(packed * np.float32(1.0 / _PACK))
        n_plus = packed - np.float32(_PACK) * n_minus
        hist_cache["binary"] = (n_plus, n_minus)  # the closed forms take them per distinct sample
    else:
        exact32 = lat is not None and float(lat) * lat * n < 2**24  # Σv² stays exact in float32
        vf = values.astype(np.float32 if exact32 else np.float64)
        ssum = summer(vf)
        qsum = summer(vf * vf) if need_q else None
    k = ts.ks[None, None, :].astype(np.float64)
    # A's cost fraction of the observed tasks, added over the orders: [P, J]
    a_idx = np.array([plan.pairs[p][0] for p in members])
    cost = plan.records.cost[a_idx][:, ts.tasks]
    cost_ok = ~np.isnan(cost).any(axis=1)
    total = np.where(cost_ok, np.nansum(cost, axis=1), np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        frac = np.where(cost_ok[:, None], np.nan_to_num(cost) / np.where(total > 0, total, 1.0)[:, None], np.nan)
        zero_total = cost_ok & (total <= 0)
    if cost_ok.any():
        cost_rsum = summer.rep_sums(np.nan_to_num(frac).astype(np.float64))
    else:  # no complete costs in this block: nothing to sum
        cost_rsum = np.full((len(members), n_j), np.nan)
    if zero_total.any():  # all-free tasks: the observed share of cost is the share of tasks
        cost_rsum[zero_total] = (reps * ts.ks / n)[None, :]
    cost_rsum[~cost_ok] = np.nan
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
            if rule in _CLOSED_FORMS:
                if "binary" in hist_cache:  # 0/1 counts: once per distinct (budget, n+, n-), then gathered
                    uj, un_plus, un_minus, inv = _binary_samples(hist_cache, ts.ks)
                    s_u, q_u = (un_plus - un_minus).astype(np.float64), (un_plus + un_minus).astype(np.float64)
                    dec = _closed_form(rule, s_u, q_u, ts.ks[uj].astype(np.float64), n, theta, cfg.a, lat)[inv]
                else:
                    dec = _closed_form(rule, ssum, qsum, k, n, theta, cfg.a, lat)
            elif rule == "bootstrap" and not plan.fft_bootstrap:
                dec = _bootstrap_literal(plan, ts_id, members, values, order, c, s, theta)
            elif rule == "bootstrap" and not set(np.unique(values).tolist()) <= {-1, 0, 1}:
                u = None if cfg.bootstrap == "exact" else np.stack([
                    plan._rng(s, STREAM["bootstrap"], *plan.pairs[p], c).random((reps, n_j)) for p in members
                ])
                dec = bootstrap_decisions(values, summer, ssum, qsum, ts.ks, theta, lat, cfg.a, cfg.bootstrap, u,
                                          hist_cache, compiled_stages(plan))
            elif rule == "bootstrap":
                pos, inv, keys = _binary_bootstrap_samples(ssum, qsum, ts.ks, theta, lat, hist_cache)
                if cfg.bootstrap == "exact":
                    dec = R.exact_binary(*keys, cfg.a)[inv]
                else:
                    big_b = int(cfg.bootstrap)
                    q = R.conclude_binary(*keys, cfg.a, big_b)
                    # per distinct sample, then one gather: u < q never holds for q = 0 and
                    # always for q = 1 (u in [0, 1)), so only cases in between draw
                    sure = np.where(q <= 0.0, R.DEFER, np.where(pos, R.ACCEPT, R.REJECT)).astype(np.int8)
                    dec = sure[inv]
                    unsure = np.flatnonzero(((q > 0.0) & (q < 1.0))[inv].reshape(len(members), -1).any(axis=1))
                    u = np.empty((reps, n_j))
                    for i in unsure.tolist():  # pairs whose every case is sure draw nothing
                        plan._rng(s, STREAM["bootstrap"], *plan.pairs[members[i]], c).random(out=u)
                        dec[i][u >= q[inv[i]]] = R.DEFER
            else:
                raise ValueError(rule)
            if cfg.policy.coverage_aware:  # a decision only where coverage is met: no failures
                dec = np.where(cov, dec, R.DEFER)
                covfail = None
            else:
                covfail = (dec != 0) & ~cov
        every = bool(appl.all())  # (the usual case: no copy of the block's arrays)
        sel = rows if every else rows[appl]
        dec = dec if every else dec[appl]
        accept, reject = _count(dec == R.ACCEPT), _count(dec == R.REJECT)
        out.accept[sel, c, s] = accept
        out.reject[sel, c, s] = reject
        out.defer[sel, c, s] = reps - accept - reject  # every case is one of the three
        if covfail is not None:
            covfail = np.broadcast_to(covfail, (len(members), reps, n_j))
            out.coverage_fail[sel, c, s] = _count(covfail if every else covfail[appl])
        out.cost_sum[sel, c, s] = cost_rsum[appl]
        if used is not None:
            out.used_sum[sel, c, s] = (used if every else used[appl]).sum(axis=1)
        else:
            out.used_sum[sel, c, s] = reps * ts.ks[None, :]
        if progress:
            progress(len(members) * reps * n_j)


_CLOSED_FORMS = ("forced", "paired_normal", "mcnemar", "serfling")
"""Rules decided from the sums of d and d² over the observed tasks."""


def _closed_form(rule: str, s: np.ndarray, q: np.ndarray | None, k: np.ndarray, n: int, theta: float, a: float,
                 lat: int | None) -> np.ndarray:
    """A closed-form rule's decisions from the sums of d and d² (elementwise: per case, or per
    distinct sample)."""
    if rule == "forced":
        return R.forced(s, k, theta, lat)
    if rule == "paired_normal":
        return R.paired_normal(s, q, k, theta, a, lat)
    if rule == "mcnemar":
        return R.mcnemar((q + s) / 2, (q - s) / 2, a)
    return R.serfling(s, k, n, theta, a, lat)


def _count(hit: np.ndarray) -> np.ndarray:
    """``[P, R, J]`` booleans counted over the orders, ``[P, J]`` (bytes summed into int32:
    2x faster than ``hit.sum(axis=1)``'s int64)."""
    return hit.view(np.uint8).sum(axis=1, dtype=np.int32)


def _bootstrap_literal(plan: Plan, ts_id: int, members: np.ndarray, values: np.ndarray, order: np.ndarray | None,
                       c: int, s: int, theta: float) -> np.ndarray:
    """``B`` literal resamples per case, for outcomes off a small lattice (slow, exact in law)."""
    ts = plan._tasksets[ts_id]
    cfg = plan.configs[c]
    reps, big_b = plan.spec.orders, int(cfg.bootstrap)
    lat = plan.lattice
    dec = np.zeros((len(members), reps, len(ts.ks)), dtype=np.int8)
    for i, p in enumerate(members):
        rng = plan._rng(s, STREAM["bootstrap"], *plan.pairs[p], c)
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


def _binary_samples(cache: dict, ks: np.ndarray) -> tuple:
    """The distinct 0/1 samples of a block (its counts ``cache["binary"]``), ``(budget index,
    n+, n-)`` each, and every case's index into them (``[P, R, J]``), computed once per block:
    the bootstrap at every threshold and the closed-form rules decide per distinct sample,
    then gather."""
    if "samples" in cache:
        return cache["samples"]
    n_plus, n_minus = cache["binary"]
    # code = start_j + n+·(k_j + 1) + n-: budget j's (n+, n-) in a square of side k_j + 1,
    # the squares one after another (increasing in (j, n+, n-), as the sort below is)
    side = ks.astype(np.int64) + 1
    start = np.concatenate([[0], np.cumsum(side * side)])
    n_codes = int(start[-1])
    itype = np.int32 if n_codes < 2**31 else np.int64
    code = n_plus.astype(itype)
    code *= side.astype(itype)[None, None, :]
    code += n_minus.astype(itype)
    code += start[:-1].astype(itype)[None, None, :]
    if 4 * code.size >= n_codes:  # a large block: one pass over every possible code
        present = np.zeros(n_codes, dtype=bool)
        present[code.ravel()] = True
        uniq = np.flatnonzero(present)
        rank = np.empty(n_codes, dtype=np.int32)  # read only where present
        rank[uniq] = np.arange(len(uniq), dtype=np.int32)
        inv = rank[code]
    else:  # few cases for the codes there could be (few orders, many tasks): sort them
        uniq, inv = np.unique(code, return_inverse=True)
        inv = inv.reshape(code.shape)
    uj = np.searchsorted(start, uniq, side="right") - 1
    un_plus, un_minus = np.divmod(uniq - start[uj], side[uj])
    cache["samples"] = (uj, un_plus, un_minus, inv)
    return cache["samples"]


def _binary_bootstrap_samples(ssum: np.ndarray | None, qsum: np.ndarray | None, ks: np.ndarray, theta: float,
                              lat: int, cache: dict) -> tuple:
    """The distinct 0/1 samples of a block, for the bootstrap at ``θ``.

    Returns ``(pos, inverse, keys)``: ``m > θ`` per distinct (k, n+, n-), each case's index
    into them, and the samples' ``(k, n+, n-, c)`` (the keys of ``rules.exact_binary`` and
    ``rules.conclude_binary``, which look their tails up in a per-process memo: a replay
    repeats the same few thousand samples millions of times). The counts are the block's
    packed ones, or (past ``_PACK`` tasks) split off the sums of d and d².
    """
    key = f"{theta!r}"
    if key in cache:
        return cache[key]
    if "binary" not in cache:
        cache["binary"] = (np.rint((qsum + ssum) / 2), np.rint((qsum - ssum) / 2))
    uj, un_plus, un_minus, inv = _binary_samples(cache, ks)
    uk = ks[uj]
    uc = R.bootstrap_threshold(theta, uk, lat)
    pos = R.above((un_plus - un_minus).astype(np.float64), uk.astype(np.float64), theta, lat)
    cache[key] = (pos, inv, (uk, un_plus, un_minus, uc))
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
    fast = False
    if cfg.policy.rule == "anytime":  # compiled or not by the whole replay's size, as every chunk decides
        longest = max(int(t.ks.max()) for t in plan._tasksets)
        fast = compiled_walk(plan.n_pairs * plan.spec.orders * plan.spec.seeds * longest)
    paths = functools.partial(betting_paths, compiled=False) if cfg.policy.rule == "anytime" else R.anytime_paths
    for i in range(0, p_n, block):
        b = len(values[i : i + block])
        if fast:  # each pair read in each order in place, the coverage per order
            d, st = betting_walks(values[i : i + block], order[:, :kmax], plan.lattice, n, list(thetas), cfg.a,
                                  cov_step if cfg.policy.coverage_aware else None)
        else:
            # np.take lays [b, R, kmax] out in order (indexing [:, order] gave a transposed view,
            # which the reshape below then copied: 8x the time of the gather itself)
            v = np.take(values[i : i + block], order[:, :kmax], axis=1)  # [b, R, kmax]
            cov_ok = np.tile(cov_step, (b, 1)) if cfg.policy.coverage_aware else None
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
    counts = _counts_at(lab, order, cks, n_groups)  # [R, m, G]
    cov_ck = np.all(counts >= req[None], axis=2) & (req.sum(axis=1) <= np.array(cks))[None, :]  # [R, m]
    p_n, m = len(values), len(cks)
    dec = np.zeros((p_n, reps), dtype=np.int8)
    stop = np.zeros((p_n, reps), dtype=np.int64)
    block = max(1, BLOCK_ELEMENTS // (reps * k_m))
    for i in range(0, p_n, block):
        v = np.take(values[i : i + block], order[:, :k_m], axis=1)  # [b, R, k_m], laid out in order
        b = v.shape[0]
        cov_ok = np.tile(cov_ck, (b, 1)) if cfg.policy.coverage_aware else None
        u = None
        if cfg.policy.rule == "bootstrap" and cfg.bootstrap != "exact":
            u = np.concatenate([plan._rng(s, STREAM["schedule"], *plan.pairs[p], c).random((reps, m))
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


_COUNT_ELEMENTS = 1 << 20
"""Most labels ``_counts_at`` gathers at once."""


def _counts_at(lab: np.ndarray, order: np.ndarray, cks: Sequence[int], n_groups: int) -> np.ndarray:
    """``[R, m, G]``: how many of each order's first ``k_j`` tasks lie in each group, counted
    segment by segment between checkpoints on a few orders at a time. A one-hot ``[R, k_m, G]``
    and its running sum cost 12 bytes per order, step and group: 216 MB for 20,000 orders of
    300 tasks in 3 groups, for the ``m`` checkpoints read from them."""
    reps = len(order)
    out = np.empty((reps, len(cks), n_groups), dtype=np.int64)
    rows = max(1, _COUNT_ELEMENTS // max(cks[-1], 1))
    for r0 in range(0, reps, rows):
        part = order[r0 : r0 + rows]
        r = len(part)
        base = (np.arange(r) * n_groups)[:, None]
        acc = np.zeros(r * n_groups, dtype=np.int64)
        prev = 0
        for j, k in enumerate(cks):
            acc += np.bincount((base + lab[part[:, prev:k]]).ravel(), minlength=r * n_groups)
            out[r0 : r0 + r, j] = acc.reshape(r, n_groups)
            prev = k
    return out


# ------------------------------------------------------------------------- report
