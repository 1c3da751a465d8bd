"""``/v1/datasets``: upload (multipart file or JSON rows), list, read."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from tempfile import SpooledTemporaryFile
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, Response, status
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile
from starlette.requests import ClientDisconnect

from service import json_body
from service.datasets import repository, service
from service.datasets.schemas import DatasetDeleted, DatasetPage, DatasetRead, DatasetRowsCreate, DatasetUpdate
from service.deps import OffsetQuery, SessionDep, SettingsDep
from service.errors import (
    BadRequest,
    Conflict,
    NotFound,
    PayloadTooLarge,
    ServiceUnavailable,
    Unprocessable,
    UnsupportedMediaType,
    responses,
)
from service.json_body import StrictJSONRoute
from service.limits import record_limits
from service.names import NUL_MESSAGE

router = APIRouter(prefix="/v1/datasets", tags=["datasets"], route_class=StrictJSONRoute)

FORMATS = ("csv", "jsonl")


@dataclass(frozen=True)
class Upload:
    name: str | None
    """The name the client gave; None = derive one (``service.default_name``)."""
    content: bytes
    fmt: str | None
    filename: str | None = None


SPOOL_MEMORY_BYTES = 1024 * 1024
"""Past this, an upload being received goes to a temporary file (a slow client holds disk,
not memory)."""
RECEIVE_CHUNK = 64 * 1024


async def _spool_body(request: Request, limit: int) -> SpooledTemporaryFile:
    """The request body in a temporary file (in memory up to 1 MiB), refusing (413) as soon as
    it exceeds ``limit`` bytes."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"the upload is {int(declared)} bytes; the limit is {limit} bytes")
    spool = SpooledTemporaryFile(max_size=SPOOL_MEMORY_BYTES)  # noqa: SIM115  (closed by the caller)
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise PayloadTooLarge(f"the upload exceeds the limit of {limit} bytes")
            spool.write(chunk)
    except ClientDisconnect:
        spool.close()
        raise BadRequest("the client disconnected during the upload") from None
    except BaseException:
        spool.close()
        raise
    spool.seek(0)
    return spool


@asynccontextmanager
async def _parsing_slot(request: Request) -> AsyncIterator[None]:
    """One of ``max_concurrent_uploads`` slots for the memory-heavy part (multipart, parsing,
    storing): uploads beyond that wait, and after ``upload_slot_wait_seconds`` are told to retry
    (503)."""
    state = request.app.state
    slots = getattr(state, "upload_slots", None)
    if slots is None:
        slots = state.upload_slots = asyncio.Semaphore(state.settings.max_concurrent_uploads)
    try:
        await asyncio.wait_for(slots.acquire(), state.settings.upload_slot_wait_seconds)
    except TimeoutError:
        raise ServiceUnavailable("too many uploads are being processed; retry shortly",
                                 headers={"Retry-After": "5"}) from None
    try:
        yield
    finally:
        slots.release()


def _format_of(fmt: str | None, filename: str | None) -> str | None:
    if fmt:
        fmt = fmt.lower()
        if fmt not in FORMATS:
            raise Unprocessable([{"row": None, "field": "format", "message": f"must be one of {', '.join(FORMATS)}"}])
        return fmt
    lower = (filename or "").lower()
    if lower.endswith((".jsonl", ".ndjson", ".json")):
        return "jsonl"
    if lower.endswith((".csv", ".tsv", ".txt")):
        return "csv"
    return None


@asynccontextmanager
async def upload_context(request: Request) -> AsyncIterator[Upload]:
    """Accept ``multipart/form-data`` (fields ``file``, optional ``name``, ``format``) or
    ``application/json`` (``DatasetRowsCreate``), within the configured size limit. The body
    is received into a temporary file; then, holding a parsing slot until the ``with`` block
    ends (the endpoint stores the dataset inside it), it is parsed."""
    limit = request.app.state.settings.max_upload_bytes
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype not in ("application/json", "multipart/form-data"):
        raise UnsupportedMediaType("send multipart/form-data with a 'file' field, or application/json rows")
    spool = await _spool_body(request, limit)
    try:
        async with _parsing_slot(request):
            if ctype == "application/json":  # decoding, validating and re-encoding rows: not on the event loop
                yield await run_in_threadpool(_json_rows, spool.read())
            else:
                yield await _multipart(request, spool)
    finally:
        spool.close()


def _json_rows(body: bytes) -> Upload:
    try:
        payload = DatasetRowsCreate.model_validate(json_body.loads(body or b"null"))
    except json.JSONDecodeError as exc:
        raise Unprocessable([{"row": None, "field": "body", "message": f"not valid JSON: {exc.msg}"}]) from None
    except ValidationError as exc:
        detail = [
            {"row": None, "field": ".".join(str(p) for p in e["loc"]) or "body", "message": e["msg"]}
            for e in exc.errors()
        ]
        raise Unprocessable(detail) from None
    except (ValueError, RecursionError) as exc:  # not UTF-8, a 5,000-digit number, nesting past the limit
        why = "nested too deeply" if isinstance(exc, RecursionError) else str(exc).split(";")[0]
        raise Unprocessable([{"row": None, "field": "body", "message": f"not valid JSON: {why}"}]) from None
    return Upload(payload.name, service.rows_to_jsonl(payload.rows), "jsonl")


