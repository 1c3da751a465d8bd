"""Datasets: the parsed records beside the uploaded bytes (service.engine.records_blob)

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01 16:40:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Datasets stored before this keep a null: they are parsed from their content, as before.
    with op.batch_alter_table("datasets", schema=None) as batch_op:
        batch_op.add_column(sa.Column("parsed", sa.LargeBinary(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("datasets", schema=None) as batch_op:
        batch_op.drop_column("parsed")
