"""Every request body is read here, bounded in size and in time.

* :class:`Body` hands out the body a block at a time, each wait bounded (and, for a small body, the whole read
  too): a client that stops sending gets a 408 and its request ends, freeing what it held (an upload slot, a
  connection, a file). The multipart reader (``api.uploads``) streams big uploads through it; :func:`read_small`
  reads small bodies whole through it (a JSON submission, the console's forms).
* :func:`read_form` parses a small urlencoded form: at most ``MAX_FORM_FIELDS`` fields and ``FORM_LIMIT`` bytes;
  anything else is a 400 ``form_invalid``, never a 500.
"""

from __future__ import annotations

import asyncio
import time
from urllib.parse import parse_qs

from starlette.requests import ClientDisconnect, Request

from shared.errors import BodyTimeoutError, FormInvalidError, RequestTimeoutError, TooLargeError
from shared.settings import Settings

FORM_LIMIT = 16 * 1024  # bytes of a small (urlencoded) form
MAX_FORM_FIELDS = 20  # the console's small forms have a handful

# After a wait timed out, how long the body may still take to show what already arrived: a server whose event loop
# was held up (a busy host) sees the timer and the bytes that came meanwhile at once, and must not end a live upload.
_GRACE_SECONDS = 1.0


class Body:
    """The request body a block at a time: each wait at most ``read_timeout``, the whole body (if ``deadline``
    is given) within ``deadline`` seconds of the first read.

    ``receive`` is awaited directly (not ``request.stream()``, which a timeout would close): a wait that timed out
    leaves what the server buffered in place, so one more short wait tells a stalled client from a late loop.
    """

    def __init__(
        self,
        request: Request,
        *,
        read_timeout: float,
        deadline: float | None = None,
        error: type[RequestTimeoutError] = RequestTimeoutError,
    ) -> None:
        self._request, self._timeout, self._error = request, read_timeout, error
        self._ends_at = None if deadline is None else time.monotonic() + deadline
        self._deadline, self._done = deadline, False

    async def next_block(self) -> bytes | None:
        """The next non-empty block, or None at the body's end.

        Raises:
            RequestTimeoutError: (the class given) nothing arrived for the read timeout, or the whole body did
                not arrive by the deadline (with the grace after either).
            ClientDisconnect: the client went away.
        """
        while not self._done:
            wait = self._timeout
            if self._ends_at is not None:
                wait = min(wait, max(self._ends_at - time.monotonic(), 0.0))
            try:
                message = await asyncio.wait_for(self._request.receive(), timeout=wait)
            except TimeoutError:
                try:
                    message = await asyncio.wait_for(self._request.receive(), timeout=_GRACE_SECONDS)
                except TimeoutError as exc:
                    raise self._error(self._stalled()) from exc
            if message["type"] == "http.disconnect":
                raise ClientDisconnect()
            self._done = not message.get("more_body", False)
            if not self._done and self._ends_at is not None and time.monotonic() > self._ends_at + _GRACE_SECONDS:
                raise self._error(self._stalled())
            body: bytes = message.get("body", b"")
            if body:
                return body
        return None

    def _stalled(self) -> str:
        if self._ends_at is not None and time.monotonic() >= self._ends_at:
            return f"the request body did not arrive within {self._deadline:g}s; the request was ended"
        return f"the request body sent nothing for {self._timeout:g}s; the request was ended"


def declared_too_large(request: Request, limit: int, what: str = "the request body") -> None:
    """Refuse a body whose ``Content-Length`` is over ``limit`` before reading any of it.

    Raises:
        TooLargeError: ``request_too_large``.
    """
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise TooLargeError(f"{what} is larger than the {limit} byte limit", code="request_too_large")


async def read_small(request: Request, settings: Settings, *, limit: int, what: str = "the request body") -> bytes:
    """A small body, whole: at most ``limit`` bytes, all of it within ``body_timeout_seconds``.

    Raises:
        TooLargeError: ``request_too_large``, declared or found past ``limit`` (the rest is never read).
        BodyTimeoutError: ``body_timeout``: the body did not arrive in time.
        ClientDisconnect: the client went away.
    """
    declared_too_large(request, limit, what)
    timeout = settings.body_timeout_seconds
    body = Body(request, read_timeout=timeout, deadline=timeout, error=BodyTimeoutError)
    data = bytearray()
    while (block := await body.next_block()) is not None:
        data.extend(block)
        if len(data) > limit:
            raise TooLargeError(f"{what} is larger than the {limit} byte limit", code="request_too_large")
    return bytes(data)


def parse_form(raw: bytes) -> dict[str, str]:
    """An urlencoded form's fields (the last value of each).

    Raises:
        FormInvalidError: ``form_invalid``: more than ``MAX_FORM_FIELDS`` fields.

    >>> parse_form(b"a=1&b=2&a=3")
    {'a': '3', 'b': '2'}
    >>> parse_form(b"&".join(b"f%d=x" % i for i in range(21)))
    Traceback (most recent call last):
    ...
    shared.errors.FormInvalidError: form_invalid: a form of at most 20 fields is expected
    """
    try:
        parsed = parse_qs(raw.decode("utf-8", "replace"), max_num_fields=MAX_FORM_FIELDS)
    except ValueError as exc:  # parse_qs: "Max number of fields exceeded"
        raise FormInvalidError(f"a form of at most {MAX_FORM_FIELDS} fields is expected") from exc
    return {name: values[-1] for name, values in parsed.items()}


async def read_form(request: Request) -> dict[str, str]:
    """A small urlencoded form (sign-in, sign-out, cancel, retry), read within the body limits.

    Raises:
        What :func:`read_small` and :func:`parse_form` raise.
    """
    settings: Settings = request.app.state.settings
    return parse_form(await read_small(request, settings, limit=FORM_LIMIT, what="the form"))
