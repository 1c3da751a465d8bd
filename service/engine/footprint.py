"""How much memory one replay chunk takes, estimated from the plan before anything runs.

The case count (pairs x orders x budgets x configurations x seeds) bounds time, not memory:
``run_chunk`` holds arrays whose shape is tasks x orders x budgets whatever the number of
pairs, so two systems with 1,000 tasks and 100,000 orders (3.8 M cases) asked for 7.6 GB.
This module mirrors the engine's allocations term by term (``chunk.py``, ``summers.py``: the
observation matrix of a shared order, the cached orders, the blocks of pairs decided together,
the anytime paths, neyman's prefix sums, a schedule's paths) so the service can refuse such a
replay at submission. What a process keeps between chunks is bounded apart: the exact tails'
memos (``arraycache.bound_total()``, 72 MiB) and the 0/1 tail tables (``tails._DENSE_BYTES``).
A test runs chunks under ``tracemalloc`` and checks the estimate stays above the measured
peak and within a small factor of it, so a change of the engine's shapes shows up there.
"""

from __future__ import annotations

from dataclasses import dataclass

from service.engine import schedule
from service.engine.betting import _BLOCK as BETTING_BLOCK
from service.engine.betting import SEGMENT as BETTING_SEGMENT
from service.engine.chunk import _COUNT_ELEMENTS, BLOCK_ELEMENTS, block_cases
from service.engine.coverage import budget_k
from service.engine.plan import Config, Plan, config_groups
from service.engine.records import group_labels
from service.engine.spec import ANYTIME_RULES

ORDER_CACHE_ENTRIES = 65
"""``Plan._orders`` keeps up to 64 orders, then clears: at most 65 are alive at once."""
LITERAL_BOOTSTRAP_BYTES = 2 * 8 * 4_000_000
"""``_bootstrap_literal`` draws at most 4 M indices at a time (and gathers as many values)."""


@dataclass(frozen=True)
class Footprint:
    """The estimate, by term (bytes), so a refusal can say what dominates."""

    observation_matrix: int
    orders: int
    blocks: int
    anytime: int
    neyman: int
    results: int
    schedule: int = 0

    @property
    def total(self) -> int:
        return (self.observation_matrix + self.orders + self.blocks + self.anytime + self.neyman + self.results
                + self.schedule)

    def largest(self) -> str:
        terms = {
            "tasks x orders x budgets (the observation matrix)": self.observation_matrix,
            "orders x tasks (the sampled orders)": self.orders,
            "pairs x orders x budgets (the decided cases; the bootstrap's budgets x tasks^2 codes)": self.blocks,
            "orders x tasks x groups (the anytime paths)": self.anytime,
            "orders x tasks (neyman's prefix sums)": self.neyman,
            "pairs x configurations x budgets (the tallies)": self.results,
            "orders x checkpoint tasks (a schedule's paths; the histograms of a fine grid)": self.schedule,
        }
        return max(terms, key=terms.__getitem__)


