"""SQLAlchemy models: tenants and their API keys, jobs, their chunks and events.

Postgres is the source of truth; SQLite serves ``swapfarm run``.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    select,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship
from sqlalchemy.sql.expression import Exists
from sqlalchemy.types import TypeDecorator

from shared.states import ChunkStatus, JobStatus

# The largest value an ``Integer`` (Postgres int4) and a ``BigInteger`` (int8) column hold: a number a request
# compares with a column is bounded by these (a larger one would fail in the database, not in validation).
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1


def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on every backend (SQLite drops the zone; this puts it back)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("naive datetime")
        return value

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is not None and value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value


def new_id() -> str:
    return uuid.uuid4().hex


class Base(DeclarativeBase):
    pass


class Tenant(Base):
    """A team using the farm: it owns jobs and API keys, and has a limit of jobs running at once."""

    __tablename__ = "tenants"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    # None: the farm's default (``max_running_jobs_per_tenant``)
    max_running_jobs: Mapped[int | None] = mapped_column(Integer, default=None)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    # When a worker last took a chunk of this tenant's: fair share serves the tenant waiting longest first
    last_served_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)


class ApiKey(Base):
    """An API key of a tenant. Only the sha256 of the key is stored; the key itself is shown once."""

    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(100), default="")
    prefix: Mapped[str] = mapped_column(String(16))  # the key's first characters, to recognise it in lists
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    admin: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)


class Job(Base):
    __tablename__ = "jobs"
    __table_args__ = (
        # Two requests with one Idempotency-Key make one job, however they interleave.
        UniqueConstraint("tenant_id", "idempotency_key", name="uq_jobs_tenant_idempotency_key"),
        Index("ix_jobs_tenant_created", "tenant_id", "created_at", "id"),
        Index("ix_jobs_tenant_status", "tenant_id", "status"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    # None for jobs of ``swapfarm run``, which has no tenants
    tenant_id: Mapped[str | None] = mapped_column(ForeignKey("tenants.id", name="fk_jobs_tenant_id"), default=None)
    priority: Mapped[int] = mapped_column(Integer, default=5)  # 0 (lowest) … 9 (most urgent)
    idempotency_key: Mapped[str | None] = mapped_column(String(255), default=None)
    request_hash: Mapped[str | None] = mapped_column(String(64), default=None)
    retries: Mapped[int] = mapped_column(Integer, default=0)  # explicit retries asked for by the user
    expired_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)  # files deleted by the reaper
    # Bytes of the job's inputs and output in storage, counted against the tenant's quota until they expire
    stored_bytes: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    status: Mapped[str] = mapped_column(String(32), default=JobStatus.QUEUED, index=True)
    options: Mapped[dict[str, Any]] = mapped_column(JSON)
    target_url: Mapped[str] = mapped_column(Text)
    source_urls: Mapped[list[str]] = mapped_column(JSON, default=list)
    # lip_syncer: the source audio, what its probe found, and the SHA-256 of the mel spectrogram planned from it
    audio_url: Mapped[str | None] = mapped_column(Text, default=None)
    audio_media: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    mel_sha256: Mapped[str | None] = mapped_column(String(64), default=None)
    target_name: Mapped[str] = mapped_column(Text, default="")
    output_url: Mapped[str | None] = mapped_column(Text, default=None)
    family: Mapped[str] = mapped_column(String(16), default="any")

    frames_total: Mapped[int | None] = mapped_column(Integer, default=None)
    frames_done: Mapped[int] = mapped_column(Integer, default=0)
    chunks_total: Mapped[int | None] = mapped_column(Integer, default=None)
    chunks_done: Mapped[int] = mapped_column(Integer, default=0)
    media: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)

    attempts: Mapped[int] = mapped_column(Integer, default=0)
    error_code: Mapped[str | None] = mapped_column(String(64), default=None)
    error_message: Mapped[str | None] = mapped_column(Text, default=None)
    # A lease on the job row covers the steps that act on the whole job (plan, stitch).
    lease_token: Mapped[str | None] = mapped_column(String(32), default=None)
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    enqueued_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    # Where the job's end is announced (``shared.webhooks``); checked against SSRF when the job is submitted
    callback_url: Mapped[str | None] = mapped_column(Text, default=None)
    # The tags a worker must have to render it (``options.required_tags``, sorted, comma-joined; "" for none)
    required_tags: Mapped[str] = mapped_column(Text, default="", server_default="")
    # Why a job that could run waits (``no_worker_with_tags``), shown with its status; cleared when it runs
    wait_reason: Mapped[str | None] = mapped_column(String(64), default=None)
    # The group a batch submission made it in (``shared.groups``)
    group_id: Mapped[str | None] = mapped_column(String(32), default=None, index=True)
    # A preview awaiting approval is cancelled, its files deleted, past this time (``shared.control``)
    approval_due_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)

    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, index=True)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)

    chunks: Mapped[list[Chunk]] = relationship(
        back_populates="job", order_by="Chunk.index", cascade="all, delete-orphan"
    )


class Chunk(Base):
    __tablename__ = "chunks"
    __table_args__ = (UniqueConstraint("job_id", "index", name="uq_chunks_job_index"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    index: Mapped[int] = mapped_column(Integer)
    frame_start: Mapped[int] = mapped_column(Integer)
    frame_end: Mapped[int] = mapped_column(Integer)  # exclusive
    seek_seconds: Mapped[float] = mapped_column(Float)
    # A tracked job's chunk decodes ``lead_frames`` frames before its first one (its tracks' look-behind), in the
    # same decoder, from ``lead_seek_seconds``: seek positions from the planner's frame index, exact on any video
    lead_frames: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    lead_seek_seconds: Mapped[float | None] = mapped_column(Float, default=None)
    # One of a previewed job's preview frames (a chunk of its own, rendered first; never rendered again)
    preview: Mapped[bool] = mapped_column(Boolean, default=False, server_default="false")

    status: Mapped[str] = mapped_column(String(16), default=ChunkStatus.QUEUED, index=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    # ``attempts`` when the job was last retried: the attempt limit counts from here, the total stays visible
    attempts_at_retry: Mapped[int] = mapped_column(Integer, default=0)
    frames_done: Mapped[int] = mapped_column(Integer, default=0)
    error_code: Mapped[str | None] = mapped_column(String(64), default=None)
    error_message: Mapped[str | None] = mapped_column(Text, default=None)
    worker: Mapped[str | None] = mapped_column(String(255), default=None)
    family: Mapped[str | None] = mapped_column(String(16), default=None)
    output_url: Mapped[str | None] = mapped_column(Text, default=None)

    lease_token: Mapped[str | None] = mapped_column(String(32), default=None)
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    enqueued_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    render_seconds: Mapped[float | None] = mapped_column(Float, default=None)

    job: Mapped[Job] = relationship(back_populates="chunks")

    @property
    def frame_count(self) -> int:
        return self.frame_end - self.frame_start


class JobEvent(Base):
    """One line of a job's history: a state change, a chunk attempt and its worker, an error, a retry.

    Written in the transaction of the change it records. No foreign key: the log is append-only and an insert
    must not lock the job row that workers lock.
    """

    __tablename__ = "job_events"

    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer(), "sqlite"), primary_key=True, autoincrement=True
    )
    job_id: Mapped[str] = mapped_column(String(32), index=True)
    at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    kind: Mapped[str] = mapped_column(String(32))
    status: Mapped[str | None] = mapped_column(String(32), default=None)  # the job's state after the event
    chunk_index: Mapped[int | None] = mapped_column(Integer, default=None)
    attempt: Mapped[int | None] = mapped_column(Integer, default=None)
    worker: Mapped[str | None] = mapped_column(String(255), default=None)
    error_code: Mapped[str | None] = mapped_column(String(64), default=None)
    message: Mapped[str] = mapped_column(Text, default="")


# -- webhooks, browser sessions, worker presence -----------------------------------------------------------


class WebhookDelivery(Base):
    """The outbox of webhooks: one row per event to announce, written in the transaction that ended the job.

    A delivery is claimed with a lease like a chunk (so a worker killed mid-request leaves it to be claimed again),
    and every attempt is recorded as a job event. ``id`` is the event's ``webhook-id``: the same on every attempt,
    so receivers can drop duplicates.
    """

    __tablename__ = "webhook_deliveries"
    __table_args__ = (Index("ix_webhook_deliveries_due", "status", "next_attempt_at"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    job_id: Mapped[str] = mapped_column(String(32), index=True)
    tenant_id: Mapped[str | None] = mapped_column(String(32), default=None)
    event_type: Mapped[str] = mapped_column(String(32))
    url: Mapped[str] = mapped_column(Text)
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(16), default="pending")  # pending, delivered, abandoned
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    lease_token: Mapped[str | None] = mapped_column(String(32), default=None)
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    last_error: Mapped[str | None] = mapped_column(Text, default=None)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    delivered_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)


class UiSession(Base):
    """A browser's signed-in session of the jobs console: the cookie holds a random token, the row its hash.

    The session acts as the API key it was opened with: revoking the key ends it at the next request.
    """

    __tablename__ = "ui_sessions"

    token_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    key_id: Mapped[str] = mapped_column(ForeignKey("api_keys.id", ondelete="CASCADE"), index=True)
    csrf_token: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime)


class FarmControl(Base):
    """The farm's own switches, one row (``id`` 1): while ``paused_at`` is set no worker starts a new chunk."""

    __tablename__ = "farm_controls"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    paused_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)


