"""The column-by-column CSV path (engine/csv_columns.py) against the row-by-row one.

``parse_records`` reads a clean CSV by columns and hands anything else to ``from_rows``; the
reference here is ``from_rows`` on every file, fed as the row-by-row path always was. On
hundreds of generated files, clean and broken in the ways uploads are (spaces, words for
outcomes, ``1.0`` trials, blank and ``nan`` costs, out-of-range values, duplicates, metadata
that changes within a task, quoted fields, CRLF, blank lines), both must give the same
records, or the same errors in the same order.
"""

from __future__ import annotations

import csv
import io
import random

import numpy as np
import pytest

from service.engine import csv_columns
from service.engine import records as R


def reference(text: str) -> R.Records:
    """``parse_records`` as it was: every data row through ``from_rows`` as a mapping."""
    reader = csv.reader(io.StringIO(text, newline=""))
    header = [h.strip() for h in next(reader)]
    rows = [{} if not v or all(not x.strip() for x in v) else dict(zip(header, v, strict=True)) for v in reader]
    return R.from_rows(rows)


def outcome(parse, text: str):
    try:
        rec = parse(text)
    except R.RecordsError as exc:
        return ("error", [str(e) for e in exc.errors], exc.total, exc.bad_rows)
    arrays = ("y", "cost", "trials", "raw_system", "raw_task", "raw_trial", "raw_outcome")
    return ("ok", rec.systems, rec.tasks, rec.metadata,
            *(np.asarray(getattr(rec, a)).tobytes() for a in arrays))


def generated(seed: int) -> str:
    """A CSV of a few systems and tasks, then some of the damage uploads carry."""
    rng = random.Random(seed)
    n_sys, n_tasks, n_trials = rng.randint(2, 4), rng.randint(2, 6), rng.randint(1, 3)
    cols = ["system", "task_id", "outcome"] + [c for c in ("trial", "cost", "repo", "level") if rng.random() < 0.6]
    if n_trials > 1 and "trial" not in cols:
        cols.append("trial")
    rng.shuffle(cols)
    rows = []
    for s in range(n_sys):
        for t in range(n_tasks):
            for k in range(n_trials):
                row = {"system": f"s{s}", "task_id": f"t{t}", "trial": str(k), "repo": f"r{t % 2}",
                       "level": ["easy", "hard"][t % 2],
                       "outcome": rng.choice(["0", "1", "0.5", "1.0", " 1 ", "0.25"]),
                       "cost": rng.choice(["", "0.3", "2", "1e-3", " 4 "])}
                rows.append(row)
    damage = rng.randrange(16)
    row = rng.choice(rows)
    if damage == 1:
        row["outcome"] = rng.choice(["True", "false", " TRUE "])  # words: from_rows reads them
    elif damage == 2:
        row["outcome"] = rng.choice(["1.5", "-0.1", "nan", "inf", "yes", ""])
    elif damage == 3:
        row["trial"] = rng.choice(["1.0", " 2 ", "", "-1", "0.5", "2147483648", "1e300", "nan", "x"])
    elif damage == 4:
        row["cost"] = rng.choice(["nan", "NaN", "-1", "inf", "-0", "x", " "])
    elif damage == 5:
        row["system"] = rng.choice(["", "  ", f" {row['system']} "])
    elif damage == 6:
        row["task_id"] = rng.choice(["", f"{row['task_id']} "])
    elif damage == 7:
        rows.append(dict(row))  # a duplicate (system, task, trial)
    elif damage == 8:
        row["repo"] = "elsewhere"  # metadata that differs within a task
    elif damage == 9:
        row["level"] = rng.choice(["", "  hard  "])
    elif damage == 10:
        row["system"] = '"quoted, with a comma"'
    body = [",".join(cols)] + [",".join(r[c] for c in cols) for r in rows]
    if damage == 11:
        body.insert(rng.randrange(1, len(body) + 1), "")  # a blank line
    elif damage == 12:
        body.insert(rng.randrange(1, len(body) + 1), "," * (len(cols) - 1))  # a line of empty values
    elif damage == 13:
        body.append("")  # trailing blank lines
        body.append("")
    elif damage == 14:
        body = body[:1]  # a header alone
    sep = "\r\n" if damage == 15 or rng.random() < 0.2 else "\n"
    return sep.join(body) + sep


@pytest.mark.parametrize("seed", range(400))
def test_columns_give_what_rows_give(seed: int) -> None:
    text = generated(seed)
    assert outcome(lambda t: R.parse_records(t, "csv"), text) == outcome(reference, text), text


def test_clean_files_take_the_column_path(monkeypatch) -> None:
    """The generated clean files are read by columns (else the test above compares the row
    path with itself), and a file the columns refuse falls back to the rows."""
    taken = []
    real = csv_columns.clean_columns
    monkeypatch.setattr(R, "clean_columns", lambda *a: taken.append(real(*a) is not None) or real(*a))
    R.parse_records("system,task_id,trial,outcome,cost\na,t,0,1,\nb,t,0,0.5,2\na,t,1,0,1\n", "csv")
    R.parse_records("system,task_id,outcome\na,t,True\nb,t,0\n", "csv")
    assert taken == [True, False]
    taken.clear()
    for seed in range(400):
        try:
            R.parse_records(generated(seed), "csv")
        except R.RecordsError:
            pass
    assert sum(taken) >= 100 and not all(taken)
