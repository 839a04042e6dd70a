"""The one exception tree of swapfarm. Every error has a stable ``code`` that clients may rely on.

    SwapfarmError                     base; ``code``, ``http_status``, human ``message``; internal_error
    ├── InputError (422)              input_invalid: the submitted input cannot be processed; never retried
    │   ├── NotAVideoError            media_not_video: no decodable video stream
    │   ├── UnreadableMediaError      media_unreadable: ffprobe cannot read the file
    │   │   ├── MediaMetadataError    media_metadata_invalid: a tag (rotation …) is not what it must be
    │   │   ├── MediaDurationError    media_duration_invalid: a negative duration
    │   │   ├── MediaRateError        media_rate_invalid: a frame rate that is no rate
    │   │   └── NoFramesError         media_no_frames: the video holds no frame
    │   ├── InvalidOptionsError       options_invalid: options JSON fails validation
    │   │   ├── TrimOutOfRangeError   trim_out_of_range: a trim range outside the video's frames
    │   │   ├── LicenceDisabledError  model_licence_disabled: a model the job needs is under a licence the
    │   │   │                         operator disabled (at submission, or at load on a worker; never retried)
    │   │   └── TrimUnsupportedError  trim_unsupported: a range past frame 0 of a video whose frames carry no times
    │   ├── SourceImageError          source_invalid: a source is not a readable image
    │   ├── NoFaceInSourceError       source_no_face: no face found in a source image
    │   ├── RequestInvalidError       request_invalid: the request itself is malformed (form, query, header)
    │   │   ├── FormInvalidError (400) form_invalid: a console form that is not one (too many fields …)
    │   │   ├── TooManySourcesError   too_many_sources: more source images than a job takes
    │   │   ├── GroupTooLargeError    group_too_large: more members than a group takes
    │   │   └── TenantNameError       tenant_name_invalid: a tenant name outside the allowed characters
    │   ├── MediaLimitError           media_limit_exceeded: over a limit; its subclasses say which
    │   │   ├── MediaTooLongError     media_too_long
    │   │   ├── ResolutionError       resolution_too_large
    │   │   ├── SourceResolutionError source_resolution_too_large
    │   │   └── TooManyFramesError    too_many_frames
    │   ├── CallbackUrlError          callback_url_invalid: a malformed webhook URL
    │   │   └── CallbackForbiddenError callback_url_forbidden: it resolves to an address refused (SSRF)
    │   ├── InputUrlError             input_url_invalid: a malformed referenced input
    │   │   ├── InputForbiddenError   input_url_forbidden: outside the prefixes the operator allows
    │   │   └── InputMissingError     input_missing: nothing readable there
    │   ├── GroupMemberRefusedError   group_member_refused: a member of a group failed intake (named)
    │   ├── MediaFormatError          media_format_refused: not a container the farm reads (playlists, scripts)
    │   ├── ContentRefusedError       content_refused: the operator's content policy refuses the target video
    │   ├── TooLargeError (413)       upload_too_large: over a size limit
    │   │   ├── SourceTooLargeError   source_too_large
    │   │   └── RequestTooLargeError  request_too_large
    │   └── RequestTimeoutError (408) upload_timeout: the upload stopped sending
    │       ├── BodyTimeoutError      body_timeout: a small body (form, JSON) did not arrive in time
    │       └── HeaderTimeoutError    header_timeout: a request's headers did not arrive in time
    ├── UnauthorizedError (401)       unauthorized: no API key, or an unknown or revoked one
    ├── ForbiddenError (403)          forbidden: the key lacks the admin scope (never for another tenant's job)
    ├── NotFoundError (404)           not_found: no such job, or not yours
    ├── ConflictError (409)           conflict: the request conflicts with the job's state
    │   ├── IdempotencyConflictError  idempotency_conflict: an Idempotency-Key reused with a different request
    │   ├── WorkerNameTakenError      worker_name_taken: a worker started under the name of a live one
    │   ├── NotCancellableError       job_not_cancellable: the job has ended
    │   ├── NotRetryableError         job_not_retryable: only a failed job is retried
    │   ├── NotQuarantinedError       worker_not_quarantined: releasing a worker that is not quarantined
    │   └── OutputNotReadyError       output_not_ready: the job has no output yet
    ├── GoneError (410)               output_expired: the job's files were deleted after the retention time
    │   └── JobExpiredError           job_expired: the same, for a retry
    ├── RangeNotSatisfiableError (416) range_not_satisfiable: a Range header outside the file
    ├── TooManyRequestsError (429)    quota_exceeded: a tenant's or key's quota; its subclasses say which
    │   ├── TooManyWaitingError       too_many_waiting_jobs
    │   ├── StorageQuotaError         storage_quota_exceeded
    │   ├── TooManyStreamsError       too_many_streams
    │   └── TooManyUploadsError       too_many_uploads
    ├── PermanentError (500)          permanent_error: a failure that retrying will not fix
    │   ├── ProcessorError            processor_failed: a processor raised on the frames
    │   │   └── OutOfMemoryError      out_of_memory: a single item does not fit the device
    │   ├── ModelError                model_unavailable: a model file is missing
    │   │   ├── ModelHashError        model_hash_mismatch: a model file is not the one the registry names
    │   │   └── ModelInvalidError     model_invalid: a model file lacks the inputs or outputs its kind has
    │   ├── FfmpegError               ffmpeg_failed: ffmpeg exited non-zero (stderr kept)
    │   │   ├── FfmpegMissingError    ffmpeg_missing: ffmpeg or ffprobe is not installed
    │   │   ├── TruncatedMediaError   media_truncated: decoding ended before the frames the file declares
    │   │   └── ChunkStalledError     chunk_stalled: ffmpeg stopped producing frames
    │   ├── StitchMismatchError       stitch_mismatch: the stitched output lacks or adds frames
    │   ├── WorkerLostError           worker_lost: a step's worker stopped heartbeating too many times
    │   ├── TooManyFailedChunksError  too_many_failed_chunks: the job's max_failed_chunks attempts failed
    │   ├── WorkerBlocklistedError    worker_blocklisted: a worker takes no more chunks of the job (event)
    │   ├── WorkerQuarantinedError    worker_quarantined: a worker takes no work until released (event)
    │   └── NoWorkerWithTagsError     no_worker_with_tags: no live worker has the job's required tags (waits)
    ├── RetryableError (503)          retryable_error: a transient failure; tasks retry it with back-off
    │   ├── ServiceUnavailableError   service_unavailable: database or broker unreachable
    │   └── LeaseLostError            lease_lost: another worker took the chunk over (never retried: the owner
    │                                 does the work)
    └── WebhookError                  webhook_failed: a webhook delivery attempt failed (stored in job events)
        ├── WebhookTimeoutError       webhook_timeout: no answer in time
        ├── WebhookUnreachableError   webhook_unreachable: no connection
        ├── WebhookHttpError          webhook_http_<status>: a non-2xx answer (:func:`WebhookHttpError.code_for`)
        └── WebhookWorkerLostError    webhook_worker_lost: the delivering worker died mid-attempt

Every code the farm stores (a job's or chunk's ``error_code``, an event's) is the ``code`` of a class here
(:func:`codes`; ``tests/shared/test_errors.py`` checks the literals in the code). ``RetryableError`` vs
``PermanentError`` drives the tasks' retry policy; the API maps the base class to an HTTP
status and a JSON body ``{"error": {"code", "message"}}`` in one handler.

What reaches a client (API errors, a job's or chunk's error, event messages) goes through :func:`public_message`:
no server path, storage URL or host name. The full text stays in the logs.
"""

