"""A job's frame index: where each frame of its target sits in time, counted once, at planning.

The planner counts the frames from the target's packets (``workers.video.frame_scan.scan_frames``) to cut the
chunks; the stitcher needs the same times to give a variable-rate output its timing, to cut a trimmed job's audio
and to pick the stills. It reads them from the index the planner stored beside the job's files
(``jobs/<job>/frames.json.gz``) instead of scanning the target again, so both steps work from one count. A job
planned before the index existed is scanned again, as it was then.
"""

from __future__ import annotations

import gzip
import json
import logging
from pathlib import Path

from shared.storage import Storage
from workers.video.frame_scan import frame_times

logger = logging.getLogger(__name__)

NAME = "frames.json.gz"


def encode(times: list[float]) -> bytes:
    """The index as compressed JSON (times in seconds, to the microsecond, as ffprobe writes them).

    >>> decode(encode([0.0, 0.033367, 0.0667]))
    [0.0, 0.033367, 0.0667]
    """
    return gzip.compress(json.dumps({"times": [round(t, 6) for t in times]}, separators=(",", ":")).encode())


def decode(data: bytes) -> list[float]:
    """The times of an index made by :func:`encode`.

    Raises:
        ValueError: the data is not such an index.
    """
    body = json.loads(gzip.decompress(data))
    times = body.get("times") if isinstance(body, dict) else None
    if not isinstance(times, list) or not all(isinstance(t, int | float) for t in times):
        raise ValueError("not a frame index")
    return [float(t) for t in times]


def store(storage: Storage, job_id: str, times: list[float], scratch: Path) -> None:
    """Store the frame ``times`` of a job's target beside its files."""
    local = scratch / f"{job_id}-{NAME}"
    local.write_bytes(encode(times))
    try:
        storage.upload(local, storage.job_url(job_id, NAME))
    finally:
        local.unlink(missing_ok=True)


def load(storage: Storage, job_id: str, target: Path, demuxer: str | None) -> list[float]:
    """The frame times the planner stored for the job; the target's (``target``, read with ``demuxer``) scanned
    again when the job was planned without an index."""
    url = storage.job_url(job_id, NAME)
    if not storage.exists(url):
        logger.info("job %s: no stored frame index; scanning the target again", job_id)
        return frame_times(target, demuxer=demuxer)
    with storage.open_read(url) as handle:
        return decode(handle.read())
