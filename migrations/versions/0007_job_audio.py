"""a lip_syncer job's source audio, its probe and the hash of the mel spectrogram planned from it

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("audio_url", sa.Text(), nullable=True))
    op.add_column("jobs", sa.Column("audio_media", sa.JSON(), nullable=True))
    op.add_column("jobs", sa.Column("mel_sha256", sa.String(64), nullable=True))


def downgrade() -> None:
    op.drop_column("jobs", "mel_sha256")
    op.drop_column("jobs", "audio_media")
    op.drop_column("jobs", "audio_url")