from __future__ import annotations

import re
from typing import ClassVar

# data table: the error tree, one short class per code the farm stores or answers with; longer than a module
# should be because each code is a class (``tests/test_modules.py`` lets a data table pass the size limit).


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


class MediaMetadataError(UnreadableMediaError):
    code = "media_metadata_invalid"


class MediaDurationError(UnreadableMediaError):
    code = "media_duration_invalid"


class MediaRateError(UnreadableMediaError):
    code = "media_rate_invalid"


class NoFramesError(UnreadableMediaError):
    code = "media_no_frames"


class InvalidOptionsError(InputError):
    code = "options_invalid"


class TrimOutOfRangeError(InvalidOptionsError):
    code = "trim_out_of_range"


class LicenceDisabledError(InvalidOptionsError):
    """The job needs a model under a licence the operator disabled (``disabled_licences``; ``shared.licences``)."""

    code = "model_licence_disabled"


class TrimUnsupportedError(InvalidOptionsError):
    code = "trim_unsupported"


class SourceImageError(InputError):
    code = "source_invalid"


class NoFaceInSourceError(InputError):
    code = "source_no_face"


class TooLargeError(InputError):
    code = "upload_too_large"
    http_status = 413


class SourceTooLargeError(TooLargeError):
    code = "source_too_large"


