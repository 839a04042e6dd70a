"""Logging for the entry points: plain lines on a terminal, one JSON object per line otherwise."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

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
    handler = logging.StreamHandler(sys.stderr)
    use_json = (not sys.stderr.isatty()) if json_lines is None else json_lines
    handler.setFormatter(
        JsonFormatter() if use_json else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    handler.addFilter(JobContextFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
