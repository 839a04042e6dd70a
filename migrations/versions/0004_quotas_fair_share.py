"""job stored bytes (the tenant's storage quota); jobs by tenant and state; when a tenant was last served (fair share)

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("stored_bytes", sa.BigInteger(), nullable=False, server_default="0"))
    op.create_index("ix_jobs_tenant_status", "jobs", ["tenant_id", "status"])
    op.add_column("tenants", sa.Column("last_served_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    op.drop_column("tenants", "last_served_at")
    op.drop_index("ix_jobs_tenant_status", table_name="jobs")
    op.drop_column("jobs", "stored_bytes")
