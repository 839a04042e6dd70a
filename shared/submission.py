"""Accepting a job: every decision about a submission, then store the inputs, insert the row, commit, enqueue.

:func:`submit` is the one way a job is made: ``POST /v1/jobs`` (a multipart upload or a JSON body naming URLs),
the console's submit form and ``swapfarm run`` all call it, so a job is accepted by the same rules whichever way it
came (``tests/api/test_one_submit_path.py`` walks the API's source for any other). It decides, in this order: the
caller's rights (the admin band, priority 10, needs an admin key; :func:`screen`), the number of sources, the
callback URL (``shared.webhooks.check_callback_url``), the idempotency key, the tenant's quotas, the options beyond
their schema, the target's limits and what the job will write (``shared.limits``), and the sources. Entry points
only read their wire format into a :class:`Submission`.

Nothing is stored for a refused job: inputs are validated from local files before the first upload, and a failure
after that removes what was written.

Stored files get names the server chooses: ``target`` with the extension of the container ffprobe found (only
whitelisted ones, see ``shared.media``), ``source-<i>`` with the extension of the image format its header shows.
The client's file name is a label only.

A tenant's job is refused with a 429 when the tenant is at a quota (``shared.quotas``); else it enters ``waiting``
and is admitted in the same transaction when the tenant is under its limit (``shared.admission``). With an
idempotency key, the tenant's unique ``(tenant, key)`` constraint decides which of two racing requests creates the
job; the other answers with that job, or with a conflict when its request differs.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from shared import jobs, quotas, worker_health
from shared.admission import lock_tenant
from shared.audio import AudioInfo, probe_audio
from shared.background_options import check_background_remover
from shared.containers import check_alpha
from shared.db import session_scope
from shared.dispatch import send_all
from shared.errors import (
    ForbiddenError,
    IdempotencyConflictError,
    InvalidOptionsError,
    RequestInvalidError,
    TooManySourcesError,
)
from shared.events import EventKind, record
from shared.farm import Farm
from shared.images import ImageHeader
from shared.job_models import job_models
from shared.licences import check_job
from shared.lifecycle import admit
from shared.limits import MediaLimits
from shared.lip_sync import check_lip_sync
from shared.media import MediaInfo, probe, probe_image
from shared.models import Job, new_id
from shared.options import JobOptions
from shared.output_frames import check_chain, check_trim
from shared.processor_order import check_order
from shared.settings import Settings
from shared.tasks import ADMIN_PRIORITY, DEFAULT_PRIORITY, MAX_PRIORITY, MIN_PRIORITY, PLAN, message
from shared.tenants import Principal
from shared.webhooks import check_callback_url

__all__ = ["Submission", "Upload", "check", "screen", "submit"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Upload:
    """A submitted file, already on local disk; ``name`` is the client's file name (never used as a path);
    ``sha256`` its digest where the reader took it as the bytes came (else it is read when needed)."""

    path: Path
    name: str
    sha256: str | None = None

    def digest(self) -> str:
        if self.sha256 is not None:
            return self.sha256
        digest = hashlib.sha256()
        with self.path.open("rb") as handle:
            while block := handle.read(1 << 20):
                digest.update(block)
        return digest.hexdigest()


@dataclass(frozen=True)
class Submission:
    """What a caller asks for, whichever entry point carried it."""

    target: Upload
    sources: Sequence[Upload] = ()
    options: JobOptions = field(default_factory=JobOptions)
    priority: int = DEFAULT_PRIORITY
    callback_url: str | None = None
    idempotency_key: str | None = None
    group_id: str | None = None  # the group a batch submission makes it in (``shared.groups``), never a client's
    audio: Upload | None = None  # the source audio of a lip_syncer job

    def request_hash(self) -> str:
        """What makes two submissions the same request: the files' contents, the target's name, the options,
        the priority and the callback."""
        digest: dict[str, object] = {
            "target": [self.target.digest(), self.target.name],
            "sources": [s.digest() for s in self.sources],
            "options": self.options.model_dump(mode="json"),
            "priority": self.priority,
        }
        if self.callback_url is not None:
            digest["callback_url"] = self.callback_url
        if self.audio is not None:
            digest["audio"] = self.audio.digest()
        return hashlib.sha256(json.dumps(digest, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class _Owner:
    """The tenant a job belongs to, its limit of jobs running at once when the tenant row sets none, and its
    quotas."""

    tenant_id: str
    default_limit: int
    quotas: quotas.Quotas

    @classmethod
    def of(cls, settings: Settings, tenant_id: str) -> _Owner:
        return cls(
            tenant_id=tenant_id,
            default_limit=settings.max_running_jobs_per_tenant,
            quotas=quotas.Quotas(settings.max_waiting_jobs_per_tenant, settings.max_stored_bytes_per_tenant),
        )


def screen(
    settings: Settings, caller: Principal | None, *, priority: int, sources: int, callback_url: str | None
) -> None:
    """The decisions that need no file: the caller's right to the priority, the number of sources, the callback
    URL. :func:`submit` makes them first; an entry point that must fetch its inputs (a JSON body's references)
    asks before it reads any, so that a refused request reads nothing.

    ``caller`` ``None`` is the machine's own user (``swapfarm run``): any priority, no tenant.

    Raises:
        ForbiddenError: the admin band's priority without an admin key.
        RequestInvalidError: a priority outside 0 … 10; ``too_many_sources``.
        CallbackUrlError: the callback URL is refused (``callback_url_invalid``, ``callback_url_forbidden``).
    """
    if not MIN_PRIORITY <= priority <= ADMIN_PRIORITY:
        raise RequestInvalidError(
            f"priority: an integer from {MIN_PRIORITY} to {MAX_PRIORITY} ({ADMIN_PRIORITY} with an admin key)"
        )
    if priority > MAX_PRIORITY and caller is not None and not caller.admin:
        raise ForbiddenError(f"priority {priority}, the farm-wide urgent band, needs an admin key")
    if sources > settings.max_sources:
        raise TooManySourcesError(f"source: at most {settings.max_sources} source images per job")
    if callback_url is not None:
        check_callback_url(
            callback_url,
            production=settings.environment == "production",
            allowed=settings.webhook_allowed_networks,
            resolve_timeout=settings.webhook_resolve_timeout_seconds,
        )


def submit(farm: Farm, caller: Principal | None, job: Submission) -> str:
    """Accept a job for ``caller`` (``None``: ``swapfarm run``'s own user, no tenant, no quota) and return its id
    (an earlier job's id when the tenant's ``idempotency_key`` matches one made by the same request).

    Raises:
        ForbiddenError, RequestInvalidError, CallbackUrlError: see :func:`screen`.
        IdempotencyConflictError: the tenant used the idempotency key for a different request.
        TooManyRequestsError: the tenant is at a quota.
        MediaFormatError: the target is not in a container the farm reads (a playlist, a manifest, a script).
        NotAVideoError, UnreadableMediaError: the target is not a readable video.
        MediaLimitError: the target, or what the job would write, is over a limit (``shared.limits``).
        SourceImageError: a source is not an image, or is over the pixel limit.
        UnreadableAudioError, AudioTooLongError: the source audio is not a readable audio file
            (``audio_unreadable``; one outside the audio whitelist is ``media_format_refused``) or lasts longer than
            ``max_audio_seconds`` (``audio_too_long``); see ``shared.audio``.
        InvalidOptionsError: the options need a source image and none was given, lip_syncer has no source audio
            or a source audio has no lip_syncer (``shared.lip_sync``), the encoder cannot carry the alpha they
            ask for (``shared.containers``), or the trim range ends where it starts or before;
            ``trim_out_of_range``: it lies outside the frames the header declares; ``model_licence_disabled``: a
            model they need is under a licence the operator disabled (``shared.licences``).
    """
    settings, storage = farm.settings, farm.storage
    database_url = settings.database_url
    target, sources, options, priority = job.target, job.sources, job.options, job.priority
    screen(settings, caller, priority=priority, sources=len(sources), callback_url=job.callback_url)
    owner = _Owner.of(settings, caller.tenant_id) if caller is not None else None
    key = job.idempotency_key if owner is not None else None
    request_hash = job.request_hash() if key is not None else None
    if owner is not None and key is not None and request_hash is not None:
        with session_scope(database_url) as session:
            earlier = _earlier(session, owner, key, request_hash)
        if earlier is not None:
            return earlier
    audio = job.audio
    size = target.path.stat().st_size + sum(s.path.stat().st_size for s in sources)
    size += audio.path.stat().st_size if audio is not None else 0
    if owner is not None:  # early, before the work of probing; decided again below
        with session_scope(database_url) as session:
            quotas.check(session, owner.tenant_id, owner.quotas, new_bytes=size)
    media, images, sound = _examine(settings, job)

    job_id = new_id()
    target_url = storage.job_url(job_id, "input", "target" + media.extension)
    source_urls = [storage.job_url(job_id, "input", f"source-{i}{image.extension}") for i, image in enumerate(images)]
    audio_url = storage.job_url(job_id, "input", "audio" + sound.extension) if sound is not None else None
    try:
        storage.upload(target.path, target_url)
        for source, url in zip(sources, source_urls, strict=True):
            storage.upload(source.path, url)
        if audio is not None and audio_url is not None:
            storage.upload(audio.path, audio_url)
        with session_scope(database_url) as session:
            if owner is not None:
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
                idempotency_key=key,
                request_hash=request_hash,
                callback_url=job.callback_url,
                stored_bytes=size,
                group_id=job.group_id,
                audio_url=audio_url,
                audio_media=sound.to_json() if sound is not None else None,
            )
            if owner is None:
                messages = [message(PLAN, job_id, family=options.family, priority=priority)]
            else:
                messages = admit(session, owner.tenant_id, owner.default_limit)
            worker_health.note_no_worker(session, settings, job_id)  # a job no live worker can take says why
    except IntegrityError:
        storage.delete(storage.job_url(job_id), recursive=True)
        if owner is None or key is None or request_hash is None:
            raise
        # A request with the same key committed first: answer as it would be answered now.
        with session_scope(database_url) as session:
            earlier = _earlier(session, owner, key, request_hash)
        if earlier is None:
            raise
        return earlier
    except BaseException:
        storage.delete(storage.job_url(job_id), recursive=True)
        raise
    # Postgres first, Redis second: if this send is lost, the reaper sends the plan again.
    try:
        send_all(farm.dispatcher, messages)
    except Exception as exc:
        logger.warning("job %s: stored, but its messages were not sent; the reaper will send them", job_id)
        _note_unsent(database_url, [m.payload.job_id for m in messages], exc)
    return job_id


def check(farm: Farm, caller: Principal | None, job: Submission) -> None:
    """Every decision :func:`submit` makes about ``job`` that needs no stored file (its rights, quotas at this
    moment, options, target and sources), storing nothing: a group submission (``shared.groups``) checks each
    member before it submits the first. ``submit`` decides them all again.

    Raises:
        What :func:`submit` raises for a refused job.
    """
    settings = farm.settings
    screen(settings, caller, priority=job.priority, sources=len(job.sources), callback_url=job.callback_url)
    if caller is not None:
        owner = _Owner.of(settings, caller.tenant_id)
        size = job.target.path.stat().st_size + sum(s.path.stat().st_size for s in job.sources)
        with session_scope(settings.database_url) as session:
            quotas.check(session, owner.tenant_id, owner.quotas, new_bytes=size)
    _examine(settings, job)


def _examine(settings: Settings, job: Submission) -> tuple[MediaInfo, list[ImageHeader], AudioInfo | None]:
    """The decisions on the job's options and files: the chain, the target's limits and what the job will write,
    the trim range, the sources. Returns what the probes found."""
    target, sources, options, audio = job.target, job.sources, job.options, job.audio
    check_job(job_models(options, content_policy=settings.content_policy), settings.disabled_licences)
    check_background_remover(options)
    check_chain(options)
    check_alpha(options)
    check_order(options)
    check_lip_sync(options, has_audio=audio is not None)
    limits = MediaLimits.of(settings)
    media = probe(target.path)
    limits.check(media)
    check_trim(options, media.frame_count or None)  # no count in the header: the planner checks the range
    limits.check_submitted(media, options)
    face = options.face
    if face.selector_age_start > face.selector_age_end:  # between two fields: beyond what the schema can state
        raise InvalidOptionsError(
            f"face.selector_age_start ({face.selector_age_start}) is above "
            f"face.selector_age_end ({face.selector_age_end})"
        )
    if options.needs_source and not sources:
        raise InvalidOptionsError(f"processors {options.processors} need at least one source image")
    images = [
        probe_image(s.path, f"source {i + 1} ({s.name!r})", max_pixels=limits.max_source_pixels)
        for i, s in enumerate(sources)
    ]
    sound = probe_audio(audio.path) if audio is not None else None
    if sound is not None:
        sound.check(settings.max_audio_seconds)
    return media, images, sound


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


def _earlier(session: Session, owner: _Owner, key: str, request_hash: str) -> str | None:
    """The id of the tenant's job made with this idempotency key, if any.

    Raises:
        IdempotencyConflictError: that job was made by a different request.
    """
    row = session.execute(
        select(Job.id, Job.request_hash).where(Job.tenant_id == owner.tenant_id, Job.idempotency_key == key)
    ).first()
    if row is None:
        return None
    if row[1] != request_hash:
        raise IdempotencyConflictError(f"Idempotency-Key {key!r} was used for a different request (job {row[0]})")
    return str(row[0])
