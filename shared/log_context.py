"""The job and chunk a log record belongs to, carried in context variables and stamped on every record.

Task wrappers enter :func:`job_context`; :class:`JobContextFilter` (attached to the handler by the entry point)
copies the ids onto each record, so a formatter writes them without any call site passing them.

    >>> import logging
    >>> record = logging.LogRecord("x", logging.INFO, __file__, 1, "rendering", None, None)
    >>> with job_context(job_id="j1", chunk_id="c1"):
    ...     _ = JobContextFilter().filter(record)
    >>> record.job_id, record.chunk_id
    ('j1', 'c1')
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

__all__ = ["JobContextFilter", "current_ids", "job_context"]

_job_id: ContextVar[str | None] = ContextVar("swapfarm_job_id", default=None)
_chunk_id: ContextVar[str | None] = ContextVar("swapfarm_chunk_id", default=None)


@contextmanager
def job_context(*, job_id: str | None, chunk_id: str | None = None) -> Iterator[None]:
    """Within the block, records of this thread (and tasks it starts with a copied context) carry the ids."""
    job_token, chunk_token = _job_id.set(job_id), _chunk_id.set(chunk_id)
    try:
        yield
    finally:
        _chunk_id.reset(chunk_token)
        _job_id.reset(job_token)


def current_ids() -> tuple[str | None, str | None]:
    """The job and chunk id of the current context (``None`` outside :func:`job_context`)."""
    return _job_id.get(), _chunk_id.get()


class JobContextFilter(logging.Filter):
    """Sets ``job_id`` and ``chunk_id`` on every record (``None`` outside a job); never drops a record."""

    def filter(self, record: logging.LogRecord) -> bool:
        job_id, chunk_id = current_ids()
        if getattr(record, "job_id", None) is None:
            record.job_id = job_id
        if getattr(record, "chunk_id", None) is None:
            record.chunk_id = chunk_id
        return True
