"""The frames as 4:2:0 planes on a frame back-end vs whole BGR frames (the OpenCV path) on ``crowd_1080p.mp4``, side
by side.

First a chunk end to end as a job renders it (:mod:`workers.rendering`: the decoder's pipe, tracks, the chain's
stages, the encoder's pipe; no database or storage), for ``face_blur`` (the job's default options: tracks, strict
margin) and ``face_swapper`` (a replica inswapper at reduced width, on ONNX Runtime in both paths, so that the
ratio is the frame path's: the swapper costs the same on both). Then ``face_blur``'s pixel work alone:

Both take the chunk's 4:2:0 planes as the decoder's pipe gives them and hand 4:2:0 planes to the encoder's pipe:
the OpenCV path converts whole frames to BGR and back around the blur of every detected face; the planes' back-end
converts the faces' regions only. Printed per frame, with and without the
detection (the same YuNet model through ONNX Runtime in both, and, as a third column, the planes with their
detection on the device: the converted model, batched, decode and NMS in torch), and the ratio torch / OpenCV.
Then the pixel stages of ``face_blur`` pixelating and of ``face_debugger``, on the same detections, planes to
planes: the host's (whole frames converted, OpenCV on the BGR frames) vs the device's (the faces' regions of the
planes; the marks drawn into the device's BGR frames and their regions stored back into the planes), and the
host's stage alone.
Then detection alone: the host's (OpenCV letterbox, ONNX Runtime one frame at a time, numpy decode, OpenCV NMS) vs
the device's (:class:`workers.faces.device_detection.DeviceDetector`), per detector. The end-to-end chunk compares
the same three, and how close each planes path's output is to the OpenCV path's (PSNR of the decoded outputs). The
planes go to the back-end of ``--device`` (:func:`workers.frames.choice.backend_for`: the host back-end on the CPU,
torch's on ``cuda``); the OpenCV path always runs on the host.

    .venv/bin/python -m benchmarks.device_pipeline [--frames 24] [--batch 8] [--data ../shared/data] [--no-chunk]
        [--stages-only] [--chunk-only] [--device cuda]
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

from shared.options import BlurStyle, FaceOptions, JobOptions
from tests.support.faces import cpu_settings
from tests.support.media import psnr
from tests.support.replicas import arcface_w600k_r50, install_replica, inswapper_128, replica_settings
from workers.faces.detection import Face, FaceDetector
from workers.faces.device_detection import DeviceDetector, converted_engine, detection_on_feed
from workers.faces.track_feed import TrackFeed
from workers.frames.choice import backend_for, make_backend
from workers.frames.feed import FrameFeed
from workers.frames.torch import TorchBackend
from workers.pipeline import face_chain, run_stages, stages_of
from workers.processors import Processor, ProcessorContext, build
from workers.processors.face_blur import blur_faces, hide_faces
from workers.processors.face_debugger import FaceDebuggerProcessor, Located, draw_faces
from workers.video.ffmpeg import decode_args
from workers.video.pipes import FrameReader, FrameWriter

STRENGTH = 0.5
Faces = Sequence[Sequence[Face]]


def opencv_path(planes: np.ndarray, faces: Faces | None, detect: Callable[[np.ndarray], Faces]) -> np.ndarray:
    frames = np.stack([cv2.cvtColor(frame, cv2.COLOR_YUV2BGR_I420) for frame in planes])
    found = faces if faces is not None else detect(frames)
    pairs = zip(frames, found, strict=True)
    return np.stack([cv2.cvtColor(blur_faces(frame, list(f), STRENGTH), cv2.COLOR_BGR2YUV_I420) for frame, f in pairs])


def torch_path(
    planes: np.ndarray, faces: Faces | None, detect: Callable[[np.ndarray], Faces], device: str = "cpu"
) -> np.ndarray:
    raw = torch.from_numpy(planes.copy()).to(device)
    if faces is None:  # the detector's frames as the render path makes them (workers/frames/feed.py)
        faces = detect(next(FrameFeed(make_backend(backend_for(device))).frames([planes], keep=False)))
    return _hidden_in_planes(raw, faces).cpu().numpy()


def _hidden_in_planes(raw: torch.Tensor, faces: Faces, style: BlurStyle = "blur") -> torch.Tensor:
    """``face_blur`` on the torch back-end, in the planes ``raw`` (in place)."""
    backend = TorchBackend(str(raw.device))
    hide_faces(backend, backend.frames(planes=raw), faces, STRENGTH, style=style)
    return raw


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=24)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu", help="torch device the planes go to (cpu, cuda …)")
    parser.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    parser.add_argument("--no-chunk", action="store_true", help="skip the end-to-end chunk comparison")
    parser.add_argument("--stages-only", action="store_true", help="only the pixelate and debugger stages")
    parser.add_argument("--chunk-only", action="store_true", help="only the end-to-end chunk comparison")
    args = parser.parse_args()
    clip = args.data / "media" / "crowd_1080p.mp4"
    if not args.no_chunk and not args.stages_only:
        chunk_comparison(clip, args.data, args.frames, args.batch, args.repeats, args.device)
    if args.chunk_only:
        return
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
        default_threads = torch.get_num_threads()
        if args.device == "cpu":  # one thread per pixel stage, as the detector's runs on the CPU
            torch.set_num_threads(1)
        threads = torch.get_num_threads()
        stage_comparison(planes, batches, found, args.repeats, args.device)
        if args.stages_only:
            return
        print(f"face_blur on crowd_1080p.mp4: {args.frames} frames, {faces} faces, batches of {args.batch}, "
              f"torch {torch.__version__}, {args.device} ({threads} CPU threads; best of {args.repeats})")  # fmt: skip
        on_device = DeviceDetector(detector, converted_engine(models / "yunet_2023_mar.onnx", args.device))
        for label, with_detection in (("without detection", False), ("with detection", True)):
            rates = {}
            device_path = partial(torch_path, device=args.device)
            runs: list[tuple[str, Callable[..., np.ndarray], Callable[[np.ndarray], Faces]]] = [
                ("OpenCV", opencv_path, detector.detect), ("torch", device_path, detector.detect)
            ]  # fmt: skip
            if with_detection:
                runs.append(("torch+det", device_path, on_device.detect))
            for name, run, detect in runs:
                best = float("inf")
                for _ in range(args.repeats):
                    started = time.perf_counter()
                    for batch, given in zip(batches, found, strict=True):
                        run(batch, None if with_detection else given, detect)
                    if args.device != "cpu":
                        torch.cuda.synchronize()
                    best = min(best, time.perf_counter() - started)
                rates[name] = best / args.frames * 1000
            print(f"  {label:18s} {_ratios(rates)}")
        torch.set_num_threads(default_threads)  # the detectors run with the worker's threads, as in the path
        detection_comparison(args.data, models, planes, args.batch, args.repeats, args.device)


def stage_comparison(
    planes: np.ndarray, batches: list[np.ndarray], found: list[Faces], repeats: int, device: str
) -> None:
    """``face_blur`` pixelating and ``face_debugger``'s drawing, host vs device, from 4:2:0 planes to 4:2:0 planes
    as the frame paths take and give them (the OpenCV path converts whole frames around its stage, the device
    path the marked regions only), then the host's stage alone (its frames already BGR): ms per frame."""
    faces = sum(len(f) for per_batch in found for f in per_batch)
    print(f"pixel stages on crowd_1080p.mp4: {len(planes)} frames, {faces} faces, {device} device "
          f"({torch.get_num_threads()} CPU threads; best of {repeats})")  # fmt: skip
    host_batches = [np.stack([cv2.cvtColor(f, cv2.COLOR_YUV2BGR_I420) for f in b]) for b in batches]

    def pixelated(frame: np.ndarray, f: Sequence[Face]) -> np.ndarray:
        return blur_faces(frame, list(f), STRENGTH, style="pixelate")

    def drawn(frame: np.ndarray, f: Sequence[Face]) -> np.ndarray:
        return draw_faces(frame, list(f))

    def on_host(stage: Callable[[np.ndarray, Sequence[Face]], np.ndarray], convert: bool) -> Callable[[int], None]:
        def run(index: int) -> None:
            for plane, bgr, f in zip(batches[index], host_batches[index], found[index], strict=True):
                frame = cv2.cvtColor(plane, cv2.COLOR_YUV2BGR_I420) if convert else bgr
                done = stage(frame, f)
                if convert:
                    cv2.cvtColor(done, cv2.COLOR_BGR2YUV_I420)

        return run

    def device_pixelate(index: int) -> None:
        raw = torch.from_numpy(batches[index].copy()).to(device)
        _hidden_in_planes(raw, found[index], style="pixelate")

    debugger = FaceDebuggerProcessor(None)  # type: ignore[arg-type]  # draws only: no detector needed

    def device_debugger(index: int) -> None:
        raw = torch.from_numpy(batches[index].copy()).to(device)
        backend = TorchBackend(str(raw.device))
        batch = backend.frames(planes=raw, bgr=backend.upload(host_batches[index]))
        debugger.draw(backend, batch, Located([list(f) for f in found[index]], [[] for _ in found[index]]))

    for name, stage, ours in (("pixelate", pixelated, device_pixelate), ("debugger", drawn, device_debugger)):
        times = {}
        runs = (("OpenCV", on_host(stage, True)), ("torch", ours), ("OpenCV stage alone", on_host(stage, False)))
        for label, run in runs:
            best = float("inf")
            for _ in range(repeats):
                started = time.perf_counter()
                for index in range(len(batches)):
                    run(index)
                if device != "cpu":
                    torch.cuda.synchronize()
                best = min(best, time.perf_counter() - started)
            times[label] = best / len(planes) * 1000
        print(f"  {name:9s} {_ratios(times)}")


