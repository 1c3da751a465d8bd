"""Which pairs a replay counts (SPEC §5.1): parse a pair selection and apply it to the pairs.

A selection is terms joined by ``+`` (intersection): ``all``, ``involving:S1,S2``,
``adjacent``, ``top:K``, ``min_gap:X``. Every term is symmetric in A and B, so applying it
after orientation keeps the same unordered pairs as applying it before.

System names may themselves contain ``+`` or ``,``: a ``+`` starts a new term only when what
follows is a term keyword, and a comma list that is itself a system name is that name.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from service.engine.errors import FieldError

MAX_SELECTION_CHARS = 20_000
MAX_TERMS = 16
GAP_TOL = 1e-9
"""Tolerance (pp) when comparing a gap with an edge: ``|Δ_full|`` is a ratio of integers
on a lattice, so an exact 2 pp gap may print as 1.9999999999."""

_KEYWORDS = ("all", "adjacent")
_PREFIXES = ("involving:", "top:", "min_gap:")


class SelectionError(FieldError):
    """A pair selection that cannot be read or matches nothing; ``field`` is ``pairs``."""


@dataclass(frozen=True)
class Term:
    kind: str  # all | involving | adjacent | top | min_gap
    systems: tuple[str, ...] = ()
    top: int = 0
    gap: float = 0.0

    def text(self) -> str:
        if self.kind == "involving":
            return "involving:" + ",".join(self.systems)
        if self.kind == "top":
            return f"top:{self.top}"
        if self.kind == "min_gap":
            return f"min_gap:{self.gap:g}"
        return self.kind


def _starts_term(segment: str) -> bool:
    s = segment.strip()
    return s in _KEYWORDS or s.startswith(_PREFIXES)


def parse_selection(text: object) -> tuple[Term, ...]:
    """Read ``all``, ``top:10+min_gap:2``... into terms; ``all`` alone is the empty tuple."""
    if not isinstance(text, str):
        raise SelectionError("pairs", f"must be a string such as 'all' or 'top:10+min_gap:2', got {text!r}")
    if len(text) > MAX_SELECTION_CHARS:
        raise SelectionError("pairs", f"at most {MAX_SELECTION_CHARS} characters")
    if not text.strip():
        raise SelectionError("pairs", "empty selection; use 'all'")
    segments: list[str] = []
    for part in text.split("+"):
        if segments and not _starts_term(part) and segments[-1].strip().startswith("involving:"):
            segments[-1] += "+" + part  # a '+' inside a system name
        else:
            segments.append(part)
    if len(segments) > MAX_TERMS:
        raise SelectionError("pairs", f"at most {MAX_TERMS} terms joined by '+'")
    terms: list[Term] = []
    for seg in segments:
        s = seg.strip()
        if s == "all":
            continue
        if s == "adjacent":
            terms.append(Term("adjacent"))
        elif s.startswith("involving:"):
            names = s.removeprefix("involving:").strip()
            if not names:
                raise SelectionError("pairs", "involving: needs at least one system name")
            terms.append(Term("involving", (names,)))  # split against the dataset's names later
        elif s.startswith("top:"):
            v = s.removeprefix("top:").strip()
            if not v.isdigit() or len(v) > 7 or not 1 <= int(v) <= 1_000_000:  # (int() of 4,300+ digits raises)
                raise SelectionError("pairs", f"top:K needs an integer K >= 1, got '{v}'")
            terms.append(Term("top", top=int(v)))
        elif s.startswith("min_gap:"):
            v = s.removeprefix("min_gap:").strip()
            try:
                x = float(v)
            except ValueError:
                raise SelectionError("pairs", f"min_gap:X needs a number of percentage points, got '{v}'") from None
            if not math.isfinite(x) or not 0.0 <= x <= 100.0:
                raise SelectionError("pairs", f"min_gap:X is in percentage points and must be in [0, 100], got {v}")
            terms.append(Term("min_gap", gap=x))
        else:
            raise SelectionError(
                "pairs",
                f"unknown selection term '{s[:80]}'; terms: all, involving:S1,S2, adjacent, top:K, min_gap:X "
                "(joined by '+')",
            )
    return tuple(terms)


def canonical(text: str) -> str:
    """The selection as the report echoes it (whitespace trimmed, ``all`` terms dropped)."""
    terms = parse_selection(text)
    return "+".join(t.text() for t in terms) if terms else "all"


def _resolve_names(raw: str, systems: Sequence[str], dropped: Sequence[str]) -> tuple[str, ...]:
    if raw in systems:
        return (raw,)
    names = tuple(dict.fromkeys(n.strip() for n in raw.split(",") if n.strip()))
    for n in names:
        if n not in systems:
            why = " (dropped by min_task_coverage)" if n in dropped else ""
            raise SelectionError("pairs", f"involving: no system named '{n[:200]}' takes part{why}")
    return names


def ranking(scores: np.ndarray, systems: Sequence[str]) -> list[int]:
    """System indices from the best full mean to the worst; equal means by name."""
    return sorted(range(len(systems)), key=lambda s: (-float(scores[s]), systems[s]))


def select_pairs(
    terms: Sequence[Term],
    pairs: Sequence[tuple[int, int]],
    systems: Sequence[str],
    scores: np.ndarray,
    gap_pp: Callable[[int, int], float],
    dropped: Sequence[str] = (),
) -> list[tuple[int, int]]:
    """The pairs every term keeps, in their original order.

    ``scores`` are full means on the task universe (the ranking of ``adjacent`` and ``top``);
    ``gap_pp(a, b)`` is ``|Δ_full|`` of the pair on its own task set, in percentage points.
    """
    keep = list(pairs)
    rank = ranking(scores, systems)
    position = {s: i for i, s in enumerate(rank)}
    for t in terms:
        if t.kind == "involving":
            names = _resolve_names(t.systems[0], systems, dropped)
            idx = {systems.index(n) for n in names}
            keep = [(a, b) for a, b in keep if a in idx or b in idx]
        elif t.kind == "adjacent":
            keep = [(a, b) for a, b in keep if abs(position[a] - position[b]) == 1]
        elif t.kind == "top":
            best = set(rank[: t.top])
            keep = [(a, b) for a, b in keep if a in best and b in best]
        elif t.kind == "min_gap":
            keep = [(a, b) for a, b in keep if gap_pp(a, b) >= t.gap - GAP_TOL]
    return keep


__all__ = ["SelectionError", "Term", "parse_selection", "canonical", "select_pairs", "ranking", "GAP_TOL"]
