"""``db.blob_rows``: large binary columns read in binary format on Postgres must be the rows
SQLAlchemy reads (on SQLite it is SQLAlchemy itself)."""

from __future__ import annotations

import uuid

from fastapi.testclient import TestClient
from sqlalchemy import select

from service.datasets.models import Dataset
from service.db import blob_rows
from service.replays import repository
from service.replays.models import ReplayChunk
from tests.service.conftest import SMALL_SPEC, synth_csv, upload, wait_for


def test_blob_rows_are_the_rows_sqlalchemy_reads(client: TestClient) -> None:
    ds = upload(client, synth_csv(seed=8, n_systems=4))
    rid = client.post("/v1/replays", json={"dataset_id": ds["id"], **SMALL_SPEC}).json()["id"]
    assert wait_for(client, rid)["status"] == "succeeded"
    replay_id = uuid.UUID(rid)
    with client.app.state.sessionmaker() as session:
        stmt = (
            select(ReplayChunk.result, ReplayChunk.chunk_index, ReplayChunk.replay_id, ReplayChunk.status)
            .where(ReplayChunk.replay_id == replay_id)
            .order_by(ReplayChunk.chunk_index)
        )
        want = [tuple(r) for r in session.execute(stmt).all()]
        got = blob_rows(session, stmt)
        assert len(want) > 1 and all(isinstance(r[0], bytes) and len(r[0]) > 100 for r in want)
        assert got == want
        assert [type(v) for v in got[0]] == [bytes, int, uuid.UUID, str]
        assert repository.chunk_results(session, replay_id) == [r[0] for r in want]
        parsed = session.scalar(select(Dataset.parsed).where(Dataset.id == uuid.UUID(ds["id"])))
        assert blob_rows(session, select(Dataset.parsed).where(Dataset.id == uuid.UUID(ds["id"]))) == [(parsed,)]
        assert blob_rows(session, select(Dataset.parsed).where(Dataset.id == uuid.uuid4())) == []
        pairs = repository.pair_table_bytes(session, replay_id, 0)
        assert pairs is not None and pairs[:2] == b"PK"  # an .npz
        assert repository.pair_table_bytes(session, replay_id, 99) is None
