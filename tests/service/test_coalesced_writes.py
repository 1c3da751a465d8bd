"""A response's head and body leave in one send (``service/coalesced_writes.py``): the writes
a transport receives, on asyncio's real event loop, and a real ``sufficiency serve`` answering
keep-alive and closing requests whole."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.coalesced_writes import JOIN_BYTES, CoalescedWrites
from tests.service import procs


class Recording(asyncio.Transport):
    """What reaches the socket: the writes, in order, and whether it was closed or aborted."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.ended = ""

    def write(self, data: bytes) -> None:  # type: ignore[override]
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.ended = self.ended or "closed"

    def abort(self) -> None:
        self.ended = self.ended or "aborted"

    def is_closing(self) -> bool:
        return bool(self.ended)

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str, default: object = None) -> object:
        return {"peername": ("127.0.0.1", 9)}.get(name, default)


def _on_loop(body) -> Recording:
    async def run() -> Recording:
        real = Recording()
        await body(real, CoalescedWrites(real, asyncio.get_running_loop()))
        return real

    return asyncio.run(run())


def test_head_and_body_written_in_one_turn_leave_as_one_write() -> None:
    async def body(real: Recording, t: CoalescedWrites) -> None:
        t.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
        assert real.writes == [] and t.get_write_buffer_size() == 38
        t.write(b"{}")
        assert real.writes == [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"]
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert len(real.writes) == 1  # nothing sent twice

    _on_loop(body)


def test_a_large_body_is_not_copied_to_join_it() -> None:
    async def body(real: Recording, t: CoalescedWrites) -> None:
        big = b"x" * (JOIN_BYTES + 1)
        t.write(b"head")
        t.write(big)
        assert real.writes == [b"head", big]
        t.write(big)  # nothing held: a large write goes at once, not on the next turn
        assert real.writes == [b"head", big, big]
        await asyncio.sleep(0)
        assert len(real.writes) == 3

    _on_loop(body)


def test_a_write_nothing_follows_leaves_on_the_next_turn_in_order() -> None:
    async def body(real: Recording, t: CoalescedWrites) -> None:
        buf = bytearray(b"one")
        t.write(buf)
        buf[:] = b"XXX"  # the caller's buffer is its own again once write returns
        await asyncio.sleep(0)
        assert real.writes == [b"one"]
        t.write(b"two")
        t.write(b"three")
        t.write(b"four")
        await asyncio.sleep(0)
        assert real.writes == [b"one", b"twothree", b"four"]
        t.writelines([b"5", b"6"])
        t.write(b"")
        await asyncio.sleep(0)
        assert b"".join(real.writes) == b"onetwothreefour56"

    _on_loop(body)


def test_close_sends_what_is_held_and_abort_drops_it() -> None:
    async def closes(real: Recording, t: CoalescedWrites) -> None:
        t.write(b"last response")
        t.close()
        assert real.writes == [b"last response"] and real.ended == "closed"
        await asyncio.sleep(0)
        assert real.writes == [b"last response"]

    _on_loop(closes)

    async def aborts(real: Recording, t: CoalescedWrites) -> None:
        t.write(b"never")
        t.abort()
        await asyncio.sleep(0)
        assert real.writes == [] and real.ended == "aborted"

    _on_loop(aborts)

    async def lost(real: Recording, t: CoalescedWrites) -> None:
        t.write(b"late")
        real.ended = "lost"  # the connection went away before the loop turned
        await asyncio.sleep(0)
        assert real.writes == []
        assert t.get_extra_info("peername") == ("127.0.0.1", 9) and t.is_closing()

    _on_loop(lost)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[int]:
    port = procs.free_port()
    env = procs.env_for(data_dir=tmp_path / "data")
    proc = procs.start(["serve", "--port", str(port), "--log-level", "warning"], env, tmp_path / "serve.log")
    try:
        procs.wait_http(f"http://127.0.0.1:{port}/healthz", proc=proc)
        yield port
    finally:
        procs.stop(proc)


def _response(s: socket.socket, buf: bytes) -> tuple[bytes, bytes, bytes]:
    """One response off the socket: (head, body, what follows it)."""
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(65536)
        assert chunk, buf
        buf += chunk
    head, _, rest = buf.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length"))
    while len(rest) < length:
        chunk = s.recv(65536)
        assert chunk, (head, rest)
        rest += chunk
    return head, rest[:length], rest[length:]


def test_the_server_answers_keep_alive_and_closing_requests_whole(served: int) -> None:
    with socket.create_connection(("127.0.0.1", served), timeout=30) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" * 3)  # pipelined
        buf = b""
        for _ in range(3):
            head, body, buf = _response(s, buf)
            assert head.startswith(b"HTTP/1.1 200") and body == b'{"status":"ok"}', (head, body)
        s.sendall(b"GET /v1/nothing HTTP/1.1\r\nHost: x\r\n\r\n")
        head, body, buf = _response(s, buf)
        assert head.startswith(b"HTTP/1.1 404") and b"detail" in body
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        head, body, buf = _response(s, buf)
        assert body == b'{"status":"ok"}' and buf == b"" and s.recv(10) == b""  # whole, then closed
