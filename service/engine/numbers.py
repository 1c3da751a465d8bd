"""How every number leaves the engine: 12 significant digits, so reports and live answers are
the same bytes on every platform and summation order, and ``None`` where there is no number."""

from __future__ import annotations

import math


def clean(x: float | None) -> float | None:
    """``x`` rounded to 12 significant digits; ``None`` for a missing or non-finite value."""
    if x is None or not math.isfinite(x):
        return None
    return float(f"{x:.12g}")


__all__ = ["clean"]
