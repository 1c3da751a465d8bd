"""Names the service keeps in a text column (a session's systems, a placement's entry, a
dataset's or an API key's name).

A NUL is a character like any other in records and task ids (issue 7: such names round-trip
on both databases, kept in JSON and in the records' own storage), but PostgreSQL's text
columns refuse it: SQLite stored a session whose ``system_a`` held one, PostgreSQL answered
"out of range for the database". These fields refuse it on both, naming the field.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator

NUL_MESSAGE = "must not contain a NUL character (\\u0000): it is kept in a text column"


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError(NUL_MESSAGE)
    return value


ColumnText = Annotated[str, AfterValidator(_no_nul)]
"""A ``str`` field stored in a text column."""

__all__ = ["NUL_MESSAGE", "ColumnText"]
