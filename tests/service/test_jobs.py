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
