"""Placing a new entry on a stored leaderboard, live (SPEC §8.1).

A harness runs only the new system; the board's outcomes come from a stored dataset. After
each task the entry is compared with every board system ``j`` on the tasks both have, by the
anytime-valid rule of the live decisions (``live.rule_verdict``, the code sessions call), at
``δ = 0``: ``accept`` = the entry's full-run mean is above ``j``'s on ``j``'s tasks,
``reject`` = it is not. The level ``a`` is split over the ``S`` board systems so that every
conclusion holds at once with probability ``>= 1 - a``:

* ``bonferroni``: each comparison at ``a / S``;
* ``holm``: step-down over the anytime p-values: with ``r`` comparisons concluded, the open
  ones are checked at ``a / (S - r)``, repeated until nothing new concludes. Anytime-valid
  p-values are valid at any stopping time, and Holm's procedure is valid for any
  dependence between them, so the family stays at ``a`` however the run stops. For
  ``anytime`` the rounds cost one walk per comparison (``holm_levels``); ``anytime_eb`` bets
  by the level, so each round runs the rule again, for at most ``EB_STEP_DOWN_ROUNDS`` rounds.

Rank interval: ``rank_low = 1 + #{reject}``, ``rank_high = S + 1 - #{accept}``. Without a
wrong conclusion it holds the entry's **true rank** ``1 + #{j : Δ_full(entry, j) <= 0}`` (its
rank by full-run paired differences, ties counted against the entry), so it covers that rank
simultaneously with every comparison, with probability ``>= 1 - a``.

Order. The anytime guarantee needs an order that does not depend on the entry's outcomes:
choosing tasks by what the entry did so far would bias every difference. The placement order
is therefore fixed at creation: stratified by the coverage groups (every prefix meets the
floor when feasible, SPEC §4.1), and within each group stratified by how the board splits on
the task (terciles of the board's mean outcome), so that the tasks that separate systems are
spread evenly over every prefix rather than left to chance. ``next`` continues that order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from service.engine import rules as R
from service.engine.coverage import required
from service.engine.live import (
    LiveError,
    LiveSpec,
    Observed,
    Universe,
    _coverage_path,
    anytime_strengths,
    next_tasks,
    rule_verdict,
)
from service.engine.numbers import clean
from service.engine.orders import stratified_orders

CORRECTIONS = ("holm", "bonferroni")
DIFFICULTY_STRATA = 3


@dataclass(frozen=True)
class Board:
    """The stored systems' outcomes over the universe: ``y[j, t]`` (NaN where ``j`` has no
    outcome for ``t``), in universe order."""

    systems: tuple[str, ...]
    y: np.ndarray

    @property
    def observed(self) -> np.ndarray:
        return ~np.isnan(self.y)

    @property
    def scores(self) -> np.ndarray:
        return np.nanmean(self.y, axis=1)


def placement_order(universe: Universe, board: Board, floor: str, seed: int) -> list[int]:
    """The fixed order of a placement (positions in the universe): groups interleaved
    earliest-deadline-first as in :func:`~service.engine.orders.stratified_orders`, and the
    slots of each group filled by a proportional interleave of its board-difficulty terciles
    (random within a tercile). Depends on the board and ``seed`` only."""
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([int(seed), 16])))
    labels = universe.labels
    slots = labels[stratified_orders(labels, floor, 1, rng)[0]]  # which group each step serves
    with np.errstate(invalid="ignore"):
        ease = np.nanmean(board.y, axis=0)
    ease = np.where(np.isnan(ease), 0.5, ease)
    fill: dict[int, list[int]] = {}
    for g in range(len(universe.group_names)):
        tasks = np.flatnonzero(labels == g)
        ranks = np.argsort(np.argsort(ease[tasks] + 1e-9 * rng.random(len(tasks)), kind="stable"), kind="stable")
        strata = (ranks * DIFFICULTY_STRATA) // max(len(tasks), 1)
        within = stratified_orders(strata.astype(np.intp), "proportional", 1, rng)[0] if len(tasks) else []
        fill[g] = tasks[within].tolist() if len(tasks) else []
    taken = dict.fromkeys(fill, 0)
    out = []
    for g in slots.tolist():
        out.append(fill[g][taken[g]])
        taken[g] += 1
    return out


@dataclass(frozen=True)
class Entry:
    """The entry's outcomes: ``y[t]`` mean over its trials (NaN = none yet), ``trials[t]``,
    and ``sequence``: positions that became observed (``trials_needed`` trials), in order."""

    y: np.ndarray
    trials: np.ndarray
    sequence: np.ndarray


def aggregate_entry(universe: Universe, rows: Sequence[tuple[str, int, float]], trials_needed: int) -> Entry:
    """Rows ``(task_id, trial, outcome)`` in storage order; a task counts once it has
    ``trials_needed`` trials (the sequence is the order in which tasks got their last one)."""
    n = universe.n
    total = np.zeros(n)
    count = np.zeros(n, dtype=np.int64)
    sequence = []
    for task, _trial, outcome in rows:
        i = universe.index[task]
        total[i] += outcome
        count[i] += 1
        if count[i] == trials_needed:
            sequence.append(i)
    with np.errstate(invalid="ignore", divide="ignore"):
        y = np.where(count > 0, total / np.maximum(count, 1), np.nan)
    return Entry(y, count, np.asarray(sequence, dtype=np.intp))


@dataclass(frozen=True)
class Comparison:
    """The entry against one board system on their common observed tasks."""

    system: str
    board_score: float
    n_common: int
    k: int
    mean_difference: float | None
    decision: str
    level: float
    stopped_at: int | None


@dataclass(frozen=True)
class PlacementState:
    status: str
    k: int
    N: int
    rank_low: int
    rank_high: int
    width: int
    entry_score: float | None
    comparisons: tuple[Comparison, ...]
    rivals: tuple[str, ...]
    next: dict | None


def _lattice(values: np.ndarray) -> int | None:
    if not values.size or np.array_equal(values, np.round(values)):
        return 1
    return R.find_lattice(values)


def _common(entry: Entry, board: Board, cov: np.ndarray | None, j: int) -> tuple | None:
    """The entry against system ``j`` on their common observed tasks, in the entry's order:
    the differences, ``j``'s task count, the lattice and the coverage path (None: no task yet)."""
    seq = entry.sequence
    keep = board.observed[j, seq]
    pos = seq[keep]
    if not len(pos):
        return None
    d = entry.y[pos] - board.y[j, pos]
    lat = _lattice(np.concatenate([entry.y[pos], board.y[j, pos]]))
    return d, int(board.observed[j].sum()), lat, None if cov is None else cov[keep]


