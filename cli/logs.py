"""Logging for the entry points: plain lines on a terminal, one JSON object per line otherwise.

With JSON lines a process's output is JSON only: what bypasses logging — warnings, a library's ``print``, Celery's
shutdown notice, native libraries writing to file descriptors 1 and 2 — is read back from those descriptors and
logged as records of the ``stdout`` and ``stderr`` loggers (:func:`_capture_stdio`).
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import sys
import threading
import traceback
from datetime import UTC, datetime
from types import TracebackType
from typing import TextIO

from shared.log_context import JobContextFilter


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key in ("job_id", "chunk_id"):  # set by JobContextFilter inside a task
            if value := getattr(record, key, None):
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def configure(level: str = "INFO", *, json_lines: bool | None = None) -> None:
    use_json = (not sys.stderr.isatty()) if json_lines is None else json_lines
    stream = _capture_stdio() if use_json else sys.stderr
    handler = logging.StreamHandler(stream)
    handler.setFormatter(
        JsonFormatter() if use_json else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    handler.addFilter(JobContextFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    if use_json:
        logging.captureWarnings(True)
        sys.excepthook = _log_uncaught


_captured: list[tuple[int, int, threading.Thread]] = []  # (descriptor, its original, reader) while captured
_handler_stream: list[TextIO] = []


def _capture_stdio() -> TextIO:
    """Point descriptors 1 and 2 at pipes whose lines are logged; returns a stream on the original stderr, for the
    log handler. Idempotent; undone at exit, after the readers have logged what was left in the pipes.

    Processes forked later (a prefork pool) inherit the pipes: their stray output is logged by this process.
    """
    if _captured:
        return _handler_stream[0]
    original_err = os.dup(2)
    stream = os.fdopen(original_err, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)
    _handler_stream.append(stream)
    for fd, name, level in ((1, "stdout", logging.INFO), (2, "stderr", logging.WARNING)):
        read_end, write_end = os.pipe()
        saved = os.dup(fd)
        os.dup2(write_end, fd)
        os.close(write_end)
        reader = threading.Thread(
            target=_relay, args=(read_end, logging.getLogger(name), level), name=f"relay-{name}", daemon=True
        )
        reader.start()
        _captured.append((fd, saved, reader))
    for text in (sys.stdout, sys.stderr):
        reconfigure = getattr(text, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(line_buffering=True)
    atexit.register(_release_stdio)
    return stream


def _relay(read_end: int, logger: logging.Logger, level: int) -> None:
    with os.fdopen(read_end, "rb") as pipe:
        for raw in pipe:
            line = raw.decode(errors="replace").rstrip()
            if line.strip():
                try:
                    logger.log(level, "%s", line)
                except Exception:  # never let the relay die: a full pipe would block every writer
                    continue


def _release_stdio() -> None:
    """Give descriptors 1 and 2 back their originals, so the pipes end, and let the readers log the rest."""
    for text in (sys.stdout, sys.stderr):
        try:
            text.flush()
        except (OSError, ValueError):
            pass
    for fd, saved, _ in _captured:
        os.dup2(saved, fd)
    for _, _, reader in _captured:
        reader.join(timeout=1.0)


def _log_uncaught(kind: type[BaseException], error: BaseException, tb: TracebackType | None) -> None:
    if issubclass(kind, KeyboardInterrupt):
        sys.__excepthook__(kind, error, tb)
        return
    logging.getLogger("uncaught").critical(
        "%s", "".join(traceback.format_exception_only(kind, error)).strip(), exc_info=(kind, error, tb)
    )
