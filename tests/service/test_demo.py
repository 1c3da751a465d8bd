"""``sufficiency demo --exit-after`` end to end: server, upload, replay, budgets, report URL."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.service import procs


def test_demo_runs_and_reports(tmp_path: Path) -> None:
    port = procs.free_port()
    env = procs.env_for(data_dir=tmp_path / "data")
    cmd = [sys.executable, "-m", "service.cli", "demo", "--port", str(port), "--exit-after",
           "--systems", "5", "--tasks", "80", "--groups", "4", "--orders", "50"]
    first = subprocess.run(cmd, cwd=procs.REPO, env=env, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stdout + first.stderr
    out = first.stdout
    assert "Minimum sufficient budget" in out and "coverage_bootstrap" in out
    assert re.search(rf"http://127\.0\.0\.1:{port}/v1/replays/[0-9a-f-]{{36}}/report", out)
    assert (tmp_path / "data" / "sufficiency.db").exists()
    again = subprocess.run(cmd, cwd=procs.REPO, env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and "already stored" in again.stdout


def test_demo_keeps_serving(tmp_path: Path) -> None:
    port = procs.free_port()
    proc = procs.start(
        ["demo", "--port", str(port), "--systems", "4", "--tasks", "40", "--groups", "3", "--orders", "20"],
        procs.env_for(data_dir=tmp_path / "data"),
        tmp_path / "demo.log",
    )
    try:
        procs.wait_http(f"http://127.0.0.1:{port}/healthz", proc=proc)
        for _ in range(200):
            replays = httpx.get(f"http://127.0.0.1:{port}/v1/replays", timeout=5).json()
            if replays["items"] and replays["items"][0]["status"] == "succeeded":
                break
            time.sleep(0.1)
        assert replays["items"][0]["status"] == "succeeded", (tmp_path / "demo.log").read_text()
        assert proc.poll() is None  # still serving after the replay
    finally:
        procs.stop(proc)
