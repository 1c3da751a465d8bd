"""Reading records text: CSV tables and JSONL rows, checked for size and shape, and the
errors that name the row and field (SPEC §1).

This is the layer under ``records``: it turns bytes into a header and rows, or into JSON
objects, and stops at the first limit crossed; ``records.from_rows`` then checks each row's
values and aggregates them. The errors live here so both layers raise the same ones.
"""

from __future__ import annotations

import csv
import io
import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import islice

from service.engine.jsontext import may_hold_non_text, non_text

REQUIRED = ("system", "task_id", "outcome")
"""Columns every record needs; ``trial`` defaults to 0 and ``cost`` to missing."""
MAX_ERRORS = 20
"""List this many problems (the first few are what a user fixes); all of them are counted."""
HEADER_HINTS = {
    "model": "system", "agent": "system", "submission": "system", "system_name": "system",
    "instance_id": "task_id", "task": "task_id", "example_id": "task_id", "id": "task_id", "sample_id": "task_id",
    "resolved": "outcome", "pass1": "outcome", "passed": "outcome", "success": "outcome", "score": "outcome",
    "reward": "outcome", "correct": "outcome", "is_resolved": "outcome",
}
"""Column names other tools use for our required ones: a missing column names its likely alias."""


@dataclass(frozen=True)
class RecordError:
    """One validation problem. ``row`` is 1-based over data records (the CSV header and
    blank JSONL lines are not counted), printed as "data row N"; ``None`` when the problem is
    the whole input."""

    row: int | None
    field: str | None
    message: str

    def __str__(self) -> str:
        where = []
        if self.row is not None:
            where.append(f"data row {self.row}")
        if self.field is not None:
            where.append(f"field '{self.field}'")
        return f"{', '.join(where)}: {self.message}" if where else self.message


@dataclass(frozen=True)
class RecordLimits:
    """Sizes an input may reach, checked while it is read (before any dense matrix):
    records, distinct systems x tasks, distinct systems, and columns (CSV header, or keys of one
    JSON row)."""

    max_rows: int | None = None
    max_cells: int | None = None
    max_columns: int | None = None
    max_systems: int | None = None


class RecordsTooLarge(ValueError):
    """The input is over a size limit (the API answers 413); the message says which."""


class RecordsError(ValueError):
    """The input is not a valid dataset. ``errors`` lists the first ``MAX_ERRORS`` problems;
    ``total`` counts all of them and ``bad_rows`` the distinct data rows they are on."""

    def __init__(self, errors: Sequence[RecordError], total: int | None = None, bad_rows: int | None = None):
        self.errors = list(errors)
        self.total = max(total or 0, len(self.errors))
        self.bad_rows = bad_rows if bad_rows is not None else len({e.row for e in self.errors if e.row is not None})
        shown = "; ".join(str(e) for e in self.errors[:5])
        more = f" (and {self.total - 5} more)" if self.total > 5 else ""
        super().__init__(f"invalid records: {shown}{more}")

    def __reduce__(self) -> tuple:  # pickled whole (an upload parsed in another process raises it)
        return (type(self), (self.errors, self.total, self.bad_rows))

    @property
    def summary(self) -> str | None:
        """One line giving the totals when not every problem is listed (else None)."""
        if self.total <= len(self.errors):
            return None
        return (f"{self.total:,} problems on {self.bad_rows:,} data rows in all (rows count data records from 1, "
                f"the CSV header not included); the first {len(self.errors)} are listed")


def too_many_rows(n: int, limit: int) -> RecordsTooLarge:
    return RecordsTooLarge(f"the dataset has {n:,} records; the limit is {limit:,}")