async def _multipart(request: Request, spool: SpooledTemporaryFile) -> Upload:
    async def from_spool() -> dict[str, object]:
        chunk = spool.read(RECEIVE_CHUNK)
        return {"type": "http.request", "body": chunk, "more_body": bool(chunk)}

    form_request = Request(request.scope, receive=from_spool)
    form = await form_request.form(max_files=1, max_fields=10)
    try:
        file = form.get("file")
        if not isinstance(file, UploadFile):
            raise Unprocessable([{"row": None, "field": "file", "message": "a file field named 'file' is required"}])
        content = await file.read()
        name = form.get("name")
        fmt = form.get("format")
        if isinstance(name, str) and "\x00" in name:  # as DatasetRowsCreate's name (ColumnText)
            raise Unprocessable([{"row": None, "field": "name", "message": NUL_MESSAGE}])
        return Upload(
            name=str(name) if isinstance(name, str) and name.strip() else None,
            content=content,
            fmt=_format_of(fmt if isinstance(fmt, str) else None, file.filename),
            filename=file.filename,
        )
    finally:
        await form.close()


async def read_upload(request: Request) -> AsyncIterator[Upload]:
    """The upload, as a dependency that keeps its parsing slot until the endpoint returns."""
    async with upload_context(request) as upload:
        yield upload


_UPLOAD_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["file"],
                    "properties": {
                        "file": {"type": "string", "format": "binary", "description": "CSV or JSONL records"},
                        "name": {"type": "string"},
                        "format": {"type": "string", "enum": list(FORMATS)},
                    },
                }
            },
            "application/json": {"schema": {"$ref": "#/components/schemas/DatasetRowsCreate"}},
        },
    }
}


@router.post(
    "",
    response_model=DatasetRead,
    status_code=status.HTTP_201_CREATED,
    openapi_extra=_UPLOAD_BODY,
    responses={
        200: {"model": DatasetRead, "description": "The same content was uploaded before: the stored dataset"},
        **responses(BadRequest, PayloadTooLarge, UnsupportedMediaType, Unprocessable, ServiceUnavailable),
    },
    summary="Upload a dataset (validated per SPEC §1; stored once per content)",
)
def create_dataset(
    upload: Annotated[Upload, Depends(read_upload, scope="function")], session: SessionDep, settings: SettingsDep,
    response: Response,
) -> DatasetRead:
    dataset, created = service.create(session, name=upload.name, content=upload.content, fmt=upload.fmt,
                                      limits=record_limits(settings),
                                      parse_process_bytes=settings.parse_process_bytes, filename=upload.filename)
    response.status_code = status.HTTP_201_CREATED if created else status.HTTP_200_OK
    response.headers["Location"] = f"/v1/datasets/{dataset.id}"
    read = DatasetRead.model_validate(dataset)
    if not created:
        fmt = service.upload_format(upload.content, upload.fmt)
        read = read.model_copy(update={"notice": service.duplicate_notice(dataset, upload.name, fmt)})
    return read


@router.get("", response_model=DatasetPage, summary="List datasets, newest first")
def list_datasets(
    session: SessionDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: OffsetQuery = 0,
) -> DatasetPage:
    items, total, limit = repository.page(session, limit=limit, offset=offset, max_systems=repository.LIST_SYSTEMS)
    return DatasetPage(
        items=[DatasetRead.model_validate(d) for d in items], total=total, limit=limit, offset=offset
    )


@router.get("/{dataset_id}", response_model=DatasetRead, responses=responses(NotFound))
def get_dataset(dataset_id: uuid.UUID, session: SessionDep):
    return service.get(session, dataset_id)


@router.patch(
    "/{dataset_id}", response_model=DatasetRead, responses=responses(NotFound, Unprocessable),
    summary="Rename a dataset",
)
def rename_dataset(dataset_id: uuid.UUID, body: DatasetUpdate, session: SessionDep):
    return service.rename(session, dataset_id, body.name.strip())


@router.delete(
    "/{dataset_id}",
    response_model=DatasetDeleted,
    responses=responses(NotFound, Conflict),
    summary="Delete a dataset (409 while a replay of it runs, or while finished ones exist without ?with_replays=true)",
    description="Refused with 409, saying why, while a replay of the dataset is queued or running, while finished "
    "replays of another owner use it, and while finished replays of it exist unless `with_replays=true` "
    "(then they are deleted with it, reports included, and listed in the answer). Live sessions keep the "
    "universe they copied at creation.",
)
def delete_dataset(
    dataset_id: uuid.UUID,
    session: SessionDep,
    with_replays: Annotated[
        bool, Query(description="Also delete the finished replays of it (and their reports)")
    ] = False,
) -> DatasetDeleted:
    deleted = service.delete(session, dataset_id, with_replays=with_replays)
    return DatasetDeleted(id=dataset_id, deleted_replays=deleted)