class AudioTooLargeError(TooLargeError):
    code = "audio_too_large"


class RequestTooLargeError(TooLargeError):
    code = "request_too_large"


class RequestInvalidError(InputError):
    code = "request_invalid"


class FormInvalidError(RequestInvalidError):
    code = "form_invalid"
    http_status = 400


class UnknownQueryParameterError(RequestInvalidError):
    """A query parameter the route does not take (a misspelt filter would otherwise be ignored)."""

    code = "query_parameter_unknown"


class TooManySourcesError(RequestInvalidError):
    code = "too_many_sources"


class TenantNameError(RequestInvalidError):
    code = "tenant_name_invalid"


class UnreadableAudioError(InputError):
    """The source audio is not a readable audio file: no audio stream, a video, a text file, nonsense metadata."""

    code = "audio_unreadable"


class MediaLimitError(InputError):
    """The target is over a farm limit; ``code`` says which (``media_too_long``, ``resolution_too_large`` …)."""

    code = "media_limit_exceeded"


class MediaTooLongError(MediaLimitError):
    code = "media_too_long"


class AudioTooLongError(MediaLimitError):
    code = "audio_too_long"


class ResolutionError(MediaLimitError):
    code = "resolution_too_large"


class SourceResolutionError(MediaLimitError):
    code = "source_resolution_too_large"


class TooManyFramesError(MediaLimitError):
    code = "too_many_frames"


class CallbackUrlError(InputError):
    """A ``callback_url`` that is malformed (``callback_url_invalid``) or resolves to an address the farm will not
    call (``callback_url_forbidden``: loopback, link-local, private …)."""

    code = "callback_url_invalid"


class CallbackForbiddenError(CallbackUrlError):
    code = "callback_url_forbidden"


class InputUrlError(InputError):
    """An input referenced by URL: malformed (``input_url_invalid``), outside the prefixes the operator allows
    (``input_url_forbidden``), or not there (``input_missing``)."""

    code = "input_url_invalid"


class InputForbiddenError(InputUrlError):
    code = "input_url_forbidden"


class InputMissingError(InputUrlError):
    code = "input_missing"


class MediaFormatError(InputError):
    """The file is not in a container the farm reads: HLS/DASH manifests, ``ffconcat`` scripts, raw streams."""

    code = "media_format_refused"


class ContentRefusedError(InputError):
    """The content policy (an operator setting) found the target video refused: the job fails, no output is kept."""

    code = "content_refused"


class RequestTimeoutError(InputError):
    code = "upload_timeout"
    http_status = 408


class BodyTimeoutError(RequestTimeoutError):
    code = "body_timeout"


class HeaderTimeoutError(RequestTimeoutError):
    code = "header_timeout"


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


class NotCancellableError(ConflictError):
    code = "job_not_cancellable"


class NotRetryableError(ConflictError):
    code = "job_not_retryable"


class NotQuarantinedError(ConflictError):
    code = "worker_not_quarantined"


class GroupTooLargeError(RequestInvalidError):
    code = "group_too_large"


class GroupMemberRefusedError(InputError):
    """A member of a group submission failed intake: the whole submission is refused, naming the member."""

    code = "group_member_refused"


class NotPausableError(ConflictError):
    code = "job_not_pausable"


class NotResumableError(ConflictError):
    code = "job_not_resumable"


