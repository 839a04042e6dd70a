"""``face_blur``'s pixel work on ``crowd_1080p.mp4`` from the decoder's 4:2:0 planes to the encoder's, side by side:

- ``OpenCV path``: the BGR frames (converted whole for the detector in every path) blurred with OpenCV, then
  converted whole back to 4:2:0 for the encoder;
- ``host back-end``: :func:`workers.processors.face_blur.hide_faces` on the planes, the faces' regions converted
  and written back (:class:`workers.frames.host.HostBackend`);
- ``torch back-end (cpu)``: the same on CPU tensors (:class:`workers.frames.torch.TorchBackend`), one OpenMP
  thread as the render path's pixel stages run;
- with ``--against REF``: the device path's blur of that commit (``workers/device/blurring.py``, before the frame
  back-ends), on one OpenMP thread as it ran in the render path: the fastest CPU path there was; and that
  commit's OpenCV path (``blur_faces`` of its ``workers/processors/face_blur.py``).

The faces are detected once (YuNet), with the job's default options (strict: boxes grown by ``blur_margin``). Best
of ``--repeats`` runs, ms per frame, and each time as a ratio of the host back-end's.

    .venv/bin/python -m benchmarks.frame_backends [--frames 24] [--batch 8] [--data ../shared/data] [--against main]
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import cv2
import numpy as np
import torch

from shared.options import FaceOptions
from tests.support.faces import cpu_settings
from workers.faces.detection import FaceDetector
from workers.faces.device_detection import calling_thread_on_one
from workers.frames.host import HostBackend
from workers.frames.torch import TorchBackend
from workers.processors.face_blur import blur_faces, hide_faces
from workers.video.ffmpeg import decode_args


def _old(ref: str, path: str, name: str) -> ModuleType:
    """The module at ``path`` as it was at ``ref``, imported as ``name`` (it imports only modules still here)."""
    source = subprocess.run(["git", "show", f"{ref}:{path}"], capture_output=True, check=True)
    folder = Path(tempfile.mkdtemp())
    (folder / f"{name}.py").write_bytes(source.stdout)
    spec = importlib.util.spec_from_file_location(name, folder / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=24)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--data", type=Path, default=Path("../shared/data"))
    parser.add_argument("--against", help="a git commit whose device path's blur to time beside")
    args = parser.parse_args()
    clip = args.data / "media" / "crowd_1080p.mp4"
    raw = subprocess.run(decode_args(clip, 0, args.frames, "yuv420p"), capture_output=True, check=True).stdout
    planes = np.frombuffer(raw, np.uint8).reshape(args.frames, 1620, 1920).copy()
    bgr = np.stack([cv2.cvtColor(frame, cv2.COLOR_YUV2BGR_I420) for frame in planes])
    with tempfile.TemporaryDirectory() as folder:
        models = Path(folder)
        shutil.copy(args.data / "models" / "yunet_2023mar.onnx", models / "yunet_2023_mar.onnx")
        options = FaceOptions()
        detector = FaceDetector.load(options, cpu_settings(models, models_dir=models, allow_model_hash_mismatch=True))
        faces = detector.detect(bgr)
    strength, margin = options.blur_strength, options.blur_margin
    batches = range(0, args.frames, args.batch)

    def opencv_path() -> None:
        for frame, found in zip(bgr, faces, strict=True):
            cv2.cvtColor(blur_faces(frame, found, strength, margin=margin), cv2.COLOR_BGR2YUV_I420)

    host = HostBackend()

    def host_backend() -> None:
        for start in batches:
            part = planes[start : start + args.batch].copy()
            hide_faces(host, host.frames(planes=part), faces[start : start + args.batch], strength, margin=margin)

    on_cpu = TorchBackend("cpu")

    def torch_backend() -> None:
        calling_thread_on_one()
        for start in batches:
            part = torch.from_numpy(planes[start : start + args.batch].copy())
            found = faces[start : start + args.batch]
            hide_faces(on_cpu, on_cpu.frames(planes=part), found, strength, margin=margin)

    runs: dict[str, Callable[[], None]] = {
        "host back-end": host_backend,
        "OpenCV path": opencv_path,
        "torch back-end (cpu)": torch_backend,
    }
    if args.against:
        old = _old(args.against, "workers/device/blurring.py", "old_blurring")
        old_blur = _old(args.against, "workers/processors/face_blur.py", "old_face_blur").blur_faces

        def old_opencv_path() -> None:
            for frame, found in zip(bgr, faces, strict=True):
                cv2.cvtColor(old_blur(frame, found, strength, margin=margin), cv2.COLOR_BGR2YUV_I420)

        def device_path() -> None:
            calling_thread_on_one()
            for start in batches:
                part = torch.from_numpy(planes[start : start + args.batch].copy())
                old.blur_faces_in_planes(part, faces[start : start + args.batch], strength, margin=margin)

        runs[f"device path at {args.against}"] = device_path
        runs[f"OpenCV path at {args.against}"] = old_opencv_path
    times = {name: float("inf") for name in runs}
    for _ in range(args.repeats):  # interleaved: the machine's load falls on every run alike
        for name, run in runs.items():
            started = time.perf_counter()
            run()
            times[name] = min(times[name], time.perf_counter() - started)
    count = sum(len(found) for found in faces)
    print(f"face_blur (strict defaults) on crowd_1080p.mp4: {args.frames} frames, {count} faces, "
          f"batches of {args.batch}, best of {args.repeats}")  # fmt: skip
    reference = times["host back-end"]
    for name, seconds in times.items():
        print(f"  {name:28s} {seconds / args.frames * 1000:7.2f} ms/frame  {seconds / reference:5.2f}x")


if __name__ == "__main__":
    main()
