"""Several uvicorn worker processes, each with its own listening socket (``SO_REUSEPORT``).

Why not ``uvicorn --workers``: there the workers share one listening socket and whichever
is awake accepts. A burst of new connections (a harness opening its pool, a load balancer
warming up) then lands mostly on one worker: of 32 connections opened at once, splits such
as 31/1 and 27/5 were common on the development machine. That worker's queue sets the tail
latency while the other idles. With one socket per worker the kernel spreads connections
over the workers by a hash of the address pair (within 21/11 in the same trials), and the
workers even out what the hash leaves uneven (``service.connection_share``).

Linux only (elsewhere ``SO_REUSEPORT`` does not spread connections); ``sufficiency serve``
falls back to uvicorn's own workers there. The supervisor restarts a worker that dies,
stops all of them on SIGTERM or SIGINT, and gives up when a worker cannot start (cannot
bind, or the app's start-up fails) or keeps dying.
"""

from __future__ import annotations

import multiprocessing as mp
import signal
import socket
import sys
import time
from multiprocessing.connection import wait
from types import FrameType
from typing import Any

from service import connection_share
from service.connection_share import NOT_SERVING

APP = "service.main:create_app"
STARTUP_FAILURE = 3
"""Exit code of a worker that never started serving (as uvicorn's own): the supervisor gives up."""
MAX_RESTARTS, RESTART_WINDOW_S = 10, 60.0
"""More deaths than this within the window: the workers crash as they start, so give up."""
STOP_TIMEOUT_S = 15.0


def reuseport_spreads() -> bool:
    return sys.platform.startswith("linux") and hasattr(socket, "SO_REUSEPORT")


def bound_socket(host: str, port: int, *, reuseport: bool = True, listen: bool = True) -> socket.socket:
    """A TCP socket bound to ``host:port``, with ``SO_REUSEPORT`` and listening unless told not."""
    family, kind, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                      flags=socket.AI_PASSIVE)[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuseport:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(addr)
        if listen:
            sock.listen(2048)
    except OSError:
        sock.close()
        raise
    return sock


def _worker(host: str, port: int, log_level: str, counts: Any = None, index: int = 0) -> None:
    import uvicorn

    try:
        sock = bound_socket(host, port)
    except OSError as exc:
        print(f"sufficiency serve: worker cannot bind {host}:{port}: {exc.strerror}", file=sys.stderr)
        sys.exit(STARTUP_FAILURE)
    if counts is not None:  # listening: the kernel hashes connections here from now on
        connection_share.install(counts, index)
    from service.config import Settings
    from service.http_limits import uvicorn_options

    server = uvicorn.Server(uvicorn.Config(APP, factory=True, log_level=log_level, **uvicorn_options(Settings())))
    server.run(sockets=[sock])
    if not server.started:  # the app or its lifespan failed (uvicorn has logged why)
        sys.exit(STARTUP_FAILURE)


class Supervisor:
    """Start ``workers`` processes serving ``host:port``; keep them running until a signal."""

    def __init__(self, host: str, port: int, workers: int, log_level: str = "info", balance: bool = True):
        self.host, self.port, self.workers, self.log_level = host, port, workers, log_level
        self._ctx = mp.get_context("spawn")
        self._stopping = False
        # each worker's connection count, in shared memory (service.connection_share)
        self._counts = None
        if balance and workers > 1:
            self._counts = self._ctx.Array("i", [NOT_SERVING] * workers, lock=False)

    def _start(self, index: int) -> mp.process.BaseProcess:
        proc = self._ctx.Process(target=_worker, args=(self.host, self.port, self.log_level, self._counts, index),
                                 daemon=False)
        proc.start()
        return proc

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._stopping = True

    def run(self) -> int:
        try:
            # A plain bind first: SO_REUSEPORT would let us join another server of this user
            # that already listens here (an earlier `serve` left running) and share its port.
            with bound_socket(self.host, self.port, listen=False, reuseport=False) as probe:
                self.port = probe.getsockname()[1]  # resolves port 0
            # Bound, never listening: holds the port across worker restarts (it takes no
            # connections; only listening sockets of the group do).
            anchor = bound_socket(self.host, self.port, listen=False)
        except OSError as exc:
            print(f"sufficiency serve: cannot bind {self.host}:{self.port}: {exc.strerror}", file=sys.stderr)
            return 1
        previous = {s: signal.signal(s, self._on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        procs = [self._start(i) for i in range(self.workers)]
        print(f"sufficiency serve: http://{self.host}:{self.port} with {self.workers} workers "
              f"(one listening socket each)", file=sys.stderr, flush=True)
        status = 0
        deaths: list[float] = []
        try:
            while not self._stopping:
                wait([p.sentinel for p in procs], timeout=0.5)
                for i, proc in enumerate(procs):
                    if proc.is_alive() or self._stopping:
                        continue
                    now = time.monotonic()
                    deaths = [t for t in deaths if now - t < RESTART_WINDOW_S] + [now]
                    if proc.exitcode == STARTUP_FAILURE or len(deaths) > MAX_RESTARTS:
                        why = "could not start" if proc.exitcode == STARTUP_FAILURE else (
                            f"died {len(deaths)} times in {RESTART_WINDOW_S:.0f} s")
                        print(f"sufficiency serve: a worker {why} (exit code {proc.exitcode}); stopping",
                              file=sys.stderr, flush=True)
                        self._stopping, status = True, 1
                        break
                    print(f"sufficiency serve: worker {proc.pid} exited (exit code {proc.exitcode}); "
                          "starting another", file=sys.stderr, flush=True)
                    if self._counts is not None:  # its connections are gone, and no socket listens
                        self._counts[i] = NOT_SERVING
                    procs[i] = self._start(i)
        finally:
            self._stop_all(procs)
            for s, handler in previous.items():
                signal.signal(s, handler)
            anchor.close()
        return status

    @staticmethod
    def _stop_all(procs: list[mp.process.BaseProcess]) -> None:
        """SIGTERM (uvicorn finishes the requests in flight), then SIGKILL after a timeout."""
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for proc in procs:
            proc.join(max(0.0, deadline - time.monotonic()))
            if proc.is_alive():
                proc.kill()
                proc.join(5)