class NotAwaitingApprovalError(ConflictError):
    code = "job_not_awaiting_approval"


class PreviewExpiredError(ConflictError):
    code = "preview_expired"  # a cancelled job's event: its preview was not approved in time


class StillsNotReadyError(ConflictError):
    code = "stills_not_ready"


class OutputNotReadyError(ConflictError):
    code = "output_not_ready"


class GoneError(SwapfarmError):
    code = "output_expired"
    http_status = 410


class JobExpiredError(GoneError):
    code = "job_expired"


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


class TooManyWaitingError(TooManyRequestsError):
    code = "too_many_waiting_jobs"


class StorageQuotaError(TooManyRequestsError):
    code = "storage_quota_exceeded"


class TooManyStreamsError(TooManyRequestsError):
    code = "too_many_streams"


class TooManyUploadsError(TooManyRequestsError):
    code = "too_many_uploads"


class PermanentError(SwapfarmError):
    code = "permanent_error"


class ProcessorError(PermanentError):
    code = "processor_failed"


class OutOfMemoryError(ProcessorError):
    code = "out_of_memory"


class ModelError(PermanentError):
    code = "model_unavailable"


class ModelHashError(ModelError):
    code = "model_hash_mismatch"


class ModelInvalidError(ModelError):
    code = "model_invalid"


class FfmpegError(PermanentError):
    code = "ffmpeg_failed"

    def __init__(self, message: str, *, stderr: str = "", code: str | None = None) -> None:
        tail = stderr.strip().splitlines()[-8:]
        super().__init__(message + (": " + " | ".join(tail) if tail else ""), code=code)
        self.stderr = stderr


class FfmpegMissingError(FfmpegError):
    code = "ffmpeg_missing"


class TruncatedMediaError(FfmpegError):
    code = "media_truncated"


class ChunkStalledError(FfmpegError):
    code = "chunk_stalled"


class StitchMismatchError(PermanentError):
    code = "stitch_mismatch"


class WorkerLostError(PermanentError):
    """A step's worker stopped heartbeating (killed, frozen, cut off) more often than the attempt limit."""

    code = "worker_lost"


class TooManyFailedChunksError(PermanentError):
    """The job's ``max_failed_chunks`` attempts failed (not for its input): it fails early, not burning retries."""

    code = "too_many_failed_chunks"


class WorkerBlocklistedError(PermanentError):
    """A worker failed ``blocklist_after`` chunks of one job: it takes no more of that job (an event's code)."""

    code = "worker_blocklisted"


class WorkerQuarantinedError(PermanentError):
    """A worker failed chunks of several jobs within the window: it takes no work until released."""

    code = "worker_quarantined"


class NoWorkerWithTagsError(PermanentError):
    """No live worker has every tag the job requires: it waits (an event's code and the job's ``wait_reason``)."""

    code = "no_worker_with_tags"


class RetryableError(SwapfarmError):
    code = "retryable_error"
    http_status = 503


class ServiceUnavailableError(RetryableError):
    code = "service_unavailable"


class LeaseLostError(RetryableError):
    code = "lease_lost"


class WebhookError(SwapfarmError):
    """A webhook delivery attempt that failed; its code is stored in the job's events, never raised to a client."""

    code = "webhook_failed"


class WebhookTimeoutError(WebhookError):
    code = "webhook_timeout"


class WebhookUnreachableError(WebhookError):
    code = "webhook_unreachable"


class WebhookHttpError(WebhookError):
    code = "webhook_http"

    @staticmethod
    def code_for(status: int) -> str:
        """The stored code of a non-2xx answer: ``webhook_http_<status>``."""
        return f"{WebhookHttpError.code}_{status}"


class WebhookWorkerLostError(WebhookError):
    code = "webhook_worker_lost"


def codes() -> frozenset[str]:
    """Every code of the tree: what a job, a chunk or an event may store as its error code."""
    found: set[str] = set()
    pending: list[type[SwapfarmError]] = [SwapfarmError]
    while pending:
        cls = pending.pop()
        found.add(cls.code)
        pending += cls.__subclasses__()
    return frozenset(found)


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
