"""What ``sufficiency serve`` tells uvicorn, and the limits uvicorn itself lacks.

uvicorn's httptools protocol (the one ``uvicorn[standard]`` picks) takes request headers of
any size and waits for them forever: a 16 MB header was answered 200, eight unfinished
32 MB headers held 380 MB, and 1,100 connections that sent their headers a byte at a time
were all still open after 40 s. ``BoundedHttpTools`` adds two limits on the way in, before
the request reaches the app:

- the request line and headers of one request may take ``max_header_bytes``; past that the
  connection gets a 431 and is closed (counted as they arrive, so an unfinished header is
  cut off too);
- a connection must finish sending a request's headers within ``header_timeout_seconds``
  of opening (or of its previous response); else a 408 and close. uvicorn's keep-alive
  timer covers only idle connections, and is reset by every byte.

``uvicorn_options`` adds uvicorn's own: ``limit_concurrency`` (a 503 past it), the keep-alive
timeout, h11's event size (should h11 be used), and X-Forwarded-For trusted only from
``forwarded_allow_ips`` (uvicorn trusts loopback by default, which let any local client
rotate its address past the per-address rate limit).

It also picks the event loop: asyncio's, not uvloop (which uvicorn prefers when installed).
libuv accepts one connection per loop iteration (libuv/libuv#3696), and under load an
iteration runs every queued request first: with 16 busy connections per worker an iteration
took about 10 ms, so 16 connections opened at once were accepted over 160 ms, their first
requests waiting all that time. asyncio's loop accepts every pending connection at once. In
``benchmarks/load.py`` (three pairs of runs) the decision p99 was 19.6-22.3 ms with asyncio's
loop against 25.6-27.4 ms with uvloop, and the maximum 44-55 ms against 95-158 ms, for
10-16 % more API CPU per healthz and 2-7 % more per request of the mixed phase.
``SUFFICIENCY_EVENT_LOOP=uvloop`` chooses uvloop.
"""

from __future__ import annotations

import asyncio
from functools import lru_cache
from typing import Any

from service import connection_share
from service.coalesced_writes import CoalescedWrites
from service.config import Settings

try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # pragma: no cover  (uvicorn without httptools: h11's own size limit only)
    HttpToolsProtocol = None  # type: ignore[assignment,misc]

TOO_LARGE = b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
TIMEOUT = b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"


@lru_cache(maxsize=1)
def _limits() -> tuple[int, float]:
    """(max_header_bytes, header_timeout_seconds) of this process (workers read the same
    environment as the command that started them)."""
    settings = Settings()
    return settings.max_header_bytes, settings.header_timeout_seconds


if HttpToolsProtocol is not None:

    class BoundedHttpTools(HttpToolsProtocol):  # type: ignore[misc,valid-type]
        """uvicorn's httptools protocol with a size and a time limit on request headers, and
        the count of connections that ``service.connection_share`` keeps even across workers."""

        _in_headers = True
        _header_bytes = 0
        _header_timer: asyncio.TimerHandle | None = None
        _share: connection_share.ConnectionShare | None = None
        _shed = False
        _opened_at = 0.0

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            # a response's head and body leave in one send (coalesced_writes says why)
            super().connection_made(CoalescedWrites(transport, self.loop))  # type: ignore[arg-type]
            self._max_bytes, self._timeout = _limits()
            self._arm()
            self._share = connection_share.current()
            if self._share is not None:
                self._share.opened()
                self._opened_at = self._share.clock()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            if self._share is not None:
                self._share.lost(self._shed)
                self._share = None
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self._in_headers and not self.transport.is_closing():
                self._header_bytes += len(data)  # the parser kept what it was fed: count it
                if self._header_bytes > self._max_bytes:
                    self._refuse(TOO_LARGE)

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._in_headers = True
            self._header_bytes = 0
            if self._header_timer is None:
                self._arm()

        def on_headers_complete(self) -> None:
            self._in_headers = False
            self._disarm()
            super().on_headers_complete()
            # the request just parsed runs now (none ahead of it on this connection): its
            # response may close the connection for the kernel to hash it to another worker
            cycle = self.cycle  # a new one, unless the request was an upgrade (no cycle)
            if (self._share is not None and not self._shed and cycle is not None and not cycle.response_complete
                    and not self.pipeline and self._share.shed(self._opened_at)):
                self._shed = True
                cycle.keep_alive = False  # uvicorn adds "connection: close" and closes after

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._in_headers = True  # the next request's headers: the clock starts again
                self._header_bytes = 0
                self._arm()

        def _arm(self) -> None:
            self._disarm()
            self._header_timer = self.loop.call_later(self._timeout, self._timed_out)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _timed_out(self) -> None:
            self._header_timer = None
            if self._in_headers and not self.transport.is_closing():
                self._refuse(TIMEOUT if self._header_bytes else b"")

        def _refuse(self, response: bytes) -> None:
            self._disarm()
            if response:
                self.transport.write(response)
            self.transport.close()

else:  # pragma: no cover
    BoundedHttpTools = None  # type: ignore[assignment,misc]


def uvicorn_options(settings: Settings) -> dict[str, Any]:
    """Keyword arguments for ``uvicorn.Config`` / ``uvicorn.run`` from the limits in Settings."""
    trusted = settings.forwarded_allow_ips.strip()
    options: dict[str, Any] = {
        "limit_concurrency": settings.max_connections,
        "timeout_keep_alive": settings.keep_alive_seconds,
        "h11_max_incomplete_event_size": settings.max_header_bytes,
        "proxy_headers": bool(trusted),
        "forwarded_allow_ips": trusted or None,
        "server_header": False,
        "loop": settings.event_loop,
    }
    if BoundedHttpTools is not None:
        options["http"] = BoundedHttpTools
    return options


__all__ = ["BoundedHttpTools", "uvicorn_options"]
