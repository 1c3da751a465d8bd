"""CSV that a spreadsheet opens as text: user text never starts a formula.

Policy names, group keys and system names are the user's; a cell such as ``=HYPERLINK(...)``
or ``@SUM(...)`` written raw into ``report.csv`` runs as a formula when the file is opened.
Every CSV writer goes through :func:`writer`, which prefixes such a text cell with ``'``
(the usual neutralisation; the cell then reads as the same text). Numbers are left alone,
so ``-0.5`` stays a number; a text cell starting with ``-`` followed by a digit is a
number's text too and is kept.
"""

from __future__ import annotations

import csv
from typing import Any, Protocol

TRIGGERS = ("=", "+", "-", "@", "\t", "\r")


class _Writable(Protocol):
    def write(self, s: str, /) -> object: ...


def neutralise(value: object) -> object:
    """``value`` unless it is text a spreadsheet would read as a formula: then ``'`` + text."""
    if not isinstance(value, str) or not value.startswith(TRIGGERS):
        return value
    if value[0] == "-" and len(value) > 1 and (value[1].isdigit() or value[1] == "."):
        return value  # a negative number written as text
    return "'" + value


class SafeWriter:
    """``csv.writer`` whose rows are neutralised cell by cell."""

    def __init__(self, out: _Writable, **options: Any):
        self._writer = csv.writer(out, **options)

    def writerow(self, row: list[object] | tuple[object, ...]) -> None:
        self._writer.writerow([neutralise(v) for v in row])

    def writerows(self, rows: list[list[object]]) -> None:
        for row in rows:
            self.writerow(row)


def writer(out: _Writable, **options: Any) -> SafeWriter:
    return SafeWriter(out, **options)
