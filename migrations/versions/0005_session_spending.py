"""Sessions: the spending function of a fixed-sample rule's checkpoints (SPEC §4.4)

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 11:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Sessions declared before schedules spent their level consulted the rule at a at every
    # checkpoint: they keep that meaning ('none') rather than silently changing verdicts.
    with op.batch_alter_table("live_sessions", schema=None) as batch_op:
        batch_op.add_column(sa.Column("spending", sa.String(length=32), nullable=True))
    op.execute("UPDATE live_sessions SET spending = 'none' WHERE rule <> 'anytime'")


def downgrade() -> None:
    with op.batch_alter_table("live_sessions", schema=None) as batch_op:
        batch_op.drop_column("spending")
