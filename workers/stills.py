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
from dataclasses import asdict, dataclass
from pathlib import Path

from shared.media import MediaInfo, input_args, probe
from workers import ffmpeg
from workers.runtime import Runtime

logger = logging.getLogger(__name__)

POINTS = (1 / 6, 1 / 2, 5 / 6)  # where in the video the stills are taken, as fractions of its frames
WIDTH = 640  # the widest a still is (smaller videos keep their size)
MANIFEST = "stills.json"
OUTPUT_DEMUXER = "mov"  # the stitched output is an MP4


@dataclass(frozen=True)
class Still:
    index: int
    frame: int  # the frame's number in the input (and the output), from 0
    seconds: float  # its time from the start of the video
    before: str  # file names beside the manifest
    after: str


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
    return [
        ffmpeg.FFMPEG,
        "-hide_banner",
        "-nostdin",
        "-loglevel",
        "error",
        "-y",
        "-ss",
        f"{seek:.6f}",
        *input_args(source, demuxer),
        "-map",
        "0:v:0",
        "-frames:v",
        "1",
        "-vf",
        f"scale='min({WIDTH},iw)':-2",
        "-q:v",
        "3",
        "-f",
        "image2",
        "-c:v",
        "mjpeg",
        str(output),
    ]


def make(
    target: Path,
    output: Path,
    target_times: list[float],
    output_times: list[float],
    target_media: MediaInfo,
    folder: Path,
) -> list[Still]:
    """Write the stills of ``target`` (described by ``target_media``) and ``output`` (the same frames, an MP4 of
    the farm's own) into ``folder``.

    Raises:
        FfmpegError: a frame could not be decoded or written.
    """
    output_start = probe(output, OUTPUT_DEMUXER).start_time
    stills = []
    for index, frame in enumerate(frames_at(min(len(target_times), len(output_times)))):
        before, after = f"{index:02d}-before.jpg", f"{index:02d}-after.jpg"
        seek = seek_seconds(target_times, frame, target_media.start_time)
        ffmpeg.run(still_args(target, seek, folder / before, target_media.demuxer), what="still")
        seek = seek_seconds(output_times, frame, output_start)
        ffmpeg.run(still_args(output, seek, folder / after, OUTPUT_DEMUXER), what="still")
        seconds = round(target_times[frame] - target_times[0], 3)
        stills.append(Still(index, frame, seconds, before, after))
    (folder / MANIFEST).write_text(json.dumps({"stills": [asdict(s) for s in stills]}))
    return stills


def publish(rt: Runtime, job_id: str, folder: Path, stills: list[Still]) -> None:
    """Upload the stills made in ``folder``, the manifest last."""
    for still in stills:
        for name in (still.before, still.after):
            rt.storage.upload(folder / name, rt.storage.job_url(job_id, "stills", name))
    rt.storage.upload(folder / MANIFEST, rt.storage.job_url(job_id, "stills", MANIFEST))