def csv_table(text: str, limits: RecordLimits) -> tuple[list[str], list[list[str] | None]]:
    """The header and each row's values (None for a blank line, which ``from_rows`` reports);
    rows of another width than the header are refused here, naming them."""
    if not text.strip():
        raise RecordsError([RecordError(None, None, "the file is empty")])
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader)
    except csv.Error as exc:
        raise RecordsError([RecordError(None, None, f"CSV header unreadable: {exc}")]) from None
    header = [h.strip() for h in header]
    if limits.max_columns is not None and len(header) > limits.max_columns:
        raise RecordsTooLarge(f"the CSV header has {len(header):,} columns; the limit is {limits.max_columns:,}")
    check_header(header)
    rows: list[list[str] | None] = []
    width: list[RecordError] = []
    n_width = 0
    try:  # the common case, read whole: every row full, none blank (its first value is not)
        table = list(reader if limits.max_rows is None else islice(reader, limits.max_rows))
        if next(reader, None) is None and all(len(v) == len(header) and v[0].strip() for v in table):
            return header, table
    except csv.Error:
        pass
    table = None  # (not held while the rows are read again)
    reader = csv.reader(io.StringIO(text, newline=""))  # again, row by row, to say what is wrong
    next(reader)
    try:
        for i, values in enumerate(reader, start=1):
            if limits.max_rows is not None and i > limits.max_rows:
                raise too_many_rows(i + sum(1 for v in reader if v and any(x.strip() for x in v)), limits.max_rows)
            if not values or all(not v.strip() for v in values):
                rows.append(None)  # blank line: keeps numbering, reported by from_rows
                continue
            if len(values) != len(header):
                n_width += 1
                if len(width) < MAX_ERRORS:
                    width.append(RecordError(i, None, f"has {len(values)} values, the header has {len(header)} "
                                                      f"({', '.join(header)})"))
                rows.append(None)
                continue
            rows.append(values)
    except csv.Error as exc:
        raise RecordsError([*width, RecordError(len(rows) + 1, None, f"CSV syntax error: {exc}")],
                           total=n_width + 1, bad_rows=n_width + 1) from None
    if width:
        raise RecordsError(width, total=n_width, bad_rows=n_width)
    return header, rows


def jsonl_rows(text: str, limits: RecordLimits) -> list[Mapping[str, object]]:
    rows: list[Mapping[str, object]] = []
    errors: list[RecordError] = []
    n_bad = 0
    lines = text.splitlines()
    if limits.max_rows is not None:
        n_rows = sum(1 for line in lines if line.strip())
        if n_rows > limits.max_rows:
            raise too_many_rows(n_rows, limits.max_rows)
    for line_no, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        row_no = len(rows) + 1
        problem = None
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            problem, obj = f"not valid JSON ({exc.msg}; line {line_no} of the file)", {}
        except (ValueError, RecursionError) as exc:  # a 5,000-digit number, nesting past the recursion limit
            why = "nested too deeply" if isinstance(exc, RecursionError) else str(exc).split(";")[0]
            problem, obj = f"not valid JSON ({why}; line {line_no} of the file)", {}
        if problem is None and not isinstance(obj, dict):
            problem, obj = f"each line must be a JSON object (line {line_no} of the file)", {}
        if problem is None and may_hold_non_text(line) and (where := non_text(obj)) is not None:
            problem, obj = f"{where} (line {line_no} of the file)", {}
        if problem is None and limits.max_columns is not None and len(obj) > limits.max_columns:
            raise RecordsTooLarge(f"row {row_no} has {len(obj):,} fields; the limit is {limits.max_columns:,}")
        if problem is not None:
            n_bad += 1
            if len(errors) < MAX_ERRORS:
                errors.append(RecordError(row_no, None, problem))
        rows.append(obj)
    if errors:
        raise RecordsError(errors, total=n_bad, bad_rows=n_bad)
    if not rows:
        raise RecordsError([RecordError(None, None, "the file is empty")])
    return rows


def missing_columns_error(columns: Sequence[str], missing: Sequence[str]) -> RecordsError:
    """A missing required column, with the columns that were found and what to rename (or how
    the file is delimited) when that is recognisable."""
    found = ", ".join(repr(c) for c in columns[:30]) or "none"
    hints = []
    renames = [f"{c} -> {HEADER_HINTS[c.lower()]}" for c in columns if HEADER_HINTS.get(c.lower()) in missing]
    if renames:
        hints.append(f"rename {', '.join(renames)}")
    if len(columns) == 1 and any(d in columns[0] for d in ";\t|"):
        sep = next(d for d in ";\t|" if d in columns[0])
        hints.append(f"the header looks {'tab' if sep == chr(9) else repr(sep)}-separated: records must be "
                     "comma-separated CSV (or JSONL)")
    hint = f"; hint: {'; '.join(hints)}" if hints else ""
    return RecordsError([
        RecordError(None, c, f"required column is missing (columns found: {found}; required: "
                             f"{', '.join(REQUIRED)}, optional: trial, cost){hint}")
        for c in missing
    ])


def check_header(columns: Iterable[str]) -> None:
    cols = list(columns)
    missing = [c for c in REQUIRED if c not in cols]
    if missing:
        raise missing_columns_error(cols, missing)
    dup = sorted(c for c, n in Counter(cols).items() if n > 1)  # linear: a header may have 40,000 columns
    if dup:
        raise RecordsError([RecordError(None, c, "column appears more than once") for c in dup])
