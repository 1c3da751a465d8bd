"""datasets, replays, chunks, metric rows

Revision ID: 0001
Revises:
Create Date: 2026-11-30 01:37:53.037208
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "datasets",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("content_hash", sa.String(length=64), nullable=False),
        sa.Column("format", sa.String(length=8), nullable=False),
        sa.Column("size_bytes", sa.Integer(), nullable=False),
        sa.Column("n_records", sa.Integer(), nullable=False),
        sa.Column("n_systems", sa.Integer(), nullable=False),
        sa.Column("n_tasks", sa.Integer(), nullable=False),
        sa.Column("summary", sa.JSON(), nullable=False),
        sa.Column("content", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_datasets")),
        sa.UniqueConstraint("content_hash", name=op.f("uq_datasets_content_hash")),
    )
    with op.batch_alter_table("datasets", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_datasets_created_at"), ["created_at"], unique=False)

    op.create_table(
        "replays",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("dataset_id", sa.Uuid(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("options", sa.JSON(), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("n_pairs", sa.Integer(), nullable=False),
        sa.Column("n_chunks", sa.Integer(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("report_etag", sa.String(length=80), nullable=True),
        sa.Column("report_json", sa.LargeBinary(), nullable=True),
        sa.Column("report_csv", sa.LargeBinary(), nullable=True),
        sa.ForeignKeyConstraint(
            ["dataset_id"], ["datasets.id"], name=op.f("fk_replays_dataset_id_datasets"), ondelete="RESTRICT"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_replays")),
    )
    with op.batch_alter_table("replays", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_replays_created_at"), ["created_at"], unique=False)
        batch_op.create_index(batch_op.f("ix_replays_dataset_id"), ["dataset_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_replays_status"), ["status"], unique=False)

    op.create_table(
        "metric_rows",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("replay_id", sa.Uuid(), nullable=False),
        sa.Column("policy", sa.String(length=200), nullable=False),
        sa.Column("grouping", sa.String(length=200), nullable=True),
        sa.Column("floor", sa.String(length=32), nullable=False),
        sa.Column("a", sa.Float(), nullable=False),
        sa.Column("bootstrap", sa.String(length=32), nullable=False),
        sa.Column("delta", sa.Float(), nullable=False),
        sa.Column("budget", sa.Float(), nullable=True),
        sa.Column("metric", sa.String(length=64), nullable=False),
        sa.Column("value", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(
            ["replay_id"], ["replays.id"], name=op.f("fk_metric_rows_replay_id_replays"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_metric_rows")),
    )
    with op.batch_alter_table("metric_rows", schema=None) as batch_op:
        batch_op.create_index("ix_metric_rows_replay_metric", ["replay_id", "metric", "policy"], unique=False)

    op.create_table(
        "replay_chunks",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("replay_id", sa.Uuid(), nullable=False),
        sa.Column("chunk_index", sa.Integer(), nullable=False),
        sa.Column("start", sa.Integer(), nullable=False),
        sa.Column("stop", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("progress", sa.Float(), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("result", sa.LargeBinary(), nullable=True),
        sa.ForeignKeyConstraint(
            ["replay_id"], ["replays.id"], name=op.f("fk_replay_chunks_replay_id_replays"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_replay_chunks")),
        sa.UniqueConstraint("replay_id", "chunk_index", name=op.f("uq_replay_chunks_replay_id")),
    )


def downgrade() -> None:
    op.drop_table("replay_chunks")
    with op.batch_alter_table("metric_rows", schema=None) as batch_op:
        batch_op.drop_index("ix_metric_rows_replay_metric")

    op.drop_table("metric_rows")
    with op.batch_alter_table("replays", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_replays_status"))
        batch_op.drop_index(batch_op.f("ix_replays_dataset_id"))
        batch_op.drop_index(batch_op.f("ix_replays_created_at"))

    op.drop_table("replays")
    with op.batch_alter_table("datasets", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_datasets_created_at"))

    op.drop_table("datasets")
