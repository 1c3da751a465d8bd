"""A one-process replay runs its chunks on several threads (``replay._lone_threads``): the
report must not change, and progress must reach the caller whole even when the caller's
callback is not thread-safe."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from service import examples
from service.engine import lattice_decisions as LD
from service.engine import replay as RP
from service.engine.records import from_rows, load_records
from service.engine.replay import plan_replay, run_replay, total_cases
from service.engine.spec import make_spec
from service.engine.synth import generate

ROOT = Path(__file__).resolve().parents[2]


def _fractional():
    rows = generate(n_systems=6, n_tasks=60, n_groups=4, seed=3, fractional=True, cost=False)
    return from_rows(rows)


def _spec():
    return make_spec(policies=["coverage_bootstrap", "anytime_coverage", "serfling_coverage"], deltas=[0, 5],
                     orders=60, bootstrap=[200, "exact"])


def test_threads_are_the_cores_capped_by_the_environment(monkeypatch):
    """For every kind of record (0/1 records' rules other than the bootstrap have no products
    for BLAS to spread)."""
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    monkeypatch.setattr(RP.os, "sched_getaffinity", lambda _pid: set(range(16)))
    assert RP._lone_threads() == RP.MAX_THREADS
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")  # a process that replays beside others
    assert RP._lone_threads() == 1
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "2")
    assert RP._lone_threads() == 2


def test_threaded_report_equals_the_serial_one_and_progress_adds_up(monkeypatch):
    records, spec = _fractional(), _spec()
    monkeypatch.setattr(RP, "_lone_threads", lambda: 1)
    serial = run_replay(records, spec, chunks=6)
    monkeypatch.setattr(RP, "_lone_threads", lambda: 3)
    state = [0]

    def racy(n: int) -> None:  # read, yield, write: loses updates if two threads call it at once
        seen = state[0]
        time.sleep(0)
        state[0] = seen + n

    threaded = run_replay(records, spec, chunks=6, progress=racy)
    assert threaded == serial
    assert state[0] == total_cases(plan_replay(records, spec))


def test_threaded_report_of_binary_records_equals_the_serial_one(monkeypatch):
    """0/1 records too (their bootstrap's products, the binary tail memo shared by the threads,
    and the rules without products), for every rule and the neyman order."""
    records = load_records(str(examples.path()))
    spec = make_spec(policies=["coverage_bootstrap", "coverage_mcnemar", "neyman_coverage_bootstrap",
                               "coverage_paired_normal", "anytime_coverage", "serfling_coverage",
                               "uniform_forced"],
                     deltas=[0], orders=40, bootstrap=[200, "exact"])
    monkeypatch.setattr(RP, "_lone_threads", lambda: 1)
    serial = run_replay(records, spec, chunks=1)
    monkeypatch.setattr(RP, "_lone_threads", lambda: 3)
    assert run_replay(records, spec) == serial
    assert run_replay(records, spec, chunks=7) == serial


def test_lone_chunks_are_whole_blocks_and_a_multiple_of_the_threads(monkeypatch):
    """The default chunks of a one-process lattice replay: no chunk holds more than one block
    of pairs, they split among the threads evenly, and the report is the one of any chunking."""
    from service.engine import chunk as CH

    records, spec = _fractional(), _spec()
    plan = plan_replay(records, spec)  # 30 directed pairs, 60 orders, 19 budgets
    monkeypatch.setattr(CH, "LATTICE_BLOCK_CASES", 60 * 19 * 8)  # blocks of 8 pairs
    for threads, want in ((1, 4), (2, 4), (3, 6), (4, 4)):
        n_chunks = RP._lone_chunks(plan, threads)
        assert n_chunks == want, threads
        sizes = [b - a for a, b in RP._chunk_bounds(plan.n_pairs, n_chunks)]
        assert max(sizes) <= 8 and sum(sizes) == plan.n_pairs
    monkeypatch.setattr(RP, "_lone_threads", lambda: 2)
    assert run_replay(records, spec) == run_replay(records, spec, chunks=5)


def test_a_failing_chunk_stops_the_threaded_replay(monkeypatch):
    """An error in one chunk (or Ctrl-C in the caller) reaches the caller, and the chunks not
    yet started are dropped instead of run to the end first."""
    records, spec = _fractional(), _spec()
    monkeypatch.setattr(RP, "_lone_threads", lambda: 2)
    started: list[int] = []
    real = RP.run_chunk

    def failing(plan, start, stop, progress=None):
        started.append(start)
        if len(started) == 1:
            raise KeyboardInterrupt
        time.sleep(0.05)
        return real(plan, start, stop, progress)

    monkeypatch.setattr(RP, "run_chunk", failing)
    try:
        run_replay(records, spec, chunks=30)
    except KeyboardInterrupt:
        pass
    else:
        raise AssertionError("the interrupt did not reach the caller")
    assert len(started) < 10  # not all 30 chunks


def test_a_running_chunk_stops_at_its_next_progress_report(monkeypatch):
    """When the caller stops waiting (here the other chunk's error), a chunk already running
    stops at its next progress report instead of running to its end (Ctrl-C in the CLI
    returns within a block of pairs, not a whole chunk)."""
    records = _fractional()
    spec = make_spec(policies=["coverage_bootstrap", "anytime_coverage", "serfling_coverage"], deltas=[0, 5],
                     orders=400, bootstrap=[200, "exact"])
    monkeypatch.setattr(RP, "_lone_threads", lambda: 2)
    finished: list[int] = []
    other_running = threading.Event()
    real = RP.run_chunk

    def first_fails(plan, start, stop, progress=None):
        if start == 0:
            assert other_running.wait(30)  # fail only once the other chunk is under way
            raise RuntimeError("boom")
        other_running.set()
        out = real(plan, start, stop, progress)
        finished.append(start)
        return out

    monkeypatch.setattr(RP, "run_chunk", first_fails)
    try:
        run_replay(records, spec, chunks=2)
    except RuntimeError as exc:
        assert str(exc) == "boom"
    else:
        raise AssertionError("the error did not reach the caller")
    assert finished == []  # the second chunk stopped (it has a dozen progress reports)


def test_compiled_stages_give_the_numpy_report(monkeypatch):
    """A replay past ``lattice.COMPILED_FROM``, or any replay in a process that has loaded
    ``lattice_kernel``, computes its short sums there (threads, every bootstrap configuration):
    the report is the one numpy gives, and the threshold counts the bootstrap cases of the
    whole replay."""
    records, spec = _fractional(), _spec()
    plan = plan_replay(records, spec)
    boot_cases = 4 * plan.n_pairs * plan.spec.seeds * plan.spec.orders * len(plan.spec.budgets)  # 2 B x 2 deltas
    monkeypatch.setattr(LD, "COMPILED_FROM", boot_cases + 1)
    monkeypatch.setattr(LD, "kernel_loaded", lambda: False)  # other tests of this process may have loaded it
    assert not LD.compiled_stages(plan)
    import service.engine.lattice_kernel as K

    calls = []  # which way each block's short sums went: False numpy, True compiled
    for owner, name, compiled in ((LD.Tails, "_short_sums", False), (K, "short_stage", True)):
        real = getattr(owner, name)
        monkeypatch.setattr(owner, name, lambda *a, _real=real, _c=compiled, **kw: calls.append(_c) or _real(*a, **kw))
    monkeypatch.setattr(RP, "_lone_threads", lambda: 3)
    in_numpy = run_replay(records, spec, chunks=6)
    assert calls and not any(calls)
    monkeypatch.setattr(LD, "COMPILED_FROM", boot_cases)
    assert LD.compiled_stages(plan)
    calls.clear()
    compiled = run_replay(records, spec, chunks=6)
    assert calls and all(calls)
    assert compiled == in_numpy
    monkeypatch.setattr(LD, "COMPILED_FROM", boot_cases + 1)
    monkeypatch.setattr(LD, "kernel_loaded", lambda: True)  # a worker that preloaded it
    assert LD.compiled_stages(plan)
    calls.clear()
    assert run_replay(records, spec, chunks=6) == in_numpy
    assert calls and all(calls)


def test_kernel_loaded_means_imported():
    """``kernel_loaded`` turns true with the import of ``lattice_kernel``, which leaves the
    kernel compiled (checked in a fresh process: here another test may have called it), and a
    worker preloads the module (``service.replays.tasks``)."""
    import service.replays.tasks  # noqa: F401  (registers its preloads)
    from service.jobs import PRELOAD

    assert "service.engine.lattice_kernel" in PRELOAD
    probe = (
        "from service.engine import lattice as LT\n"
        "before = LT.kernel_loaded()\n"
        "import service.engine.lattice_kernel as K\n"
        "print(before, LT.kernel_loaded(), len(K._first_stages.signatures))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.split() == ["False", "True", "1"]


def test_threads_chosen_by_the_caller_give_the_same_report_and_are_bounded(monkeypatch):
    records, spec = _fractional(), _spec()
    pools = []
    threaded = RP._in_threads
    monkeypatch.setattr(RP, "_in_threads", lambda plan, bounds, threads, progress: (
        pools.append(threads), threaded(plan, bounds, threads, progress))[1])
    monkeypatch.setattr(RP, "_lone_threads", lambda: 2)  # what the caller's choice overrides
    one = run_replay(records, spec, threads=1)
    assert pools == []  # one thread: the chunks run in the caller's
    assert run_replay(records, spec, threads=RP.MAX_THREADS) == one
    assert pools == [RP.MAX_THREADS]
    for bad in (0, RP.MAX_THREADS + 1):
        with pytest.raises(ValueError, match="threads must be from 1"):
            run_replay(records, spec, threads=bad)
    with pytest.raises(ValueError, match="one-process replay"):
        run_replay(records, spec, jobs=2, threads=2)


def test_cli_threads_flag(tmp_path):
    csv = tmp_path / "r.csv"
    csv.write_text("system,task_id,outcome\n" + "".join(f"{s},t{i},{(i * (s == 'a') + i // 2) % 2}\n"
                                                        for s in "ab" for i in range(20)))
    cli = [sys.executable, "-m", "service.cli", "replay", str(csv), "--policy", "coverage_bootstrap", "--orders", "20",
           "--format", "json"]
    outs = [subprocess.run([*cli, "--threads", n], cwd=ROOT, capture_output=True, timeout=120) for n in ("1", "2")]
    assert [o.returncode for o in outs] == [0, 0], outs[0].stderr
    assert outs[0].stdout == outs[1].stdout
    bad = subprocess.run([*cli, "--threads", "0"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--threads must be from 1 to" in bad.stderr
    both = subprocess.run([*cli, "--threads", "2", "--jobs", "2"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert both.returncode == 2 and "--threads is for a one-process replay" in both.stderr


def test_chunks_with_pairs_near_a_threshold_start_first():
    """Longest processing time first: on lattice-valued records a chunk whose pairs are near δ
    starts before one whose pairs are far from it (its cases reach the short sums); the results
    stay in the order of the chunks (the report above is unchanged); 0/1 records keep their order."""
    records, spec = _fractional(), _spec()
    plan = plan_replay(records, spec)
    bounds = [(p, p + 1) for p in range(plan.n_pairs)]
    order = RP._costliest_first(plan, bounds)
    assert sorted(order) == list(range(plan.n_pairs))
    z = []
    for p in range(plan.n_pairs):
        d = plan.pair_values(p) / plan.lattice
        z.append(min(abs(d.mean() - t) / (d.std() / len(d) ** 0.5) for t in (0.0, 0.05)))
    near = [p for p in range(plan.n_pairs) if z[p] < 4.0]
    assert 0 < len(near) < plan.n_pairs
    assert set(order[: len(near)]) == set(near)  # every near pair's chunk before every far one's
    binary = plan_replay(from_rows(generate(n_systems=5, n_tasks=40, seed=1)), spec)
    assert RP._costliest_first(binary, [(0, 4), (4, 8), (8, 20)]) == [0, 1, 2]
