"""Per-pair tables of finished replays, stored apart from the report and served by page

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 11:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "replay_pair_tables",
        sa.Column("replay_id", sa.Uuid(), nullable=False),
        sa.Column("config_index", sa.Integer(), nullable=False),
        sa.Column("n_pairs", sa.Integer(), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(
            ["replay_id"], ["replays.id"], name=op.f("fk_replay_pair_tables_replay_id_replays"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("replay_id", "config_index", name=op.f("pk_replay_pair_tables")),
    )


def downgrade() -> None:
    op.drop_table("replay_pair_tables")