def farm_paused_clause() -> Exists:
    """True while the farm is paused: a condition for the queries that start chunks or send them again."""
    return select(FarmControl.id).where(FarmControl.id == 1, FarmControl.paused_at.is_not(None)).exists()


class WorkerPresence(Base):
    """A worker process as it last announced itself (every heartbeat while it runs, idle or not)."""

    __tablename__ = "workers"

    name: Mapped[str] = mapped_column(String(255), primary_key=True)  # Celery's node name, as chunk rows name it
    hostname: Mapped[str] = mapped_column(String(255))
    family: Mapped[str] = mapped_column(String(16))
    device: Mapped[str] = mapped_column(String(255), default="")
    queues: Mapped[str] = mapped_column(Text, default="")
    started_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    last_seen_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, index=True)
    stopped_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    tags: Mapped[str] = mapped_column(Text, default="", server_default="")  # sorted, comma-joined
    # Quarantined: it takes no work until an admin releases it or it restarts with a healthy self-test
    quarantined_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    quarantine_reason: Mapped[str | None] = mapped_column(Text, default=None)
    # Failures before this (its last release) no longer count towards a quarantine
    released_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)


class WorkerFailure(Base):
    """A chunk attempt that failed on a worker for a reason that is not the input's (``shared.worker_health``)."""

    __tablename__ = "worker_failures"
    __table_args__ = (Index("ix_worker_failures_worker_at", "worker", "at"),)

    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer(), "sqlite"), primary_key=True, autoincrement=True
    )
    worker: Mapped[str] = mapped_column(String(255))
    job_id: Mapped[str] = mapped_column(String(32), index=True)
    chunk_index: Mapped[int] = mapped_column(Integer)
    error_code: Mapped[str] = mapped_column(String(64))
    at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class JobGroup(Base):
    """Jobs made by one batch submission: many targets, one option set (``shared.groups``)."""

    __tablename__ = "job_groups"
    __table_args__ = (Index("ix_job_groups_tenant_created", "tenant_id", "created_at", "id"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    tenant_id: Mapped[str | None] = mapped_column(
        ForeignKey("tenants.id", name="fk_job_groups_tenant_id"), default=None
    )
    name: Mapped[str] = mapped_column(String(255), default="")
    callback_url: Mapped[str | None] = mapped_column(Text, default=None)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    # When the last member ended (its webhook queued once)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
