"""Replays: case count, cost kind and the run time estimated at submission (service.replays.estimate)

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01 11:10:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Replays submitted before this have no estimate (null): their pages show the ETA from progress only.
    with op.batch_alter_table("replays", schema=None) as batch_op:
        batch_op.add_column(sa.Column("estimated_seconds", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("n_cases", sa.BigInteger(), nullable=True))
        batch_op.add_column(sa.Column("cost_kind", sa.String(length=120), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("replays", schema=None) as batch_op:
        batch_op.drop_column("cost_kind")
        batch_op.drop_column("n_cases")
        batch_op.drop_column("estimated_seconds")
