"""The frame enhancer's cost per frame: every tile of a batch of frames in one engine call, in calls of 8 and
one tile per call, and what the tiling itself (cutting and joining, on the CPU) costs of it.

``--frames`` frames of d18 (480², 4 tiles of 256 px each) are upscaled ×2 by a Real-ESRGAN replica
(tests/support/upscaler_replicas.py: a bilinear upscale plus a small convolutional branch of ``--width``
channels; the real RRDB network is far heavier, so these figures show the batching and the pre/post-processing,
not the real model's compute) on ONNX Runtime. Rounds alternate between the two ways so a busy machine slows
both alike; printed: ms per frame (median of the rounds) and the ratio one-tile-per-call / batched, measured
side by side.

    .venv/bin/python -m benchmarks.frame_enhancer [--frames 8] [--rounds 3] [--width 16]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from tests.support.faces import clip_frames
from tests.support.replicas import install_replica, replica_settings
from tests.support.upscaler_replicas import real_esrgan
from workers.engines.batching import FittedBatches
from workers.upscaling import FrameEnhancer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frames", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--width", type=int, default=16)
    args = parser.parse_args()
    frames = clip_frames("d18.mp4", slice(0, args.frames))
    with tempfile.TemporaryDirectory() as tmp:
        models = Path(tmp) / "models"
        install_replica(real_esrgan(2, residual=0.1, width=args.width), "real_esrgan_x2", models)
        enhancer = FrameEnhancer.load("real_esrgan_x2", replica_settings(models))
        enhancer.upscale(frames[:1])  # the session's first run
        tiles = enhancer.tiling.split(frames)
        ways = {"all tiles in one call": len(tiles), "8 tiles per call": 8, "one tile per call": 1}
        times: dict[str, list[float]] = {way: [] for way in [*ways, "tiling only"]}
        for _ in range(args.rounds):
            for way, limit in ways.items():
                enhancer.batches = FittedBatches(limit)
                started = time.perf_counter()
                enhancer.upscale(frames)
                times[way].append((time.perf_counter() - started) * 1000 / len(frames))
            started = time.perf_counter()
            upscaled = enhancer.tiling.split(frames).repeat(2, axis=1).repeat(2, axis=2)
            enhancer.tiling.join(upscaled, len(frames), 480, 480, scale=2)
            times["tiling only"].append((time.perf_counter() - started) * 1000 / len(frames))
    print(f"{args.frames} frames of 480x480, {len(tiles)} tiles, x2 replica of width {args.width}, ONNX Runtime CPU")
    medians = {way: statistics.median(values) for way, values in times.items()}
    for way, value in medians.items():
        print(f"  {way:<22} {value:8.1f} ms per frame")
    one = medians["one tile per call"]
    for way in list(ways)[:-1]:
        print(f"  one tile per call / {way}: {one / medians[way]:.2f}x")


if __name__ == "__main__":
    main()
