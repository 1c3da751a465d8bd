"""The per-pair breakdown of a replay configuration (SPEC §5), as arrays.

On a big board the breakdown is almost all of a report: 134 systems give 17,822 directed
pairs, and their rows (Δ_full, full decision, accept / reject / defer shares at each budget)
are 7 MB of JSON per configuration. A :class:`PairTable` keeps them as counts, so the service
can store them once (a few hundred kB, compressed), filter and sort them in memory and
send one page at a time, while ``build_report`` writes the same rows into the CLI report.
Both go through :meth:`PairTable.rows`, so a page equals the matching slice of the report.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np

from service.engine.npz import savez_fast
from service.engine.numbers import clean as _clean

PAIR_SORTS = ("pair", "abs_delta", "delta", "defer", "a", "b")
"""``pair``: the report's order; ``defer``: the unresolved share at the largest budget."""


@dataclass(frozen=True)
class PairTable:
    """One configuration's applicable pairs in report order, with their tallies over the
    ``total`` cases (orders x seeds) per pair and budget."""

    systems: tuple[str, ...]
    a: np.ndarray  # int32 [P]: index into systems
    b: np.ndarray  # int32 [P]
    n_tasks: np.ndarray  # int64 [P]
    delta_full: np.ndarray  # float64 [P]
    positive: np.ndarray  # bool [P]
    accept: np.ndarray  # int32 [P, J]: cases that ended accept (of ``total``)
    reject: np.ndarray
    defer: np.ndarray
    total: int

    ARRAYS = ("a", "b", "n_tasks", "delta_full", "positive", "accept", "reject", "defer")

    def __len__(self) -> int:
        return len(self.a)

    def rows(self, index: np.ndarray | None = None) -> list[dict[str, object]]:
        """The report's ``per_pair`` rows (all of them, or those at ``index``, in that order)."""
        idx = np.arange(len(self)) if index is None else np.asarray(index, dtype=np.intp)
        names = self.systems
        share = self._shares() if len(idx) else []
        acc, rej, dfr = (x[idx].tolist() for x in (self.accept, self.reject, self.defer))
        return [
            {
                "a": names[a],
                "b": names[b],
                "n_tasks": n,
                "delta_full": _clean(d),
                "full_decision": "positive" if pos else "negative",
                "accept": [share[x] for x in acc[i]],
                "reject": [share[x] for x in rej[i]],
                "defer": [share[x] for x in dfr[i]],
            }
            for i, (a, b, n, d, pos) in enumerate(
                zip(
                    self.a[idx].tolist(),
                    self.b[idx].tolist(),
                    self.n_tasks[idx].tolist(),
                    self.delta_full[idx].tolist(),
                    self.positive[idx].tolist(),
                    strict=True,
                )
            )
        ]

    def _shares(self) -> list[float | None]:
        """``clean(x / total)`` for every count ``x`` from 0 to ``total``: a share is one of these
        few values, and formatting each anew was most of the rows' cost (17,822 pairs x 19
        budgets x 3 shares: 0.45 of 0.58 s)."""
        tot = self.total
        return [_clean(x / tot) for x in range(int(tot) + 1)]

    def select(
        self, *, systems: list[str] | None = None, query: str = "", sort: str = "pair", descending: bool = False
    ) -> np.ndarray:
        """Indices of the pairs involving one of ``systems`` (exact names) and whose A or B
        contains ``query`` (case-insensitive), sorted by ``sort`` (ties: A, then B, then
        report order)."""
        keep = np.ones(len(self), dtype=bool)
        if systems:
            wanted = np.array([s in set(systems) for s in self.systems] or [False])
            keep &= wanted[self.a] | wanted[self.b]
        q = query.strip().lower()
        if q:
            hit = np.array([q in s.lower() for s in self.systems] or [False])
            keep &= hit[self.a] | hit[self.b]
        idx = np.flatnonzero(keep)
        if sort == "pair" or not len(idx):
            return idx[::-1] if descending else idx
        rank = np.argsort(np.argsort(np.array(self.systems, dtype=object), kind="stable"), kind="stable")
        ra, rb = rank[self.a[idx]], rank[self.b[idx]]
        if sort == "a":
            keys: tuple[np.ndarray, ...] = (rb, ra)
        elif sort == "b":
            keys = (ra, rb)
        else:
            first = {
                "abs_delta": np.abs(self.delta_full[idx]),
                "delta": self.delta_full[idx],
                "defer": self.defer[idx, -1] if self.defer.shape[1] else np.zeros(len(idx)),
            }.get(sort)
            if first is None:
                raise ValueError(f"unknown sort '{sort}'; one of {', '.join(PAIR_SORTS)}")
            keys = (rb, ra, first)
        order = np.lexsort(keys)  # the last key is the primary one; (A, B) is unique
        return idx[order[::-1] if descending else order]

    def to_bytes(self) -> bytes:
        names = np.array(self.systems, dtype=np.str_) if self.systems else np.zeros(0, dtype="<U1")
        return savez_fast(systems=names, total=self.total, **{f: getattr(self, f) for f in self.ARRAYS})

    @classmethod
    def from_rows(cls, systems: list[str], rows: list[dict], total: int, n_budgets: int) -> PairTable:
        """The table of a report's ``per_pair`` rows (reports stored before the tables were);
        the shares are counts over ``total`` printed to 12 digits, so rounding recovers them."""
        index = {s: i for i, s in enumerate(systems)}

        def counts(key: str) -> np.ndarray:
            return np.array([[round(x * total) for x in r[key]] for r in rows], dtype=np.int32).reshape(-1, n_budgets)

        return cls(
            systems=tuple(systems),
            a=np.array([index[r["a"]] for r in rows], dtype=np.int32),
            b=np.array([index[r["b"]] for r in rows], dtype=np.int32),
            n_tasks=np.array([r["n_tasks"] for r in rows], dtype=np.int64),
            delta_full=np.array([r["delta_full"] for r in rows], dtype=np.float64),
            positive=np.array([r["full_decision"] == "positive" for r in rows], dtype=bool),
            accept=counts("accept"),
            reject=counts("reject"),
            defer=counts("defer"),
            total=total,
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> PairTable:
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            return cls(
                tuple(z["systems"].tolist()),
                *(z[f] for f in cls.ARRAYS[:5]),
                *(z[f] for f in cls.ARRAYS[5:]),
                total=int(z["total"]),
            )


def pair_table(
    plan, cat: dict[str, np.ndarray], c: int, dfull: np.ndarray, positive: np.ndarray, appl: np.ndarray
) -> PairTable:
    """Configuration ``c``'s table from the merged chunk tallies (``build_report``'s ``cat``)."""
    idx = np.flatnonzero(appl)
    pairs = np.array(plan.pairs, dtype=np.int32).reshape(-1, 2)
    n_tasks = plan.pair_n[idx].astype(np.int64)
    return PairTable(
        systems=tuple(plan.records.systems),
        a=pairs[idx, 0],
        b=pairs[idx, 1],
        n_tasks=n_tasks,
        delta_full=np.asarray(dfull, dtype=np.float64)[idx],
        positive=np.asarray(positive, dtype=bool)[idx],
        **{f: cat[f][idx, c].sum(axis=1, dtype=np.int32) for f in ("accept", "reject", "defer")},
        total=plan.spec.orders * plan.spec.seeds,
    )


def pair_tables(plan, chunks) -> list[PairTable]:  # noqa: ANN001  (replay.Plan, [ChunkResult])
    """Every configuration's table from the chunk results (validated by ``build_report``)."""
    chunks = sorted(chunks, key=lambda ch: ch.start)
    cat = {f: np.concatenate([getattr(ch, f) for ch in chunks], axis=0) for f in ("accept", "reject", "defer")}
    dfull = plan.delta_full()
    tables = []
    for c, cfg in enumerate(plan.configs):
        appl = plan.applicable[:, c]
        tables.append(pair_table(plan, cat, c, dfull, plan.positive(cfg.delta) & appl, appl))
    return tables


__all__ = ["PairTable", "pair_table", "pair_tables", "PAIR_SORTS"]
