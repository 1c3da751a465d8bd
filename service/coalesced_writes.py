"""A response's head and body in one ``send``: the transport ``sufficiency serve`` gives
uvicorn's protocol (``http_limits.BoundedHttpTools``).

uvicorn writes a response's status line and headers when the app sends
``http.response.start`` and its body when the app sends ``http.response.body``: two writes,
and asyncio's transport sends each at once (``TCP_NODELAY``), so every response cost two
``send`` calls, two TCP segments, and a client woken twice. Under ``benchmarks/load.py`` the
sends were 14 % of the API workers' CPU.

``CoalescedWrites`` holds back one write: the next write goes out joined to it, and a write
nothing follows goes out on the event loop's next turn. Every write still leaves in the order
it was made, none later than the turn after it; closing sends what is held first, aborting
drops it with the rest of the buffer, as an abort does.
"""

from __future__ import annotations

import asyncio
from typing import Any

JOIN_BYTES = 64 * 1024
"""Largest pair of writes joined (and largest write held back): past it, joining would copy more
than a second ``send`` costs (a report of several MB copied whole to save one small segment)."""


class CoalescedWrites:
    """``transport`` (an ``asyncio.Transport``), one write held back until the next write or
    the next turn of ``loop``; everything else is the transport's own."""

    __slots__ = ("_transport", "_loop", "_held", "_flush_handle")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop):
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None
        self._flush_handle: asyncio.Handle | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._held is None:
            if not data:
                return
            if len(data) > JOIN_BYTES:  # too large to be joined to anything: it goes now
                self._transport.write(data)
                return
            self._held = bytes(data)  # a caller may reuse a bytearray once write returns
            self._flush_handle = self._loop.call_soon(self._flush)
            return
        held, self._held = self._held, None
        self._cancel()
        if len(held) + len(data) > JOIN_BYTES:  # a large body: two sends cost less than copying it
            self._transport.write(held)
            self._transport.write(data)
        else:
            self._transport.write(held + data)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def _flush(self) -> None:
        self._flush_handle = None
        held, self._held = self._held, None
        if held is not None and not self._transport.is_closing():
            self._transport.write(held)

    def _cancel(self) -> None:
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None

    def flush(self) -> None:
        """Send what is held now."""
        self._cancel()
        self._flush()

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def abort(self) -> None:
        self._cancel()
        self._held = None
        self._transport.abort()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + len(self._held or b"")

    def __getattr__(self, name: str) -> Any:  # get_extra_info, is_closing, pause_reading, ...
        return getattr(self._transport, name)


__all__ = ["CoalescedWrites"]
