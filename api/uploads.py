"""Reading a job submission (``multipart/form-data``) as it streams in, with the size limits enforced per block.

Starlette's form parser spools the whole body to disk before the endpoint runs, so an over-size upload would be
read to its end before it could be refused. Here python-multipart's streaming parser runs over the body as it
arrives: each block is counted, hashed and written to a local file, and the first block past a limit ends the
request with a 413 — the rest of the body is never read, and memory holds one block.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from api.bodies import Body, declared_too_large
from shared.errors import RequestInvalidError, TooLargeError
from shared.groups import GroupResult, GroupSubmission, submit_group
from shared.settings import Settings
from shared.submission import Submission, Upload, submit
from shared.tasks import DEFAULT_PRIORITY
from shared.tenants import Principal

if TYPE_CHECKING:
    from python_multipart.multipart import MultipartCallbacks

FIELD_LIMIT = 64 * 1024  # bytes of a text field (options, priority)
FILE_FIELDS = ("target", "source", "source_audio")
TEXT_FIELDS = ("options", "priority", "callback_url")
MAX_EXTRA_FIELDS = 96  # text fields a caller's own form may add, unless it says how many its form holds
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True)
class StoredFile:
    upload: Upload
    sha256: str
    size: int


@dataclass(frozen=True)
class JobForm:
    target: StoredFile
    sources: list[StoredFile]
    options: str
    priority: int
    callback_url: str | None = None
    extra: dict[str, list[str]] = field(default_factory=dict)  # fields the caller asked for, by name
    audio: StoredFile | None = None  # source_audio, for lip_syncer
    targets: list[StoredFile] = field(default_factory=list)  # every target, in order (a group's; a job's one)


def body_limit(settings: Settings, targets: int = 1) -> int:
    """The most bytes a submission of up to ``targets`` targets may have: the targets, every source, the source
    audio, and room for the rest of the form."""
    files = targets * settings.max_upload_bytes + settings.max_sources * settings.max_source_bytes
    return files + settings.max_audio_bytes + 1024 * 1024


@dataclass
class _Part:
    name: str = ""
    filename: str | None = None
    size: int = 0
    limit: int = FIELD_LIMIT
    code: str = "request_too_large"
    path: Path | None = None
    handle: IO[bytes] | None = None
    digest: Any = None
    text: bytearray = field(default_factory=bytearray)


class _FormReader:
    """The parser's callbacks: one part at a time, files to ``folder``, text fields in memory."""

    def __init__(
        self,
        folder: Path,
        settings: Settings,
        extra: Callable[[str], bool] | None = None,
        targets: int = 1,
        extra_limit: int = MAX_EXTRA_FIELDS,
    ) -> None:
        self.folder, self.settings, self.max_targets, self.extra_limit = folder, settings, targets, extra_limit
        self.is_extra = extra or (lambda _: False)
        self.extra: dict[str, list[str]] = {}
        self.part = _Part()
        self.header_field, self.header_value = bytearray(), bytearray()
        self.headers: dict[str, bytes] = {}
        self.files: dict[str, list[StoredFile]] = {name: [] for name in FILE_FIELDS}
        self.fields: dict[str, str] = {}
        self.ended = False

    def callbacks(self) -> MultipartCallbacks:
        return {
            "on_part_begin": self.on_part_begin,
            "on_header_field": lambda data, start, end: self.header_field.extend(data[start:end]),
            "on_header_value": lambda data, start, end: self.header_value.extend(data[start:end]),
            "on_header_end": self.on_header_end,
            "on_headers_finished": self.on_headers_finished,
            "on_part_data": self.on_part_data,
            "on_part_end": self.on_part_end,
            "on_end": self.on_end,
        }

    def on_part_begin(self) -> None:
        self.part, self.headers = _Part(), {}

    def on_header_end(self) -> None:
        self.headers[self.header_field.decode("latin-1").lower()] = bytes(self.header_value)
        self.header_field, self.header_value = bytearray(), bytearray()

    def on_headers_finished(self) -> None:
        disposition, params = parse_options_header(self.headers.get("content-disposition", b""))
        name = params.get(b"name", b"").decode("utf-8", "replace")
        if disposition != b"form-data" or not name:
            raise RequestInvalidError("each part needs 'Content-Disposition: form-data; name=…'")
        extra = name not in FILE_FIELDS + TEXT_FIELDS and self.is_extra(name)
        if name not in FILE_FIELDS + TEXT_FIELDS and not extra:
            raise RequestInvalidError(
                f"unknown form field {_printable(name)!r}; expected one of {FILE_FIELDS + TEXT_FIELDS}"
            )
        part = self.part
        part.name = name
        if extra:
            if sum(len(v) for v in self.extra.values()) >= self.extra_limit:
                raise RequestInvalidError(f"more than {self.extra_limit} form fields")
            self.extra.setdefault(name, [])
            return
        if name in TEXT_FIELDS:
            if name in self.fields:
                raise RequestInvalidError(f"{name}: given more than once")
            return
        if name == "target" and len(self.files["target"]) >= self.max_targets:
            if self.max_targets == 1:
                raise RequestInvalidError("target: one video per job")
            raise RequestInvalidError(f"target: at most {self.max_targets} videos per group", code="group_too_large")
        if name == "source_audio" and self.files["source_audio"]:
            raise RequestInvalidError("source_audio: one audio file per job")
        if name == "source" and len(self.files["source"]) >= self.settings.max_sources:
            raise RequestInvalidError(
                f"source: at most {self.settings.max_sources} source images per job", code="too_many_sources"
            )
        raw_name = params.get(b"filename")
        part.filename = _printable(raw_name.decode("utf-8", "replace"))[:255] if raw_name is not None else None
        if name == "target":
            part.limit, part.code = self.settings.max_upload_bytes, "upload_too_large"
        elif name == "source_audio":
            part.limit, part.code = self.settings.max_audio_bytes, "audio_too_large"
        else:
            part.limit, part.code = self.settings.max_source_bytes, "source_too_large"
        part.path = self.folder / f"{name}-{len(self.files[name])}"
        part.handle = part.path.open("wb")
        part.digest = hashlib.sha256()

    def on_part_data(self, data: bytes, start: int, end: int) -> None:
        part = self.part
        block = data[start:end]
        part.size += len(block)
        if part.size > part.limit:
            what = "the target video" if part.name == "target" else f"{part.name}"
            raise TooLargeError(f"{what} is larger than the {part.limit} byte limit", code=part.code)
        if part.handle is None:
            part.text.extend(block)
            return
        part.digest.update(block)
        part.handle.write(block)

    def on_part_end(self) -> None:
        part = self.part
        if part.handle is None:
            try:
                text = part.text.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise RequestInvalidError(f"{part.name}: not UTF-8 text") from exc
            if part.name in self.extra:
                self.extra[part.name].append(text)
            else:
                self.fields[part.name] = text
            return
        part.handle.close()
        part.handle = None
        assert part.path is not None
        sha256 = part.digest.hexdigest()
        upload = Upload(path=part.path, name=part.filename or part.name, sha256=sha256)
        self.files[part.name].append(StoredFile(upload, sha256, part.size))

    def on_end(self) -> None:
        self.ended = True

    def close(self) -> None:
        if self.part.handle is not None:
            self.part.handle.close()

    def form(self) -> JobForm:
        if not self.ended:
            raise RequestInvalidError("the multipart body ended before its closing boundary")
        if not self.files["target"]:
            raise RequestInvalidError("target: a video file is required")
        return JobForm(
            target=self.files["target"][0],
            sources=self.files["source"],
            options=self.fields.get("options", "") or "{}",
            priority=_priority(self.fields.get("priority")),
            callback_url=self.fields.get("callback_url", "").strip() or None,
            extra=self.extra,
            targets=self.files["target"],
            audio=self.files["source_audio"][0] if self.files["source_audio"] else None,
        )


