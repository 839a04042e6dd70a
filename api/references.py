"""``POST /v1/jobs`` with a JSON body (:class:`~api.schemas.JobRequest`): inputs referenced by URL.

For farms whose users already keep their media in a bucket: the job names ``s3://…`` URLs instead of uploading
the bytes. Only URLs under a prefix the operator lists in ``SWAPFARM_INPUT_URL_PREFIXES`` are read, and only the
``s3`` and ``file`` schemes; with no prefix set (the default) every reference is refused, so a request can never
make the API read a file of its own disk. A ``file://`` reference must stay under its prefix once symbolic links
are resolved. The referenced files are copied into the job's storage (checked against the same size, media and
source limits as uploads), so a job never depends on a file someone may change or delete afterwards.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlsplit

from fastapi import Request
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, ValidationError

from api.bodies import read_small
from api.schemas import InputRef, JobRequest
from api.uploads import accept_job
from shared.errors import InputUrlError, InvalidOptionsError, RequestInvalidError, TooLargeError
from shared.settings import Settings
from shared.storage import Storage
from shared.submission import Submission, Upload, screen
from shared.tenants import Principal

JSON_LIMIT = 256 * 1024  # bytes of a JSON submission
SCHEMES = ("s3", "file")
Body = TypeVar("Body", bound=BaseModel)
_UNSAFE = re.compile(r"[\x00-\x20\x7f?#\\]")


def allowed_url(url: str, prefixes: list[str]) -> str:
    """``url`` if it lies under one of ``prefixes``; paths are compared segment by segment, never as raw text.

    Raises:
        InputUrlError: ``input_url_invalid`` (another scheme, ``..``/empty segments, odd characters) or
            ``input_url_forbidden`` (under no prefix).

    >>> allowed_url("s3://media/a/clip.mp4", ["s3://media/a/"])
    's3://media/a/clip.mp4'
    """
    parts = urlsplit(url)
    if parts.scheme not in SCHEMES or _UNSAFE.search(url):
        raise InputUrlError(f"{url!r}: only {', '.join(s + '://' for s in SCHEMES)} URLs without ?, # or spaces")
    segments = parts.path.split("/")[1:]
    host_ok = bool(parts.netloc) if parts.scheme == "s3" else not parts.netloc
    if not host_ok or not segments or any(s in ("", ".", "..") for s in segments):
        raise InputUrlError(f"{url!r}: not a file URL (empty, '.' or '..' path segments)")
    for prefix in prefixes:
        base = prefix if prefix.endswith("/") else prefix + "/"
        if url.startswith(base) and _stays_under(parts.scheme, url, base):
            return url
    raise InputUrlError(f"{url!r} is not under a prefix this farm reads inputs from", code="input_url_forbidden")


def _stays_under(scheme: str, url: str, base: str) -> bool:
    if scheme != "file":
        return True
    path = os.path.realpath(urlsplit(url).path)
    root = os.path.realpath(urlsplit(base).path)
    return posixpath.commonpath([path, root]) == root and path != root


@dataclass(frozen=True)
class Fetched:
    upload: Upload
    sha256: str


def fetch(settings: Settings, ref: InputRef, local: Path, limit: int, code: str) -> Fetched:
    """Copy the referenced file to ``local``, refusing it past ``limit`` bytes (checked as it streams).

    Raises:
        InputUrlError: ``input_missing``: nothing readable at the URL.
        TooLargeError: over ``limit`` (``code``).
    """
    url = allowed_url(ref.url, settings.input_url_prefixes)
    storage = Storage.from_settings(settings, root_url=url)
    digest, size = hashlib.sha256(), 0
    try:
        if storage.size(url) > limit:
            raise TooLargeError(f"{ref.url} is larger than the {limit} byte limit", code=code)
        with storage.open_read(url) as source, local.open("wb") as out:
            while block := source.read(1 << 20):
                size += len(block)
                if size > limit:
                    raise TooLargeError(f"{ref.url} is larger than the {limit} byte limit", code=code)
                digest.update(block)
                out.write(block)
    except (FileNotFoundError, IsADirectoryError, PermissionError) as exc:
        raise InputUrlError(f"nothing readable at {ref.url}", code="input_missing") from exc
    except OSError as exc:
        raise InputUrlError(f"{ref.url} could not be read ({type(exc).__name__})", code="input_missing") from exc
    name = ref.name or posixpath.basename(urlsplit(ref.url).path)
    return Fetched(Upload(path=local, name=name, sha256=digest.hexdigest()), digest.hexdigest())


def parse(body: bytes) -> JobRequest:
    """Raises: what :func:`parse_as` raises."""
    return parse_as(body, JobRequest)


def parse_as(body: bytes, model: type[Body]) -> Body:
    """``body`` as ``model`` (a JobRequest, or a group's request).

    Raises:
        InvalidOptionsError: ``options`` fails the JobOptions schema.
        RequestInvalidError: anything else in the body does not fit the schema.
    """
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        error = InvalidOptionsError if first["loc"][:1] == ("options",) else RequestInvalidError
        raise error(f"{where}: {first['msg']}") from exc


async def create_job_from_json(
    request: Request, caller: Principal, idempotency_key: str | None, settings: Settings
) -> str:
    """Accept a JSON submission; returns the job's id (see the module's docstring for what may be referenced).

    The decisions that need no file (``shared.submission.screen``: the priority, the sources, the callback) are
    asked before any reference is read; ``submit`` makes them again with the rest.

    Raises:
        What ``shared.submission.submit`` raises; InputUrlError, TooLargeError: a reference is refused.
    """
    body = parse(await read_small(request, settings, limit=JSON_LIMIT, what="a JSON submission"))
    await run_in_threadpool(
        lambda: screen(
            settings, caller, priority=body.priority, sources=len(body.sources), callback_url=body.callback_url
        )
    )
    refs = (body.target, *body.sources, *([body.source_audio] if body.source_audio is not None else []))
    for ref in refs:  # refuse a bad reference before reading any
        allowed_url(ref.url, settings.input_url_prefixes)
    folder = Path(tempfile.mkdtemp(prefix="swapfarm-fetch-"))
    try:
        target = await run_in_threadpool(
            fetch, settings, body.target, folder / "target", settings.max_upload_bytes, "upload_too_large"
        )
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
        job = Submission(
            target=target.upload, sources=[s.upload for s in sources], options=body.options,
            priority=body.priority, callback_url=body.callback_url, idempotency_key=idempotency_key,
            audio=audio.upload if audio is not None else None,
        )  # fmt: skip
        return await accept_job(request, caller, job)
    finally:
        await run_in_threadpool(shutil.rmtree, folder, True)
