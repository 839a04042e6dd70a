"""Accepting a job: validate, store the inputs, insert the row, commit, then enqueue the plan.

The API and ``swapfarm run`` both submit through :func:`submit`, so a job is accepted by the same rules either
way. Nothing is stored for a refused job: inputs are validated from local files before the first upload, and a
failure after that removes what was written.

Stored files get names the server chooses: ``target`` with the extension of the container ffprobe found (only
whitelisted ones, see ``shared.media``), ``source-<i>`` with the extension of the image format its header shows.
The client's file name is a label only.

A tenant's job is refused with a 429 when the tenant is at a quota (``shared.quotas``); else it enters ``waiting``
and is admitted in the same transaction when the tenant is under its limit (``shared.admission``). With an
idempotency key, the tenant's unique ``(tenant, key)`` constraint decides which of two racing requests creates the
job; the other answers with that job, or with a conflict when its request differs.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from shared import jobs, quotas
from shared.admission import lock_tenant
from shared.db import session_scope
from shared.dispatch import Dispatcher, send_all
from shared.errors import IdempotencyConflictError, InvalidOptionsError, MediaLimitError
from shared.events import EventKind, record
from shared.framing import check_chain, check_output_size, check_trim
from shared.lifecycle import admit
from shared.media import MediaInfo, probe, probe_image
from shared.models import Job, new_id
from shared.options import JobOptions
from shared.settings import Settings
from shared.storage import Storage
from shared.tasks import DEFAULT_PRIORITY, PLAN, message

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Upload:
    """A submitted file, already on local disk; ``name`` is the client's file name (never used as a path)."""

    path: Path
    name: str


@dataclass(frozen=True)
class Owner:
    """The tenant a job belongs to, its limit of jobs running at once when the tenant row sets none, and its
    quotas (none: no quota)."""

    tenant_id: str
    default_limit: int
    quotas: quotas.Quotas | None = None

    @classmethod
    def of(cls, settings: Settings, tenant_id: str) -> Owner:
        """The tenant's owner record with the farm's default limit and quotas."""
        return cls(
            tenant_id=tenant_id,
            default_limit=settings.max_running_jobs_per_tenant,
            quotas=quotas.Quotas(settings.max_waiting_jobs_per_tenant, settings.max_stored_bytes_per_tenant),
        )


@dataclass(frozen=True)
class Idempotency:
    """An Idempotency-Key and the digest of the request that carried it."""

    key: str
    request_hash: str


@dataclass(frozen=True)
class MediaLimits:
    max_duration_seconds: float
    max_frame_pixels: int
    max_frames: int
    max_source_pixels: int | None = None

    @classmethod
    def of(cls, settings: Settings) -> MediaLimits:
        """The limits every submission is checked against (duration, frame size, frames, source pixels)."""
        return cls(
            max_duration_seconds=settings.max_duration_seconds,
            max_frame_pixels=settings.max_frame_pixels,
            max_frames=settings.max_frames,
            max_source_pixels=settings.max_source_pixels,
        )

    def check(self, media: MediaInfo) -> None:
        """Raises:
        MediaLimitError: ``media_too_long``, ``resolution_too_large`` or ``too_many_frames``.
        """
        if media.duration > self.max_duration_seconds:
            raise MediaLimitError(
                f"the video lasts {media.duration:.1f}s; the limit is {self.max_duration_seconds:.0f}s",
                code="media_too_long",
            )
        if media.width * media.height > self.max_frame_pixels:
            raise MediaLimitError(
                f"frames of {media.width}x{media.height} are over the limit of {self.max_frame_pixels} pixels",
                code="resolution_too_large",
            )
        frames = media.frame_count or round(media.duration * media.fps_value)
        if frames > self.max_frames:
            raise MediaLimitError(
                f"the video has about {frames} frames; the limit is {self.max_frames}", code="too_many_frames"
            )


