"""Jobs leave only after the enqueuing transaction commits, never after a rollback."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import text

from service.db import make_engine, make_sessionmaker, transaction
from service.jobs import bind_runner, enqueue


class RecordingRunner:
    def __init__(self) -> None:
        self.sent: list[tuple[str, tuple]] = []

    def send(self, name: str, *args: object) -> None:
        self.sent.append((name, args))

    def ping(self) -> None: ...

    def close(self) -> None: ...


def test_enqueue_waits_for_commit_and_drops_on_rollback(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'j.db'}")
    factory = make_sessionmaker(engine)
    runner = RecordingRunner()
    bind_runner(factory, runner)
    try:
        try:
            with transaction(factory) as session:
                session.execute(text("SELECT 1"))
                enqueue(session, "replays.run", "a")
                assert runner.sent == []  # not before commit
                raise RuntimeError("the request failed")
        except RuntimeError:
            pass
        assert runner.sent == []  # rolled back: never sent
        with transaction(factory) as session:
            enqueue(session, "replays.run", "b")
            with session.begin_nested():  # a savepoint rollback keeps the outer job
                enqueue(session, "replays.chunk", "b", 0)
            assert runner.sent == []
        assert runner.sent == [("replays.run", ("b",)), ("replays.chunk", ("b", 0))]
    finally:
        engine.dispose()


def test_a_worker_process_has_the_replay_engine_loaded_before_its_first_job(tmp_path):
    """``create_worker_app`` imports what the replay jobs import lazily (registered with
    ``jobs.preload``), before the pool forks: the first chunk of each worker would otherwise
    pay numpy's and scipy's imports. Checked in a fresh interpreter."""
    import subprocess
    import sys
    from pathlib import Path

    settings = f"Settings(database_url='sqlite:///{tmp_path / 'w.db'}', broker_url='redis://127.0.0.1:6379/15')"
    wanted = ("service.engine.replay", "service.engine.pairs", "scipy.stats")
    code = (
        "import sys\n"
        "from service.config import Settings\n"
        "from workers.app import create_worker_app\n"
        "before = 'service.engine.replay' in sys.modules\n"
        f"create_worker_app({settings})\n"
        f"print(before, all(m in sys.modules for m in {wanted!r}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["False", "True"]


def test_warming_opens_the_broker_and_database_connections_a_first_job_would_pay(tmp_path):
    """A pool process opens its database connection and its producer's broker connection
    before its first job (workers/app._ProcessState.warm, CeleryRunner.warm); a broker that
    is down is not an error there."""
    from service.config import Settings
    from service.jobs import CeleryRunner
    from workers.app import _ProcessState

    settings = Settings(database_url=f"sqlite:///{tmp_path / 'w.db'}", broker_url="redis://127.0.0.1:6379/15")
    state = _ProcessState(settings)
    assert state.runner is None
    state.warm()
    engine = state.ctx().sessionmaker.kw["bind"]
    assert engine.pool.checkedin() >= 1  # a connection is open and back in the pool
    with state.runner.app.producer_or_acquire() as producer:
        assert producer.connection.connected
    state.runner.close()

    down = CeleryRunner(Settings(database_url=f"sqlite:///{tmp_path / 'd.db'}", broker_url="redis://127.0.0.1:1/0"))
    down.warm()  # logs, does not raise
    down.close()


def test_slow_start_up_imports_are_logged_with_their_likely_reason(tmp_path, monkeypatch, caplog) -> None:
    """A first start on a fresh install compiles the engine's kernels for 10-20 s; the process
    says why it is silent that long, and says nothing when its imports are quick."""
    import sys

    from service.jobs import import_modules

    name = f"slow_start_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text("import time\ntime.sleep(0.3)\nLOADED = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)
    with caplog.at_level("WARNING", logger="service.jobs"):
        took = import_modules([name], "worker", slow=0.2)
    assert took >= 0.3 and sys.modules[name].LOADED
    said = [r.getMessage() for r in caplog.records if r.name == "service.jobs"]
    assert len(said) == 1 and said[0].startswith("worker: start-up imports took 0.") and "numba" in said[0]
    caplog.clear()
    with caplog.at_level("WARNING", logger="service.jobs"):
        assert import_modules([name], "API", slow=0.2) < 0.2  # imported already: quick, and silent
    assert not [r for r in caplog.records if r.name == "service.jobs"]
