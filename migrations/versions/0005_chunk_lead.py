"""where a chunk's decoding starts when it reads frames before its own (a tracked job's look-behind)

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("chunks", sa.Column("lead_frames", sa.Integer(), nullable=False, server_default="0"))
    op.add_column("chunks", sa.Column("lead_seek_seconds", sa.Float(), nullable=True))


def downgrade() -> None:
    op.drop_column("chunks", "lead_seek_seconds")
    op.drop_column("chunks", "lead_frames")
