"""Task-level records: validation and per-(system, task) aggregation (SPEC §1).

A dataset is one row per (system, task, trial). Validation rejects the whole input
with row-numbered errors; nothing is half-loaded. Aggregation averages the trials of a
(system, task) into one outcome ``y[s, t]`` and one cost, because repeats of a task are
one case, never extra tasks.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from service.engine.csv_columns import clean_columns
from service.engine.record_text import (  # the errors are raised by both layers, and imported from here too
    MAX_ERRORS,
    REQUIRED,
    RecordError,
    RecordLimits,
    RecordsError,
    RecordsTooLarge,
    csv_table,
    jsonl_rows,
    missing_columns_error,
    too_many_rows,
)

__all__ = ["MAX_ERRORS", "REQUIRED", "RecordError", "RecordLimits", "RecordsError", "RecordsTooLarge"]

CORE = ("system", "task_id", "trial", "outcome", "cost")
MAX_TRIAL = 2**31 - 1
"""Largest ``trial`` (a repeat index): what the live tables' integer column holds on every
database, so a record or an observation that one backend accepts is not refused by another."""
TRUE_WORDS, FALSE_WORDS = frozenset({"true"}), frozenset({"false"})
"""CSV spellings of a boolean outcome (any case), read as 1 and 0 like JSON's true / false."""


@dataclass(frozen=True)
class Records:
    """A validated dataset, aggregated per (system, task).

    ``y``, ``cost`` and ``trials`` are ``[n_systems, n_tasks]``; a (system, task) the
    system never ran has ``trials == 0`` and ``y``/``cost`` NaN. ``cost`` is NaN where no
    trial of that (system, task) had a cost. Systems and tasks are sorted so that the
    same rows in any order give the same dataset. ``raw`` keeps every trial (for pass@k).
    """

    systems: tuple[str, ...]
    tasks: tuple[str, ...]
    y: np.ndarray
    cost: np.ndarray
    trials: np.ndarray
    metadata: dict[str, tuple[str, ...]]
    raw_system: np.ndarray = field(repr=False)
    raw_task: np.ndarray = field(repr=False)
    raw_trial: np.ndarray = field(repr=False)
    raw_outcome: np.ndarray = field(repr=False)

    @property
    def n_systems(self) -> int:
        return len(self.systems)

    @property
    def n_tasks(self) -> int:
        return len(self.tasks)

    @cached_property
    def observed(self) -> np.ndarray:
        """Boolean ``[S, T]``: the system has at least one trial of the task. Kept (read-only):
        planning a 134-system board asked for it twice per pair, 0.2 s of building it again."""
        observed = self.trials > 0
        observed.flags.writeable = False
        return observed

    @property
    def binary(self) -> bool:
        """Every raw outcome is exactly 0 or 1."""
        return bool(np.all((self.raw_outcome == 0.0) | (self.raw_outcome == 1.0)))

    @property
    def single_trial(self) -> bool:
        """Every observed (system, task) has exactly one trial."""
        return bool(np.all(self.trials[self.observed] == 1))

    @property
    def binary_single_trial(self) -> bool:
        return self.binary and self.single_trial

    @property
    def group_columns(self) -> tuple[str, ...]:
        return tuple(self.metadata)

    def held_bytes(self) -> int:
        """Bytes this dataset holds, about: its arrays and its strings (task ids, systems, group
        values), for caches that keep a few datasets by size rather than count. A million task
        ids of 12 characters are about 60 MB of ``str`` objects, more than the matrices. Measured
        against tracemalloc on datasets read back from their stored form: 3.7, 117.4 and 102.5 MiB,
        the same to 0.1 MiB (134 x 500; 2 x 400,000 with 12 groups; 10 x 100,000 x 2 trials)."""
        arrays = (self.y, self.cost, self.trials, self.raw_system, self.raw_task, self.raw_trial, self.raw_outcome)
        strings = [self.systems, self.tasks, *self.metadata.values()]
        # a value shared by many tasks (one group's name) is counted each time: an upper bound
        return sum(x.nbytes for x in arrays) + sum(sys.getsizeof(col) + sum(map(sys.getsizeof, col)) for col in strings)

    def system_coverage(self) -> np.ndarray:
        """Share of the task universe each system has an outcome for."""
        return self.observed.sum(axis=1) / max(self.n_tasks, 1)

    def scores(self) -> np.ndarray:
        """Each system's mean ``y`` over the tasks it ran."""
        with np.errstate(invalid="ignore"):
            return np.nanmean(self.y, axis=1)

    def subset_systems(self, keep: Sequence[int]) -> Records:
        """The same dataset restricted to the systems at ``keep`` (indices, sorted)."""
        keep = np.asarray(sorted(keep), dtype=np.intp)
        remap = np.full(self.n_systems, -1, dtype=np.intp)
        remap[keep] = np.arange(len(keep))
        mask = remap[self.raw_system] >= 0
        return Records(
            systems=tuple(self.systems[i] for i in keep),
            tasks=self.tasks,
            y=self.y[keep],
            cost=self.cost[keep],
            trials=self.trials[keep],
            metadata=self.metadata,
            raw_system=remap[self.raw_system[mask]],
            raw_task=self.raw_task[mask],
            raw_trial=self.raw_trial[mask],
            raw_outcome=self.raw_outcome[mask],
        )


