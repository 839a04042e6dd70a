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

Each job's wall time and CPU time (this process, where the job runs, and its ffmpeg children) are printed; on a
busy machine the CPU times are the steadier figure.

    .venv/bin/python -m benchmarks.face_tracks [--clip ../shared/data/media/crowd_1080p.mp4] [--chunk-frames 50]
        [--gop 25] [--repeat 2] [--no-strict]
"""

from __future__ import annotations

import argparse
import resource
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from statistics import median
from typing import Any

import numpy as np

from shared.media import probe
from shared.options import FaceOptions, JobOptions
from tests.support.media import read_frames
from tests.support.replicas import replica_settings
from workers.faces.detection import FaceDetector
from workers.faces.tracking import FaceTracker
from workers.local import run_local


def _job(clip: Path, models: Path, work: Path, chunk_frames: int, face: dict[str, Any], keyframe_cuts: bool) -> Cost:
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
    started, cpu = time.perf_counter(), _cpu()
    result = run_local(target=clip, sources=[], output=work / "out.mp4", options=options, workers=1, settings=settings)
    assert result.status == "succeeded", result
    return Cost(time.perf_counter() - started, _cpu() - cpu)


def _cpu() -> float:
    """CPU seconds of this process (the job runs in it, on threads) and of its finished children (ffmpeg)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@dataclass(frozen=True)
class Cost:
    """A job's wall time and CPU time (the CPU time barely moves with other load on the machine)."""

    wall: float
    cpu: float


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("../shared/data"))
    parser.add_argument("--clip", type=Path, default=None)
    parser.add_argument("--chunk-frames", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=1, help="runs of each job, interleaved; the best counts")
    parser.add_argument("--gop", type=int, default=0, help="re-encode with a keyframe every GOP frames first")
    parser.add_argument("--no-strict", action="store_true", help="leave out the strict job (the slowest)")
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
        kinds = {"off": {"tracking": False, "blur_strict": False}, "on": {"blur_strict": False}, "strict": {}}
        if args.no_strict:
            del kinds["strict"]
        runs: dict[str, list[Cost]] = {kind: [] for kind in kinds}
        for _ in range(args.repeat):  # interleaved, so that a burst of other load weighs on every kind alike
            for kind, face in kinds.items():
                runs[kind].append(_job(clip, models, work, args.chunk_frames, face, cuts))
        best = {kind: Cost(min(c.wall for c in costs), min(c.cpu for c in costs)) for kind, costs in runs.items()}
        middle = {k: Cost(median(c.wall for c in costs), median(c.cpu for c in costs)) for k, costs in runs.items()}
        off, on = best["off"], best["on"]

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
    print(f"best of {args.repeat}; wall s (CPU s)")
    print(f"tracker alone: {tracking:.3f} s = {tracking / on.cpu:.2%} of the tracked job's CPU time ({on.cpu:.1f} s)")
    print(
        f"face_blur, tracking off: {off.wall:.1f} ({off.cpu:.1f}); on: {on.wall:.1f} ({on.cpu:.1f}); "
        f"on/off = {on.wall / off.wall:.3f} ({on.cpu / off.cpu:.3f})"
    )
    print(
        f"medians of {args.repeat}: on/off = {middle['on'].wall / middle['off'].wall:.3f} "
        f"({middle['on'].cpu / middle['off'].cpu:.3f})"
    )
    for kind, costs in runs.items():
        print(f"  {kind}: " + ", ".join(f"{c.wall:.1f} ({c.cpu:.1f})" for c in costs))
    if strict := best.get("strict"):
        print(
            f"face_blur strict (default): {strict.wall:.1f} ({strict.cpu:.1f}); "
            f"strict/off = {strict.wall / off.wall:.2f} ({strict.cpu / off.cpu:.2f})"
        )


if __name__ == "__main__":
    main()