def detection_comparison(data: Path, models: Path, planes: np.ndarray, batch: int, repeats: int, device: str) -> None:
    """Detection alone, host vs device, per detector on the same frames: ms per frame and the ratio."""
    frames = np.stack([cv2.cvtColor(f, cv2.COLOR_YUV2BGR_I420) for f in planes])
    on_device_frames = torch.from_numpy(frames).to(device)
    print(f"detection alone on {len(frames)} frames of crowd_1080p.mp4 (batches of {batch}, "
          f"{torch.get_num_threads()} threads; best of {repeats})")  # fmt: skip
    cases = [("yunet", "yunet_2023mar.onnx", "yunet_2023_mar.onnx"),
             ("scrfd", "scrfd_500m_bnkps.onnx", "scrfd_2.5g.onnx")]  # fmt: skip
    for family, file, registry_file in cases:
        shutil.copy(data / "models" / file, models / registry_file)
        options = FaceOptions.model_validate({"detector": family})
        host = FaceDetector.load(options, cpu_settings(models, models_dir=models, allow_model_hash_mismatch=True))
        ours = DeviceDetector(host, converted_engine(models / registry_file, device))
        ours.detect(on_device_frames[:batch])  # warm-up
        times = {}
        for label, detect, given in (("host", host.detect, frames), ("device", ours.detect, on_device_frames)):
            best = float("inf")
            for _ in range(repeats):
                started = time.perf_counter()
                for start in range(0, len(frames), batch):
                    detect(given[start : start + batch])
                best = min(best, time.perf_counter() - started)
            times[label] = best / len(frames) * 1000
        print(f"  {family:6s} host (ONNX Runtime) {times['host']:6.1f} ms/frame   device (torch) "
              f"{times['device']:6.1f} ms/frame   device/host {times['device'] / times['host']:.2f}x time")  # fmt: skip


