"""workers kept out (failures per worker, quarantine), worker tags and jobs' required tags, job groups

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("workers", sa.Column("tags", sa.Text(), nullable=False, server_default=""))
    op.add_column("workers", sa.Column("quarantined_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("workers", sa.Column("quarantine_reason", sa.Text(), nullable=True))
    op.add_column("workers", sa.Column("released_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("jobs", sa.Column("required_tags", sa.Text(), nullable=False, server_default=""))
    op.add_column("jobs", sa.Column("wait_reason", sa.String(64), nullable=True))
    op.add_column("jobs", sa.Column("group_id", sa.String(32), nullable=True))
    op.create_index("ix_jobs_group_id", "jobs", ["group_id"])
    op.create_table(
        "worker_failures",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True),
        sa.Column("worker", sa.String(255), nullable=False),
        sa.Column("job_id", sa.String(32), nullable=False),
        sa.Column("chunk_index", sa.Integer(), nullable=False),
        sa.Column("error_code", sa.String(64), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_worker_failures_worker_at", "worker_failures", ["worker", "at"])
    op.create_index("ix_worker_failures_job_id", "worker_failures", ["job_id"])
    op.create_table(
        "job_groups",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("tenant_id", sa.String(32), sa.ForeignKey("tenants.id", name="fk_job_groups_tenant_id")),
        sa.Column("name", sa.String(255), nullable=False, server_default=""),
        sa.Column("callback_url", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_job_groups_tenant_created", "job_groups", ["tenant_id", "created_at", "id"])


def downgrade() -> None:
    op.drop_table("job_groups")
    op.drop_table("worker_failures")
    op.drop_index("ix_jobs_group_id", table_name="jobs")
    op.drop_column("jobs", "group_id")
    op.drop_column("jobs", "wait_reason")
    op.drop_column("jobs", "required_tags")
    op.drop_column("workers", "released_at")
    op.drop_column("workers", "quarantine_reason")
    op.drop_column("workers", "quarantined_at")
    op.drop_column("workers", "tags")
