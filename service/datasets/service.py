"""Dataset use cases: validate an upload, store it once per content, rebuild its records."""

from __future__ import annotations

import hashlib
import json
import math
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from service.datasets import repository
from service.datasets.models import Dataset
from service.engine.identity import records_digest
from service.engine.records import RecordLimits, Records, RecordsError, RecordsTooLarge, parse_records
from service.engine.records_blob import records_from_bytes, records_to_bytes
from service.errors import NotFound, PayloadTooLarge, Unprocessable
from service.lru import LRU
from service.parsing import parse_upload

GENERIC_STEMS = frozenset({
    "", "records", "record", "data", "dataset", "results", "result", "output", "out", "export", "file", "upload",
    "download", "test", "sample", "rows", "runs", "scores", "eval", "evals", "benchmark",
})
"""File names that say nothing about the benchmark (every shared file is ``records.csv``)."""
NAME_MAX = 200


def records_error_detail(exc: RecordsError) -> list[dict[str, Any]]:
    """The listed problems; when more were found than listed, a last entry (no row, no
    field) gives the totals, so 12,600 bad rows never read as 20."""
    detail = [{"row": e.row, "field": e.field, "message": e.message} for e in exc.errors]
    if exc.summary:
        detail.append({"row": None, "field": None, "message": exc.summary})
    return detail


def rows_to_jsonl(rows: list[dict[str, Any]]) -> bytes:
    """Canonical bytes for JSON rows, so the same rows hash the same however they were sent."""
    try:
        lines = [json.dumps(r, sort_keys=True, separators=(",", ":"), allow_nan=False) for r in rows]
    except ValueError as exc:  # NaN / infinity cannot be stored as JSON
        raise Unprocessable([{"row": None, "field": None, "message": str(exc)}]) from None
    return ("\n".join(lines) + "\n").encode() if lines else b""


def coverage_from_k(values: tuple[str, ...]) -> int | None:
    """Smallest number of tasks at which the proportional floor of this grouping fits on the
    task universe (SPEC §3): below it a coverage-aware replay defers everything."""
    from service.engine.diagnostics import first_feasible_k

    _, n_g = np.unique(np.asarray(values, dtype=object), return_counts=True)
    return first_feasible_k("proportional", n_g)


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
            {"name": c, "n_groups": len(set(values)), "coverage_from_k": coverage_from_k(values)}
            for c, values in records.metadata.items()
        ],
        "trials_min": int(trials.min()) if trials.size else 0,
        "trials_max": int(trials.max()) if trials.size else 0,
        "single_trial": records.single_trial,
        "binary": records.binary,
        "cost_coverage": float(has_cost.sum() / n_obs_all) if n_obs_all else 0.0,
    }


def default_name(session: Session, filename: str | None, digest: str) -> str:
    """A name for an upload that gave none: the file's stem, unless it is generic
    (``records``) or another dataset has it already; then the stem with the first 8 hex digits
    of the content hash (``records-3f9a1c2b``), which is stable for the same records and tells
    two ``records.csv`` apart."""
    base = filename or ""
    stem = base.rsplit(".", 1)[0] if "." in base else base
    stem = stem.replace("\x00", "").strip()[: NAME_MAX - 9]  # (a NUL cannot be kept in the name column)
    if stem.lower() not in GENERIC_STEMS and not repository.name_taken(session, stem):
        return stem
    return f"{stem or 'dataset'}-{digest[:8]}"


def upload_format(content: bytes, fmt: str | None) -> str:
    """The declared format, else JSONL when the body starts with an object, else CSV."""
    return fmt or ("jsonl" if content.lstrip()[:1] == b"{" else "csv")


def create(
    session: Session, *, name: str | None, content: bytes, fmt: str | None, limits: RecordLimits | None = None,
    filename: str | None = None, parse_process_bytes: int = 2**62,
) -> tuple[Dataset, bool]:
    """Store a validated dataset; the same records again (as CSV or JSONL, in any row order)
    return the stored one (``created=False``, its name unchanged: see ``duplicate_notice``).
    ``name`` None derives one (``default_name``). An input over ``limits`` (records,
    systems x tasks, columns) is refused (413) by the parser as it reads, before any matrix.
    Content past ``parse_process_bytes`` is parsed in a separate process (``service.parsing``)."""
    try:
        records = parse_upload(content, fmt, limits, parse_process_bytes)
    except RecordsTooLarge as exc:
        raise PayloadTooLarge(str(exc)) from None
    except RecordsError as exc:
        raise Unprocessable(records_error_detail(exc)) from None
    digest = records_digest(records)
    # datasets stored before records identity carry the hash of their bytes
    existing = repository.get_by_hash(session, digest) or repository.get_by_hash(
        session, hashlib.sha256(content).hexdigest()
    )
    if existing is not None:
        return existing, False
    fmt = upload_format(content, fmt)
    dataset = Dataset(
        id=uuid.uuid4(),
        name=(name or "").strip()[:NAME_MAX] or default_name(session, filename, digest),
        content_hash=digest,
        format=fmt,
        size_bytes=len(content),
        n_records=int(records.raw_outcome.size),
        n_systems=records.n_systems,
        n_tasks=records.n_tasks,
        summary=_json_safe(summarize(records)),
        content=content,
        parsed=records_to_bytes(records),
    )
    try:
        with session.begin_nested():  # a concurrent identical upload may win the unique hash
            repository.add(session, dataset)
    except IntegrityError:
        existing = repository.get_by_hash(session, digest)
        if existing is None:
            raise
        return existing, False
    _CACHE.put(dataset.id, records)
    return dataset, True


