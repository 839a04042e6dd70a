"""pause and preview: job states up to 32 characters (``awaiting_approval``), a preview's approval deadline,
preview chunks, and the farm's pause switch

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.alter_column("status", type_=sa.String(32), existing_type=sa.String(16))
        batch.add_column(sa.Column("approval_due_at", sa.DateTime(timezone=True), nullable=True))
    with op.batch_alter_table("job_events") as batch:
        batch.alter_column("status", type_=sa.String(32), existing_type=sa.String(16))
    op.add_column("chunks", sa.Column("preview", sa.Boolean(), nullable=False, server_default=sa.false()))
    op.create_table(
        "farm_controls",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("paused_at", sa.DateTime(timezone=True), nullable=True),
    )


def downgrade() -> None:
    op.drop_table("farm_controls")
    op.drop_column("chunks", "preview")
    with op.batch_alter_table("job_events") as batch:
        batch.alter_column("status", type_=sa.String(16), existing_type=sa.String(32))
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("approval_due_at")
        batch.alter_column("status", type_=sa.String(16), existing_type=sa.String(32))