def submit(
    *,
    database_url: str,
    storage: Storage,
    dispatcher: Dispatcher,
    target: Upload,
    sources: Sequence[Upload],
    options: JobOptions,
    owner: Owner | None = None,
    priority: int = DEFAULT_PRIORITY,
    idempotency: Idempotency | None = None,
    limits: MediaLimits | None = None,
    callback_url: str | None = None,
) -> str:
    """Accept a job and return its id (an earlier job's id when ``idempotency`` matches one).

    ``callback_url`` must have been checked by the caller (``shared.webhooks.check_callback_url``).

    Raises:
        MediaFormatError: the target is not in a container the farm reads (a playlist, a manifest, a script).
        NotAVideoError, UnreadableMediaError: the target is not a readable video.
        MediaLimitError: the target, or the output size the options ask for, is over one of ``limits``.
        SourceImageError: a source is not an image, or is over the pixel limit.
        InvalidOptionsError: the options need a source image and none was given, or the trim range ends
            where it starts or before; ``trim_out_of_range``: it lies outside the frames the header declares.
        IdempotencyConflictError: the tenant used the idempotency key for a different request.
        TooManyRequestsError: the tenant is at a quota (``owner.quotas``).
    """
    if owner is not None and idempotency is not None:
        with session_scope(database_url) as session:
            earlier = _earlier(session, owner, idempotency)
        if earlier is not None:
            return earlier
    size = target.path.stat().st_size + sum(s.path.stat().st_size for s in sources)
    if owner is not None and owner.quotas is not None:  # early, before the work of probing; decided again below
        with session_scope(database_url) as session:
            quotas.check(session, owner.tenant_id, owner.quotas, new_bytes=size)
    check_chain(options)
    media = probe(target.path)
    if limits is not None:
        limits.check(media)
        check_output_size(media.width, media.height, options, limits.max_frame_pixels)
    check_trim(options, media.frame_count or None)  # no count in the header: the planner checks the range
    face = options.face
    if face.selector_age_start > face.selector_age_end:  # between two fields: beyond what the schema can state
        raise InvalidOptionsError(
            f"face.selector_age_start ({face.selector_age_start}) is above "
            f"face.selector_age_end ({face.selector_age_end})"
        )
    if options.needs_source and not sources:
        raise InvalidOptionsError(f"processors {options.processors} need at least one source image")
    max_pixels = limits.max_source_pixels if limits is not None else None
    images = [probe_image(s.path, f"source {i + 1} ({s.name!r})", max_pixels=max_pixels) for i, s in enumerate(sources)]

    job_id = new_id()
    target_url = storage.job_url(job_id, "input", "target" + media.extension)
    source_urls = [storage.job_url(job_id, "input", f"source-{i}{image.extension}") for i, image in enumerate(images)]
    try:
        storage.upload(target.path, target_url)
        for source, url in zip(sources, source_urls, strict=True):
            storage.upload(source.path, url)
        with session_scope(database_url) as session:
            if owner is not None and owner.quotas is not None:
                lock_tenant(session, owner.tenant_id)
                quotas.check(session, owner.tenant_id, owner.quotas, new_bytes=size)
            jobs.create_job(
                session,
                job_id=job_id,
                options=options,
                target_url=target_url,
                source_urls=source_urls,
                target_name=target.name[:255],
                media=media.to_json(),
                tenant_id=owner.tenant_id if owner else None,
                priority=priority,
                idempotency_key=idempotency.key if idempotency else None,
                request_hash=idempotency.request_hash if idempotency else None,
                callback_url=callback_url,
                stored_bytes=size,
            )
            if owner is None:
                messages = [message(PLAN, job_id, family=options.family, priority=priority)]
            else:
                messages = admit(session, owner.tenant_id, owner.default_limit)
    except IntegrityError:
        storage.delete(storage.job_url(job_id), recursive=True)
        if owner is None or idempotency is None:
            raise
        # A request with the same key committed first: answer as it would be answered now.
        with session_scope(database_url) as session:
            earlier = _earlier(session, owner, idempotency)
        if earlier is None:
            raise
        return earlier
    except BaseException:
        storage.delete(storage.job_url(job_id), recursive=True)
        raise
    # Postgres first, Redis second: if this send is lost, the reaper sends the plan again.
    try:
        send_all(dispatcher, messages)
    except Exception as exc:
        logger.warning("job %s: stored, but its messages were not sent; the reaper will send them", job_id)
        _note_unsent(database_url, [m.payload.job_id for m in messages], exc)
    return job_id


def _note_unsent(database_url: str, job_ids: Sequence[str], exc: Exception) -> None:
    """Tell the jobs whose messages could not be sent: their work waits for the broker (``broker_unreachable``)."""
    reason = f"{type(exc).__name__}: {exc}"[:200]
    try:
        with session_scope(database_url) as session:
            for unsent in dict.fromkeys(job_ids):
                record(
                    session, unsent, EventKind.BROKER_UNREACHABLE,
                    message=f"accepted, but the broker does not answer ({reason}); sent when it is back",
                )  # fmt: skip
    except Exception:  # the job is stored either way; this is only its log
        logger.warning("could not record that the broker did not answer", exc_info=True)


def _earlier(session: Session, owner: Owner, idempotency: Idempotency) -> str | None:
    """The id of the tenant's job made with this idempotency key, if any.

    Raises:
        IdempotencyConflictError: that job was made by a different request.
    """
    row = session.execute(
        select(Job.id, Job.request_hash).where(Job.tenant_id == owner.tenant_id, Job.idempotency_key == idempotency.key)
    ).first()
    if row is None:
        return None
    if row[1] != idempotency.request_hash:
        raise IdempotencyConflictError(
            f"Idempotency-Key {idempotency.key!r} was used for a different request (job {row[0]})"
        )
    return str(row[0])
