"""The torch frame back-end's colour conversions are OpenCV's to the bit, both ways, on real footage; and a region a
stage rewrites on either back-end reaches the planes as the whole rewritten frame converted (to the bit), and, on a
back-end of its own memory, the host's frames (:meth:`workers.processors.base.Work.synced`)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import cv2
import numpy as np
import torch

from shared.processes import child_env
from workers.frames.host import HostBackend
from workers.frames.torch import TorchBackend, bgr_to_yuv420, yuv420_to_bgr
from workers.processors.base import Work
from workers.video.ffmpeg import decode_args


def _planes(clip: Path, frames: int) -> np.ndarray:
    raw = subprocess.run(decode_args(clip, 0, frames, "yuv420p"), capture_output=True, check=True, env=child_env())
    width, height = (int(v) for v in subprocess.run(
        ["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries", "stream=width,height", "-of", "csv=p=0",
         str(clip)], capture_output=True, text=True, check=True,
    ).stdout.strip().split(","))  # fmt: skip
    return np.frombuffer(raw.stdout, np.uint8).reshape(frames, height * 3 // 2, width).copy()


def test_colour_conversion_is_opencvs_to_the_bit_both_ways(data_dir: Path) -> None:
    # the same pixels on both back-ends: the detector finds the same faces, the encoder gets the same frames
    for clip, frames in (("d18.mp4", 4), ("crowd_1080p.mp4", 2)):
        planes = _planes(data_dir / "media" / clip, frames)
        reference = np.stack([cv2.cvtColor(frame, cv2.COLOR_YUV2BGR_I420) for frame in planes])
        assert np.array_equal(yuv420_to_bgr(torch.from_numpy(planes)).numpy(), reference), clip
        noisy = np.random.default_rng(0).integers(0, 256, reference.shape, dtype=np.uint8)  # chroma varies in blocks
        for frame_set in (reference, noisy):
            back = bgr_to_yuv420(torch.from_numpy(frame_set)).numpy()
            expected = np.stack([cv2.cvtColor(frame, cv2.COLOR_BGR2YUV_I420) for frame in frame_set])
            assert np.array_equal(back, expected), clip
            assert np.array_equal(bgr_to_yuv420(torch.from_numpy(frame_set).float()).numpy(), expected), clip


def test_a_region_written_gives_the_planes_of_the_whole_frame_converted_on_both_back_ends(data_dir: Path) -> None:
    """A stage rewrites regions of the frames on the host back-end (the host's memory) and on the torch one (a
    device's, here CPU tensors): both give the planes of the whole rewritten frames converted, to the bit, and the
    torch back-end's regions come down to the host's frames once synced."""
    planes = _planes(data_dir / "media" / "d18.mp4", 2)
    bgr = np.stack([cv2.cvtColor(frame, cv2.COLOR_YUV2BGR_I420) for frame in planes])
    host_backend, torch_backend = HostBackend(), TorchBackend("cpu")
    host = Work(bgr.copy(), backend=host_backend)
    host.pixels = host_backend.frames(planes=planes.copy(), bgr=host.frames)
    device = Work(bgr.copy(), backend=torch_backend)
    device.pixels = torch_backend.frames(planes=torch.from_numpy(planes.copy()), bgr=torch.from_numpy(bgr.copy()))
    rng = np.random.default_rng(1)
    for index, box in enumerate([(37, 51, 200, 190), (0, 1, 480, 33), (301, 300, 480, 480)]):
        x1, y1, x2, y2 = box
        patch = rng.integers(0, 256, (y2 - y1, x2 - x1, 3), dtype=np.uint8)

        def paint(region: np.ndarray, patch: np.ndarray = patch) -> None:
            region[:] = patch

        for work in (host, device):
            assert work.backend is not None and work.pixels is not None
            work.backend.draw(work.pixels, index % 2, box, paint)
            work.synced()
        assert np.array_equal(host.frames, device.frames)  # the device's region came down to the host's frames too
    expected = np.stack([cv2.cvtColor(frame, cv2.COLOR_BGR2YUV_I420) for frame in host.frames])
    assert host.pixels is not None and device.pixels is not None
    assert np.array_equal(host.pixels.planes, expected)
    assert np.array_equal(torch_backend.download(device.pixels.planes), expected)
