"""Cutting a video into frame-exact chunks.

Every frame of the input is in exactly one chunk. A chunk starts decoding at a seek time just before its first
frame's timestamp (half the smallest frame interval earlier), so float rounding can neither drop that frame nor
let the previous one in.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Sequence

from shared.jobs import ChunkPlan
from shared.settings import Settings

PIXEL_FREE = frozenset({"passthrough"})
"""Processors that never read or change pixels (``touches_pixels = False``): a chain of them is one ffmpeg process."""


def default_chunk_frames(fps: float, chunk_seconds: float) -> int:
    return max(1, math.ceil(fps * chunk_seconds))


def chunk_seconds_for(processors: Sequence[str], settings: Settings) -> float:
    """The default chunk length of a job that runs ``processors``.

    A chain that leaves the pixels alone (``passthrough``) renders each chunk in one ffmpeg process at close to
    ffmpeg's own speed, so what a chunk costs beyond that — starting the processes, the encoder's ramp-up, the
    stitch — weighs on it: such jobs get long chunks (``settings.pixel_free_chunk_seconds``; measured on a 30 s
    720p clip, one worker: 0.73× plain ffmpeg with 10 s chunks, 0.95× with 30 s). A face job costs seconds per
    frame, that fixed cost is noise, and what matters is that every worker gets a share of the video: its chunks
    are ``settings.chunk_seconds`` long.
    """
    if processors and all(name in PIXEL_FREE for name in processors):
        return settings.pixel_free_chunk_seconds
    return settings.chunk_seconds


def plan_chunks(
    times: Sequence[float],
    chunk_frames: int,
    start_time: float = 0.0,
    keyframes: Sequence[int] = (),
    frames: range | None = None,
    lead: int = 0,
) -> list[ChunkPlan]:
    """Chunks of ``chunk_frames`` frames over frames at presentation ``times`` (seconds, sorted): over all of
    them, or over the indices in ``frames`` (a trimmed job's range; a step of 1) only.

    With ``lead``, each chunk also says where to start decoding to read up to ``lead`` frames before its first
    one (a tracked job's look-behind, frames of the video before a trimmed range included), in the same decoder.

    With ``keyframes`` (display indices), each cut moves to the keyframe nearest to it within half a chunk, so
    a chunk starts where decoding can start and decodes no frame of the chunk before it (measured: per-chunk
    overhead of a 720p passthrough job fell from about 0.5 s to near zero).

    A last chunk shorter than a quarter of ``chunk_frames`` is merged into the one before it, so a stitch
    never waits on a sliver.

    >>> [(c.frame_start, c.frame_end) for c in plan_chunks([i / 10 for i in range(21)], 10)]
    [(0, 10), (10, 21)]
    >>> [(c.frame_start, c.frame_end) for c in plan_chunks([i / 10 for i in range(25)], 10, frames=range(5, 20))]
    [(5, 15), (15, 20)]
    """
    if chunk_frames < 1:
        raise ValueError("chunk_frames must be at least 1")
    span = frames if frames is not None else range(len(times))
    if span.step != 1 or span.start < 0 or span.stop > len(times):
        raise ValueError(f"frames {span} is not a range of the {len(times)} frames")
    first, total = span.start, len(span)
    if total == 0:
        return []
    gaps = [b - a for a, b in zip(times, times[1:], strict=False) if b > a]
    margin = min(gaps) / 2 if gaps else 0.0
    inside = [k - first for k in keyframes if first <= k < span.stop]
    bounds = _cuts(total, chunk_frames, inside)
    if len(bounds) > 1 and total - bounds[-1] < max(1, chunk_frames // 4):
        bounds.pop()
    bounds = [first + b for b in bounds] + [span.stop]

    def seek(frame: int) -> float:
        return 0.0 if frame == 0 else max(0.0, times[frame] - start_time - margin)

    return [
        ChunkPlan(
            index=i,
            frame_start=a,
            frame_end=b,
            seek_seconds=seek(a),
            lead_frames=min(lead, a),
            lead_seek_seconds=seek(a - min(lead, a)) if lead and a else None,
        )
        for i, (a, b) in enumerate(zip(bounds, bounds[1:], strict=False))
    ]


def _cuts(total: int, chunk_frames: int, keyframes: Sequence[int]) -> list[int]:
    if not keyframes:
        return list(range(0, total, chunk_frames))
    cuts, keys = [0], sorted(set(keyframes))
    while cuts[-1] + chunk_frames < total:
        wanted = cuts[-1] + chunk_frames
        low, high = cuts[-1] + max(1, chunk_frames // 2), wanted + chunk_frames // 2
        near = keys[bisect_left(keys, low) : bisect_right(keys, high)]
        cuts.append(min(near, key=lambda k: abs(k - wanted)) if near else wanted)
    return cuts


def bounded_chunk_frames(total: int, wanted: int, min_frames: int, max_chunks: int) -> int:
    """The chunk length to plan ``total`` frames with: ``wanted``, widened to at least ``min_frames`` and to as
    many frames as keep the job within ``max_chunks`` chunks.

    >>> bounded_chunk_frames(10_000, 1, 8, 1000), bounded_chunk_frames(600, 30, 8, 1000)
    (10, 30)
    """
    return max(wanted, min_frames, math.ceil(total / max_chunks), 1)
