"""Processes that replay keep freed memory (service/engine/malloc.py).

Each check runs in a fresh interpreter: the setting is for the whole process. What is
measured is the mechanism: a large array, written and freed, stays in the process's
resident memory (its pages are not given back, to be faulted in and zeroed again by the
next block), and allocating it again reuses them rather than growing.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc's malloc only"
)

PROBE = """
import json, os
import numpy as np
ok = {setup}
page = os.sysconf("SC_PAGE_SIZE")
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * page
start = rss()
held = []
for _ in range(5):
    a = np.empty(48 << 17)  # 48 MB: past glibc's own mmap threshold, which grows to 32 MB at most
    a.fill(1.0)
    del a
    held.append(rss() - start)
print(json.dumps({{"ok": ok, "held_mb": [h / 2**20 for h in held]}}))
"""


def probe(setup: str, env: dict[str, str] | None = None) -> dict:
    base = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}
    out = subprocess.run([sys.executable, "-c", PROBE.format(setup=setup)], cwd=ROOT, env={**base, **(env or {})},
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


KEEP = "__import__('service.engine.malloc', fromlist=['x']).keep_freed_memory()"


def kept(out: dict) -> bool:
    """The freed array stayed resident, once: not given back, and not allocated anew."""
    return all(40 < h < 60 for h in out["held_mb"])


def given_back(out: dict) -> bool:
    return all(h < 8 for h in out["held_mb"])


def test_freed_memory_is_kept_and_reused():
    default = probe("None")
    assert given_back(default), default  # glibc's default: fresh pages for every block
    out = probe(KEEP)
    assert out["ok"] is True
    assert kept(out), out


def test_an_operator_who_tunes_malloc_keeps_their_setting():
    out = probe(KEEP, {"MALLOC_ARENA_MAX": "2", "MALLOC_TRIM_THRESHOLD_": "131072"})
    assert out["ok"] is False
    assert given_back(out), out


@pytest.mark.parametrize("broker", [None, "redis://127.0.0.1:6379/15"])
def test_the_replay_command_and_the_celery_worker_keep_freed_memory(broker, tmp_path):
    if broker:
        setup = (
            "(__import__('workers.app', fromlist=['x']).create_worker_app(__import__('service.config', "
            f"fromlist=['x']).Settings(database_url='sqlite:///{tmp_path / 'm.db'}', broker_url={broker!r})), "
            "__import__('service.engine.malloc', fromlist=['x'])._done)[1]"
        )
    else:  # the CLI's replay command sets it first thing; a missing file stops it right after
        setup = (
            "(__import__('service.cli', fromlist=['x']).main(['replay', 'no-such-file.csv']), "
            "__import__('service.engine.malloc', fromlist=['x'])._done)[1]"
        )
    out = probe(setup)
    assert out["ok"] is True
    assert kept(out), out


HUGE_PROBE = """
import json, resource, threading
import numpy as np
ok = {setup}
def touch():  # 16 arrays of 3 MB: below numpy's own huge-page request (4 MB and up), as are most
    held = [np.empty(3 << 17) for _ in range(16)]  # of a replay's per-block arrays
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for a in held:
        a.fill(1.0)
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
faults = []
touch()  # in the main thread
t = threading.Thread(target=touch)  # and in another, as a threaded replay's blocks are
t.start(); t.join()
with open("/proc/self/smaps_rollup") as f:
    huge = [int(line.split()[1]) for line in f if line.startswith("AnonHugePages:")][0]
print(json.dumps({{"ok": ok, "faults": faults, "huge_kb": huge}}))
"""


def _thp_on_request() -> bool:
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            mode = f.read()
    except OSError:
        return False
    return "[always]" in mode or "[madvise]" in mode


@pytest.mark.skipif(not _thp_on_request(), reason="the kernel offers no transparent huge pages")
def test_a_replay_process_faults_its_heap_in_huge_pages():
    """48 MB written in the main thread and then in another: 12,288 faults each in 4 kB pages;
    with the heap marked for huge pages (and one arena, so the other thread allocates there too)
    a few dozen, and the process holds huge pages. Without the setting, the 4 kB faults."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}

    def run(setup: str) -> dict:
        out = subprocess.run([sys.executable, "-c", HUGE_PROBE.format(setup=setup)], cwd=ROOT, env=base,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        return json.loads(out.stdout.strip().splitlines()[-1])

    default = run("None")
    assert all(f > 10_000 for f in default["faults"]), default
    out = run(KEEP)
    assert out["ok"] is True
    assert all(f < 1_000 for f in out["faults"]), out
    assert out["huge_kb"] >= 40 << 10, out
