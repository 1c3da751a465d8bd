"""Content identity of a dataset: a hash of the records as the engine reads them, not of the bytes.

The same records as CSV or JSONL, in any row order, with ``1`` or ``1.0`` or ``true``, a
``trial`` column of zeros or none, are one dataset: what the replay and the statistics use is
identical, so storing them twice would only split their replays. What counts: the sorted
systems and tasks, every trial's (system, task, trial, outcome), the per-(system, task) mean
cost (the engine keeps no per-trial cost) and the metadata columns with their per-task values.
"""

from __future__ import annotations

import hashlib

import numpy as np

from service.engine.records import Records

VERSION = b"sufficiency-records-v1"
"""Changes whenever the canonical form does, so old and new digests never collide by accident."""


def records_digest(records: Records) -> str:
    """Hex SHA-256 of the canonical form of ``records`` (64 characters)."""
    h = hashlib.sha256(VERSION)

    def text(values: tuple[str, ...] | list[str]) -> None:
        h.update(len(values).to_bytes(8, "little"))
        for v in values:
            b = v.encode("utf-8")
            h.update(len(b).to_bytes(8, "little"))
            h.update(b)

    def array(a: np.ndarray, dtype: str) -> None:
        a = np.ascontiguousarray(a, dtype=dtype)
        h.update(str(a.shape).encode())
        h.update(a.tobytes())

    text(records.systems)
    text(records.tasks)
    order = np.lexsort((records.raw_trial, records.raw_task, records.raw_system))
    array(records.raw_system[order], "<i8")
    array(records.raw_task[order], "<i8")
    array(records.raw_trial[order], "<i8")
    array(records.raw_outcome[order] + 0.0, "<f8")  # + 0.0: -0.0 and 0.0 are one outcome
    missing = np.isnan(records.cost)
    array(missing, "u1")
    array(np.where(missing, 0.0, records.cost) + 0.0, "<f8")
    text(list(records.metadata))
    for values in records.metadata.values():
        text(list(values))
    return h.hexdigest()