def chunk_footprint(plan: Plan, chunk_pairs: int) -> Footprint:
    """Peak bytes of ``run_chunk`` on a chunk of ``chunk_pairs`` pairs of ``plan`` (an upper
    estimate: every task set is taken as large as the largest)."""
    spec = plan.spec
    reps, n_j, n_c, n_s = spec.orders, len(spec.budgets), len(plan.configs), spec.seeds
    n = max((len(ts.tasks) for ts in plan._tasksets), default=plan.records.n_tasks)
    pairs = max(1, min(chunk_pairs, plan.n_pairs))
    groups = {g: _n_groups(plan, g) for g in spec.groups}
    kinds = {c.policy.order for c in plan.configs}

    # a shared order's observation matrix: bool [N, R, J] -> float32, and a float64 copy for
    # costs and off-lattice values; the rank [R, N] it is built from
    obs = 0
    if kinds - {"neyman"}:  # neyman sums through prefix sums instead
        obs = (1 + 4 + 8) * n * reps * n_j + 8 * reps * n
        if len(config_groups(plan)) > 1:  # the next order's matrix is built while the last one is alive
            obs *= 2
    # the coverage counts of a floor: [G, R, J] float64 through the summer
    obs += 8 * max(groups.values(), default=1) * reps * n_j
    keys = 0
    for kind in kinds:
        if kind == "uniform":
            keys += 1
        elif kind == "stratified":
            keys += len({(c.group, c.floor) for c in plan.configs if c.policy.order == kind})
        elif kind == "cost_ascending":
            keys += plan.records.n_systems
        else:
            keys += 2 * len({c.group for c in plan.configs if c.policy.order == kind})  # shuffles and starts
    orders = 8 * reps * n * min(keys, ORDER_CACHE_ENTRIES)
    # pairs decided together: ~14 float64-sized arrays per case (sums of values, squares and
    # costs, the decision, coverage, the bootstrap's codes and uniforms); cost_ascending
    # decides every pair of one system A at once, the others in blocks of block_cases(plan)
    per_block = pairs if "cost_ascending" in kinds else max(1, min(pairs, block_cases(plan) // max(reps * n_j, 1)))
    blocks = 14 * 8 * per_block * reps * n_j
    if any(c.policy.rule == "bootstrap" and not c.policy.checkpoints for c in plan.configs):  # (see _schedule)
        if not plan.fft_bootstrap:
            blocks += LITERAL_BOOTSTRAP_BYTES
        elif plan.lattice == 1:
            # binary differences: a bool per possible (budget, n+, n-) code ((k + 1)^2 per
            # budget) and an int32 rank of those present, or for a block with under a quarter
            # as many cases as codes, np.unique's sort of them
            codes = max((int(((ts.ks + 1) ** 2).sum()) for ts in plan._tasksets), default=n_j * (n + 1) ** 2)
            cases_per_block = per_block * reps * n_j
            blocks += (1 + 4) * codes if 4 * cases_per_block >= codes else 4 * 8 * cases_per_block
        else:
            # off {-1, 0, 1}: a histogram of the 2L + 1 values per case, float64 sums stacked,
            # int32 rows and np.unique's sorted copies of them
            values = 2 * plan.lattice + 1
            blocks += (8 * values + 3 * 4 * (values + 1)) * per_block * reps * n_j
    anytime = 0
    anytime_cfgs = [c for c in plan.configs if c.policy.rule in ANYTIME_RULES]
    if anytime_cfgs:
        kmax = max(int(ts.ks.max()) for ts in plan._tasksets) if plan._tasksets else n
        g_any = max(groups[c.group] for c in anytime_cfgs)
        thresholds = len({c.delta for c in anytime_cfgs})
        # coverage along each order: one-hot int32 and its int64 cumsum [R, kmax, G]
        anytime = (4 + 8 + 1) * reps * kmax * g_any
        # the paths of a block (values, transposed copies, coverage, the walk's temporaries)
        steps = min(pairs, max(1, BLOCK_ELEMENTS // (reps * kmax))) * reps * kmax
        anytime += 40 * steps
        if any(c.policy.rule == "anytime" for c in anytime_cfgs):
            # the betting process, a segment at a time: ~28 float64 arrays over a block's paths x
            # SEGMENT steps, the block's coverage rows and the sums carried per path and threshold
            rows = min(max(1, steps // max(kmax, 1)), max(1, BETTING_BLOCK // BETTING_SEGMENT))
            anytime += (28 * 8 * BETTING_SEGMENT + kmax + 8 * (3 + 3 * thresholds)) * rows
        # per threshold: decisions, tasks used, coverage at stop, for the chunk's pairs
        anytime += thresholds * (1 + 8 + 8 + 1) * pairs * reps * n_j
    neyman = 0
    if "neyman" in kinds:
        per_block = min(pairs, max(1, BLOCK_ELEMENTS // (reps * n)))
        neyman = 2 * 8 * per_block * reps * (n + 1)  # x[:, within] and its prefix sums
    results = (4 * 4 + 8 + 8) * pairs * n_c * n_s * n_j
    sched = max((_schedule(plan, c, pairs, n, groups[c.group]) for c in plan.configs if c.policy.checkpoints),
                default=0)
    return Footprint(obs, orders, blocks, anytime, neyman, results, sched)


def _schedule(plan: Plan, cfg: Config, pairs: int, n: int, n_groups: int) -> int:
    """Peak bytes of ``chunk._scheduled`` for ``cfg`` (one configuration at a time: the
    largest counts). Its blocks of pairs hold ``BLOCK_ELEMENTS`` values in observation order;
    ``schedule.scheduled_paths`` decides them a slice at a time (``slice_rows``)."""
    reps, n_j, rule, lat = plan.spec.orders, len(plan.spec.budgets), cfg.policy.rule, plan.lattice
    cks = sorted({max(1, budget_k(f, n)) for f in cfg.policy.checkpoints or ()})
    k_m, m = cks[-1], len(cks)
    gap = max(b - a for a, b in zip([0, *cks], cks, strict=False))  # the most values one checkpoint adds
    # the coverage counts at each checkpoint [R, m, G] int64 and their comparisons; a segment's labels
    cover = (8 + 1) * reps * m * n_groups + 2 * reps * m + 2 * 8 * min(reps, _COUNT_ELEMENTS // k_m + 1) * gap
    # a block of pairs: their values in order (int64), coverage per checkpoint, a finite B's uniforms
    rows = min(pairs, max(1, BLOCK_ELEMENTS // (reps * k_m))) * reps
    block = 8 * rows * k_m + rows * m + (2 * 8 * rows * m if rule == "bootstrap" and cfg.bootstrap != "exact" else 0)
    # a slice: the values as float64, a checkpoint's segment and its temporaries, ~20 arrays per path
    # (sums, counts, decisions, the tails' brackets); off a lattice each checkpoint copies its prefix
    # and squares it; a lattice bootstrap's histograms over -L..L, kept and, at a checkpoint, counted,
    # copied for the live paths and read into the staged brackets' laws (about six times)
    sl = min(rows, schedule.slice_rows(k_m, rule, lat))
    per_slice = 8 * sl * k_m + 3 * 8 * sl * gap + 160 * sl
    if lat is None:
        per_slice += 2 * 8 * sl * k_m
    elif rule == "bootstrap" and lat > 1:
        per_slice += 6 * 8 * (2 * lat + 1) * sl
    # the chunk's decisions and stops [P, R], spread over the budgets [P, R, J]
    out = 9 * pairs * reps + (1 + 8 + 1 + 8 + 1) * pairs * reps * n_j
    return cover + block + per_slice + out


def _n_groups(plan: Plan, group: str | None) -> int:
    """Groups of the whole universe under ``group`` (a task set holds at most these)."""
    return len(group_labels(plan.records, group)[1])


__all__ = ["Footprint", "chunk_footprint"]
