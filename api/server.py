"""How the API is served: uvicorn, with a bound on how long a connection may take to send a request's head.

uvicorn bounds the idle time *after* a response (``timeout_keep_alive``) and, with h11, the size of a request's
head (``h11_max_incomplete_event_size``), but not the time before one: a connection that opens and sends nothing,
or sends its headers a byte at a time (slowloris), is held open for ever. :class:`BoundedH11Protocol` closes it,
with a 408 ``header_timeout``, when its request's head is not whole ``header_timeout_seconds`` after the
connection opened or after that request's first byte (an idle kept-alive connection is closed by uvicorn's
keep-alive bound). Bodies are bounded once the app reads them (``api.bodies``).
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

from shared.errors import HeaderTimeoutError
from shared.settings import Settings, get_settings

MAX_HEAD_BYTES = 16 * 1024  # a request line and headers; h11's own default, stated
LINGER_SECONDS = 1.0  # after a 408, what the client still sends is read and dropped this long before the close

logger = logging.getLogger(__name__)


def _timed_out() -> bytes:
    error = HeaderTimeoutError("the request's headers did not arrive in time")
    body = json.dumps({"error": {"code": error.code, "message": error.message}}).encode()
    head = (
        f"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    )
    return head.encode() + body


class BoundedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol, with a deadline on each request's head."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_seconds = get_settings().header_timeout_seconds
        self._head_timer: asyncio.TimerHandle | None = None
        self._answered = False  # the 408 is sent: the connection only drains until it closes

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._watch_head()

    def data_received(self, data: bytes) -> None:
        if self._answered:
            return
        super().data_received(data)
        self._watch_head()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.conn.trailing_data[0]:  # the next request's head arrived in part (idle: the keep-alive bound)
            self._watch_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_head_timer()
        super().connection_lost(exc)

    def _awaiting_head(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def _watch_head(self) -> None:
        """A timer runs while a request's head is awaited (the connection is new, or its next request began)."""
        if not self._awaiting_head() or self.transport.is_closing():
            self._stop_head_timer()
        elif self._head_timer is None:
            self._head_timer = self.loop.call_later(self._head_seconds, self._head_timed_out)

    def _stop_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if not self._awaiting_head() or self.transport.is_closing():
            return
        logger.info("closing a connection that sent no whole request head in %gs", self._head_seconds)
        self.transport.write(_timed_out())
        # a lingering close: closing a socket with unread bytes sends a reset, which can overtake the 408
        self._answered = True
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(LINGER_SECONDS, self.transport.close)


def uvicorn_options(settings: Settings) -> dict[str, Any]:
    """The options of ``uvicorn.run`` that bound connections (used by ``swapfarm api``)."""
    return {
        "http": f"{__name__}:{BoundedH11Protocol.__name__}",
        "timeout_keep_alive": settings.keep_alive_seconds,
        "h11_max_incomplete_event_size": MAX_HEAD_BYTES,
    }
