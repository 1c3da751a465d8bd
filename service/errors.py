"""Errors that carry their HTTP status, and the one handler that renders them.

Lower layers raise domain errors (``RecordsError``, ``SpecError``); the service layer
translates them once into a ``ServiceError`` so every response body has the same shape:
``{"error": <code>, "detail": <message or list of problems>}``.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from sqlalchemy.exc import DataError, OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger(__name__)


class ErrorBody(BaseModel):
    """Every error response."""

    error: str
    detail: Any = None


class ServiceError(Exception):
    status_code = 500
    code = "internal_error"

    def __init__(self, detail: Any = None, *, headers: dict[str, str] | None = None):
        self.detail = detail if detail is not None else self.code.replace("_", " ")
        self.headers = headers
        super().__init__(str(self.detail))


class BadRequest(ServiceError):
    status_code = 400
    code = "bad_request"


class NotFound(ServiceError):
    status_code = 404
    code = "not_found"


class Conflict(ServiceError):
    status_code = 409
    code = "conflict"


class PayloadTooLarge(ServiceError):
    status_code = 413
    code = "payload_too_large"


class UnsupportedMediaType(ServiceError):
    status_code = 415
    code = "unsupported_media_type"


class Unprocessable(ServiceError):
    """Input that parses but is not valid (records, replay spec); ``detail`` names the field/row."""

    status_code = 422
    code = "invalid_input"


class ServiceUnavailable(ServiceError):
    status_code = 503
    code = "unavailable"


def responses(*errors: type[ServiceError]) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses=`` entries for the errors an endpoint can raise."""
    return {e.status_code: {"model": ErrorBody, "description": e.code} for e in errors}


def validation_detail(errors: Any) -> list[dict[str, Any]]:
    """pydantic's errors as ``[{field, message}]`` (``body`` left out of the field path); a body
    that is not JSON is about ``body``, with the decoder's reason."""
    return [
        {"field": "body", "message": f"not valid JSON: {(e.get('ctx') or {}).get('error') or e.get('msg', '')}"}
        if e.get("type") == "json_invalid" else
        {"field": ".".join(str(p) for p in e.get("loc", ()) if p != "body"), "message": e.get("msg", "")}
        for e in errors
    ]


def install_handlers(app: FastAPI) -> None:
    @app.exception_handler(ServiceError)
    async def _service_error(_request: Request, exc: ServiceError) -> JSONResponse:
        body = ErrorBody(error=exc.code, detail=exc.detail).model_dump(mode="json")
        return JSONResponse(body, status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse({"error": "invalid_input", "detail": validation_detail(exc.errors())}, status_code=422)

    @app.exception_handler(DataError)
    @app.exception_handler(OverflowError)
    async def _unstorable_value(_request: Request, exc: Exception) -> JSONResponse:
        # a value the database refuses (say an offset past bigint, which SQLite's driver reports
        # as a bare OverflowError): the input's fault, not a 500
        detail = [{"field": "request", "message": "a value is out of range for the database"}]
        return JSONResponse({"error": "invalid_input", "detail": detail}, status_code=422)

    @app.exception_handler(OperationalError)
    async def _database_unavailable(_request: Request, exc: OperationalError) -> JSONResponse:
        # the database is down, restarting or busy: a retryable 503, not a 500 (the pool's
        # pre-ping replaces dead connections once it is back, with no restart of the service)
        log.warning("database unavailable: %s", type(exc.orig).__name__ if exc.orig is not None else exc)
        body = {"error": "unavailable", "detail": "the database is unavailable; retry shortly"}
        return JSONResponse(body, status_code=503, headers={"Retry-After": "5"})

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return JSONResponse({"error": code, "detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)