def _verdicts(
    entry: Entry, board: Board, cov: np.ndarray | None, spec: LiveSpec, levels: np.ndarray, todo: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Decision and stop (step within each comparison's own sequence) of comparisons ``todo``."""
    dec = np.zeros(len(board.systems), dtype=np.int64)
    stop = np.zeros(len(board.systems), dtype=np.int64)
    for j in np.flatnonzero(todo).tolist():
        common = _common(entry, board, cov, j)
        if common is None:
            continue
        d, n_j, lat, cov_j = common
        s = LiveSpec(spec.rule, 0.0, float(levels[j]), spec.floor, coverage_aware=spec.coverage_aware)
        v, stat = rule_verdict(s, d, n_j, lat, cov_j)
        dec[j] = v
        stop[j] = stat.get("stopped_at") or 0
    return dec, stop


EB_STEP_DOWN_ROUNDS = 8
"""Holm rounds after the first for ``anytime_eb``, whose bets depend on the level: each round
runs the rule again on every open comparison, and a board can be built to conclude one
comparison per round (``S`` rounds, ``S²/2`` runs against the ``S`` counted at creation). Stopping
the step-down early concludes a subset of what Holm would, so the family stays at ``a``."""


def holm_levels(best: np.ndarray, a: float, holm: bool) -> tuple[np.ndarray, float]:
    """Holm's step-down (or Bonferroni) on comparisons whose strongest evidence is ``best[j]``
    (the largest ``ln(1/level)`` at which ``j`` concludes; ``-inf``: never): with ``r``
    concluded the open ones are tested at ``a / (S - r)``, until a round concludes nothing.
    Returns the level each comparison concluded at (NaN: open) and the open ones' level.

    A comparison that concludes at a level concludes at every larger one, so the rounds are
    a walk down the comparisons sorted by ``best``: ``O(S log S)``, not ``S`` rounds of tests."""
    s_count = len(best)
    concluded_at = np.full(s_count, np.nan)
    order = np.argsort(-best, kind="stable")
    done = 0
    level = a / s_count
    while True:
        bound = R.log_inv(level)  # as the rule compares: ln K >= ln(1/a)
        start = done
        while done < s_count and best[order[done]] >= bound:
            concluded_at[order[done]] = level
            done += 1
        if done == start or done == s_count or not holm:
            return concluded_at, level
        level = a / (s_count - done)


def _decide(entry: Entry, board: Board, cov: np.ndarray | None, spec: LiveSpec,
            correction: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every comparison's decision, stop and level under the correction (module doc)."""
    s_count = len(board.systems)
    if spec.rule == "anytime":  # one walk per comparison serves every level (holm_levels)
        paths = [None if (c := _common(entry, board, cov, j)) is None else anytime_strengths(spec, *c)
                 for j in range(s_count)]
        best = np.full(s_count, -np.inf)  # no common task, or every strength NaN: never concludes
        for j, path in enumerate(paths):
            if path is not None and not np.isnan(top := np.fmax.reduce(path[1])):
                best[j] = top
        concluded_at, open_level = holm_levels(best, spec.a, correction == "holm")
        dec = np.zeros(s_count, dtype=np.int64)
        stop = np.zeros(s_count, dtype=np.int64)
        for j in np.flatnonzero(~np.isnan(concluded_at)).tolist():
            accepts, strength = paths[j]
            t = int(np.argmax(strength >= R.log_inv(concluded_at[j])))
            dec[j] = R.ACCEPT if accepts[t] else R.REJECT
            stop[j] = t + 1
        return dec, stop, np.where(np.isnan(concluded_at), open_level, concluded_at)
    levels = np.full(s_count, spec.a / s_count)
    dec, stop = _verdicts(entry, board, cov, spec, levels, np.ones(s_count, dtype=bool))
    for _ in range(EB_STEP_DOWN_ROUNDS if correction == "holm" else 0):
        open_ = dec == R.DEFER
        r = s_count - int(open_.sum())
        if not open_.any() or r == 0:
            break
        levels = np.where(open_, spec.a / (s_count - r), levels)
        d2, s2 = _verdicts(entry, board, cov, spec, levels, open_)
        new = open_ & (d2 != R.DEFER)
        if not new.any():
            break
        dec = np.where(new, d2, dec)
        stop = np.where(new, s2, stop)
    return dec, stop, levels


def placement_state(
    universe: Universe,
    board: Board,
    entry: Entry,
    spec: LiveSpec,
    correction: str,
    width: int,
    order_rank: np.ndarray,
) -> PlacementState:
    """Every comparison's decision, the rank interval, the status and ``next`` (module doc).

    ``spec`` carries the rule (``anytime``), ``a``, the floor and whether unmet coverage
    defers; ``order_rank[t]`` is task ``t``'s position in the placement order. Status:
    ``concluded`` when ``rank_high - rank_low + 1 <= width`` or every comparison concluded;
    ``exhausted`` when every task is observed without that; else ``running``.
    """
    if correction not in CORRECTIONS:
        raise LiveError("correction", f"must be one of {', '.join(CORRECTIONS)}")
    s_count = len(board.systems)
    seq = entry.sequence
    k = len(seq)
    cov = None
    if spec.coverage_aware and k:
        cov = _coverage_path(universe.labels[seq], universe.n_g, spec.floor, k)
    dec, stop, levels = _decide(entry, board, cov, spec, correction)
    n_accept = int((dec == R.ACCEPT).sum())
    n_reject = int((dec == R.REJECT).sum())
    rank_low, rank_high = 1 + n_reject, s_count + 1 - n_accept
    names = {R.ACCEPT: "accept", R.REJECT: "reject", R.DEFER: "defer"}
    obs = board.observed
    scores = board.scores
    comps = []
    for j, name in enumerate(board.systems):
        pos = seq[obs[j, seq]]
        m = float(np.mean(entry.y[pos] - board.y[j, pos])) if len(pos) else None
        comps.append(
            Comparison(
                system=name,
                board_score=float(scores[j]),
                n_common=int(obs[j].sum()),
                k=len(pos),
                mean_difference=clean(m),
                decision=names[int(dec[j])],
                level=float(levels[j]),
                stopped_at=int(stop[j]) or None,
            )
        )
    entry_score = float(np.mean(entry.y[seq])) if k else None
    open_idx = [j for j in range(s_count) if dec[j] == R.DEFER]
    # the nearest open rivals: smallest |observed difference| (board score distance before any task)
    dist = [
        abs(comps[j].mean_difference) if comps[j].mean_difference is not None else abs(scores[j] - 0.5)
        for j in open_idx
    ]
    rivals = tuple(board.systems[j] for _, j in sorted(zip(dist, open_idx, strict=True)))[:5]
    all_done = not open_idx
    concluded = rank_high - rank_low + 1 <= width or all_done
    status = "concluded" if concluded else "exhausted" if k >= universe.n else "running"
    nxt = None
    if status == "running":
        observed = Observed(entry.y, entry.y, entry.trials, entry.trials, seq, False)
        nxt = next_tasks(universe, observed, spec, order_rank, universe.n)
        if nxt is not None and (k == 0 or int(order_rank[seq].max()) == k - 1):
            # the harness followed the order: continue it (its prefixes meet the floors already)
            picks = np.argsort(order_rank)[k : nxt["k"]]
            have = np.bincount(universe.labels[seq], minlength=len(universe.n_g))
            need = np.maximum(required(spec.floor, nxt["k"], universe.n_g) - have, 0)
            nxt["task_ids"] = [universe.task_ids[t] for t in picks.tolist()]
            nxt["groups"] = [
                {
                    "group": name,
                    "missing": int(need[g]),
                    "run": int((universe.labels[picks] == g).sum()),
                    "task_ids": [universe.task_ids[t] for t in picks.tolist() if universe.labels[t] == g],
                }
                for g, name in enumerate(universe.group_names)
                if need[g] or (universe.labels[picks] == g).any()
            ]
    return PlacementState(
        status=status,
        k=k,
        N=universe.n,
        rank_low=rank_low,
        rank_high=rank_high,
        width=rank_high - rank_low + 1,
        entry_score=entry_score,
        comparisons=tuple(comps),
        rivals=rivals,
        next=nxt,
    )


def true_rank(entry_y: np.ndarray, board: Board) -> int:
    """The entry's rank by full-run paired differences: ``1 + #{j : Δ_full(entry, j) <= 0}``
    (each on ``j``'s tasks; ties counted against the entry). The rank interval covers it."""
    obs = board.observed
    worse_or_equal = 0
    for j in range(len(board.systems)):
        d = entry_y[obs[j]] - board.y[j, obs[j]]
        worse_or_equal += bool(d.size) and float(d.sum()) <= R.TOL * max(d.size, 1)
    return 1 + worse_or_equal


MAX_WIDTH = 2**31 - 1
"""Largest ``width`` the placements table stores on every database (any width past the board's
size already stops at once)."""


def check_width(width: object) -> int:
    if isinstance(width, bool) or not isinstance(width, int) or not 1 <= width <= MAX_WIDTH:
        raise LiveError("width", f"width is the number of ranks the interval may span: an integer from 1 to "
                                 f"{MAX_WIDTH:,}")
    return int(width)


TRUE_RANK = (
    "The entry's true rank is 1 + the number of board systems whose full-run mean on their own tasks is at least "
    "the entry's on the same tasks (ties counted against the entry); with probability >= 1 - a the rank interval "
    "holds it, whenever the run stops."
)
