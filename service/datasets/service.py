"""Dataset use cases: validate an upload, store it once per content, rebuild its records."""

from __future__ import annotations

import hashlib
import json
import math
import uuid
from collections import OrderedDict
from threading import Lock
from typing import Any

import numpy as np
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from service.datasets import repository
from service.datasets.models import Dataset
from service.engine.records import Records, RecordsError, parse_records
from service.errors import NotFound, PayloadTooLarge, Unprocessable


def records_error_detail(exc: RecordsError) -> list[dict[str, Any]]:
    return [{"row": e.row, "field": e.field, "message": e.message} for e in exc.errors]


def rows_to_jsonl(rows: list[dict[str, Any]]) -> bytes:
    """Canonical bytes for JSON rows, so the same rows hash the same however they were sent."""
    try:
        lines = [json.dumps(r, sort_keys=True, separators=(",", ":"), allow_nan=False) for r in rows]
    except ValueError as exc:  # NaN / infinity cannot be stored as JSON
        raise Unprocessable([{"row": None, "field": None, "message": str(exc)}]) from None
    return ("\n".join(lines) + "\n").encode() if lines else b""


def summarize(records: Records) -> dict[str, Any]:
    """What a client needs to pick systems, groups and policies (stored with the dataset)."""
    observed = records.observed
    has_cost = observed & ~np.isnan(records.cost)
    scores = records.scores()
    coverage = records.system_coverage()
    systems = []
    for i, name in enumerate(records.systems):
        n_obs = int(observed[i].sum())
        systems.append(
            {
                "name": name,
                "score": float(scores[i]),
                "n_tasks": n_obs,
                "task_coverage": float(coverage[i]),
                "cost_coverage": float(has_cost[i].sum() / n_obs) if n_obs else 0.0,
            }
        )
    trials = records.trials[observed]
    n_obs_all = int(observed.sum())
    return {
        "systems": systems,
        "group_columns": [
            {"name": c, "n_groups": len(set(values))} for c, values in records.metadata.items()
        ],
        "trials_min": int(trials.min()) if trials.size else 0,
        "trials_max": int(trials.max()) if trials.size else 0,
        "single_trial": records.single_trial,
        "binary": records.binary,
        "cost_coverage": float(has_cost.sum() / n_obs_all) if n_obs_all else 0.0,
    }


def create(
    session: Session, *, name: str, content: bytes, fmt: str | None, max_rows: int | None = None,
    max_cells: int | None = None,
) -> tuple[Dataset, bool]:
    """Store a validated dataset; the same bytes again return the stored one (``created=False``).
    More than ``max_rows`` records or ``max_cells`` systems x tasks is refused (413)."""
    digest = hashlib.sha256(content).hexdigest()
    existing = repository.get_by_hash(session, digest)
    if existing is not None:
        return existing, False
    try:
        records = parse_records(content, fmt=fmt)
    except RecordsError as exc:
        raise Unprocessable(records_error_detail(exc)) from None
    n_rows, cells = int(records.raw_outcome.size), records.n_systems * records.n_tasks
    if max_rows is not None and n_rows > max_rows:
        raise PayloadTooLarge(f"the dataset has {n_rows:,} records; the limit is {max_rows:,}")
    if max_cells is not None and cells > max_cells:
        raise PayloadTooLarge(f"the dataset has {records.n_systems:,} systems x {records.n_tasks:,} tasks = "
                              f"{cells:,}; the limit is {max_cells:,}")
    fmt = fmt or ("jsonl" if content.lstrip()[:1] == b"{" else "csv")
    dataset = Dataset(
        id=uuid.uuid4(),
        name=name[:200] or "dataset",
        content_hash=digest,
        format=fmt,
        size_bytes=len(content),
        n_records=int(records.raw_outcome.size),
        n_systems=records.n_systems,
        n_tasks=records.n_tasks,
        summary=_json_safe(summarize(records)),
        content=content,
    )
    try:
        with session.begin_nested():  # a concurrent identical upload may win the unique hash
            repository.add(session, dataset)
    except IntegrityError:
        existing = repository.get_by_hash(session, digest)
        if existing is None:
            raise
        return existing, False
    _cache_put(dataset.id, records)
    return dataset, True


def get(session: Session, dataset_id: uuid.UUID) -> Dataset:
    dataset = repository.get(session, dataset_id)
    if dataset is None:
        raise NotFound(f"dataset {dataset_id} does not exist")
    return dataset


def load_records(session: Session, dataset_id: uuid.UUID) -> Records:
    """The dataset's ``Records`` (parsed from the stored bytes; a few are kept in memory,
    since a replay's chunks all need the same dataset and datasets never change)."""
    cached = _cache_get(dataset_id)
    if cached is not None:
        return cached
    dataset = repository.get(session, dataset_id, with_content=True)
    if dataset is None:
        raise NotFound(f"dataset {dataset_id} does not exist")
    records = parse_records(dataset.content, fmt=dataset.format)
    _cache_put(dataset_id, records)
    return records


_CACHE: OrderedDict[uuid.UUID, Records] = OrderedDict()
_CACHE_LOCK = Lock()
_CACHE_SIZE = 4


def _cache_get(key: uuid.UUID) -> Records | None:
    with _CACHE_LOCK:
        value = _CACHE.get(key)
        if value is not None:
            _CACHE.move_to_end(key)
        return value


def _cache_put(key: uuid.UUID, value: Records) -> None:
    with _CACHE_LOCK:
        _CACHE[key] = value
        _CACHE.move_to_end(key)
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    return value
