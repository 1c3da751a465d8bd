"""Leaderboards kept per process, for the API and the page.

A dataset never changes, so its leaderboard for one set of parameters is the same at every
request, and a leaderboard backend asks for the same few again and again. Computed, one is
S(S-1)/2 paired tests (all at once: ``evalstats.paired_tests``) and the letters: 0.15-0.32 s
for 134 systems x 500 tasks, 0.5-0.9 s for 300 (``MAX_LEADERBOARD_SYSTEMS``;
``benchmarks/leaderboard_speed.py``). The last few are kept (without the all-pairs matrix,
which is S(S-1)/2 comparisons and is computed when asked for); concurrent requests for one
that is missing wait for a single computation; deleting the dataset drops them in this
process (another process keeps its own until evicted, as it does the parsed dataset).
"""

from __future__ import annotations

import uuid

from service.datasets import service as datasets
from service.engine import leaderboard as L
from service.engine.records import Records
from service.lru import LRU

_BOARDS: LRU[tuple, L.Leaderboard] = LRU(8)


def leaderboard(records: Records, dataset_id: uuid.UUID, level: float, cluster: str | None, correction: str,
                matrix: bool, ties: str) -> L.Leaderboard:
    """``engine.leaderboard.leaderboard`` of the dataset's ``records``, kept unless ``matrix``
    (a refusal, ``StatsInputError``, is raised every time and not kept)."""
    if matrix:
        return L.leaderboard(records, level, cluster, correction, True, ties)
    key = (dataset_id, float(level), cluster or None, correction, ties)
    return _BOARDS.get_or_load(key, lambda: L.leaderboard(records, level, cluster or None, correction, False, ties))


def _forget(dataset_id: uuid.UUID) -> None:
    for key in _BOARDS.keys():
        if key[0] == dataset_id:
            _BOARDS.pop(key)


datasets.on_delete(_forget)
