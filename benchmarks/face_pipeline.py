"""The face pipeline on CPU: what batching across frames buys, and end-to-end fps of a face_swapper job.

1. Swapper stage with a full-size inswapper_128 replica (the real layer widths, ≈174.6 GMAC per face, random
   weights): faces/s at batch 1 (one face at a time, as the single-machine tools run it) vs 8 vs 32, the same
   faces, side by side in one run.
2. ``face_swapper`` on ``crowd_1080p.mp4`` (up to 10 faces a frame) through ``swapfarm run`` with 1 and 2 workers:
   the real YuNet detector, an ArcFace replica, and a reduced-width inswapper replica (``--e2e-width``) so the run
   stays short on a laptop CPU.

    .venv/bin/python -m benchmarks.face_pipeline [--faces 32] [--e2e-width 0.25] [--data ../shared/data]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from shared.options import JobOptions
from tests.support.replicas import arcface_w600k_r50, install_replica, inswapper_128, replica_settings
from workers.faces.swapping import FaceSwapper
from workers.local import run_local


def swapper_stage(models: Path, faces: int) -> None:
    install_replica(inswapper_128(width=1.0), "inswapper_128", models)
    swapper = FaceSwapper.load("inswapper_128", replica_settings(models))
    rng = np.random.default_rng(0)
    crops = rng.integers(0, 255, (faces, 128, 128, 3), dtype=np.uint8)
    latent = swapper.source_latent(rng.standard_normal((1, 512)).astype(np.float32))
    swapper.swap(crops[:1], latent)  # warm-up
    rates = {}
    for batch in (1, 8, 32):
        started = time.perf_counter()
        for start in range(0, faces, batch):
            swapper.swap(crops[start : start + batch], latent)
        rates[batch] = faces / (time.perf_counter() - started)
    print(f"swapper stage, full-size inswapper_128 replica, ONNX Runtime CPU, {faces} faces")
    for batch, rate in rates.items():
        print(f"  batch {batch:2d}: {rate:6.3f} faces/s  ({rate / rates[1]:.2f}x batch 1)")


def end_to_end(models: Path, data: Path, width: float, tmp: Path) -> None:
    models.mkdir(parents=True, exist_ok=True)
    shutil.copy(data / "models" / "yunet_2023mar.onnx", models / "yunet_2023_mar.onnx")
    install_replica(arcface_w600k_r50(), "arcface_w600k_r50", models)
    install_replica(inswapper_128(width=width), "inswapper_128_fp16", models)
    clip, source = data / "media" / "crowd_1080p.mp4", data / "media" / "s0.jpg"
    options = JobOptions.model_validate({"processors": ["face_swapper"], "preset": "fast", "chunk_frames": 26})
    results = {}
    for workers in (1, 2):
        settings = replica_settings(models, work_dir=tmp / f"work-{workers}", batch_size=8)
        started = time.perf_counter()
        result = run_local(
            target=clip, sources=[source], output=tmp / "out.mp4", options=options, workers=workers, settings=settings
        )
        assert result.status == "succeeded", result
        results[workers] = (result.frames_total or 0) / (time.perf_counter() - started)
    print(f"face_swapper on crowd_1080p.mp4 (1920x1080, up to 10 faces a frame), inswapper replica width {width}")
    for workers, fps in results.items():
        print(f"  {workers} worker(s): {fps:5.2f} fps  ({fps / results[1]:.2f}x 1 worker)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--faces", type=int, default=32)
    parser.add_argument("--e2e-width", type=float, default=0.25)
    parser.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    parser.add_argument("--skip-stage", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        if not args.skip_stage:
            swapper_stage(tmp / "stage-models", args.faces)
        end_to_end(tmp / "e2e-models", args.data, args.e2e_width, tmp)


if __name__ == "__main__":
    main()
