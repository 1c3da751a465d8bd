"""dispatch times: re-send jobs whose message was lost

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30 02:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("replays", schema=None) as batch_op:
        batch_op.add_column(sa.Column("dispatched_at", sa.DateTime(timezone=True), nullable=True))
    with op.batch_alter_table("replay_chunks", schema=None) as batch_op:
        batch_op.add_column(sa.Column("dispatched_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("replay_chunks", schema=None) as batch_op:
        batch_op.drop_column("dispatched_at")
    with op.batch_alter_table("replays", schema=None) as batch_op:
        batch_op.drop_column("dispatched_at")
