"""The frame feed (:class:`workers.frames.feed.FrameFeed`) on the torch back-end, in the flow a GPU takes — planes
uploaded once, converted on the device, the device's planes and BGR kept and handed to the stages, the BGR
downloaded once for the host stages — run here on CPU tensors standing in for the device: a chunk renders the frames
the host back-end's flow renders, each frame goes up once, and the tracks' detection takes the device's frames."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
import torch

from shared.options import JobOptions
from shared.processes import child_env
from tests.support.media import psnr
from tests.support.replicas import arcface_w600k_r50, install_replica, inswapper_128, replica_settings
from workers.faces.device_detection import DeviceDetector, detection_on_feed, device_detector
from workers.faces.track_feed import TrackFeed, reads_landmarks
from workers.frames.backend import FrameBackend
from workers.frames.feed import FrameFeed
from workers.frames.host import HostBackend
from workers.frames.torch import TorchBackend
from workers.pipeline import face_chain, plane_refusal, run_stages, stages_of
from workers.processors import ProcessorContext, build
from workers.video.ffmpeg import decode_args

SIDE = 480  # d18.mp4
BEHIND, FRAMES, BATCH = 5, 10, 4  # look-behind and chunk frames; the reader's batches (the work items hold 3)
JOBS: dict[str, dict[str, Any]] = {
    "face_blur": {"processors": ["face_blur"], "face": {"blur_strict": False}},  # the plain detector, tracked
    "face_swapper": {"processors": ["face_swapper"], "face": {"swapper": "inswapper_128"}},
}


def _planes(clip: Path, frames: int) -> np.ndarray:
    raw = subprocess.run(decode_args(clip, 0, frames, "yuv420p"), capture_output=True, check=True, env=child_env())
    return np.frombuffer(raw.stdout, np.uint8).reshape(frames, SIDE * 3 // 2, SIDE).copy()


def _batches(planes: np.ndarray) -> list[np.ndarray]:
    return [planes[i : i + BATCH].copy() for i in range(0, len(planes), BATCH)]


class _Read:
    """The decoder's batches, counting the frames read from it (what the feed should upload, each once)."""

    def __init__(self, batches: list[np.ndarray]) -> None:
        self.batches, self.frames = batches, 0

    def __iter__(self) -> Iterator[np.ndarray]:
        for batch in self.batches:
            self.frames += len(batch)
            yield batch


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Path:
    folder = tmp_path_factory.mktemp("plane-feed") / "models"
    folder.mkdir()
    shutil.copy(data_dir / "models" / "yunet_2023mar.onnx", folder / "yunet_2023_mar.onnx")
    install_replica(arcface_w600k_r50(), "arcface_w600k_r50", folder)
    install_replica(inswapper_128(), "inswapper_128", folder)
    return folder


def _render(
    job: dict[str, Any], backend: FrameBackend[Any], models: Path, data_dir: Path, planes: np.ndarray
) -> tuple[np.ndarray, FrameFeed[Any], DeviceDetector, int]:
    """A chunk as planes as the render step wires it (workers/rendering.py): look-behind and chunk through the
    feed, tracked detection on the device detector, the chain's stages; its output planes."""
    settings = replica_settings(
        models, engine="torch", model_engines={"inswapper_128": "onnxruntime"}, device_detection="on"
    )
    options = JobOptions.model_validate(job)
    context = ProcessorContext(options=options, sources=[data_dir / "media" / "s0.jpg"], settings=settings)
    processors = [build(name, context) for name in options.processors]
    staged = face_chain(processors)
    detector = device_detector(staged[0].detector, settings, options, backend.device, width=SIDE, height=SIDE)
    assert detector is not None and plane_refusal(processors, SIDE, SIDE) is None
    feed = FrameFeed(backend)
    targeter = next((p.targeter for p in staged if p.targeter is not None), None)
    tracks = TrackFeed(
        detector, targeter, options.face, landmarks=reads_landmarks(options.processors), batch_size=3,
        on_device=detection_on_feed(detector, feed),
    )  # fmt: skip
    behind, chunk = _Read(_batches(planes[:BEHIND])), _Read(_batches(planes[BEHIND:]))
    out: list[np.ndarray] = []
    work = tracks.work(feed.frames(behind, keep=False), feed.frames(chunk, taken=FRAMES), FRAMES)
    run_stages(work, stages_of(processors, feed, detector), out.append)
    return np.concatenate(out), feed, detector, behind.frames + chunk.frames


