"""What chunk edges cost a tracked ``face_blur``'s detection: the tracked feed of each chunk (its look-behind and
look-ahead included) against detecting the clip's frames once, frame by frame — in frames detected and CPU time.

The job-level benchmark (``benchmarks.face_tracks``) times whole jobs, whose wall time a busy machine scatters by
more than the difference; this one runs the detector and the tracks alone, in this process, on frames decoded
beforehand, and counts CPU seconds (``time.process_time``), which other load barely moves. Chunks are cut every
``--chunk-frames`` frames and each gets the look-behind and look-ahead a render gives it (``TrackFeed.context``
frames each side, as far as the clip goes).

    .venv/bin/python -m benchmarks.face_track_feed [--clip ../shared/data/media/crowd_1080p.mp4]
        [--chunk-frames 50] [--frames 105]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from shared.options import JobOptions
from tests.support.media import read_frames
from tests.support.replicas import replica_settings
from workers.faces.detection import Face, FaceDetector
from workers.faces.track_feed import TrackFeed


def _batches(frames: np.ndarray, size: int = 8) -> list[np.ndarray]:
    return [frames[i : i + size] for i in range(0, len(frames), size)]


def _feed(detector: FaceDetector, options: JobOptions, strict: bool) -> TrackFeed:
    extra: dict[str, Any] = {}
    if "landmarks" in TrackFeed.__init__.__code__.co_varnames:  # a chain of face_blur alone reads no landmarks
        extra["landmarks"] = False
    return TrackFeed(detector, None, options.face, strict=strict, **extra)


class _Counting:
    """A finder that counts the frames it detects."""

    def __init__(self, finder: Any, counter: list[int]) -> None:
        self.finder, self.counter = finder, counter

    def detect(self, frames: Sequence[np.ndarray], score: float | None = None) -> list[list[Face]]:
        self.counter[0] += len(frames)
        return list(self.finder.detect(frames, score))


def measure(frames: np.ndarray, detector: FaceDetector, chunk: int, strict: bool) -> tuple[float, float, int, int]:
    """(CPU s of the chunked feeds, CPU s of frame-by-frame detection, frames the feeds detected, their context)."""
    options = JobOptions.model_validate({"processors": ["face_blur"], "face": {"blur_strict": strict}})
    reference = _feed(detector, options, strict)
    started = time.process_time()
    reference.finder.detect(list(frames), score=reference.limits.low)
    alone = time.process_time() - started
    counter = [0]
    started = time.process_time()
    context = 0
    for start in range(0, len(frames), chunk):
        stop = min(len(frames), start + chunk)
        feed = _feed(detector, options, strict)
        context = feed.context
        setattr(feed, "finder", _Counting(feed.finder, counter))  # noqa: B010  # counted
        behind = frames[max(0, start - context) : start]
        rest = frames[start : min(len(frames), stop + context)]
        assert sum(len(w.frames) for w in feed.work(_batches(behind), _batches(rest), stop - start)) == stop - start
    return time.process_time() - started, alone, counter[0], context


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("../shared/data"))
    parser.add_argument("--clip", type=Path, default=None)
    parser.add_argument("--chunk-frames", type=int, default=50)
    parser.add_argument("--frames", type=int, default=105, help="the clip's first frames to use")
    args = parser.parse_args()
    clip = args.clip or args.data / "media" / "crowd_1080p.mp4"
    frames = np.ascontiguousarray(read_frames(clip)[: args.frames, :, :, ::-1])
    with tempfile.TemporaryDirectory() as tmp:
        models = Path(tmp)
        shutil.copy(args.data / "models" / "yunet_2023mar.onnx", models / "yunet_2023_mar.onnx")
        detector = FaceDetector.load(JobOptions(processors=["face_blur"]).face, replica_settings(models))
        print(f"clip {clip.name}: {len(frames)} frames, chunks of {args.chunk_frames}; CPU seconds")
        for strict in (False, True):
            fed, alone, detected, context = measure(frames, detector, args.chunk_frames, strict)
            print(
                f"face_blur {'strict' if strict else 'plain, tracked'}: context {context} frames each side; "
                f"detected {detected} frames for {len(frames)} ({detected / len(frames):.3f}); "
                f"feeds {fed:.1f} s vs frame by frame {alone:.1f} s = {fed / alone:.3f}"
            )


if __name__ == "__main__":
    main()