def _printable(text: str) -> str:
    return _CONTROL.sub("", text)


def _priority(raw: str | None) -> int:
    """The form's priority as a number (whether the caller may have it is :func:`shared.submission.screen`'s)."""
    if raw is None or not raw.strip():
        return DEFAULT_PRIORITY
    try:
        return int(raw.strip())
    except ValueError as exc:
        raise RequestInvalidError(f"priority: an integer, not {_printable(raw.strip())[:20]!r}") from exc


async def read_job_form(
    request: Request,
    folder: Path,
    settings: Settings,
    *,
    extra: Callable[[str], bool] | None = None,
    targets: int = 1,
    extra_limit: int = MAX_EXTRA_FIELDS,
) -> JobForm:
    """Stream the submission's parts into ``folder``; files never sit in memory.

    ``extra`` names more text fields to accept (repeatable, kept in ``JobForm.extra``), e.g. a form of its own;
    ``targets``: how many ``target`` parts it may hold (a group's, ``group_too_large`` past it);
    ``extra_limit``: how many ``extra`` values it may hold in all (the form's own count).

    Raises:
        TooLargeError: the body, the target, a source or the source audio is over its limit
            (``request_too_large``, ``upload_too_large``, ``source_too_large``, ``audio_too_large``) — raised at
            the first block past it.
        RequestTimeoutError: ``upload_timeout``: no block arrived for ``upload_read_timeout_seconds``.
        RequestInvalidError: not a well-formed ``multipart/form-data`` body with one ``target``.
    """
    content_type, params = parse_options_header(request.headers.get("content-type", ""))
    boundary = params.get(b"boundary")
    if content_type != b"multipart/form-data" or not boundary:
        raise RequestInvalidError("the body must be multipart/form-data (with a boundary)")
    limit = body_limit(settings, targets)
    declared_too_large(request, limit)
    reader = _FormReader(folder, settings, extra, targets, extra_limit)
    parser = MultipartParser(boundary, reader.callbacks())
    received = 0
    body = Body(request, read_timeout=settings.upload_read_timeout_seconds)
    try:
        while (block := await body.next_block()) is not None:
            received += len(block)
            if received > limit:
                raise TooLargeError(f"the request body is larger than the {limit} byte limit", code="request_too_large")
            parser.write(block)
        parser.finalize()
    except MultipartParseError as exc:
        raise RequestInvalidError(f"not a well-formed multipart body: {exc}") from exc
    finally:
        reader.close()
    return reader.form()


async def accept_job(request: Request, caller: Principal, job: Submission) -> str:
    """Submit ``job`` for ``caller`` through this application's farm (``shared.submission.submit``, which makes
    every decision, off the event loop): the one call behind ``POST /v1/jobs`` (an upload or a JSON body naming
    URLs) and the console's submit form.

    Raises:
        What ``submit`` raises.
    """
    return await run_in_threadpool(submit, request.app.state.farm, caller, job)


async def accept_group(request: Request, caller: Principal, group: GroupSubmission) -> GroupResult:
    """Submit a group for ``caller`` (``shared.groups.submit_group``: each member through
    ``shared.submission.submit``, the one submit path), off the event loop: the one call behind
    ``POST /v1/groups``."""
    return await run_in_threadpool(submit_group, request.app.state.farm, caller, group)
