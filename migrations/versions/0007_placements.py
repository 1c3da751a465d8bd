"""Placements: a new entry measured live against a stored board, and its observations

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01 11:40:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "placements",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("dataset_id", sa.Uuid(), nullable=False),
        sa.Column("grouping", sa.String(length=200), nullable=True),
        sa.Column("system", sa.String(length=200), nullable=False),
        sa.Column("rule", sa.String(length=32), nullable=False),
        sa.Column("correction", sa.String(length=16), nullable=False),
        sa.Column("a", sa.Float(), nullable=False),
        sa.Column("width", sa.Integer(), nullable=False),
        sa.Column("floor", sa.String(length=32), nullable=False),
        sa.Column("coverage_aware", sa.Boolean(), nullable=False),
        sa.Column("trials", sa.Integer(), nullable=False),
        sa.Column("seed", sa.BigInteger(), nullable=False),
        sa.Column("task_order", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("owner", sa.String(length=200), nullable=True),
        sa.ForeignKeyConstraint(
            ["dataset_id"], ["datasets.id"], name=op.f("fk_placements_dataset_id_datasets"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_placements")),
    )
    with op.batch_alter_table("placements", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_placements_created_at"), ["created_at"], unique=False)
        batch_op.create_index(batch_op.f("ix_placements_dataset_id"), ["dataset_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_placements_owner"), ["owner"], unique=False)

    op.create_table(
        "placement_observations",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("placement_id", sa.Uuid(), nullable=False),
        sa.Column("task_id", sa.String(length=500), nullable=False),
        sa.Column("trial", sa.Integer(), nullable=False),
        sa.Column("outcome", sa.Float(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["placement_id"], ["placements.id"], name=op.f("fk_placement_observations_placement_id_placements"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_placement_observations")),
        sa.UniqueConstraint("placement_id", "task_id", "trial", name=op.f("uq_placement_observations_placement_id")),
    )


def downgrade() -> None:
    op.drop_table("placement_observations")
    with op.batch_alter_table("placements", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_placements_owner"))
        batch_op.drop_index(batch_op.f("ix_placements_dataset_id"))
        batch_op.drop_index(batch_op.f("ix_placements_created_at"))
    op.drop_table("placements")
