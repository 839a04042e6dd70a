"""The torch device path vs the OpenCV/numpy path for ``face_blur`` on ``crowd_1080p.mp4``, side by side.

Both take the chunk's 4:2:0 planes as the decoder's pipe gives them and hand 4:2:0 planes to the encoder's pipe:
the OpenCV path converts whole frames to BGR and back around the blur of every detected face; the device path
converts the faces' regions only. Printed per frame, with and without the
detection (the same YuNet model through ONNX Runtime in both), and the ratio torch / OpenCV. The device path runs
on the CPU unless ``--device`` names another (``cuda``); the OpenCV path always runs on the host.

    .venv/bin/python -m benchmarks.device_pipeline [--frames 24] [--batch 8] [--data ../shared/data]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

import cv2
import numpy as np
import torch

from shared.options import FaceOptions
from tests.support.faces import cpu_settings
from workers.device.blurring import blur_faces_in_planes
from workers.device.colour import yuv420_to_bgr
from workers.faces.detection import Face, FaceDetector
from workers.processors.face_blur import blur_faces
from workers.video.ffmpeg import decode_args

STRENGTH = 0.5
Faces = Sequence[Sequence[Face]]


def opencv_path(planes: np.ndarray, faces: Faces | None, detect: Callable[[np.ndarray], Faces]) -> np.ndarray:
    frames = np.stack([cv2.cvtColor(frame, cv2.COLOR_YUV2BGR_I420) for frame in planes])
    found = faces if faces is not None else detect(frames)
    pairs = zip(frames, found, strict=True)
    return np.stack([cv2.cvtColor(blur_faces(frame, f, STRENGTH), cv2.COLOR_BGR2YUV_I420) for frame, f in pairs])


def torch_path(
    planes: np.ndarray, faces: Faces | None, detect: Callable[[np.ndarray], Faces], device: str = "cpu"
) -> np.ndarray:
    raw = torch.from_numpy(planes.copy()).to(device)
    if faces is None:
        faces = detect(yuv420_to_bgr(raw).to(torch.uint8).permute(0, 2, 3, 1).contiguous().cpu().numpy())
    return blur_faces_in_planes(raw, faces, STRENGTH).cpu().numpy()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=24)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu", help="torch device of the device path (cpu, cuda …)")
    parser.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    args = parser.parse_args()
    clip = args.data / "media" / "crowd_1080p.mp4"
    raw = subprocess.run(decode_args(clip, 0, args.frames, "yuv420p"), capture_output=True, check=True).stdout
    planes = np.frombuffer(raw, np.uint8).reshape(args.frames, 1620, 1920).copy()
    with tempfile.TemporaryDirectory() as tmp:
        models = Path(tmp)
        shutil.copy(args.data / "models" / "yunet_2023mar.onnx", models / "yunet_2023_mar.onnx")
        detector = FaceDetector.load(
            FaceOptions(), cpu_settings(models, models_dir=models, allow_model_hash_mismatch=True)
        )
        batches = [planes[i : i + args.batch] for i in range(0, args.frames, args.batch)]
        found = [detector.detect(np.stack([cv2.cvtColor(f, cv2.COLOR_YUV2BGR_I420) for f in b])) for b in batches]
        faces = sum(len(f) for per_batch in found for f in per_batch)
        threads = torch.get_num_threads()
        print(f"face_blur on crowd_1080p.mp4: {args.frames} frames, {faces} faces, batches of {args.batch}, "
              f"torch {torch.__version__}, {args.device} ({threads} CPU threads; best of {args.repeats})")  # fmt: skip
        for label, with_detection in (("without detection", False), ("with detection", True)):
            rates = {}
            device_path = partial(torch_path, device=args.device)
            for name, run in (("OpenCV", opencv_path), ("torch", device_path)):
                best = float("inf")
                for _ in range(args.repeats):
                    started = time.perf_counter()
                    for batch, given in zip(batches, found, strict=True):
                        run(batch, None if with_detection else given, detector.detect)
                    if args.device != "cpu":
                        torch.cuda.synchronize()
                    best = min(best, time.perf_counter() - started)
                rates[name] = best / args.frames * 1000
            print(f"  {label:18s} OpenCV {rates['OpenCV']:6.1f} ms/frame   torch {rates['torch']:6.1f} ms/frame   "
                  f"torch/OpenCV {rates['torch'] / rates['OpenCV']:.2f}x time")  # fmt: skip


if __name__ == "__main__":
    main()
