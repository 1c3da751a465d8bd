"""Compact letter displays and rank intervals from a pairwise significance matrix (SPEC §8.1).

Pure functions over boolean ``S × S`` matrices whose rows are in rank order (best first).
They know nothing of how the tests were run: :mod:`service.engine.leaderboard` builds the
matrices from the corrected family of paired tests and passes them here.
"""

from __future__ import annotations

import string

import numpy as np

MAX_LETTER_COLUMNS = 4096
"""Columns the display may need before the insert-and-absorb step (and the insert step may
hold at once); a pathological pattern can need exponentially many, and then the display is
refused rather than computed for minutes."""
MAX_LETTER_SEARCH = 16 * MAX_LETTER_COLUMNS
"""Nodes the direct search for the columns (``_maximal_sets``) may visit before the
insert-and-absorb takes over. Leaderboards of 60-300 systems took 3-30 nodes per column
(up to 18,442 to find 4,097 columns, 1.4-9 µs each); the budget keeps a pattern on which the
search would wander at about half a second."""

_ALPHABET = string.ascii_lowercase + string.ascii_uppercase


class TooManyLetters(ValueError):
    """The significance pattern needs more than :data:`MAX_LETTER_COLUMNS` letter columns."""


def letter_name(i: int) -> str:
    """``a..z``, ``A..Z``, then ``a2..Z2``, ``a3``...: one name per letter column."""
    base, rnd = i % len(_ALPHABET), i // len(_ALPHABET)
    return _ALPHABET[base] + (str(rnd + 1) if rnd else "")


def letter_columns(separated: np.ndarray) -> list[int]:
    """Insert-and-absorb (Piepho 2004), then a sweep of redundant letters.

    ``separated[i, j]`` says systems ``i`` and ``j`` must not share a letter. A column is a
    set of systems (a bit mask) sharing one letter. Insert: start with one column holding
    everyone; for every separated pair, split each column holding both into a copy without
    ``i`` and a copy without ``j``; absorb: drop a column contained in another. Every pair
    not separated keeps a common column through both steps, and no separated pair keeps one,
    so the display is exact. Sweep: remove a system from a column when each of its pairs in
    that column is covered by another column too, then drop empty and absorbed columns.
    Columns come back ordered by their best (lowest-index) member. The insert's columns are
    searched for directly (``_maximal_sets``); the insert runs only where that search is long.
    """
    sep = np.asarray(separated, dtype=bool)
    n = sep.shape[0]
    if n == 0:
        return []
    cols = _maximal_sets(sep)
    if cols is None:
        cols = _insert(sep)
    cols.sort(key=_column_key)
    return _sweep(cols, n)


