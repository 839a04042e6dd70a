"""``POST /v1/groups`` with a JSON body (:class:`GroupRequest`): a batch whose targets are named by URL.

The job's JSON path (``api.references``) for many targets: the same prefixes (``SWAPFARM_INPUT_URL_PREFIXES``),
the same copy into storage under the same limits, the same decisions asked before anything is read
(``shared.submission.screen``). A refused source or audio reference refuses the whole request; a target that is
refused (outside the prefixes, not readable, too large) is that member's refusal, decided with the others by
``shared.groups.submit_group``: the whole submission refused naming it, or, with ``partial``, listed while the good
members go ahead. Nothing is stored for a refused request; the copies are deleted once the members are stored.
"""

from __future__ import annotations

import posixpath
import shutil
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

from fastapi import Request
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, ConfigDict, Field

from api.bodies import read_small
from api.references import JSON_LIMIT, Fetched, allowed_url, fetch, parse_as
from api.schemas import CALLBACK_DESCRIPTION, InputRef, JobRequest
from api.uploads import accept_group
from shared.errors import GroupTooLargeError, SwapfarmError
from shared.groups import GroupResult, GroupSubmission, Refused
from shared.options import JobOptions
from shared.settings import Settings
from shared.submission import Submission, screen
from shared.tasks import ADMIN_PRIORITY, DEFAULT_PRIORITY, MIN_PRIORITY
from shared.tenants import Principal
from shared.webhooks import MAX_URL_LENGTH

_JOB = JobRequest.model_fields
MAX_TARGETS = 100
# Every body the schema allows fits (each reference at most about 2.3 kB), so an oversized list is answered as one
# (422), not as an oversized body.
GROUP_JSON_LIMIT = 4 * JSON_LIMIT


class GroupRequest(BaseModel):
    """A batch whose inputs are already in storage the farm can read (``POST /v1/groups`` with a JSON body): one
    job per target, all with the same sources and options."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "targets": [{"url": "s3://media/clips/take-1.mp4"}, {"url": "s3://media/clips/take-2.mp4"}],
                    "sources": [{"url": "s3://media/faces/actor.jpg"}],
                    "options": {"processors": ["face_swapper"]},
                    "name": "takes",
                }
            ]
        },
    )

    targets: list[InputRef] = Field(
        min_length=1,
        max_length=MAX_TARGETS,
        description=f"The videos, one job each: max_group_members at most, and {MAX_TARGETS} in one JSON body",
    )
    sources: list[InputRef] = Field(default_factory=list, max_length=64, description=_JOB["sources"].description)
    source_audio: InputRef | None = Field(None, description=_JOB["source_audio"].description)
    options: JobOptions = Field(default_factory=JobOptions)
    priority: int = Field(
        DEFAULT_PRIORITY, ge=MIN_PRIORITY, le=ADMIN_PRIORITY, description=_JOB["priority"].description
    )
    callback_url: str | None = Field(
        None, max_length=MAX_URL_LENGTH, description=CALLBACK_DESCRIPTION + " (once, when the last job ends)"
    )
    name: str = Field("", max_length=255, description="A label for the group")
    partial: bool = Field(False, description="true: refused members are listed and the others go ahead")


def _name(ref: InputRef) -> str:
    """The name a refused target is listed under: its own, else its URL's last part (messages never carry URLs)."""
    return (ref.name or posixpath.basename(urlsplit(ref.url).path) or "target")[:255]


def _target(settings: Settings, ref: InputRef, local: Path) -> Fetched | SwapfarmError:
    try:
        allowed_url(ref.url, settings.input_url_prefixes)
        return fetch(settings, ref, local, settings.max_upload_bytes, "upload_too_large")
    except SwapfarmError as exc:
        return exc


async def create_group_from_json(request: Request, caller: Principal, settings: Settings) -> GroupResult:
    """Accept a JSON batch (see the module's docstring).

    Raises:
        GroupTooLargeError: more targets than ``max_group_members`` (before any is read).
        What ``shared.groups.submit_group`` raises; InputUrlError, TooLargeError: a source or audio reference is
            refused.
    """
    body = parse_as(await read_small(request, settings, limit=GROUP_JSON_LIMIT, what="a JSON submission"), GroupRequest)
    if len(body.targets) > settings.max_group_members:
        raise GroupTooLargeError(f"targets: from 1 to {settings.max_group_members} videos per group")
    await run_in_threadpool(
        lambda: screen(
            settings, caller, priority=body.priority, sources=len(body.sources), callback_url=body.callback_url
        )
    )
    shared_refs = (*body.sources, *([body.source_audio] if body.source_audio is not None else []))
    for ref in shared_refs:  # refuse a bad shared reference before reading any
        allowed_url(ref.url, settings.input_url_prefixes)
    folder = Path(tempfile.mkdtemp(prefix="swapfarm-group-fetch-"))
    try:
        sources = [
            await run_in_threadpool(
                fetch, settings, ref, folder / f"source-{i}", settings.max_source_bytes, "source_too_large"
            )
            for i, ref in enumerate(body.sources)
        ]
        audio = None
        if body.source_audio is not None:
            audio = await run_in_threadpool(
                fetch, settings, body.source_audio, folder / "source_audio", settings.max_audio_bytes, "audio_too_large"
            )
        members: list[Submission | Refused] = []
        for index, ref in enumerate(body.targets):
            got = await run_in_threadpool(_target, settings, ref, folder / f"target-{index}")
            if isinstance(got, SwapfarmError):
                members.append(Refused(index, _name(ref), got.code, got.message))
                continue
            members.append(
                Submission(
                    target=got.upload,
                    sources=[s.upload for s in sources],
                    options=body.options,
                    priority=body.priority,
                    audio=audio.upload if audio is not None else None,
                )  # fmt: skip
            )
        group = GroupSubmission(members, name=body.name, callback_url=body.callback_url, partial=body.partial)
        return await accept_group(request, caller, group)
    finally:
        await run_in_threadpool(shutil.rmtree, folder, True)
