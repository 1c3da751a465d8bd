"""Start and stop the service's own processes (worker, API) for the job tests."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]
BOOT = "import sys; from service.cli import main; sys.exit(main(sys.argv[1:]))"


def children(pid: int) -> dict[int, list[str]]:
    """The child processes of ``pid``: ``{child pid: its /proc stat fields after the command
    name}`` (field 1 is the parent, 11 and 12 user and system CPU ticks).

    Parents are read from every ``/proc/<pid>/stat``: ``/proc/<pid>/task/*/children`` can miss
    a child while another is being created or reaped (the kernel documents it as unreliable).
    """
    out = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                out[int(stat.parent.name)] = fields
        except (OSError, IndexError, ValueError):
            pass
    return out


def cpu_seconds(pids: Iterable[int]) -> float:
    """User + system CPU time the live processes ``pids`` have used so far, in seconds (the
    ones gone meanwhile count nothing)."""
    ticks = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        ticks += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return ticks / os.sysconf("SC_CLK_TCK")


def start_profilers(pids: Iterable[int], out: Path) -> list[subprocess.Popen]:
    """``py-spy record`` on each process until ``stop_profilers`` (SIGINT makes it write the
    file): collapsed stacks in ``out/worker-PID.txt``, for the benchmarks' ``--profile``."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    out.mkdir(parents=True, exist_ok=True)
    return [subprocess.Popen([spy, "record", "--pid", str(pid), "--rate", "250", "--nonblocking", "--format", "raw",
                              "--output", str(out / f"worker-{pid}.txt")],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for pid in pids]


def stop_profilers(spies: list[subprocess.Popen]) -> None:
    for spy in spies:
        spy.send_signal(signal.SIGINT)
    for spy in spies:
        try:
            spy.wait(30)
        except subprocess.TimeoutExpired:
            spy.kill()


def env_for(**settings: object) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SUFFICIENCY_")}
    env.update({f"SUFFICIENCY_{k.upper()}": str(v) for k, v in settings.items() if v is not None})
    env["PYTHONPATH"] = str(REPO)
    return env


def start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    """``sufficiency <args>`` in its own process group, so a kill reaches its children."""
    fh = open(log, "ab")  # noqa: SIM115  (closed with the process)
    return subprocess.Popen(
        [sys.executable, "-c", BOOT, *args], cwd=REPO, env=env, stdout=fh, stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def kill9(proc: subprocess.Popen) -> None:
    """SIGKILL the process group of a process we started."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=10)


def stop(proc: subprocess.Popen, timeout: float = 15) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill9(proc)
    except ProcessLookupError:
        pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, timeout: float = 30, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before {url} answered")
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{url} did not answer in {timeout}s")
