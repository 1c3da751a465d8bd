"""The inputs of a live decision (SPEC §1, §7), normalised once: the task universe
(``make_universe``) and the observations aggregated over it (``aggregate``,
``aggregate_columns``, and ``aggregate_single`` for the compact form a harness sends after
every task). Every problem raises ``LiveError(field, message)``. ``engine/live.py`` decides
on them (and re-exports these names).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import repeat

import numpy as np

from service.engine.coverage import required
from service.engine.errors import FieldError
from service.engine.records import MAX_TRIAL


class LiveError(FieldError):
    """Input that cannot be decided on; ``field`` names the offending input."""


# ----------------------------------------------------------------------------- inputs


@dataclass(frozen=True)
class Universe:
    """The task universe: ids in the caller's order, group index per task (groups numbered
    in sorted name order), and the id -> position map."""

    task_ids: tuple[str, ...]
    labels: np.ndarray
    group_names: tuple[str, ...]
    index: dict[str, int]

    @property
    def n(self) -> int:
        return len(self.task_ids)

    @cached_property
    def _digest(self) -> bytes:
        h = hashlib.sha256()
        h.update("\x1f".join(self.task_ids).encode())
        h.update(b"\x1e")
        h.update("\x1f".join(self.group_names).encode())
        h.update(self.labels.astype(np.int64).tobytes())
        return h.digest()

    def digest(self) -> bytes:
        """A stable hash of the ids and their groups (seeds the tie-breaking of ``next``)."""
        return self._digest

    @cached_property
    def n_g(self) -> np.ndarray:
        return np.bincount(self.labels, minlength=len(self.group_names))

    def required(self, floor: str, k: int) -> np.ndarray:
        """``coverage.required(floor, k, n_g)``, kept per ``(floor, k)``: the universe outlives
        the request (it is cached by content), and the floor is asked for after every task.
        Read-only: the same array is returned every time."""
        cache = self.__dict__.setdefault("_required", {})
        hit = cache.get((floor, k))
        if hit is None:
            hit = required(floor, k, self.n_g)
            hit.flags.writeable = False
            if len(cache) * len(hit) > 1_000_000:  # a huge universe asked at many k: start over
                cache.clear()
            cache[(floor, k)] = hit
        return hit


def make_universe(task_ids: Sequence[str], groups: Sequence[str | None] | None = None,
                  field: str = "universe") -> Universe:
    """Validate a universe: non-empty, unique non-empty ids, one group label per task
    (``None`` or no labels at all = one group ``"all"``)."""
    ids = tuple(str(t) for t in task_ids)
    if not ids:
        raise LiveError(field, "the task universe is empty")
    index: dict[str, int] = {}
    for i, t in enumerate(ids):
        if not t:
            raise LiveError(f"{field}.task_ids[{i}]", "empty task id")
        if t in index:
            raise LiveError(f"{field}.task_ids[{i}]", f"duplicate task id '{t}' (first at position {index[t]})")
        index[t] = i
    if groups is None:
        names = ["all"] * len(ids)
    else:
        if len(groups) != len(ids):
            raise LiveError(f"{field}.groups", f"{len(groups)} group labels for {len(ids)} tasks")
        names = ["all" if g is None else str(g) for g in groups]
    group_names = tuple(sorted(set(names)))
    gi = {g: i for i, g in enumerate(group_names)}
    labels = np.fromiter((gi[g] for g in names), dtype=np.intp, count=len(names))
    return Universe(ids, labels, group_names, index)


@dataclass(frozen=True)
class Observed:
    """Aggregated observations (SPEC §1) over the universe.

    ``y_a``/``y_b``: mean outcome per task (NaN = no trial); ``trials_a``/``trials_b``: trial
    counts; ``sequence``: positions of the observed tasks in the order they became observed.
    """

    y_a: np.ndarray
    y_b: np.ndarray
    trials_a: np.ndarray
    trials_b: np.ndarray
    sequence: np.ndarray
    binary_single_trial: bool

    @property
    def k(self) -> int:
        return len(self.sequence)


def aggregate(universe: Universe, rows: Iterable[tuple[str, str, int, float]], systems: tuple[str, str],
              *, trials_needed: int = 1, order: Sequence[str] | None = None,
              field: str = "observations") -> Observed:
    """Aggregate rows ``(system, task_id, trial, outcome)`` given in observation order
    (see ``aggregate_columns``)."""
    rows = list(rows)
    cols = list(zip(*rows, strict=True)) if rows else [(), (), (), ()]
    return aggregate_columns(universe, cols[0], cols[1], cols[2], cols[3], systems, trials_needed=trials_needed,
                             order=order, field=field)


def aggregate_columns(universe: Universe, system: Sequence[str], task: Sequence[str], trial: Sequence[int],
                      outcome: Sequence[float], systems: tuple[str, str], *, trials_needed: int = 1,
                      order: Sequence[str] | None = None, field: str = "observations",
                      where: Callable[[int], str] | None = None) -> Observed:
    """Aggregate observations given as columns, row ``i`` being the ``i``-th observation.

    A task becomes observed at the row that gives both systems ``trials_needed`` trials;
    ``order`` (task ids) overrides that sequence for the tasks it lists (the rest follow in
    row order). Rejects unknown systems and tasks, outcomes outside [0, 1], negative trials,
    and a repeated ``(system, task, trial)``, naming the first offending row (``where(i)``
    gives its field name; default ``field[i]``).
    """
    at = where or (lambda i: f"{field}[{i}]")
    sys_a, sys_b = systems
    n = universe.n
    role_map = {sys_a: 0, sys_b: 1}
    role = np.fromiter(map(role_map.get, system, repeat(-1)), dtype=np.int64, count=len(system))
    bad = np.flatnonzero(role < 0)
    if len(bad):
        i = int(bad[0])
        raise LiveError(f"{at(i)}.system", f"'{system[i]}' is neither system A ('{sys_a}') nor B ('{sys_b}')")
    index = universe.index
    pos = np.fromiter(map(index.get, task, repeat(-1)), dtype=np.int64, count=len(task))
    bad = np.flatnonzero(pos < 0)
    if len(bad):
        i = int(bad[0])
        raise LiveError(f"{at(i)}.task_id", f"task '{task[i]}' is not in the task universe")
    trial_range = f"trial must be an integer from 0 to {MAX_TRIAL:,}"
    try:
        tr = np.asarray(trial, dtype=np.int64).reshape(-1)
    except OverflowError:  # past int64: name the row
        i = next(i for i, t in enumerate(trial) if not -(2**63) <= t < 2**63)
        raise LiveError(f"{at(i)}.trial", trial_range) from None
    except (TypeError, ValueError):
        raise LiveError(field, trial_range) from None
    bad = np.flatnonzero((tr < 0) | (tr > MAX_TRIAL))
    if len(bad):
        raise LiveError(f"{at(int(bad[0]))}.trial", trial_range)
    try:
        val = np.asarray(outcome, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise LiveError(field, "outcomes must be numbers in [0, 1]") from None
    bad = np.flatnonzero(~((val >= 0.0) & (val <= 1.0)))  # NaN fails both comparisons
    if len(bad):
        i = int(bad[0])
        raise LiveError(f"{at(i)}.outcome", f"outcome must be a finite number in [0, 1], got {outcome[i]!r}")
    cell = role * n + pos
    rows = len(cell)
    flat_counts = np.bincount(cell, minlength=2 * n)
    single_rows = rows == 0 or (not tr.any() and flat_counts.max() <= 1)  # the common case: one row per cell
    if not single_rows:
        key = cell * (int(tr.max()) + 1) + tr
        srt = np.argsort(key, kind="stable")
        dup = np.flatnonzero(key[srt][1:] == key[srt][:-1])
        if len(dup):
            i = int(srt[dup[0] + 1])
            raise LiveError(at(i), f"repeated observation of task '{task[i]}', system '{system[i]}', "
                                   f"trial {int(tr[i])}")
    counts = flat_counts.reshape(2, n)
    sums = np.bincount(cell, weights=val, minlength=2 * n).reshape(2, n)
    never = np.iinfo(np.int64).max
    reach = np.full(2 * n, never, dtype=np.int64)  # row at which a cell gets its trials_needed-th trial
    if single_rows:
        if trials_needed == 1:
            reach[cell] = np.arange(rows)
    else:
        srt = np.lexsort((np.arange(rows), cell))
        c_sorted = cell[srt]
        starts = np.flatnonzero(np.r_[True, c_sorted[1:] != c_sorted[:-1]])
        rank = np.arange(rows) - np.repeat(starts, np.diff(np.r_[starts, rows]))
        hit = rank == trials_needed - 1
        reach[c_sorted[hit]] = srt[hit]
    reach = reach.reshape(2, n)
    done_at = np.where((reach[0] < never) & (reach[1] < never), np.maximum(reach[0], reach[1]), never)
    done = np.flatnonzero(done_at < never)
    sequence = done[np.argsort(done_at[done], kind="stable")]
    if order is not None:
        opos = np.fromiter(map(index.get, order, repeat(-1)), dtype=np.int64, count=len(order))
        bad = np.flatnonzero(opos < 0)
        if len(bad):
            j = int(bad[0])
            raise LiveError(f"order[{j}]", f"task '{order[j]}' is not in the task universe")
        if len(opos) and np.bincount(opos, minlength=n).max() > 1:
            seen_at = np.full(n, -1, dtype=np.int64)
            for j, p in enumerate(opos.tolist()):
                if seen_at[p] >= 0:
                    raise LiveError(f"order[{j}]", f"task '{order[j]}' is listed twice")
                seen_at[p] = j
        listed = np.zeros(n, dtype=bool)
        listed[opos] = True
        first = opos[done_at[opos] < never]
        sequence = np.concatenate([first, sequence[~listed[sequence]]])
    with np.errstate(invalid="ignore", divide="ignore"):
        y = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    binary = bool(np.all((val == 0.0) | (val == 1.0)))
    single = bool(np.all(counts[:, sequence] == 1)) if len(sequence) else True
    return Observed(y[0], y[1], counts[0], counts[1], sequence.astype(np.int64), binary and single)


def aggregate_single(universe: Universe, outcomes_a: Mapping[str, float],
                     outcomes_b: Mapping[str, float]) -> Observed | None:
    """``aggregate_columns`` for the compact form with one outcome per task and system,
    observed in the order of A's keys; ``None`` when anything is wrong (unknown task, an
    outcome outside [0, 1]) so that the caller's general path names the offending entry.

    A harness calls the decision endpoint after every task with a few hundred outcomes; the
    general path spends most of its time on columns, roles and duplicate checks that this
    shape cannot need (a mapping has one entry per task; the row order is A's keys)."""
    index, n = universe.index, universe.n
    ys, trials, positions = [], [], []
    values = []
    for per_task in (outcomes_a, outcomes_b):
        m = len(per_task)
        pos = np.fromiter(map(index.get, per_task, repeat(-1)), dtype=np.int64, count=m)
        try:
            val = np.fromiter(per_task.values(), dtype=np.float64, count=m)
        except (TypeError, ValueError):
            return None
        if m and (pos.min() < 0 or not (val.min() >= 0.0 and val.max() <= 1.0)):  # a NaN fails both
            return None
        y = np.full(n, np.nan)
        y[pos] = val
        t = np.zeros(n, dtype=np.int64)
        t[pos] = 1
        ys.append(y)
        trials.append(t)
        positions.append(pos)
        values.append(val)
    sequence = positions[0][trials[1][positions[0]] > 0]
    binary = not any((v * (1.0 - v)).any() for v in values)  # on [0, 1], zero only at 0 and 1
    return Observed(ys[0], ys[1], trials[0], trials[1], sequence, binary)
