"""The one exception tree of swapfarm. Every error has a stable ``code`` that clients may rely on.

    SwapfarmError                     base; ``code``, ``http_status``, human ``message``
    ├── InputError (422)              the submitted input cannot be processed; never retried
    │   ├── NotAVideoError            media_not_video: no decodable video stream
    │   ├── UnreadableMediaError      media_unreadable: ffprobe cannot read the file
    │   ├── InvalidOptionsError       options_invalid: options JSON fails validation; trim_out_of_range: a
    │   │                             trim range outside the video's frames; trim_unsupported: a range
    │   │                             starting past frame 0 of a video whose frames carry no times
    │   ├── SourceImageError          source_invalid: a source is not a readable image
    │   ├── NoFaceInSourceError       source_no_face: no face found in a source image
    │   ├── RequestInvalidError       request_invalid: the request itself is malformed (form, query, header)
    │   ├── MediaLimitError           media_too_long / resolution_too_large / too_many_frames: over a limit
    │   ├── CallbackUrlError          callback_url_invalid / callback_url_forbidden: a webhook URL refused (SSRF)
    │   ├── InputUrlError             input_url_invalid / input_url_forbidden / input_missing: a referenced input
    │   ├── MediaFormatError          media_format_refused: not a container the farm reads (playlists, scripts)
    │   ├── TooLargeError (413)       upload_too_large / source_too_large / request_too_large: over a size limit
    │   └── RequestTimeoutError (408) upload_timeout: the upload stopped sending
    ├── UnauthorizedError (401)       unauthorized: no API key, or an unknown or revoked one
    ├── ForbiddenError (403)          forbidden: the key lacks the admin scope (never for another tenant's job)
    ├── NotFoundError (404)           not_found: no such job, or not yours
    ├── ConflictError (409)           conflict: the request conflicts with the job's state
    │   ├── IdempotencyConflictError  idempotency_conflict: an Idempotency-Key reused with a different request
    │   └── WorkerNameTakenError      worker_name_taken: a worker started under the name of a live one
    ├── GoneError (410)               output_expired: the job's files were deleted after the retention time
    ├── RangeNotSatisfiableError (416) range_not_satisfiable: a Range header outside the file
    ├── TooManyRequestsError (429)    a tenant's or key's quota: too_many_waiting_jobs, storage_quota_exceeded,
    │                                 too_many_streams, too_many_uploads
    ├── PermanentError (500)          a failure that retrying will not fix
    │   ├── ProcessorError            processor_failed: a processor raised on the frames
    │   ├── ModelError                model_unavailable / model_hash_mismatch: a model file is missing or wrong
    │   └── FfmpegError               ffmpeg_failed: ffmpeg exited non-zero (stderr kept)
    └── RetryableError (503)          a transient failure; tasks retry it with back-off
        ├── ServiceUnavailableError   service_unavailable: database or broker unreachable
        └── LeaseLostError            lease_lost: another worker took the chunk over

``RetryableError`` vs ``PermanentError`` drives the tasks' retry policy; the API maps the base class to an HTTP
status and a JSON body ``{"error": {"code", "message"}}`` in one handler.

What reaches a client (API errors, a job's or chunk's error, event messages) goes through :func:`public_message`:
no server path, storage URL or host name. The full text stays in the logs.
"""

from __future__ import annotations

import re
from typing import ClassVar


class SwapfarmError(Exception):
    code: ClassVar[str] = "internal_error"
    http_status: ClassVar[int] = 500

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code  # type: ignore[misc]  # an instance may narrow its class's code

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class InputError(SwapfarmError):
    code = "input_invalid"
    http_status = 422


class NotAVideoError(InputError):
    code = "media_not_video"


class UnreadableMediaError(InputError):
    code = "media_unreadable"


class InvalidOptionsError(InputError):
    code = "options_invalid"


class SourceImageError(InputError):
    code = "source_invalid"


class NoFaceInSourceError(InputError):
    code = "source_no_face"


