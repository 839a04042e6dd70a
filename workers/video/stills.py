"""Before/after stills: the same frames of the input and of the output, as small JPEGs beside the job's output.

The stitcher makes them once, at the end of the job, where both videos are local files already: the API never
decodes video (it would need ffmpeg on every request, and a copy of the files out of S3). A frame is found the
way chunks find their first frame (``workers.chunking``): seek to just before its timestamp, take one frame. So
the still of frame *k* of the output shows frame *k* of the input beside it.

Layout: ``jobs/<job>/stills/<i>-before.jpg``, ``<i>-after.jpg`` and ``stills.json`` (what the images show),
written last so that a manifest always names images that exist.
"""

from __future__ import annotations

import json
import logging
from bisect import bisect_right
from dataclasses import asdict, dataclass
from pathlib import Path

from shared.media import MediaInfo, probe
from workers.runtime import Runtime
from workers.video import ffmpeg

logger = logging.getLogger(__name__)

POINTS = (1 / 6, 1 / 2, 5 / 6)  # where in the video the stills are taken, as fractions of its frames
WIDTH = 640  # the widest a still is (smaller videos keep their size)
MANIFEST = "stills.json"
OUTPUT_DEMUXER = ffmpeg.MUXER_DEMUXER  # the stitched output is the farm's own MP4


@dataclass(frozen=True)
class Still:
    index: int
    frame: int  # the frame's number in the output, from 0
    seconds: float  # its time from the start of the output
    before: str  # file names beside the manifest
    after: str
    input_frame: int  # the input's frame shown at that time (``frame`` itself unless the job trims or resamples)


def input_frame(target_times: list[float], first: int, output_times: list[float], frame: int) -> int:
    """The input frame on screen when output ``frame`` is: the last of the input's frames from ``first`` on whose
    time (from frame ``first``'s) is not past the output frame's (from the output's first), a quarter of the
    input's smallest frame interval allowed for rounding.

    >>> input_frame([i / 30 for i in range(216)], 50, [i / 15 for i in range(50)], 10)
    70
    """
    at = output_times[frame] - output_times[0]
    gaps = [b - a for a, b in zip(target_times, target_times[1:], strict=False) if b > a]
    slack = min(gaps) / 4 if gaps else 0.0
    origin = target_times[first]
    found = bisect_right(target_times, origin + at + slack, lo=first) - 1
    return max(first, min(found, len(target_times) - 1))


def frames_at(total: int, points: tuple[float, ...] = POINTS) -> list[int]:
    """The frame numbers of the stills of a ``total``-frame video, distinct and in order.

    >>> frames_at(216), frames_at(1)
    ([36, 108, 180], [0])
    """
    return sorted({min(total - 1, int(total * p)) for p in points}) if total > 0 else []


def seek_seconds(times: list[float], frame: int, start_time: float) -> float:
    """Where to seek (input option ``-ss``) so that the first frame decoded is ``frame``: half the smallest frame
    interval before its timestamp, relative to the container's start."""
    if frame == 0:
        return 0.0
    gaps = [b - a for a, b in zip(times, times[1:], strict=False) if b > a]
    margin = min(gaps) / 2 if gaps else 0.0
    return max(0.0, times[frame] - start_time - margin)


def still_args(source: Path, seek: float, output: Path, demuxer: str) -> list[str]:
    """One frame at ``seek`` as a JPEG at most :data:`WIDTH` wide, keeping the aspect; ``source`` is read as a
    plain local file with ``demuxer`` forced (``shared.media.input_args``), as every read of a user's file is."""
    return ffmpeg.still_args(source, seek, output, demuxer, max_width=WIDTH)


def make(
    target: Path,
    output: Path,
    target_times: list[float],
    output_times: list[float],
    target_media: MediaInfo,
    folder: Path,
    first: int = 0,
) -> list[Still]:
    """Write the stills of ``output`` (an MP4 of the farm's own) and of the frames of ``target`` (described by
    ``target_media``, its frames at ``target_times``) shown at the same moments, into ``folder``. The output
    starts at input frame ``first`` (a trimmed job's first frame).

    Raises:
        FfmpegError: a frame could not be decoded or written.
    """
    output_start = probe(output, OUTPUT_DEMUXER).start_time
    stills = []
    for index, frame in enumerate(frames_at(len(output_times))):
        before, after = f"{index:02d}-before.jpg", f"{index:02d}-after.jpg"
        shown = input_frame(target_times, first, output_times, frame)
        seek = seek_seconds(target_times, shown, target_media.start_time)
        ffmpeg.run(still_args(target, seek, folder / before, target_media.demuxer), what="still")
        seek = seek_seconds(output_times, frame, output_start)
        ffmpeg.run(still_args(output, seek, folder / after, OUTPUT_DEMUXER), what="still")
        seconds = round(output_times[frame] - output_times[0], 3)
        stills.append(Still(index, frame, seconds, before, after, shown))
    (folder / MANIFEST).write_text(json.dumps({"stills": [asdict(s) for s in stills]}))
    return stills


def publish(rt: Runtime, job_id: str, folder: Path, stills: list[Still]) -> None:
    """Upload the stills made in ``folder``, the manifest last."""
    for still in stills:
        for name in (still.before, still.after):
            rt.storage.upload(folder / name, rt.storage.job_url(job_id, "stills", name))
    rt.storage.upload(folder / MANIFEST, rt.storage.job_url(job_id, "stills", MANIFEST))