@pytest.mark.parametrize("job", list(JOBS))
def test_the_gpus_flow_renders_the_cpus_frames_uploading_each_frame_once(
    job: str, models: Path, data_dir: Path
) -> None:
    planes = _planes(data_dir / "media" / "d18.mp4", BEHIND + FRAMES + 12)  # and the look-ahead the tracks read
    cpu, cpu_feed, cpu_detector, _ = _render(JOBS[job], HostBackend(), models, data_dir, planes)
    gpu, gpu_feed, gpu_detector, read = _render(JOBS[job], TorchBackend("cpu"), models, data_dir, planes)
    original = planes[BEHIND : BEHIND + FRAMES]
    assert cpu.shape == gpu.shape == original.shape
    for index in range(FRAMES):
        assert psnr(gpu[index], cpu[index]) >= 50, f"frame {index}"
        assert np.abs(cpu[index].astype(int) - original[index]).max() > 24, f"frame {index}: no face was changed"
    # The GPU's flow: every frame read went up once, was converted once and its BGR came down once; the tracks'
    # detection took the frames on the device (none handed to the detector from the host).
    counts = gpu_feed.counts
    assert read > BEHIND + FRAMES and counts.uploaded == counts.converted == counts.downloaded == read
    assert gpu_detector.uploaded == 0 and gpu_detector.batches > 0
    # Nothing is left on the device: the chunk's frames were taken, the look-ahead (context) let go once read.
    assert gpu_feed.held == 0
    # The host back-end's flow: OpenCV's conversion on the host: nothing to upload.
    assert cpu_feed.counts.uploaded == cpu_feed.counts.downloaded == 0
    assert cpu_detector.uploaded > 0


def test_the_feed_hands_out_the_tensors_it_converted_and_lets_the_look_behind_go(data_dir: Path) -> None:
    planes = _planes(data_dir / "media" / "d18.mp4", 10)
    feed = FrameFeed(TorchBackend("cpu"))
    behind = list(feed.frames([planes[:2].copy()], keep=False))  # read through: its batch is let go
    assert feed.on_device(behind[0]) is None
    yielded: list[tuple[np.ndarray, torch.Tensor]] = []
    for batch in feed.frames(_batches(planes[2:])):
        on_device = feed.on_device(batch)
        assert on_device is not None and on_device.shape == (len(batch), SIDE, SIDE, 3)
        assert np.array_equal(batch, on_device.numpy())
        assert not np.shares_memory(batch, on_device.numpy())  # the host's copy, as it comes down from a GPU
        yielded.append((batch, on_device))
    reference = np.stack([cv2.cvtColor(frame, cv2.COLOR_YUV2BGR_I420) for frame in planes[2:]])
    assert np.array_equal(np.concatenate([b for b, _ in yielded]), reference)  # OpenCV's values, to the bit
    first = feed.take(yielded[0][0][:3])  # within one batch: the very tensors converted, not copies
    assert first.bgr is not None and first.bgr.data_ptr() == yielded[0][1].data_ptr()
    spanning = feed.take(np.concatenate([yielded[0][0][3:], yielded[1][0][:2]]))  # over two batches: joined
    assert spanning.planes is not None and spanning.bgr is not None
    assert np.array_equal(spanning.planes.numpy(), planes[5:8])
    assert np.array_equal(spanning.bgr.numpy(), reference[3:6])
    assert feed.on_device(yielded[0][0]) is None  # taken whole: let go
    assert feed.counts.uploaded == feed.counts.converted == feed.counts.downloaded == 10


def test_on_the_host_back_end_nothing_is_copied(data_dir: Path) -> None:
    planes = _planes(data_dir / "media" / "d18.mp4", 4)
    feed = FrameFeed(HostBackend())
    (host,) = list(feed.frames([planes]))
    assert feed.on_device(host) is None  # the detector takes the host's frames: they are the back-end's
    taken = feed.take(host)
    assert taken.bgr is host
    assert taken.planes is not None and np.shares_memory(taken.planes, planes)
    assert feed.counts.uploaded == feed.counts.downloaded == 0 and feed.counts.converted == 4


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason=f"no GPU: torch {torch.__version__} sees no CUDA device")
@pytest.mark.parametrize("job", list(JOBS))
def test_on_a_gpu_the_chunk_renders_the_cpus_frames_uploading_each_frame_once(
    job: str, models: Path, data_dir: Path
) -> None:
    planes = _planes(data_dir / "media" / "d18.mp4", BEHIND + FRAMES + 12)
    cpu, *_ = _render(JOBS[job], HostBackend(), models, data_dir, planes)
    gpu, feed, detector, read = _render(JOBS[job], TorchBackend("cuda"), models, data_dir, planes)
    for index in range(FRAMES):  # the warps' floating point may differ in the last bits on the GPU
        assert psnr(gpu[index], cpu[index]) >= 40, f"frame {index}"
    assert feed.counts.uploaded == feed.counts.downloaded == read
    assert detector.uploaded == 0 and detector.batches > 0 and detector.compiled
