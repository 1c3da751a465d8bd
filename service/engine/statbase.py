"""What the statistics modules share (SPEC §8): the input error that names the argument,
argument checks, the normal quantile and the JSON-ready form of results.

Conventions used throughout:

* A **task** is the unit of sampling. A system's score is the mean over the tasks it ran
  of ``y[s, t]`` (the mean over that task's trials), as in SPEC §1; repeated trials of a
  task are never treated as extra tasks.
* ``level`` is a two-sided confidence level in (0, 1); tests run at ``alpha = 1 - level``.
  The one-sided binomial bounds use the whole ``alpha`` in one tail.
* ``z`` is the exact normal quantile ``Phi^-1(1 - alpha/2)`` (1.959964 at 95 %), not the
  rounded 1.96; every worked value of SPEC §8 comes out the same either way.
* Invalid inputs raise :class:`StatsInputError` whose ``field`` names the argument.
"""

from __future__ import annotations

import math
from dataclasses import fields, is_dataclass

import numpy as np
from scipy import special

from service.engine.errors import FieldError
from service.engine.records import Records


class StatsInputError(FieldError):
    """An argument outside its domain; ``field`` names it (the API answers 422 with it)."""


def to_dict(obj: object) -> object:
    """JSON-ready form of a result: dataclasses to dicts, tuples to lists, NaN/inf to None."""
    if is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_dict(getattr(obj, f.name)) for f in fields(obj)}
    if isinstance(obj, dict):
        return {str(k): to_dict(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [to_dict(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return [to_dict(v) for v in obj.tolist()]
    if isinstance(obj, bool | np.bool_):
        return bool(obj)
    if isinstance(obj, int | np.integer):
        return int(obj)
    if isinstance(obj, float | np.floating):
        v = float(obj)
        return v if math.isfinite(v) else None
    return obj


# --------------------------------------------------------------------------- validation


def _level(level: float, field: str = "level") -> float:
    try:
        value = float(level)
    except (TypeError, ValueError):
        raise StatsInputError(field, f"must be a number in (0, 1), got {level!r}") from None
    if not (0.0 < value < 1.0):
        raise StatsInputError(field, f"must be in (0, 1), got {level!r}")
    return value


def _count(value: object, field: str, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        if isinstance(value, float | np.floating) and float(value).is_integer():
            value = int(value)
        else:
            raise StatsInputError(field, f"must be an integer, got {value!r}")
    if value < minimum:
        raise StatsInputError(field, f"must be at least {minimum}, got {value}")
    return int(value)


def _unit(value: float, field: str, low_open: bool = False, high_open: bool = False) -> float:
    v = float(value)
    if not math.isfinite(v) or v < 0 or v > 1 or (low_open and v == 0) or (high_open and v == 1):
        lo = "(" if low_open else "["
        hi = ")" if high_open else "]"
        raise StatsInputError(field, f"must be in {lo}0, 1{hi}, got {value!r}")
    return v


def _positive(value: float, field: str) -> float:
    v = float(value)
    if not math.isfinite(v) or v <= 0:
        raise StatsInputError(field, f"must be a finite number > 0, got {value!r}")
    return v


def _z(level: float) -> float:
    return float(special.ndtri(0.5 + level / 2.0))  # stats.norm.ppf (engine/binom.py says why)


def _system_index(records: Records, system: str, field: str = "system") -> int:
    try:
        return records.systems.index(system)
    except ValueError:
        known = ", ".join(records.systems[:50])
        if len(records.systems) > 50:
            known += f" ... ({len(records.systems)} in all)"
        raise StatsInputError(field, f"unknown system '{system}'; the systems of this dataset: {known}") from None