def chunk_comparison(clip: Path, data: Path, frames: int, batch: int, repeats: int, device: str) -> None:
    """A chunk of ``frames`` frames through both paths, per processor: ms per frame and the ratio."""
    print(f"chunk end to end on {clip.name}: {frames} frames, batches of {batch}, planes on {backend_for(device)} "
          f"(torch {torch.__version__}, {torch.get_num_threads()} threads; best of {repeats})")  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        models = folder / "models"
        models.mkdir()
        shutil.copy(data / "models" / "yunet_2023mar.onnx", models / "yunet_2023_mar.onnx")
        install_replica(arcface_w600k_r50(), "arcface_w600k_r50", models)
        install_replica(inswapper_128(), "inswapper_128", models)
        settings = replica_settings(models, batch_size=batch)
        jobs = {
            "face_blur": {"processors": ["face_blur"]},
            "face_swapper": {"processors": ["face_swapper"], "face": {"swapper": "inswapper_128"}},
        }
        for name, job in jobs.items():
            options = JobOptions.model_validate(job)
            context = ProcessorContext(options=options, sources=[data / "media" / "s0.jpg"], settings=settings)
            processors = [build(p, context) for p in options.processors]
            detector = face_chain(processors)[0].detector
            converted = DeviceDetector(detector, converted_engine(models / "yunet_2023_mar.onnx", device))
            paths: dict[str, tuple[str, DeviceDetector | None] | None] = {
                "OpenCV": None, "torch": (device, None), "torch+det": (device, converted),
            }  # fmt: skip
            times = dict.fromkeys(paths, float("inf"))
            for _ in range(repeats):  # alternated, so that a busy spell of the machine falls on both
                for label, path in paths.items():
                    started = time.perf_counter()
                    _render(clip, processors, path, options, frames, batch, folder / f"{label}.mp4")
                    times[label] = min(times[label], (time.perf_counter() - started) / frames * 1000)
            print(f"  {name:13s} {_ratios(times)}")
            outputs = {label: _decoded(folder / f"{label}.mp4", frames) for label in paths}
            same = "   ".join(f"{label} {psnr(outputs[label], outputs['OpenCV']):.1f} dB" for label in paths if
                           label != "OpenCV")  # fmt: skip
            print(f"  {name:13s} PSNR against the OpenCV path's output (both decoded, 4:2:0): {same}", flush=True)


