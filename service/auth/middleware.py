"""One ASGI middleware in front of every route: authentication and scopes, the per-key
rate limit, the request-body cap of non-upload routes, and ``nosniff`` on every response.

It runs before FastAPI routes, reads or validates anything, so a request without a valid
key costs no body parsing and a wrong key answers 401 whatever the body. The scope a
request needs comes from :func:`service.auth.scopes.required_scope` (method and path).
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import math
import time
from typing import Any
from urllib.parse import urlsplit

import anyio.to_thread
from fastapi import FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.auth import keys
from service.auth.contract import install_contract
from service.auth.keys import Principal
from service.auth.ownership import current_principal
from service.auth.scopes import SAFE_METHODS, required_scope
from service.config import Settings
from service.lru import LRU

log = logging.getLogger(__name__)

UPLOAD_ROUTES = frozenset({("POST", "/v1/datasets"), ("POST", "/datasets")})
"""Capped by ``max_upload_bytes`` in the datasets router instead of ``max_request_bytes``."""

BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class TokenBuckets:
    """Per-key token buckets (in this process only): ``rate`` tokens a second up to ``burst``.
    At most ``max_keys`` buckets are kept, the least recently used evicted first (a bucket
    evicted is a full one again: the memory of clients rotating addresses stays bounded)."""

    def __init__(self, rate: float, burst: int, max_keys: int = 10_000):
        self.rate, self.burst = rate, max(burst, 1)
        self._state: LRU[Any, tuple[float, float]] = LRU(max(max_keys, 1))

    def __len__(self) -> int:
        return len(self._state)

    def take(self, key: Any, now: float | None = None, *, spend: bool = True) -> float:
        """Spend one token (or, with ``spend=False``, only look): 0 when allowed, else the
        seconds until one is available."""
        if self.rate <= 0:
            return 0.0
        now = time.monotonic() if now is None else now
        tokens, last = self._state.get(key) or (float(self.burst), now)
        tokens = min(float(self.burst), tokens + (now - last) * self.rate)
        if tokens >= 1.0:
            self._state.put(key, (tokens - 1.0 if spend else tokens, now))
            return 0.0
        self._state.put(key, (tokens, now))
        return (1.0 - tokens) / self.rate


class TrustMiddleware:
    def __init__(self, app: ASGIApp, *, fastapi_app: FastAPI, settings: Settings):
        self.app = app
        self.fastapi_app = fastapi_app
        self.settings = settings
        self.required = settings.auth == "required"
        self.buckets = TokenBuckets(settings.rate_limit_per_second, settings.rate_limit_burst,
                                    settings.rate_limit_max_addresses)
        self.refused = TokenBuckets(settings.rate_limit_per_second, settings.rate_limit_burst,
                                    settings.rate_limit_max_addresses)
        """Requests refused for a missing or bad key, per client address and key prefix (slows
        guessing one key's secret; a flood of other guesses does not hold back a valid key)."""
        self._verified: LRU[str, tuple[float, Principal | None]] = LRU(10_000)
        self._known_good: LRU[str, bool] = LRU(settings.rate_limit_max_addresses)
        """Digests of tokens that verified in this process: they pass a throttled address."""
        self._inflight: dict[str, asyncio.Future[Principal | None]] = {}
        """The lookup running for a token's digest (one at a time per token)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            self._announce()
            await self.app(scope, receive, send)
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        send = _nosniff(send)
        method, path = scope["method"], scope["path"]
        principal: Principal | None = None
        if self.required:
            needed = required_scope(method, path)
            if needed is not None:
                address = (scope.get("client") or ("unknown", 0))[0]
                token = _credentials(_headers(scope))[0]
                throttle_key = (address, _prefix_of(token))
                wait = self.refused.take(throttle_key, spend=False)
                if wait > 0 and not self._is_known_good(token):
                    retry = max(1, math.ceil(wait))
                    await _error(429, "rate_limited", f"too many requests without a valid key from this address; "
                                 f"retry in {retry} s", {"retry-after": str(retry)})(send)
                    return
                outcome = await self._authorize(scope, method, needed)
                if not isinstance(outcome, Principal):
                    if outcome.status == 401:
                        self.refused.take(throttle_key)
                    await outcome(send)
                    return
                principal = outcome
                wait = self.buckets.take(principal.key_id)
                if wait > 0:
                    retry = max(1, math.ceil(wait))
                    await _error(429, "rate_limited", f"more than {self.settings.rate_limit_per_second:g} requests a "
                                 f"second for this key; retry in {retry} s", {"retry-after": str(retry)})(send)
                    return
        if method in BODY_METHODS and (method, path) not in UPLOAD_ROUTES:
            capped = await _cap_body(scope, receive, self.settings.max_request_bytes)
            if capped is None:
                limit = self.settings.max_request_bytes
                await _error(413, "payload_too_large", f"the request body exceeds the limit of {limit} bytes")(send)
                return
            receive = capped
        reset = current_principal.set(principal)
        try:
            await self.app(scope, receive, send)
        finally:
            current_principal.reset(reset)

    # ------------------------------------------------------------------ pieces

    def _announce(self) -> None:
        if self.required:
            log.info("authentication is required (SUFFICIENCY_AUTH=required); create keys with `sufficiency keys`")
        else:
            log.warning("authentication is OFF (SUFFICIENCY_AUTH=off): anyone who can reach this service can use "
                        "it; serve on loopback only, or set SUFFICIENCY_AUTH=required")

    async def _authorize(self, scope: Scope, method: str, needed: str) -> Principal | _Responder:
        headers = _headers(scope)
        browser = not scope["path"].startswith("/v1/")
        token, via = _credentials(headers)
        if token is None:
            return _unauthorized("an API key is required (Authorization: Bearer <key>)", browser, "")
        try:
            principal = await self._verify(token)
        except Exception as exc:  # the key store is the database: say it is unavailable, not 500
            log.warning("could not verify a key: %s", type(exc).__name__)
            return _error(503, "unavailable", "the key store (database) is unavailable", {"retry-after": "5"})
        if principal is None:
            return _unauthorized("the API key is invalid or revoked", browser, ' error="invalid_token"')
        if needed not in principal.scopes:
            return _error(403, "forbidden", f"this key lacks the '{needed}' scope")
        if via == "basic" and method not in SAFE_METHODS and not _same_origin(headers):
            # browsers resend Basic credentials on cross-site form posts: refuse those
            return _error(403, "forbidden", "cross-origin request refused")
        return principal

    async def _verify(self, token: str) -> Principal | None:
        """The token's principal, from this process's cache while its entry is fresh.

        Under load every request of a process carries the same few keys: a lookup per request
        of those that arrive while one is in flight (all of them, when the entry has just
        expired) took a database connection each, past the pool, every ``auth_cache_seconds``.
        So one lookup runs per token at a time and the others await it, and an entry in the
        last fifth of its life is refreshed in the background while it is still served: a key
        is still never trusted longer than ``auth_cache_seconds`` after the database said so."""
        digest = keys.hash_token(token)
        ttl = self.settings.auth_cache_seconds
        if ttl <= 0:  # every request asks the database itself
            return await self._lookup_and_keep(digest, token)
        now = time.monotonic()
        hit = self._verified.get(digest)
        if hit is not None and hit[0] > now:
            if hit[0] - now < 0.2 * ttl:
                self._lookup_once(digest, token)  # the refreshed entry replaces this one when it lands
            return hit[1]
        return await asyncio.shield(self._lookup_once(digest, token))

    def _lookup_once(self, digest: str, token: str) -> asyncio.Future[Principal | None]:
        """The lookup of ``token`` in flight on this event loop, started if there is none."""
        loop = asyncio.get_running_loop()
        running = self._inflight.get(digest)
        if running is not None and running.get_loop() is loop and not running.done():
            return running
        task = loop.create_task(self._lookup_and_keep(digest, token))
        self._inflight[digest] = task

        def done(t: asyncio.Future[Principal | None]) -> None:
            if self._inflight.get(digest) is t:
                del self._inflight[digest]
            if not t.cancelled():
                t.exception()  # retrieved: a failed background refresh is said by the next lookup (503)

        task.add_done_callback(done)
        return task

    async def _lookup_and_keep(self, digest: str, token: str) -> Principal | None:
        now = time.monotonic()
        principal = await anyio.to_thread.run_sync(self._lookup, token)
        if principal is not None:
            self._known_good.put(digest, True)
        ttl = self.settings.auth_cache_seconds
        if ttl > 0:
            self._verified.put(digest, (now + ttl, principal))
        return principal

    def _is_known_good(self, token: str | None) -> bool:
        return bool(token) and keys.hash_token(token) in self._known_good  # type: ignore[arg-type]

    def _lookup(self, token: str) -> Principal | None:
        factory = self.fastapi_app.state.sessionmaker
        with factory() as session:
            return keys.verify(session, token)


# ---------------------------------------------------------------------- helpers

_Responder = Any  # async (send) -> None


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}


def _credentials(headers: dict[str, str]) -> tuple[str | None, str]:
    """``(token, how)`` from ``Authorization: Bearer``, ``Authorization: Basic`` (any user,
    the key as password: what a browser sends for the pages) or ``X-API-Key``."""
    auth = headers.get("authorization", "").strip()
    scheme, _, value = auth.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip(), "bearer"
    if scheme.lower() == "basic" and value.strip():
        try:
            decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
        except (ValueError, UnicodeDecodeError):
            return "", "basic"
        return decoded.partition(":")[2], "basic"
    if headers.get("x-api-key", "").strip():
        return headers["x-api-key"].strip(), "header"
    return None, ""


def _prefix_of(token: str | None) -> str | None:
    """The key a token names (its public prefix), for throttling guesses at one key; ``None``
    for a missing or malformed token (those share one bucket per address)."""
    return keys.prefix_of(token) if token else None


def _same_origin(headers: dict[str, str]) -> bool:
    """The request provably comes from this site's own pages. Fails closed: a request that
    says nothing about where it comes from (no Origin, Referer or Sec-Fetch-Site) is refused,
    since a browser resends Basic credentials on a cross-site form post."""
    origin = headers.get("origin") or headers.get("referer")
    if origin is None:
        return headers.get("sec-fetch-site") in ("same-origin", "none")
    return origin != "null" and urlsplit(origin).netloc == headers.get("host", "")


def _error(status: int, code: str, detail: str, headers: dict[str, str] | None = None) -> _Responder:
    body = json.dumps({"error": code, "detail": detail}).encode()

    async def respond(send: Send) -> None:
        raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        raw += [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
        await send({"type": "http.response.start", "status": status, "headers": raw})
        await send({"type": "http.response.body", "body": body})

    respond.status = status  # type: ignore[attr-defined]
    return respond


def _unauthorized(detail: str, browser: bool, error: str) -> _Responder:
    challenge = 'Basic realm="sufficiency", charset="UTF-8"' if browser else f'Bearer realm="sufficiency"{error}'
    return _error(401, "unauthorized", detail, {"www-authenticate": challenge})


def _nosniff(send: Send) -> Send:
    async def wrapped(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = list(message.get("headers", []))
            if not any(k.lower() == b"x-content-type-options" for k, _ in headers):
                headers.append((b"x-content-type-options", b"nosniff"))
                message = {**message, "headers": headers}
        await send(message)

    return wrapped


async def _cap_body(scope: Scope, receive: Receive, limit: int) -> Receive | None:
    """A ``receive`` that yields the body when it is within ``limit`` bytes, else ``None``.
    A declared length is checked up front; a chunked body is read (up to the limit) first."""
    declared = _headers(scope).get("content-length")
    if declared is not None:
        if not declared.isdigit():
            return receive  # the server refuses a malformed length itself
        return receive if int(declared) <= limit else None
    messages: list[Message] = []
    size = 0
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            break
        size += len(message.get("body", b""))
        if size > limit:
            return None
        if not message.get("more_body", False):
            break

    async def replay() -> Message:
        return messages.pop(0) if messages else await receive()

    return replay


LOOPBACK = ("127.0.0.1", "localhost", "::1")


def exposure_warning(host: str, settings: Settings) -> str | None:
    """What to say when the API would listen beyond this machine without authentication."""
    if settings.auth == "required" or host in LOOPBACK or host.startswith("127."):
        return None
    return (f"warning: serving on {host} with authentication off; anyone who can reach this port can use the "
            "service. Set SUFFICIENCY_AUTH=required and create keys with `sufficiency keys create`.")


def install_trust(app: FastAPI, settings: Settings) -> None:
    """Add the trust middleware and, only when origins are configured, CORS (closed by default);
    document both in the OpenAPI document."""
    install_contract(app)
    app.add_middleware(TrustMiddleware, fastapi_app=app, settings=settings)
    origins = settings.cors_origin_list
    if origins:
        from starlette.middleware.cors import CORSMiddleware

        app.add_middleware(
            CORSMiddleware,
            allow_origins=origins,
            allow_methods=["GET", "POST", "DELETE"],
            allow_headers=["authorization", "content-type", "x-api-key", "if-none-match"],
            expose_headers=["etag", "location", "retry-after"],
            max_age=600,
        )


__all__ = ["TrustMiddleware", "TokenBuckets", "install_trust"]
