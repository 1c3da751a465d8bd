"""Python client for the live APIs (``/v1/decisions``, ``/v1/sessions``, ``/v1/placements``), on httpx.

    from sufficiency_client import SufficiencyClient

    with SufficiencyClient("http://127.0.0.1:8000") as client:
        answer = client.decide(universe={"task_ids": ids, "groups": groups},
                               outcomes={"A": {"t1": 1, "t2": 0}, "B": {"t1": 0, "t2": 0}})
        answer["decision"], answer["reason"], answer["next"]

``AsyncSufficiencyClient`` has the same methods as coroutines. Both accept an existing
``httpx.Client`` / ``httpx.AsyncClient`` (``http=``) or a transport (``transport=``), so tests
can run them straight against the ASGI app.

Errors are translated once, here, into a shallow tree:

* ``SufficiencyError`` — base of everything this client raises.

  * ``TransportError`` — the service could not be reached or did not answer in time
    (wraps ``httpx.TransportError``).
  * ``APIError`` — the service answered with an error, or with a body that is not JSON;
    ``status``, ``code`` (the body's ``error``) and ``detail`` (for 422: a list of
    ``{"field", "message"}``).

    * ``InvalidInputError`` (400, 422; also raised before any request for a body JSON cannot
      carry, such as a NaN outcome), ``AuthError`` (401, 403: missing, unknown or
      under-scoped API key), ``NotFoundError`` (404), ``ConflictError`` (409: e.g. an
      observation re-posted with another outcome), ``ServerError`` (5xx),
      ``UnexpectedResponseError`` (a 2xx whose body is not JSON: a proxy or a captive portal
      answered, not the service).

With ``SUFFICIENCY_AUTH=required`` on the service, pass ``api_key=`` (sent as
``Authorization: Bearer <key>``).
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

DEFAULT_URL = "http://127.0.0.1:8000"


class SufficiencyError(Exception):
    """Base of every error raised by the client."""


class TransportError(SufficiencyError):
    """The service could not be reached, or the connection failed or timed out."""


class APIError(SufficiencyError):
    """The service answered with an error status (or with a body the client cannot read)."""

    def __init__(self, status: int, code: str, detail: Any):
        self.status = status
        self.code = code
        self.detail = detail
        super().__init__(f"{status} {code}: {detail}")

    @property
    def fields(self) -> list[str]:
        """The input fields named by a 422 (empty otherwise)."""
        if isinstance(self.detail, list):
            return [str(d.get("field")) for d in self.detail if isinstance(d, dict) and d.get("field")]
        return []


class InvalidInputError(APIError):
    """400 / 422: the request was refused; ``fields`` names what to fix."""


class AuthError(APIError):
    """401 / 403: the API key is missing, unknown, or lacks the scope."""


class NotFoundError(APIError):
    """404: no such session or dataset."""


class ConflictError(APIError):
    """409: e.g. an observation already recorded with a different outcome."""


class ServerError(APIError):
    """5xx: the service failed."""


class UnexpectedResponseError(APIError):
    """A 2xx whose body is not JSON: something other than the service answered (a proxy, a
    captive portal, a URL that is not the service's). An ``APIError``, so a caller that falls
    back on service errors falls back on this one too; ``code`` is ``not_json``."""


def _error_for(response: httpx.Response) -> APIError:
    try:
        body = response.json()
    except ValueError:
        body = {}
    if not isinstance(body, dict):
        body = {}
    code = str(body.get("error") or response.reason_phrase or "error")
    detail = body.get("detail", response.text)
    status = response.status_code
    cls: type[APIError]
    if status in (400, 422):
        cls = InvalidInputError
    elif status in (401, 403):
        cls = AuthError
    elif status == 404:
        cls = NotFoundError
    elif status == 409:
        cls = ConflictError
    elif status >= 500:
        cls = ServerError
    else:
        cls = APIError
    return cls(status, code, detail)


def _result(response: httpx.Response) -> Any:
    if response.status_code >= 400:
        raise _error_for(response)
    try:
        return response.json()
    except ValueError:
        request, ctype = response.request, response.headers.get("content-type", "none")
        raise UnexpectedResponseError(
            response.status_code, "not_json",
            f"{request.method} {request.url.path} answered {ctype}, not JSON: {response.text[:80]!r}",
        ) from None


def _finite(value: float, field: str, what: str) -> float:
    """``value`` as a float. NaN and infinities are refused before any request (JSON cannot carry
    them: httpx would raise a bare ValueError), as an ``InvalidInputError`` naming the field, the
    shape of the service's 422."""
    out = float(value)
    if not math.isfinite(out):
        raise InvalidInputError(422, "invalid_input", [{"field": field, "message": f"{what}: {out} is not finite"}])
    return out


def _build(http: httpx.Client | httpx.AsyncClient, method: str, path: str, json: Any) -> httpx.Request:
    """The request, built apart from sending, so that only a body httpx cannot encode as JSON (NaN,
    infinity) becomes an ``InvalidInputError``: nothing was sent."""
    try:
        return http.build_request(method, path, json=json)
    except ValueError as exc:
        detail = f"{method} {path}: the body cannot be sent as JSON: {exc}"
        raise InvalidInputError(422, "invalid_input", detail) from exc


def _drop_none(body: Mapping[str, Any]) -> dict[str, Any]:
    return {k: (str(v) if isinstance(v, uuid.UUID) else v) for k, v in body.items() if v is not None}


def _rows_body(rows: Sequence[Mapping[str, Any]], name: str | None) -> dict[str, Any]:
    """The JSON upload body; no ``name`` key lets the server choose one."""
    return _drop_none({"name": name, "rows": [dict(r) for r in rows]})


def _headers(headers: Mapping[str, str] | None, api_key: str | None) -> dict[str, str]:
    out = dict(headers or {})
    if api_key:
        out["Authorization"] = f"Bearer {api_key}"
    return out


def observation(task_id: str, system: str, outcome: float, trial: int = 0) -> dict[str, Any]:
    """One observation row as the API takes it."""
    return {"task_id": task_id, "system": system, "trial": trial, "outcome": outcome}


class SufficiencyClient:
    """Synchronous client. Use as a context manager, or call ``close()``."""

    def __init__(self, base_url: str = DEFAULT_URL, *, timeout: float = 30.0,
                 transport: httpx.BaseTransport | None = None, http: httpx.Client | None = None,
                 headers: Mapping[str, str] | None = None, api_key: str | None = None):
        self._own = http is None
        self._http = http or httpx.Client(base_url=base_url, timeout=timeout, transport=transport,
                                          headers=_headers(headers, api_key))

    def __enter__(self) -> SufficiencyClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._own:
            self._http.close()

    def _request(self, method: str, path: str, json: Any = None) -> Any:
        request = _build(self._http, method, path, json)
        try:
            response = self._http.send(request)
        except httpx.TransportError as exc:
            raise TransportError(f"{method} {path}: {type(exc).__name__}: {exc}") from exc
        return _result(response)

    def decide(self, **body: Any) -> dict[str, Any]:
        """``POST /v1/decisions``: keyword arguments are the request body fields."""
        return self._request("POST", "/v1/decisions", _drop_none(body))

    def create_session(self, **body: Any) -> dict[str, Any]:
        """``POST /v1/sessions``: declare A, B, the universe, rule and checkpoints."""
        return self._request("POST", "/v1/sessions", _drop_none(body))

    def get_session(self, session_id: str | uuid.UUID) -> dict[str, Any]:
        return self._request("GET", f"/v1/sessions/{session_id}")

    def observe(self, session_id: str | uuid.UUID, observations: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """``POST /v1/sessions/{id}/observations``; returns the session state after it."""
        return self._request("POST", f"/v1/sessions/{session_id}/observations",
                             {"observations": [dict(o) for o in observations]})

    def upload_rows(self, rows: Sequence[Mapping[str, Any]], name: str | None = None) -> dict[str, Any]:
        """``POST /v1/datasets`` with JSON rows (SPEC §1), stored as ``name``; without one the
        server names it ``dataset-`` + 8 hex digits of its content hash. Records already stored
        come back as that dataset (200, its name unchanged, ``notice`` says so)."""
        return self._request("POST", "/v1/datasets", _rows_body(rows, name))

    def place(self, dataset_id: str | uuid.UUID, system: str, **options: Any) -> dict[str, Any]:
        """``POST /v1/placements``: where does ``system`` rank on the board of ``dataset_id``?
        Options: ``group``, ``rule``, ``a``, ``correction``, ``width``, ``floor``, ``trials``, ``seed``."""
        return self._request("POST", "/v1/placements", _drop_none({"dataset_id": dataset_id, "system": system,
                                                                   **options}))

    def get_placement(self, placement_id: str | uuid.UUID) -> dict[str, Any]:
        return self._request("GET", f"/v1/placements/{placement_id}")

    def observe_placement(self, placement_id: str | uuid.UUID,
                          observations: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """``POST /v1/placements/{id}/observations`` (rows ``{task_id, outcome, trial}``)."""
        return self._request("POST", f"/v1/placements/{placement_id}/observations",
                             {"observations": [dict(o) for o in observations]})


class AsyncSufficiencyClient:
    """Asynchronous client: the same methods as ``SufficiencyClient``, awaited."""

    def __init__(self, base_url: str = DEFAULT_URL, *, timeout: float = 30.0,
                 transport: httpx.AsyncBaseTransport | None = None, http: httpx.AsyncClient | None = None,
                 headers: Mapping[str, str] | None = None, api_key: str | None = None):
        self._own = http is None
        self._http = http or httpx.AsyncClient(base_url=base_url, timeout=timeout, transport=transport,
                                               headers=_headers(headers, api_key))

    async def __aenter__(self) -> AsyncSufficiencyClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._own:
            await self._http.aclose()

    async def _request(self, method: str, path: str, json: Any = None) -> Any:
        request = _build(self._http, method, path, json)
        try:
            response = await self._http.send(request)
        except httpx.TransportError as exc:
            raise TransportError(f"{method} {path}: {type(exc).__name__}: {exc}") from exc
        return _result(response)

    async def decide(self, **body: Any) -> dict[str, Any]:
        return await self._request("POST", "/v1/decisions", _drop_none(body))

    async def create_session(self, **body: Any) -> dict[str, Any]:
        return await self._request("POST", "/v1/sessions", _drop_none(body))

    async def get_session(self, session_id: str | uuid.UUID) -> dict[str, Any]:
        return await self._request("GET", f"/v1/sessions/{session_id}")

    async def observe(self, session_id: str | uuid.UUID,
                      observations: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        return await self._request("POST", f"/v1/sessions/{session_id}/observations",
                                   {"observations": [dict(o) for o in observations]})

    async def upload_rows(self, rows: Sequence[Mapping[str, Any]], name: str | None = None) -> dict[str, Any]:
        return await self._request("POST", "/v1/datasets", _rows_body(rows, name))

    async def place(self, dataset_id: str | uuid.UUID, system: str, **options: Any) -> dict[str, Any]:
        return await self._request("POST", "/v1/placements", _drop_none({"dataset_id": dataset_id,
                                                                         "system": system, **options}))

    async def get_placement(self, placement_id: str | uuid.UUID) -> dict[str, Any]:
        return await self._request("GET", f"/v1/placements/{placement_id}")

    async def observe_placement(self, placement_id: str | uuid.UUID,
                                observations: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        return await self._request("POST", f"/v1/placements/{placement_id}/observations",
                                   {"observations": [dict(o) for o in observations]})


__all__ = ["SufficiencyClient", "AsyncSufficiencyClient", "SufficiencyError", "TransportError", "APIError",
           "InvalidInputError", "AuthError", "NotFoundError", "ConflictError", "ServerError",
           "UnexpectedResponseError", "observation"]