def duplicate_notice(dataset: Dataset, requested_name: str | None, fmt: str | None) -> str:
    """What a re-upload of stored records must be told: which dataset it is, and that a new
    name was not applied (datasets are shared: an upload does not rename someone's dataset)."""
    text = f"these records are already stored as dataset {dataset.id} '{dataset.name}'"
    if fmt and fmt != dataset.format:
        text += f" (uploaded as {dataset.format}; the same records as {fmt} are the same dataset)"
    if requested_name and requested_name.strip() and requested_name.strip() != dataset.name:
        text += (f"; the name '{requested_name.strip()}' was not applied: PATCH /v1/datasets/{dataset.id} "
                 '{"name": ...} renames it')
    return text


def rename(session: Session, dataset_id: uuid.UUID, name: str) -> Dataset:
    dataset = get(session, dataset_id)
    dataset.name = name
    session.flush()
    return dataset


def delete(session: Session, dataset_id: uuid.UUID, *, with_replays: bool) -> list[uuid.UUID]:
    """Delete a dataset; returns the ids of the finished replays deleted with it.

    Refused (409, saying why) while a replay of it is queued or running, when finished replays
    of it exist and ``with_replays`` is false (their reports would go with it: nothing is lost
    without asking), and when replays of another owner use it (one cannot delete others'
    work). Live sessions keep the universe they copied at creation; their link is cleared."""
    from service.errors import Conflict
    from service.replays import repository as replays_repo
    from service.replays import service as replays_service

    dataset = get(session, dataset_id)
    uses = replays_repo.uses_of_dataset(session, dataset_id)
    active = [u for u in uses if not u.finished]
    if active:
        shown = ", ".join(f"{u.id} ({u.status})" for u in active if u.visible) or "not yours"
        raise Conflict(f"dataset {dataset_id} has {len(active)} replay(s) queued or running ({shown}); cancel them "
                       "(DELETE /v1/replays/{id}) or wait until they finish, then delete the dataset")
    foreign = [u for u in uses if not u.visible]
    if foreign:
        raise Conflict(f"dataset {dataset_id} is used by {len(foreign)} finished replay(s) of other owners; "
                       "it cannot be deleted while they exist")
    if uses and not with_replays:
        ids = ", ".join(str(u.id) for u in uses[:20]) + (" ..." if len(uses) > 20 else "")
        raise Conflict(f"dataset {dataset_id} has {len(uses)} finished replay(s) ({ids}); deleting it deletes their "
                       "reports too: repeat with ?with_replays=true to do that (or delete them one by one: DELETE "
                       "/v1/replays/{id}), or download them first")
    deleted = [u.id for u in uses]
    replays_service.remove(session, deleted)
    repository.delete(session, dataset)
    _CACHE.pop(dataset_id)
    for forget in _ON_DELETE:
        forget(dataset_id)
    return deleted


_ON_DELETE: list[Callable[[uuid.UUID], None]] = []


def on_delete(forget: Callable[[uuid.UUID], None]) -> None:
    """Register a function that drops what a module keeps in memory about a dataset. Datasets
    never change, so deletion is the only event such caches must hear of; this keeps the
    dependency pointing from those modules to this one. (Another process learns of it only
    when its own entry is evicted: noted in the README.)"""
    _ON_DELETE.append(forget)


def get(session: Session, dataset_id: uuid.UUID) -> Dataset:
    dataset = repository.get(session, dataset_id)
    if dataset is None:
        raise NotFound(f"dataset {dataset_id} does not exist")
    return dataset


def load_records(session: Session, dataset_id: uuid.UUID) -> Records:
    """The dataset's ``Records`` (parsed from the stored bytes, once however many requests
    ask together; a few are kept in memory, since a replay's chunks all need the same dataset
    and datasets never change)."""

    def parse() -> Records:
        row = repository.parsed_bytes(session, dataset_id)
        if row is None:
            raise NotFound(f"dataset {dataset_id} does not exist")
        records = records_from_bytes(row[0]) if row[0] is not None else None
        if records is not None:
            return records
        dataset = repository.get(session, dataset_id, with_content=True)
        if dataset is None:
            raise NotFound(f"dataset {dataset_id} does not exist")
        return parse_records(dataset.content, fmt=dataset.format)

    return _CACHE.get_or_load(dataset_id, parse)


CACHED_DATASET_BYTES = 512 * 1024**2
"""Parsed datasets a process keeps, by their ``held_bytes`` (the newest is always kept): the
upload limits allow a dataset of about 200 MB parsed (a million tasks, two million rows)."""
_CACHE: LRU[uuid.UUID, Records] = LRU(4, weigh=lambda _id, r: r.held_bytes(), max_weight=CACHED_DATASET_BYTES)


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    return value
