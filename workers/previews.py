"""A preview before the long render: ``preview: N`` renders N frames spread over the job's frames first.

Each preview frame is a chunk of its own (one frame, cut out of the chunk that held it), so the frames the preview
rendered are the job's own chunks: approving the preview renders the other chunks, and the stitch takes them all
in order — no frame is rendered twice. The planner's chunks are otherwise unchanged, and every chunk still starts
decoding where the planner's seek rule says (``workers.chunking``).

Once the preview's chunks are done, the job waits in ``awaiting_approval`` (``shared.previewing.await_approval``) with
before/after stills of the preview frames (:func:`make_stills`), which the console shows.
"""

from __future__ import annotations

import json
import logging
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path

from sqlalchemy import select

from shared.db import session_scope
from shared.jobs import ChunkPlan
from shared.media import MediaInfo
from shared.models import Chunk
from workers.runtime import Runtime
from workers.video import ffmpeg, stills

logger = logging.getLogger(__name__)


def preview_frames(frames: range, count: int) -> list[int]:
    """``count`` frames spread evenly over ``frames`` (the middle of each of ``count`` equal parts), distinct.

    >>> preview_frames(range(100), 5), preview_frames(range(10, 13), 5)
    ([10, 30, 50, 70, 90], [10, 11, 12])
    """
    total = len(frames)
    if count <= 0 or total == 0:
        return []
    return sorted({frames.start + min(total - 1, (2 * i + 1) * total // (2 * count)) for i in range(count)})


def split(
    chunks: Sequence[ChunkPlan], picked: Sequence[int], times: Sequence[float], start_time: float
) -> list[ChunkPlan]:
    """The planner's ``chunks`` with each frame of ``picked`` cut out into a one-frame preview chunk, re-indexed in
    frame order. Seeks follow ``workers.chunking.plan_chunks``: half the smallest frame interval before a frame."""
    gaps = [b - a for a, b in zip(times, times[1:], strict=False) if b > a]
    margin = min(gaps) / 2 if gaps else 0.0

    def seek(frame: int) -> float:
        return 0.0 if frame == 0 else max(0.0, times[frame] - start_time - margin)

    def piece(chunk: ChunkPlan, start: int, end: int, preview: bool) -> ChunkPlan:
        lead = min(chunk.lead_frames, start)
        lead_seek = seek(start - lead) if lead else None
        return replace(
            chunk, frame_start=start, frame_end=end, seek_seconds=seek(start), lead_frames=lead,
            lead_seek_seconds=lead_seek, preview=preview,
        )  # fmt: skip

    wanted = sorted(set(picked))
    out: list[ChunkPlan] = []
    for chunk in chunks:
        cut = chunk.frame_start
        for frame in (f for f in wanted if chunk.frame_start <= f < chunk.frame_end):
            if frame > cut:
                out.append(piece(chunk, cut, frame, False))
            out.append(piece(chunk, frame, frame + 1, True))
            cut = frame + 1
        if cut < chunk.frame_end:
            out.append(piece(chunk, cut, chunk.frame_end, False))
    return [replace(c, index=i) for i, c in enumerate(out)]


def make_stills(rt: Runtime, job_id: str, target_url: str, media: MediaInfo) -> None:
    """Before/after stills of the preview's frames, where the console looks for a job's stills (the stitch
    replaces them with the whole output's). A failure is logged: the preview's chunks are what matters."""
    with session_scope(rt.db) as session:
        rows = session.execute(
            select(Chunk.index, Chunk.frame_start, Chunk.seek_seconds, Chunk.output_url)
            .where(Chunk.job_id == job_id, Chunk.preview.is_(True))
            .order_by(Chunk.index)
        ).all()
    try:
        with (
            rt.targets.local(rt.storage, target_url, rt.scratch) as target,
            tempfile.TemporaryDirectory(dir=rt.scratch) as tmp,
        ):
            folder = Path(tmp)
            made: list[stills.Still] = []
            for number, (_, frame, seek, url) in enumerate(rows):
                if url is None:
                    continue
                before, after = f"{number:02d}-before.jpg", f"{number:02d}-after.jpg"
                local = folder / f"{number:02d}.mp4"
                rt.storage.download(url, local)
                ffmpeg.run(stills.still_args(target, seek, folder / before, media.demuxer), what="still")
                ffmpeg.run(stills.still_args(local, 0.0, folder / after, stills.OUTPUT_DEMUXER), what="still")
                seconds = round(frame / media.fps_value, 3) if media.fps_value else 0.0
                made.append(stills.Still(number, frame, seconds, before, after, frame))
            (folder / stills.MANIFEST).write_text(json.dumps({"stills": [asdict(s) for s in made], "preview": True}))
            stills.publish(rt, job_id, folder, made)
    except Exception:
        logger.warning("job %s: no stills of its preview", job_id, exc_info=True)