def _decoded(video: Path, frames: int) -> np.ndarray:
    """The 4:2:0 planes of ``video``'s first ``frames`` frames, as ffmpeg decodes them."""
    raw = subprocess.run(decode_args(video, 0, frames, "yuv420p"), capture_output=True, check=True).stdout
    return np.frombuffer(raw, np.uint8).reshape(frames, -1)


def _ratios(times: dict[str, float]) -> str:
    """ms per frame of each path, then each torch path's time over the OpenCV path's."""
    spent = "   ".join(f"{name} {ms:6.1f} ms/frame" for name, ms in times.items())
    ratios = "   ".join(
        f"{name}/OpenCV {ms / times['OpenCV']:.2f}x time" for name, ms in times.items() if name != "OpenCV"
    )
    return f"{spent}   {ratios}"


def _render(
    clip: Path,
    processors: list[Processor],
    path: tuple[str, DeviceDetector | None] | None,
    options: JobOptions,
    frames: int,
    batch: int,
    output: Path,
) -> None:
    """The render step's frame pipeline for one chunk from the clip's start (as ``workers.rendering._process``)."""
    planes = path is not None
    reader = FrameReader(clip, seek_seconds=0.0, frames=frames, width=1920, height=1080, batch_size=batch,
                         planes=planes)  # fmt: skip
    writer = FrameWriter(output, width=1920, height=1080, fps="25", options=options.encoder, planes=planes)
    staged = face_chain(processors)
    targeter = next((p.targeter for p in staged if p.targeter is not None), None)
    strict = "face_blur" in options.processors and options.face.blur_strict
    device, on = path if path is not None else (None, None)
    planes_feed = None if device is None else FrameFeed(make_backend(backend_for(device)))
    detector = staged[0].detector if on is None else on
    on_device = None if on is None or planes_feed is None else detection_on_feed(on, planes_feed)
    feed = TrackFeed(detector, targeter, options.face, strict=strict, batch_size=batch, on_device=on_device)
    with reader:
        chunk = reader if planes_feed is None else planes_feed.frames(reader)
        run_stages(feed.work((), chunk, frames), stages_of(processors, planes_feed, on), writer.write)
    writer.close()
    assert writer.frames_written == frames


if __name__ == "__main__":
    main()