class TooLargeError(InputError):
    code = "upload_too_large"
    http_status = 413


class RequestInvalidError(InputError):
    code = "request_invalid"


class MediaLimitError(InputError):
    """The target is over a farm limit; ``code`` says which (``media_too_long``, ``resolution_too_large`` …)."""

    code = "media_limit_exceeded"


class CallbackUrlError(InputError):
    """A ``callback_url`` that is malformed (``callback_url_invalid``) or resolves to an address the farm will not
    call (``callback_url_forbidden``: loopback, link-local, private …)."""

    code = "callback_url_invalid"


class InputUrlError(InputError):
    """An input referenced by URL: malformed (``input_url_invalid``), outside the prefixes the operator allows
    (``input_url_forbidden``), or not there (``input_missing``)."""

    code = "input_url_invalid"


class MediaFormatError(InputError):
    """The file is not in a container the farm reads: HLS/DASH manifests, ``ffconcat`` scripts, raw streams."""

    code = "media_format_refused"


class RequestTimeoutError(InputError):
    code = "upload_timeout"
    http_status = 408


class UnauthorizedError(SwapfarmError):
    code = "unauthorized"
    http_status = 401


class ForbiddenError(SwapfarmError):
    code = "forbidden"
    http_status = 403


class NotFoundError(SwapfarmError):
    code = "not_found"
    http_status = 404


class ConflictError(SwapfarmError):
    code = "conflict"
    http_status = 409


class IdempotencyConflictError(ConflictError):
    code = "idempotency_conflict"


class WorkerNameTakenError(ConflictError):
    """A worker was started under the name of a worker that is running (``swapfarm worker --name``)."""

    code = "worker_name_taken"


class GoneError(SwapfarmError):
    code = "output_expired"
    http_status = 410


class RangeNotSatisfiableError(SwapfarmError):
    code = "range_not_satisfiable"
    http_status = 416

    def __init__(self, message: str, *, size: int) -> None:
        super().__init__(message)
        self.size = size


class TooManyRequestsError(SwapfarmError):
    """Over a quota of the tenant or the key; ``code`` says which. Retrying later may succeed."""

    code = "quota_exceeded"
    http_status = 429


class PermanentError(SwapfarmError):
    code = "permanent_error"


class ProcessorError(PermanentError):
    code = "processor_failed"


class ModelError(PermanentError):
    code = "model_unavailable"


class FfmpegError(PermanentError):
    code = "ffmpeg_failed"

    def __init__(self, message: str, *, stderr: str = "", code: str | None = None) -> None:
        tail = stderr.strip().splitlines()[-8:]
        super().__init__(message + (": " + " | ".join(tail) if tail else ""), code=code)
        self.stderr = stderr


class RetryableError(SwapfarmError):
    code = "retryable_error"
    http_status = 503


class ServiceUnavailableError(RetryableError):
    code = "service_unavailable"


class LeaseLostError(RetryableError):
    code = "lease_lost"


# -- what clients see -------------------------------------------------------------------------------------------

_URL = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://\S+")
_PATH = re.compile(r"(?<![\w.:/-])(?:/[^\s/'\",:;()\[\]|]+)+/?")


def public_message(text: str) -> str:
    """``text`` without what a client must not learn about the servers: URLs (storage, database, broker) become
    ``<url>``, absolute paths their last part, and this machine's host name ``<host>``.

    >>> public_message("cannot open file:///srv/storage/jobs/42/input/target.mp4: /tmp/swapfarm-upload-x/target-0 bad")
    'cannot open <url> target-0 bad'
    """
    text = _URL.sub("<url>", text)
    text = _PATH.sub(lambda m: m.group(0).rstrip("/").rsplit("/", 1)[-1] or "<path>", text)
    host = _hostname()
    if len(host) > 2:
        text = re.sub(rf"(?<![\w.-]){re.escape(host)}(?![\w-])", "<host>", text)
    return text


def _hostname() -> str:
    import socket

    return socket.gethostname()
