"""What face tracks cost a ``face_blur`` job: the tracker's own time, and the job's wall time with and without
tracks, side by side on the same clip.

1. The tracker alone (association, gap filling, smoothing, decisions) replayed over the detections of every frame
   of the clip, against the wall time of the whole job with tracking on.
2. The job with ``tracking`` off vs on (and strict off both times, so the anonymiser's extra detection passes do
   not hide the difference): what tracks cost end to end, look-behind and look-ahead frames of each chunk included.
3. The strict job (the default: tracks, the detection sweep, doubtful faces kept), for scale.

With ``--gop N`` the clip is first re-encoded with a keyframe every ``N`` frames and the jobs are planned as a job
that names no ``chunk_frames`` is (chunks of about ``--chunk-frames`` frames, cut near keyframes), so what the
look-behind costs to decode at a keyframe cut shows; without it, chunks are exactly ``--chunk-frames`` long.

    .venv/bin/python -m benchmarks.face_tracks [--clip ../shared/data/media/crowd_1080p.mp4] [--chunk-frames 50]
        [--gop 25]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from shared.media import probe
from shared.options import FaceOptions, JobOptions
from tests.support.media import read_frames
from tests.support.replicas import replica_settings
from workers.embedded import run_local
from workers.faces.detection import FaceDetector
from workers.faces.tracking import FaceTracker


def _job(clip: Path, models: Path, work: Path, chunk_frames: int, face: dict[str, Any], keyframe_cuts: bool) -> float:
    options = JobOptions.model_validate(
        {
            "processors": ["face_blur"],
            "encoder": {"preset": "ultrafast"},
            "face": face,
            **({} if keyframe_cuts else {"chunk_frames": chunk_frames}),
        }
    )
    fps = probe(clip).fps_value
    settings = replica_settings(models, work_dir=work, min_chunk_frames=1, chunk_seconds=chunk_frames / fps)
    started = time.perf_counter()
    result = run_local(target=clip, sources=[], output=work / "out.mp4", options=options, workers=1, settings=settings)
    assert result.status == "succeeded", result
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("../shared/data"))
    parser.add_argument("--clip", type=Path, default=None)
    parser.add_argument("--chunk-frames", type=int, default=50)
    parser.add_argument("--gop", type=int, default=0, help="re-encode with a keyframe every GOP frames first")
    args = parser.parse_args()
    clip = args.clip or args.data / "media" / "crowd_1080p.mp4"
    with tempfile.TemporaryDirectory() as tmp:
        if args.gop:
            regular = Path(tmp) / "gop.mp4"
            subprocess.run(
                ["ffmpeg", "-v", "error", "-i", str(clip), "-c:v", "libx264", "-preset", "veryfast", "-crf", "16",
                 "-g", str(args.gop), "-keyint_min", str(args.gop), "-sc_threshold", "0", "-an", str(regular)],
                check=True,
            )  # fmt: skip
            clip = regular
        models = Path(tmp) / "models"
        models.mkdir()
        shutil.copy(args.data / "models" / "yunet_2023mar.onnx", models / "yunet_2023_mar.onnx")
        work = Path(tmp) / "work"
        work.mkdir()
        cuts = bool(args.gop)
        off = _job(clip, models, work, args.chunk_frames, {"tracking": False, "blur_strict": False}, cuts)
        on = _job(clip, models, work, args.chunk_frames, {"blur_strict": False}, cuts)
        strict = _job(clip, models, work, args.chunk_frames, {}, cuts)

        options = FaceOptions()
        detector = FaceDetector.load(options, replica_settings(models))
        frames = read_frames(clip)[:, :, :, ::-1]
        detections = [detector.detect_frame(np.ascontiguousarray(frame), options.track_score) for frame in frames]
        tracker = FaceTracker(high=options.detector_score, low=options.track_score, max_gap=options.track_gap)
        started = time.perf_counter()
        for faces in detections:
            tracker.update(faces)
            list(tracker.ready())
        list(tracker.flush())
        tracking = time.perf_counter() - started

    planned = f"about {args.chunk_frames}, cut near keyframes every {args.gop}" if args.gop else f"{args.chunk_frames}"
    print(f"clip {clip.name}: {len(frames)} frames, chunks of {planned}")
    print(f"tracker alone: {tracking:.3f} s = {tracking / on:.2%} of the tracked job's wall time ({on:.1f} s)")
    print(f"face_blur, tracking off: {off:.1f} s; on: {on:.1f} s; on/off = {on / off:.3f}")
    print(f"face_blur strict (default): {strict:.1f} s; strict/off = {strict / off:.2f}")


if __name__ == "__main__":
    main()
