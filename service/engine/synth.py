"""Synthetic benchmarks shaped like the real task-level records (SPEC §1).

The model is a two-parameter item-response model with group effects:

    P(pass | s, t) = sigmoid(disc_t * (ability_s - difficulty_t) + skill[s, group_t])

- **Systems** come in tiers: tier centres are spread over ``ability_range`` and the systems
  of one tier sit close together, so some pairs are near-ties and others are far apart
  (as on the SWE-bench boards, where many entries sit within a few points of each other).
- **Task groups** have uneven, Zipf-like sizes (the biggest repository of SWE-bench Lite holds
  114 of 300 tasks, the smallest 3); every group has at least one task.
- **Task difficulty** is heterogeneous: a group offset plus task noise, and a share of
  near-impossible tasks (about half the SWE-bench Lite tasks are solved by almost nobody).
  A ``difficulty`` metadata column labels the terciles easy / medium / hard.
- **Costs** are lognormal per attempt: a per-system price level, more spent on harder
  tasks and on failed attempts (agents that fail tend to run to their step limit).
- **Trials** repeat each (system, task) with independent draws; ``fractional`` turns each
  outcome into the share of ``fraction_of`` attempts passed (as terminal-bench reports).

Everything is drawn from one ``numpy.random.Generator`` seeded with ``seed``: the same
arguments give the same rows, byte for byte once serialised.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

SCAFFOLDS = ("react", "openhands", "swe-agent", "aider", "mini", "moatless", "autocoder", "agentless")
DIFFICULTY_LABELS = ("easy", "medium", "hard")
COLUMNS = ("system", "task_id", "group", "difficulty", "trial", "outcome", "cost")


@dataclass(frozen=True)
class SynthBenchmark:
    """A generated benchmark: the rows and the design they were drawn from.

    ``abilities`` is aligned with ``systems`` (sorted by name, like ``Records.systems``);
    ``difficulties``, ``task_groups`` and ``p_pass`` follow ``tasks``. ``p_pass`` is the
    ``[S, T]`` matrix of true pass probabilities, so ``p_pass.mean(axis=1)`` is each system's
    expected score.
    """

    rows: list[dict]
    systems: tuple[str, ...]
    abilities: np.ndarray
    tasks: tuple[str, ...]
    task_groups: tuple[str, ...]
    difficulties: np.ndarray
    groups: tuple[str, ...]
    group_sizes: tuple[int, ...]
    p_pass: np.ndarray = field(repr=False)

    def expected_scores(self) -> np.ndarray:
        return self.p_pass.mean(axis=1)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _group_sizes(rng: np.random.Generator, n_tasks: int, n_groups: int, zipf: float) -> np.ndarray:
    """Uneven sizes summing to ``n_tasks``, each at least 1, largest first."""
    weights = 1.0 / np.arange(1, n_groups + 1) ** zipf
    weights = rng.dirichlet(weights / weights.sum() * 4.0 * n_groups)  # jitter around Zipf shares
    sizes = 1 + rng.multinomial(n_tasks - n_groups, weights)
    return np.sort(sizes)[::-1]


def _abilities(rng: np.random.Generator, n_systems: int, lo: float, hi: float, spread: float) -> np.ndarray:
    """Tiered abilities, ascending: tier centres spread over [lo, hi], systems of a tier close."""
    n_tiers = max(1, min(n_systems, round(n_systems / 3)))
    # every tier gets at least one system; the rest are shared at random
    tier_sizes = 1 + rng.multinomial(n_systems - n_tiers, np.full(n_tiers, 1.0 / n_tiers))
    centres = np.linspace(lo, hi, n_tiers)
    if n_tiers > 1:
        gap = (hi - lo) / (n_tiers - 1)
        centres = centres + rng.uniform(-0.2, 0.2, n_tiers) * gap
    abil = np.concatenate([c + rng.normal(0.0, spread, k) for c, k in zip(centres, tier_sizes, strict=True)])
    return np.sort(abil)


def synthesize(
    n_systems: int = 12,
    n_tasks: int = 300,
    n_groups: int = 8,
    trials: int = 1,
    seed: int = 0,
    cost: bool = True,
    fractional: bool = False,
    *,
    fraction_of: int = 5,
    difficulty: bool = True,
    ability_range: tuple[float, float] = (-3.0, 1.5),
    tier_spread: float = 0.08,
    zipf: float = 1.1,
    impossible_share: float = 0.2,
    missing: float = 0.0,
) -> SynthBenchmark:
    """Generate a benchmark and keep its design (abilities, difficulties, groups).

    ``missing`` drops that share of (system, task) cells at random (every trial of the
    cell), for exercising the system-coverage filter. See :func:`generate` for the rest.
    """
    if n_systems < 2:
        raise ValueError("n_systems must be at least 2")
    if n_groups < 1:
        raise ValueError("n_groups must be at least 1")
    if n_tasks < n_groups:
        raise ValueError("n_tasks must be at least n_groups (every group has a task)")
    if trials < 1:
        raise ValueError("trials must be at least 1")
    if fraction_of < 1:
        raise ValueError("fraction_of must be at least 1")
    if not 0.0 <= missing < 1.0:
        raise ValueError("missing must be in [0, 1)")
    if not 0.0 <= impossible_share <= 1.0:
        raise ValueError("impossible_share must be in [0, 1]")

    rng = np.random.default_rng(seed)
    S, T, G = n_systems, n_tasks, n_groups

    # --- systems: tiered abilities, names that do not reveal the order
    abil = _abilities(rng, S, ability_range[0], ability_range[1], tier_spread)
    width = max(2, len(str(S - 1)))
    labels = rng.permutation(S)
    scaffolds = rng.integers(0, len(SCAFFOLDS), S)
    names = [f"agent{labels[i]:0{width}d}_{SCAFFOLDS[scaffolds[i]]}" for i in range(S)]

    # --- groups and tasks
    sizes = _group_sizes(rng, T, G, zipf)
    gwidth = max(2, len(str(G - 1)))
    group_names = [f"repo{g:0{gwidth}d}" for g in range(G)]
    task_group = np.repeat(np.arange(G), sizes)
    group_offset = rng.normal(0.0, 0.6, G)
    diff = group_offset[task_group] + rng.normal(0.0, 1.3, T)
    impossible = rng.random(T) < impossible_share
    diff[impossible] += rng.uniform(3.0, 6.0, int(impossible.sum()))
    disc = rng.lognormal(0.0, 0.3, T)
    skill = rng.normal(0.0, 0.3, (S, G))  # system x group specialisation
    p = _sigmoid(disc[None, :] * (abil[:, None] - diff[None, :]) + skill[:, task_group])

    cuts = np.quantile(diff, [1 / 3, 2 / 3])
    diff_label = np.searchsorted(cuts, diff, side="right")
    twidth = max(3, len(str(int(sizes.max()) - 1)))
    task_ids: list[str] = []
    counters = np.zeros(G, dtype=int)
    for g in task_group:
        task_ids.append(f"{group_names[g]}__{counters[g]:0{twidth}d}")
        counters[g] += 1

    # --- outcomes: [S, T, trials] draws, each the share of ``fraction_of`` attempts if fractional
    attempts = fraction_of if fractional else 1
    passes = rng.binomial(attempts, p[:, :, None], size=(S, T, trials))
    outcome = passes / attempts

    # --- costs: lognormal per attempt (dollars): system price level, harder and failed runs cost more
    price = rng.normal(math.log(0.12), 0.8, S) + 0.15 * (abil - abil.mean())
    log_cost = (
        price[:, None, None]
        + 0.35 * np.clip(diff, -4.0, 4.0)[None, :, None]
        + 0.4 * (1.0 - outcome)
        + rng.normal(0.0, 0.7, (S, T, trials))
    )
    costs = np.round(np.exp(log_cost), 6)

    keep = rng.random((S, T)) >= missing if missing > 0 else np.ones((S, T), dtype=bool)

    order = sorted(range(S), key=lambda i: names[i])
    rows: list[dict] = []
    for i in order:
        for t in range(T):
            if not keep[i, t]:
                continue
            for k in range(trials):
                row: dict = {"system": names[i], "task_id": task_ids[t], "group": group_names[task_group[t]]}
                if difficulty:
                    row["difficulty"] = DIFFICULTY_LABELS[diff_label[t]]
                row["trial"] = k
                row["outcome"] = float(outcome[i, t, k])
                if cost:
                    row["cost"] = float(costs[i, t, k])
                rows.append(row)

    task_order = sorted(range(T), key=lambda t: task_ids[t])
    return SynthBenchmark(
        rows=rows,
        systems=tuple(names[i] for i in order),
        abilities=abil[order],
        tasks=tuple(task_ids[t] for t in task_order),
        task_groups=tuple(group_names[task_group[t]] for t in task_order),
        difficulties=diff[task_order],
        groups=tuple(group_names),
        group_sizes=tuple(int(x) for x in sizes),
        p_pass=p[np.ix_(order, task_order)],
    )


def generate(
    n_systems: int = 12,
    n_tasks: int = 300,
    n_groups: int = 8,
    trials: int = 1,
    seed: int = 0,
    cost: bool = True,
    fractional: bool = False,
    **options,
) -> list[dict]:
    """Rows of a realistic synthetic benchmark, one per (system, task, trial).

    Keys: ``system``, ``task_id``, ``group``, ``difficulty`` (unless ``difficulty=False``),
    ``trial``, ``outcome`` (0/1, or a multiple of ``1/fraction_of`` when ``fractional``)
    and ``cost`` (USD per attempt, unless ``cost=False``). Deterministic for ``seed``.
    Extra keyword ``options`` are those of :func:`synthesize`.
    """
    return synthesize(n_systems, n_tasks, n_groups, trials, seed, cost, fractional, **options).rows


def _columns(rows: Sequence[dict]) -> list[str]:
    present: set[str] = set()
    for r in rows:
        present.update(r)
    cols = [c for c in COLUMNS if c in present]
    return cols + sorted(present - set(cols))


def _fmt(value: object) -> object:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def to_csv(rows: Sequence[dict]) -> str:
    """CSV text with a header; the known columns first (SPEC §1 order), others after."""
    buf = io.StringIO(newline="")
    writer = csv.writer(buf, lineterminator="\n")
    cols = _columns(rows)
    writer.writerow(cols)
    for r in rows:
        writer.writerow(["" if r.get(c) is None else _fmt(r[c]) for c in cols])
    return buf.getvalue()


def to_jsonl(rows: Sequence[dict]) -> str:
    """One JSON object per line, keys in the same order as :func:`to_csv`."""
    cols = _columns(rows)
    lines = [json.dumps({c: _fmt(r[c]) for c in cols if c in r}, separators=(",", ":")) for r in rows]
    return "\n".join(lines) + ("\n" if lines else "")
