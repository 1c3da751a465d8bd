"""live sessions and their observations

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30 02:10:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "live_sessions",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("dataset_id", sa.Uuid(), nullable=True),
        sa.Column("grouping", sa.String(length=200), nullable=True),
        sa.Column("system_a", sa.String(length=200), nullable=False),
        sa.Column("system_b", sa.String(length=200), nullable=False),
        sa.Column("policy", sa.String(length=200), nullable=True),
        sa.Column("rule", sa.String(length=32), nullable=False),
        sa.Column("coverage_aware", sa.Boolean(), nullable=False),
        sa.Column("delta", sa.Float(), nullable=False),
        sa.Column("a", sa.Float(), nullable=False),
        sa.Column("floor", sa.String(length=32), nullable=False),
        sa.Column("bootstrap", sa.String(length=16), nullable=False),
        sa.Column("budgets", sa.JSON(), nullable=False),
        sa.Column("trials", sa.Integer(), nullable=False),
        sa.Column("seed", sa.BigInteger(), nullable=False),
        sa.Column("universe", sa.JSON(), nullable=False),
        sa.Column("task_order", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["dataset_id"], ["datasets.id"], name=op.f("fk_live_sessions_dataset_id_datasets"), ondelete="RESTRICT"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_live_sessions")),
    )
    with op.batch_alter_table("live_sessions", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_live_sessions_created_at"), ["created_at"], unique=False)
        batch_op.create_index(batch_op.f("ix_live_sessions_dataset_id"), ["dataset_id"], unique=False)

    op.create_table(
        "live_observations",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("session_id", sa.Uuid(), nullable=False),
        sa.Column("task_id", sa.String(length=500), nullable=False),
        sa.Column("system", sa.String(length=1), nullable=False),
        sa.Column("trial", sa.Integer(), nullable=False),
        sa.Column("outcome", sa.Float(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["session_id"], ["live_sessions.id"], name=op.f("fk_live_observations_session_id_live_sessions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_live_observations")),
        sa.UniqueConstraint("session_id", "task_id", "system", "trial", name=op.f("uq_live_observations_session_id")),
    )


def downgrade() -> None:
    op.drop_table("live_observations")
    with op.batch_alter_table("live_sessions", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_live_sessions_dataset_id"))
        batch_op.drop_index(batch_op.f("ix_live_sessions_created_at"))
    op.drop_table("live_sessions")
