"""Compact letter displays and rank intervals from a pairwise significance matrix (SPEC §8.1).

Pure functions over boolean ``S × S`` matrices whose rows are in rank order (best first).
They know nothing of how the tests were run: :mod:`service.engine.leaderboard` builds the
matrices from the corrected family of paired tests and passes them here.
"""

from __future__ import annotations

import string

import numpy as np

MAX_LETTER_COLUMNS = 4096
"""Columns the insert step may hold at once; a pathological pattern can need exponentially
many, and then the display is refused rather than computed for minutes."""

_ALPHABET = string.ascii_lowercase + string.ascii_uppercase


class TooManyLetters(ValueError):
    """The significance pattern needs more than :data:`MAX_LETTER_COLUMNS` letter columns."""


def letter_name(i: int) -> str:
    """``a..z``, ``A..Z``, then ``a2..Z2``, ``a3``...: one name per letter column."""
    base, rnd = i % len(_ALPHABET), i // len(_ALPHABET)
    return _ALPHABET[base] + (str(rnd + 1) if rnd else "")


def _absorb(new: list[int], kept: list[int]) -> list[int]:
    """Drop the new columns that are subsets of another column (or duplicates)."""
    out = list(kept)
    for c in sorted(set(new), key=lambda m: -m.bit_count()):
        if not any(c | d == d for d in out):
            out.append(c)
    return out


def letter_columns(separated: np.ndarray) -> list[int]:
    """Insert-and-absorb (Piepho 2004), then a sweep of redundant letters.

    ``separated[i, j]`` says systems ``i`` and ``j`` must not share a letter. A column is a
    set of systems (a bit mask) sharing one letter. Insert: start with one column holding
    everyone; for every separated pair, split each column holding both into a copy without
    ``i`` and a copy without ``j``; absorb: drop a column contained in another. Every pair
    not separated keeps a common column through both steps, and no separated pair keeps one,
    so the display is exact. Sweep: remove a system from a column when each of its pairs in
    that column is covered by another column too, then drop empty and absorbed columns.
    Columns come back ordered by their best (lowest-index) member.
    """
    sep = np.asarray(separated, dtype=bool)
    n = sep.shape[0]
    if n == 0:
        return []
    cols = [(1 << n) - 1]
    for i, j in zip(*np.nonzero(np.triu(sep, 1)), strict=True):
        both = (1 << int(i)) | (1 << int(j))
        hit = [c for c in cols if c & both == both]
        if not hit:
            continue
        rest = [c for c in cols if c & both != both]
        split = [c & ~(1 << int(i)) for c in hit] + [c & ~(1 << int(j)) for c in hit]
        cols = _absorb(split, rest)
        if len(cols) > MAX_LETTER_COLUMNS:
            raise TooManyLetters(f"more than {MAX_LETTER_COLUMNS} letter columns would be needed")
    cols.sort(key=_column_key)
    return _sweep(cols, n)


def _members(c: int) -> list[int]:
    return [i for i in range(c.bit_length()) if c >> i & 1]


def _column_key(c: int) -> tuple[int, ...]:
    return tuple(_members(c))


def _sweep(cols: list[int], n: int) -> list[int]:
    cover = np.zeros((n, n), dtype=np.int64)  # cover[x, y]: columns holding both
    for c in cols:
        m = _members(c)
        cover[np.ix_(m, m)] += 1
    out = list(cols)
    for k in range(len(out)):
        for x in _members(out[k]):
            others = [y for y in _members(out[k]) if y != x]
            if others and not np.all(cover[x, others] >= 2):
                continue
            if not others and cover[x, x] < 2:
                continue  # x's only letter
            cover[x, _members(out[k])] -= 1
            cover[_members(out[k]), x] -= 1
            cover[x, x] += 1  # the line above took it twice
            out[k] &= ~(1 << x)
    kept: list[int] = []
    for c in sorted((c for c in out if c), key=lambda m: -m.bit_count()):
        if not any(c | d == d for d in kept):
            kept.append(c)
    kept.sort(key=_column_key)
    return kept


def compact_letters(separated: np.ndarray) -> tuple[tuple[str, ...], ...]:
    """Letters per system (rows of ``separated`` in rank order): two systems share a letter
    iff ``separated`` is false for them. The best system's first letter is ``a``."""
    cols = letter_columns(separated)
    n = np.asarray(separated).shape[0]
    names = [letter_name(k) for k in range(len(cols))]
    return tuple(tuple(names[k] for k, c in enumerate(cols) if c >> i & 1) for i in range(n))


def rank_bounds(better: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rank intervals from ``better[i, j]`` = "``i`` is significantly better than ``j``".

    ``rank_low(i) = 1 + #{j : better[j, i]}`` and ``rank_high(i) = S - #{j : better[i, j]}``
    (SPEC §8.1). When the family controls the family-wise error at ``a`` (Holm, Bonferroni),
    every system's true rank lies in its interval simultaneously with probability at least
    ``1 - a``: the intervals are wrong only if some significant direction is wrong.
    """
    b = np.asarray(better, dtype=bool)
    s = b.shape[0]
    return 1 + b.sum(axis=0), s - b.sum(axis=1)