def _bits(m: int) -> list[int]:
    """Indices of the set bits of ``m``, ascending: bit by bit when there are few, else
    unpacked by numpy (a Python step per set bit costs a pass over the whole integer)."""
    if m.bit_count() > 16:
        raw = np.frombuffer(m.to_bytes((m.bit_length() + 7) // 8, "little"), dtype=np.uint8)
        return np.flatnonzero(np.unpackbits(raw, bitorder="little")).tolist()
    out = []
    while m:
        low = m & -m
        out.append(low.bit_length() - 1)
        m ^= low
    return out


def _column_key(c: int) -> tuple[int, ...]:
    """Columns are ordered by their members, ascending (the best system first)."""
    return tuple(_bits(c))


def _maximal_sets(sep: np.ndarray) -> list[int] | None:
    """The insert-and-absorb's columns found directly: every maximal set of systems no two of
    which are separated. (Splitting ``c`` into ``c - i`` and ``c - j`` and absorbing keeps
    exactly the maximal sets of the pairs taken so far, so the insert ends with all of them.)

    Bron-Kerbosch with Tomita's pivot on bit masks: ``r`` the set being grown, ``p`` the systems
    that may still join it, ``x`` those that could but were tried in an earlier branch. It
    proves a pattern needs more than ``MAX_LETTER_COLUMNS`` columns once it has found that
    many (``TooManyLetters``), where the insert spent most of a leaderboard's time getting
    there (134 clustered systems: 0.04 against 0.3 s), and it shows letters where the insert
    held too many columns on the way to fewer. ``None`` past ``MAX_LETTER_SEARCH`` nodes."""
    n = sep.shape[0]
    near = [m & ~(1 << i) for i, m in enumerate(_row_masks(~sep))]  # not separated, itself apart
    found: list[int] = []
    stack = [(0, (1 << n) - 1, 0)]
    for _ in range(MAX_LETTER_SEARCH):
        if not stack:
            return found
        r, p, x = stack.pop()
        if not p:
            if not x:  # nothing can join r, and nothing tried before could: r is maximal
                found.append(r)
                if len(found) > MAX_LETTER_COLUMNS:
                    raise TooManyLetters(f"more than {MAX_LETTER_COLUMNS} letter columns would be needed")
            continue
        pivot = max(_bits(p | x), key=lambda u: (p & near[u]).bit_count())
        for v in _bits(p & ~near[pivot]):  # a maximal set holds the pivot or one of these
            bit = 1 << v
            stack.append((r | bit, p & near[v], x & near[v]))
            p &= ~bit
            x |= bit
    return found if not stack else None


def _insert(sep: np.ndarray) -> list[int]:
    """The insert-and-absorb columns (unordered), pairs taken in row-major order.

    The columns stay an antichain, so a split ``c - i`` (``c`` holding ``i`` and ``j``) can
    only be absorbed by a column holding ``j`` but not ``i``, and splits never absorb each
    other: absorbing is a superset test against those columns, not a rescan of every column.
    Columns live in slots, and ``has[x]`` is the mask of the slots whose column holds ``x``:
    the columns holding both of a pair are one AND.
    """
    n = sep.shape[0]
    slots = [(1 << n) - 1]
    has = [1] * n
    free: list[int] = []
    live = 1
    for i_, j_ in zip(*np.nonzero(np.triu(sep, 1)), strict=True):
        i, j = int(i_), int(j_)
        hit = has[i] & has[j]
        if not hit:
            continue
        only_i, only_j = has[i] & ~has[j], has[j] & ~has[i]
        plans = [(s, *_splits_kept(slots, has, slots[s], i, j, only_i, only_j)) for s in _bits(hit)]
        for s, keep_without_i, keep_without_j in plans:
            c = slots[s]
            if keep_without_i or keep_without_j:  # the slot keeps one split: one bit moves
                drop = i if keep_without_i else j
                slots[s] = c & ~(1 << drop)
                has[drop] &= ~(1 << s)
            else:
                slots[s] = 0
                for x in _bits(c):
                    has[x] &= ~(1 << s)
                free.append(s)
            if keep_without_i and keep_without_j:  # the other split takes a new slot
                other = c & ~(1 << j)
                if free:
                    t = free.pop()
                    slots[t] = other
                else:
                    t = len(slots)
                    slots.append(other)
                for x in _bits(other):
                    has[x] |= 1 << t
            live += keep_without_i + keep_without_j - 1
        if live > MAX_LETTER_COLUMNS:
            raise TooManyLetters(f"more than {MAX_LETTER_COLUMNS} letter columns would be needed")
    return [c for c in slots if c]


def _splits_kept(
    slots: list[int], has: list[int], c: int, i: int, j: int, only_i: int, only_j: int
) -> tuple[bool, bool]:
    """Whether ``c - i`` and ``c - j`` survive absorption: ``c - i`` is absorbed iff a column
    holding ``j`` but not ``i`` (``only_j``) holds it. Tests the few candidate columns one by
    one, or, when they outnumber ``c``'s members, ANDs ``has`` over those members."""
    if (only_i | only_j).bit_count() <= c.bit_count():
        without_i, without_j = c & ~(1 << i), c & ~(1 << j)
        return (
            all(without_i & ~slots[r] for r in _bits(only_j)),
            all(without_j & ~slots[r] for r in _bits(only_i)),
        )
    sup = only_i | only_j  # narrowed to the columns holding all of c - {i, j}
    for x in _bits(c & ~(1 << i | 1 << j)):
        sup &= has[x]
        if not sup:
            break
    return not sup & only_j, not sup & only_i


def _row_masks(rows: np.ndarray) -> list[int]:
    """Each row of a boolean matrix as a bit mask (bit ``y`` = column ``y``)."""
    packed = np.packbits(rows, axis=1, bitorder="little")
    return [int.from_bytes(r.tobytes(), "little") for r in packed]


def _sweep(cols: list[int], n: int) -> list[int]:
    """Visit the columns in order and, in each, its members in ascending order; remove a
    member whose pairs in the column (itself included) are all held by two columns or more.

    ``cover[x, y]`` counts the columns holding both, and ``low[x]`` masks the ``y`` with
    ``cover[x, y] < 2``, so a member's test is one AND. Removing ``x`` changes only the pairs
    holding ``x``, which the later members of the same column no longer test, so a column's
    removals are decided first and ``cover`` updated once per column. What is left is an
    antichain (a column inside another would have lost every member when it was visited),
    so the absorb after the sweep only has empty columns to drop.
    """
    members = [_bits(c) for c in cols]
    grid = np.zeros((len(cols), n), dtype=bool)
    for k, m in enumerate(members):
        grid[k, m] = True
    dense = grid.astype(np.float32)  # BLAS; the counts (at most len(cols) < 2**24) are exact
    cover = (dense.T @ dense).astype(np.int64)
    low = _row_masks(cover < 2)
    out = list(cols)
    for k, m in enumerate(members):
        cur = out[k]
        for x in m:
            if not cur & low[x]:
                cur &= ~(1 << x)
        if cur == out[k]:
            continue
        gone = [x for x in m if not cur >> x & 1]
        kept = [x for x in m if cur >> x & 1]
        cover[gone] -= grid[k]  # (gone, column): each such pair lost this column once
        if kept:
            cover[np.ix_(kept, gone)] -= 1  # and the mirror of (gone, kept)
        for x, mask in zip(m, _row_masks(cover[m] < 2), strict=True):
            low[x] = mask
        out[k] = cur
    return sorted((c for c in out if c), key=_column_key)


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