def filter_systems(records: Records, min_task_coverage: float = 0.95) -> tuple[Records, list[str]]:
    """Keep systems with an outcome for at least ``min_task_coverage`` of the universe.

    Returns the filtered records and the names of the dropped systems (SPEC §1).
    """
    if not 0.0 <= min_task_coverage <= 1.0:
        raise ValueError("min_task_coverage must be in [0, 1]")
    cov = records.observed.sum(axis=1)
    keep = [i for i in range(records.n_systems) if cov[i] >= min_task_coverage * records.n_tasks - 1e-9]
    dropped = [records.systems[i] for i in range(records.n_systems) if i not in set(keep)]
    return records.subset_systems(keep), dropped


def group_labels(records: Records, key: str | Sequence[str] | None) -> tuple[np.ndarray, list[str]]:
    """Per-task group index and the group names for a grouping key (SPEC §3).

    ``key`` is one metadata column, several (a tuple, or a comma-separated string like
    ``"repo,difficulty"``), or ``None``/empty for a single group. Groups are numbered in
    sorted name order so the numbering does not depend on row order.
    """
    cols = parse_group_key(key)
    if not cols:
        return np.zeros(records.n_tasks, dtype=np.intp), ["all"]
    for c in cols:
        if c not in records.metadata:
            known = ", ".join(records.metadata) or "none"
            raise ValueError(f"group column '{c}' is not in the dataset (metadata columns: {known})")
    names_per_task = [" × ".join(records.metadata[c][t] for c in cols) for t in range(records.n_tasks)]
    names = sorted(set(names_per_task))
    index = {n: i for i, n in enumerate(names)}
    return np.array([index[n] for n in names_per_task], dtype=np.intp), names


def parse_group_key(key: str | Sequence[str] | None) -> tuple[str, ...]:
    """The columns of a grouping key, each named once: a key that repeats a column (``"g,g,g"``)
    means the same groups, but every task's name would be built from every repeat (2,000
    tasks x 16,000 repeats: 1.8 s and 214 MiB), so it is refused (``ValueError``)."""
    if key is None:
        return ()
    if isinstance(key, str):
        cols = tuple(c.strip() for c in key.split(",") if c.strip())
    else:
        cols = tuple(str(c).strip() for c in key if str(c).strip())
    seen: set[str] = set()
    for c in cols:
        if c in seen:
            raise ValueError(f"group column '{c}' is named more than once in the key")
        seen.add(c)
    return cols


# --------------------------------------------------------------------------- parsing


def parse_records(data: bytes | str, fmt: str | None = None, filename: str | None = None,
                  limits: RecordLimits | None = None) -> Records:
    """Parse CSV or JSONL content. ``fmt`` is ``"csv"`` or ``"jsonl"``; when omitted it is
    taken from the file name, else sniffed (JSONL when the first non-blank byte is ``{``).
    ``limits`` raise ``RecordsTooLarge`` as soon as the input is known to exceed them."""
    limits = limits or RecordLimits()
    if isinstance(data, bytes):
        if b"\x00" in data[:65536]:
            raise RecordsError([RecordError(None, None, "the file is binary, not CSV or JSONL text")])
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise RecordsError(
                [RecordError(None, None, f"the file is not UTF-8 text (byte {exc.start})")]
            ) from None
    else:
        text = data
    if fmt is None and filename:
        lower = filename.lower()
        if lower.endswith((".jsonl", ".ndjson", ".json")):
            fmt = "jsonl"
        elif lower.endswith(".csv"):
            fmt = "csv"
    if fmt is None:
        fmt = "jsonl" if text.lstrip().startswith("{") else "csv"
    if fmt == "csv":
        return _from_csv(text, limits)
    if fmt == "jsonl":
        return from_rows(jsonl_rows(text, limits), limits)
    raise ValueError(f"unknown format '{fmt}': use csv or jsonl")


