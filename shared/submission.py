"""Accepting a job: validate, store the inputs, insert the row, commit, then enqueue the plan.

The API and ``swapfarm run`` both submit through :func:`submit`, so a job is accepted by the same rules either
way. Nothing is stored for a refused job: inputs are validated from local files before the first upload, and a
failure after that removes what was written.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from shared import jobs
from shared.db import session_scope
from shared.dispatch import Dispatcher
from shared.errors import InvalidOptionsError
from shared.media import probe, probe_image
from shared.models import new_id
from shared.options import JobOptions
from shared.storage import Storage
from shared.tasks import CONTROL_QUEUE, PLAN, JobPayload

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Upload:
    """A submitted file, already on local disk; ``name`` is the client's file name (never used as a path)."""

    path: Path
    name: str


def safe_suffix(name: str) -> str:
    """A file extension safe to use in a storage key: lower-case letters and digits only, or none.

    >>> safe_suffix("../../etc/pass wd.MP4"), safe_suffix("clip.m p4"), safe_suffix("noext")
    ('.mp4', '', '')
    """
    suffix = Path(name.replace("\\", "/")).suffix.lower()
    return suffix if re.fullmatch(r"\.[a-z0-9]{1,8}", suffix) else ""


def submit(
    *,
    database_url: str,
    storage: Storage,
    dispatcher: Dispatcher,
    target: Upload,
    sources: Sequence[Upload],
    options: JobOptions,
) -> str:
    """Accept a job and return its id.

    Raises:
        NotAVideoError, UnreadableMediaError: the target is not a readable video.
        SourceImageError: a source is not an image.
        InvalidOptionsError: the options need a source image and none was given.
    """
    media = probe(target.path)
    if options.needs_source and not sources:
        raise InvalidOptionsError(f"processors {options.processors} need at least one source image")
    for i, source in enumerate(sources):
        probe_image(source.path, f"source {i + 1} ({source.name!r})")

    job_id = new_id()
    target_url = storage.job_url(job_id, "input", "target" + safe_suffix(target.name))
    source_urls = [storage.job_url(job_id, "input", f"source-{i}{safe_suffix(s.name)}") for i, s in enumerate(sources)]
    try:
        storage.upload(target.path, target_url)
        for source, url in zip(sources, source_urls, strict=True):
            storage.upload(source.path, url)
        with session_scope(database_url) as session:
            jobs.create_job(
                session,
                job_id=job_id,
                options=options,
                target_url=target_url,
                source_urls=source_urls,
                target_name=target.name[:255],
                media=media.to_json(),
            )
    except BaseException:
        storage.delete(storage.job_url(job_id), recursive=True)
        raise
    # Postgres first, Redis second: if this send is lost, the reaper sends the plan again.
    try:
        dispatcher.send(PLAN, JobPayload(job_id=job_id), queue=CONTROL_QUEUE)
    except Exception:
        logger.warning("job %s: stored, but the plan message was not sent; the reaper will send it", job_id)
    return job_id
