"""Worker log records carry the job and chunk they were written for, in the JSON lines the entry points write."""

from __future__ import annotations

import json
import logging
import threading

from cli.logs import JsonFormatter
from shared.log_context import JobContextFilter, job_context


def _line(message: str) -> dict[str, object]:
    record = logging.LogRecord("workers.rendering", logging.INFO, __file__, 1, message, None, None)
    JobContextFilter().filter(record)
    entry: dict[str, object] = json.loads(JsonFormatter().format(record))
    return entry


def test_records_inside_a_job_context_carry_its_ids_and_others_none() -> None:
    with job_context(job_id="j1", chunk_id="c1"):
        inside = _line("rendering")
        with job_context(job_id="j1"):
            stitch = _line("stitching")
    outside = _line("idle")
    assert (inside["job_id"], inside["chunk_id"]) == ("j1", "c1")
    assert stitch["job_id"] == "j1" and "chunk_id" not in stitch
    assert "job_id" not in outside and "chunk_id" not in outside


def test_the_context_belongs_to_one_thread() -> None:
    seen: list[dict[str, object]] = []
    with job_context(job_id="j1", chunk_id="c1"):
        thread = threading.Thread(target=lambda: seen.append(_line("elsewhere")))
        thread.start()
        thread.join()
    assert "job_id" not in seen[0]