def load_records(path: str | os.PathLike[str]) -> Records:
    """Read a CSV or JSONL file from disk (a ``str`` or a ``pathlib.Path``); the format comes
    from the file's extension, else from its content."""
    name = os.fspath(path)
    with open(name, "rb") as fh:
        return parse_records(fh.read(), filename=name)


def _from_csv(text: str, limits: RecordLimits) -> Records:
    """CSV records: a clean file column by column (``csv_columns``), else row by row
    (``from_rows``, which names every problem)."""
    header, table = csv_table(text, limits)
    meta_cols = sorted(c for c in header if c not in CORE)
    if all(v is not None for v in table) and (  # (csv_table holds the rows within limits.max_rows)
            limits.max_columns is None or len(meta_cols) + len(CORE) <= limits.max_columns):
        cols = clean_columns(header, table, meta_cols, MAX_TRIAL)
        if cols is not None:
            return _aggregate(*cols, meta_cols, limits)
    rows: list = table  # each row's values become its mapping in place: both are never held whole
    for i, v in enumerate(table):
        rows[i] = {} if v is None else dict(zip(header, v, strict=True))
    return from_rows(rows, limits)


def _number(value: object) -> float | None:
    """A finite or non-finite float, or None when the value is not a number at all."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def _outcome(value: object) -> float | None:
    """An outcome: a number, JSON true / false, or the CSV words True / False (any case)."""
    if isinstance(value, str) and value.strip().lower() in TRUE_WORDS | FALSE_WORDS:
        return 1.0 if value.strip().lower() in TRUE_WORDS else 0.0
    return _number(value)


def _blank(value: object) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def from_rows(rows: Sequence[Mapping[str, object]], limits: RecordLimits | None = None) -> Records:
    """Validate records given as mappings (CSV rows, JSON objects) and aggregate them.
    ``limits`` are checked before the dense ``[systems, tasks]`` matrices are allocated."""
    limits = limits or RecordLimits()
    if limits.max_rows is not None and len(rows) > limits.max_rows:
        raise too_many_rows(len(rows), limits.max_rows)
    errors: list[RecordError] = []
    counts = {"total": 0}
    bad_rows: set[int] = set()

    def err(row: int | None, fld: str | None, msg: str) -> None:
        counts["total"] += 1
        if row is not None:
            bad_rows.add(row)
        if len(errors) < MAX_ERRORS:
            errors.append(RecordError(row, fld, msg))

    if not rows:
        raise RecordsError([RecordError(None, None, "no records")])
    if all(not r for r in rows):
        raise RecordsError([RecordError(None, None, "no records")])
    # Columns: required ones must be present on every row (JSON rows may differ).
    meta_cols: list[str] = []
    seen_cols: set[str] = set()
    for r in rows:
        for c in r:
            if c not in CORE and c not in seen_cols:
                seen_cols.add(c)
                meta_cols.append(c)
    meta_cols.sort()
    if limits.max_columns is not None and len(meta_cols) + len(CORE) > limits.max_columns:
        raise RecordsTooLarge(f"the records have {len(meta_cols) + len(CORE):,} distinct fields; the limit is "
                              f"{limits.max_columns:,}")
    absent = [c for c in REQUIRED if not any(c in r for r in rows if r)]
    if absent:  # no row has it (JSONL): one whole-input error, not one per row
        raise missing_columns_error([c for c in (*CORE, *meta_cols) if any(c in r for r in rows if r)], absent)

    systems: list[str] = []
    tasks: list[str] = []
    trials: list[int] = []
    outcomes: list[float] = []
    costs: list[float] = []
    task_meta: dict[str, tuple[str, ...]] = {}
    task_meta_row: dict[str, int] = {}
    seen: dict[tuple[str, str, int], int] = {}

    for i, r in enumerate(rows, start=1):
        if not r:
            err(i, None, "blank record")
            continue
        bad = False
        for c in REQUIRED:
            if c not in r:
                err(i, c, "required field is missing")
                bad = True
        if bad:
            continue
        system, task = r["system"], r["task_id"]
        if _blank(system) or not isinstance(system, str | int):
            err(i, "system", "must be a non-empty string")
            bad = True
        if _blank(task) or not isinstance(task, str | int):
            err(i, "task_id", "must be a non-empty string")
            bad = True
        out = _outcome(r["outcome"])
        if out is None or not math.isfinite(out):
            err(i, "outcome", f"must be a finite number, got {_show(r['outcome'])}")
            bad = True
        elif not 0.0 <= out <= 1.0:
            err(i, "outcome", f"must be in [0, 1], got {_show(r['outcome'])}")
            bad = True
        trial = 0
        if not _blank(r.get("trial")):
            t = _number(r["trial"])
            if (t is None or not math.isfinite(t) or t != int(t) or not 0 <= t <= MAX_TRIAL
                    or isinstance(r["trial"], bool)):
                err(i, "trial", f"must be an integer from 0 to {MAX_TRIAL:,}, got {_show(r['trial'])}")
                bad = True
            else:
                trial = int(t)
        cost = math.nan
        if not _blank(r.get("cost")):
            cv = _number(r["cost"])
            if cv is None or not math.isfinite(cv) or cv < 0 or isinstance(r["cost"], bool):
                err(i, "cost", f"must be a finite number >= 0, got {_show(r['cost'])}")
                bad = True
            else:
                cost = cv
        if bad:
            continue
        system_s, task_s = str(system).strip(), str(task).strip()
        key = (system_s, task_s, trial)
        if key in seen:
            err(i, "trial", f"duplicate of data row {seen[key]} (system '{system_s}', task '{task_s}', trial {trial})")
            continue
        seen[key] = i
        meta = tuple("" if _blank(r.get(c)) else str(r.get(c)).strip() for c in meta_cols)
        prior = task_meta.get(task_s)
        if prior is None:
            task_meta[task_s] = meta
            task_meta_row[task_s] = i
        elif prior != meta:
            j = next(k for k in range(len(meta_cols)) if prior[k] != meta[k])
            err(
                i,
                meta_cols[j],
                f"task '{task_s}' has '{meta[j]}' here but '{prior[j]}' in data row {task_meta_row[task_s]}",
            )
            continue
        systems.append(system_s)
        tasks.append(task_s)
        trials.append(trial)
        outcomes.append(out)  # type: ignore[arg-type]
        costs.append(cost)

    if errors:
        raise RecordsError(errors, total=counts["total"], bad_rows=len(bad_rows))
    return _aggregate(systems, tasks, trials, outcomes, costs, task_meta, meta_cols, limits)


def _aggregate(systems: list[str], tasks: list[str], trials: list[int], outcomes: list[float], costs: list[float],
               task_meta: dict[str, tuple[str, ...]], meta_cols: Sequence[str], limits: RecordLimits) -> Records:
    """``Records`` from validated rows (one entry per row in each list; ``task_meta`` per
    task, in ``meta_cols`` order): the matrices are allocated only within ``limits``."""
    sys_names = sorted(set(systems))
    if len(sys_names) < 2:
        raise RecordsError(
            [RecordError(None, "system", f"need at least 2 systems, found {len(sys_names)}")]
        )
    if limits.max_systems is not None and len(sys_names) > limits.max_systems:
        raise RecordsTooLarge(f"the dataset has {len(sys_names):,} systems; the limit is {limits.max_systems:,}")
    task_names = sorted(set(tasks))
    cells = len(sys_names) * len(task_names)
    if limits.max_cells is not None and cells > limits.max_cells:  # before the [systems, tasks] matrices
        raise RecordsTooLarge(f"the dataset has {len(sys_names):,} systems x {len(task_names):,} tasks = "
                              f"{cells:,}; the limit is {limits.max_cells:,}")
    s_index = {n: i for i, n in enumerate(sys_names)}
    t_index = {n: i for i, n in enumerate(task_names)}
    rs = np.fromiter((s_index[s] for s in systems), dtype=np.intp, count=len(systems))
    rt = np.fromiter((t_index[t] for t in tasks), dtype=np.intp, count=len(tasks))
    ro = np.asarray(outcomes, dtype=np.float64)
    rc = np.asarray(costs, dtype=np.float64)
    shape = (len(sys_names), len(task_names))
    n = np.zeros(shape, dtype=np.int64)
    np.add.at(n, (rs, rt), 1)
    ysum = np.zeros(shape)
    np.add.at(ysum, (rs, rt), ro)
    has_cost = ~np.isnan(rc)
    csum = np.zeros(shape)
    cn = np.zeros(shape, dtype=np.int64)
    np.add.at(csum, (rs[has_cost], rt[has_cost]), rc[has_cost])
    np.add.at(cn, (rs[has_cost], rt[has_cost]), 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        y = np.where(n > 0, ysum / np.maximum(n, 1), np.nan)
        cost = np.where(cn > 0, csum / np.maximum(cn, 1), np.nan)
    metadata = {
        c: tuple(task_meta[t][j] for t in task_names) for j, c in enumerate(meta_cols)
    }
    return Records(
        systems=tuple(sys_names),
        tasks=tuple(task_names),
        y=y,
        cost=cost,
        trials=n,
        metadata=metadata,
        raw_system=rs,
        raw_task=rt,
        raw_trial=np.asarray(trials, dtype=np.int64),
        raw_outcome=ro,
    )


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
