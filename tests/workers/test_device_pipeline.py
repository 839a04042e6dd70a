"""The device path (torch, here on the CPU as in CI) gives the frames the OpenCV/numpy path gives: ≥ 40 dB PSNR
per frame on real footage, with faces really blurred, pixelated to the same pixels, and the debugger's marks drawn
in the same pixels and colours."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

from shared.options import FaceOptions
from shared.processes import child_env
from tests.support import mask_replicas
from tests.support.faces import cpu_settings, engine
from tests.support.replicas import install_replica
from workers.device.blurring import _reflect101, blur_faces_in_planes, gaussian_kernel, pixelate
from workers.device.colour import bgr_to_yuv420, yuv420_to_bgr, yuv420_to_bgr_hwc
from workers.device.debugging import disc, draw_marks, glyphs, outline
from workers.device.feed import DeviceFrames
from workers.device.pipeline import DeviceBlur
from workers.faces.detection import Face, FaceDetector
from workers.faces.landmarks import FaceLandmarker
from workers.processors.face_blur import blur_faces, face_region, grown_region
from workers.processors.face_debugger import BOX_COLOUR, FONT, draw_faces, font_scale
from workers.video.ffmpeg import decode_args

STRENGTH = 0.5


def _planes(clip: Path, frames: int) -> np.ndarray:
    raw = subprocess.run(decode_args(clip, 0, frames, "yuv420p"), capture_output=True, check=True, env=child_env())
    width, height = (int(v) for v in subprocess.run(
        ["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries", "stream=width,height", "-of", "csv=p=0",
         str(clip)], capture_output=True, text=True, check=True,
    ).stdout.strip().split(","))  # fmt: skip
    return np.frombuffer(raw.stdout, np.uint8).reshape(frames, height * 3 // 2, width).copy()


def _psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(255**2 / mse)


@pytest.fixture(scope="module")
def detector(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> FaceDetector:
    models = tmp_path_factory.mktemp("models")
    shutil.copy(data_dir / "models" / "yunet_2023mar.onnx", models / "yunet_2023_mar.onnx")
    settings = cpu_settings(models, models_dir=models, allow_model_hash_mismatch=True)
    return FaceDetector.load(FaceOptions(), settings)


def test_opencvs_kernels_and_border_are_the_ones_the_device_blurs_with() -> None:
    for side in (3, 5, 7, 9, 11, 31, 151):
        expected = cv2.getGaussianKernel(side, 0).ravel()
        assert np.allclose(gaussian_kernel(side, torch.device("cpu")).numpy(), expected, atol=1e-6), side
    # gfedcb|abcdefgh|gfedcba, also when the border is longer than the side
    assert _reflect101(4, 5, torch.device("cpu")).tolist() == [1, 2, 3, 2, 1, 0, 1, 2, 3, 2, 1, 0, 1, 2]


def test_colour_conversion_is_opencvs_to_the_bit_both_ways(data_dir: Path) -> None:
    # the same pixels on both paths: the detector finds the same faces, the encoder gets the same frames
    for clip, frames in (("d18.mp4", 4), ("crowd_1080p.mp4", 2)):
        planes = _planes(data_dir / "media" / clip, frames)
        reference = np.stack([cv2.cvtColor(frame, cv2.COLOR_YUV2BGR_I420) for frame in planes])
        assert np.array_equal(yuv420_to_bgr_hwc(torch.from_numpy(planes)).numpy(), reference), clip
        assert np.array_equal(yuv420_to_bgr(torch.from_numpy(planes)).permute(0, 2, 3, 1).numpy(), reference), clip
        noisy = np.random.default_rng(0).integers(0, 256, reference.shape, dtype=np.uint8)  # chroma varies in blocks
        for frame_set in (reference, noisy):
            back = bgr_to_yuv420(torch.from_numpy(frame_set).permute(0, 3, 1, 2).float()).numpy()
            expected = np.stack([cv2.cvtColor(frame, cv2.COLOR_BGR2YUV_I420) for frame in frame_set])
            assert np.array_equal(back, expected), clip


def test_a_region_stored_back_gives_the_planes_of_the_whole_frame_converted_on_the_host_and_on_a_device(
    data_dir: Path,
) -> None:
    """A stage rewrites a region of the BGR frames and stores it back into the planes: OpenCV's conversion where
    the frames are the host's memory (the CPU), torch's where they are a device's; both give the planes of the whole
    rewritten frame converted, to the bit."""
    planes = _planes(data_dir / "media" / "d18.mp4", 2)
    bgr = np.stack([cv2.cvtColor(frame, cv2.COLOR_YUV2BGR_I420) for frame in planes])
    host = DeviceFrames(torch.from_numpy(planes.copy()), bgr.copy())  # the CPU's: BGR a view of the host's frames
    device = DeviceFrames(torch.from_numpy(planes.copy()), bgr.copy(), torch.from_numpy(bgr.copy()).permute(0, 3, 1, 2))
    assert host.shared and not device.shared
    rng = np.random.default_rng(1)
    for index, (x1, y1, x2, y2) in enumerate([(37, 51, 200, 190), (0, 1, 480, 33), (301, 300, 480, 480)]):
        frame = index % 2
        patch = torch.from_numpy(rng.integers(0, 256, (3, y2 - y1, x2 - x1), dtype=np.uint8))
        for frames in (host, device):
            frames.bgr[frame, :, y1:y2, x1:x2] = patch
            frames.store(frame, (x1, y1, x2, y2))
        assert np.array_equal(host.host, device.host)  # the device's region came down to the host's batch too
    expected = np.stack([cv2.cvtColor(frame, cv2.COLOR_BGR2YUV_I420) for frame in host.host])
    assert np.array_equal(host.planes.numpy(), expected)
    assert np.array_equal(device.planes.numpy(), expected)


@pytest.mark.parametrize(("clip", "frames"), [("d18.mp4", 12), ("crowd_1080p.mp4", 6)])
def test_face_blur_on_the_device_agrees_with_the_opencv_path(
    clip: str, frames: int, detector: FaceDetector, data_dir: Path
) -> None:
    planes = _planes(data_dir / "media" / clip, frames)
    host_frames = np.stack([cv2.cvtColor(frame, cv2.COLOR_YUV2BGR_I420) for frame in planes])
    faces = detector.detect(host_frames)
    host = np.stack([
        cv2.cvtColor(blur_faces(frame, found, STRENGTH), cv2.COLOR_BGR2YUV_I420)
        for frame, found in zip(host_frames, faces, strict=True)
    ])  # fmt: skip
    device = DeviceBlur(detector.detect, strength=STRENGTH, device="cpu")(planes)
    assert device.shape == planes.shape and device.dtype == np.uint8
    assert sum(len(found) for found in faces) >= frames, "faces found to blur"
    height = host_frames.shape[1]
    for index in range(frames):
        assert _psnr(device[index], host[index]) >= 40, f"frame {index}"
        inside = np.zeros(host_frames.shape[1:3], bool)
        for face in faces[index]:
            x1, y1, x2, y2 = face_region(face, host_frames.shape[1:3])
            inside[y1:y2, x1:x2] = True
        luma, before = device[index, :height], planes[index, :height]
        widened = np.zeros_like(inside)  # to whole 2×2 chroma blocks
        for face in faces[index]:
            x1, y1, x2, y2 = face_region(face, host_frames.shape[1:3])
            widened[y1 & ~1 : (y2 + 1) & ~1, x1 & ~1 : (x2 + 1) & ~1] = True
        assert np.array_equal(luma[~widened], before[~widened]), f"frame {index}: pixels outside the faces changed"
        if inside.any():
            assert _psnr(luma[inside], before[inside]) < 35, f"frame {index}: faces not blurred"


def _box(x1: float, y1: float, x2: float, y2: float) -> Face:
    return Face(box=np.array([x1, y1, x2, y2], np.float32), landmarks=np.zeros((5, 2), np.float32), score=0.9)


def _shifted(face: Face, dx: float, dy: float) -> Face:
    step = np.array([dx, dy], np.float32)
    return Face(box=face.box + np.tile(step, 2), landmarks=face.landmarks + step, score=face.score * 0.9)


def test_pixelation_on_the_device_is_opencvs_area_shrink_and_nearest_growth_to_the_bit() -> None:
    # every one of OpenCV's INTER_AREA paths: 2×2 blocks, other whole blocks, fractional cells (each axis)
    rng = np.random.default_rng(0)
    sizes = [(4, 4, 0.5), (40, 40, 0.4), (48, 36, 1.0), (30, 30, 0.5), (31, 57, 0.5), (7, 200, 0.3), (1, 9, 0.5)]
    heights, widths = rng.integers(3, 260, 40), rng.integers(3, 260, 40)
    strengths = rng.choice([0.1, 0.25, 0.5, 0.8, 1.0], 40)
    sizes += [(int(h), int(w), float(s)) for h, w, s in zip(heights, widths, strengths, strict=True)]
    for height, width, strength in sizes:
        frame = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
        host = blur_faces(frame, [_box(0, 0, width, height)], strength, style="pixelate")
        region = torch.from_numpy(frame).permute(2, 0, 1).float()
        device = pixelate(region, strength).permute(1, 2, 0).to(torch.uint8).numpy()
        assert np.array_equal(device, host), (height, width, strength)


@pytest.mark.parametrize(("clip", "frames", "margin"), [("d18.mp4", 8, 0.2), ("crowd_1080p.mp4", 3, 0.0)])
def test_pixelated_faces_on_the_device_are_the_opencv_paths(
    clip: str, frames: int, margin: float, detector: FaceDetector, data_dir: Path
) -> None:
    planes = _planes(data_dir / "media" / clip, frames)
    host_frames = np.stack([cv2.cvtColor(frame, cv2.COLOR_YUV2BGR_I420) for frame in planes])
    faces = detector.detect(host_frames)
    assert sum(len(found) for found in faces) >= frames, "faces found to pixelate"
    host = np.stack([
        blur_faces(frame, found, STRENGTH, style="pixelate", margin=margin)
        for frame, found in zip(host_frames, faces, strict=True)
    ])  # fmt: skip
    bgr = torch.from_numpy(host_frames.copy()).permute(0, 3, 1, 2)  # kept in step, as for a later processor
    device = blur_faces_in_planes(
        torch.from_numpy(planes.copy()), faces, STRENGTH, style="pixelate", margin=margin, bgr=bgr
    ).numpy()
    # the same pixels as the OpenCV path's frames, and its planes wherever a face was pixelated
    assert np.array_equal(bgr.permute(0, 2, 3, 1).numpy(), host)
    height, width = host_frames.shape[1:3]
    for index in range(frames):
        expected = cv2.cvtColor(host[index], cv2.COLOR_BGR2YUV_I420)
        assert _psnr(device[index], expected) >= 40, f"frame {index}"
        for face in faces[index]:
            x1, y1, x2, y2 = grown_region(face, margin, (height, width))
            box = (slice(y1 & ~1, y2 & ~1), slice(x1 & ~1, x2 & ~1))
            assert np.array_equal(device[index, :height][box], expected[:height][box]), f"frame {index}"


def test_opencvs_discs_rectangles_and_text_are_the_pixels_the_device_draws() -> None:
    def drawn(canvas: np.ndarray) -> set[tuple[int, int]]:
        ys, xs = np.nonzero(canvas)
        return set(zip(xs.tolist(), ys.tolist(), strict=True))

    def placed(pixels: np.ndarray, at: tuple[int, int], size: int) -> set[tuple[int, int]]:
        shifted = pixels + np.array(at)
        keep = (shifted >= 0).all(axis=1) & (shifted < size).all(axis=1)  # the frame clips what falls outside
        return {(int(x), int(y)) for x, y in shifted[keep]}

    for radius in range(1, 16):
        for centre in ((40, 40), (2, 79), (-3, 10)):
            canvas = np.zeros((80, 80), np.uint8)
            cv2.circle(canvas, centre, radius, 255, -1)
            assert drawn(canvas) == placed(disc(radius), centre, 80), (radius, centre)
    for thickness in range(1, 9):
        for corners in ((10, 12, 60, 50), (-5, 3, 30, 90), (20, 20, 21, 70)):
            canvas = np.zeros((80, 80), np.uint8)
            cv2.rectangle(canvas, corners[:2], corners[2:], 255, thickness)
            assert drawn(canvas) == placed(outline(corners, thickness), (0, 0), 80), (thickness, corners)
    for thickness in (1, 2, 4, 6):
        for text in ("0.87", "1.00", "0.50"):
            canvas = np.zeros((200, 200), np.uint8)
            cv2.putText(canvas, text, (17, 120), FONT, font_scale(thickness), 255, thickness)
            assert drawn(canvas) == placed(glyphs(text, thickness), (17, 120), 200), (thickness, text)


@pytest.mark.parametrize(("clip", "frames", "with_68"), [("d18.mp4", 6, True), ("crowd_1080p.mp4", 2, True)])
def test_the_debuggers_marks_on_the_device_are_the_opencv_paths(
    clip: str, frames: int, with_68: bool, detector: FaceDetector, data_dir: Path, tmp_path: Path
) -> None:
    planes = _planes(data_dir / "media" / clip, frames)
    host_frames = np.stack([cv2.cvtColor(frame, cv2.COLOR_YUV2BGR_I420) for frame in planes])
    faces = detector.detect(host_frames)
    assert sum(len(found) for found in faces) >= frames, "faces found to draw"
    points: list[list[np.ndarray]] = [[] for _ in faces]
    if with_68:  # the mean shape lifted from each face's five points: 68 real-looking points, some under the box
        lift = engine(install_replica(mask_replicas.fan_68_5(exact=True), "fan_68_5", tmp_path))
        found = FaceLandmarker(lift, None, min_score=0.0).landmarks(host_frames, faces)
        start = 0
        for index, count in enumerate(len(f) for f in faces):
            points[index], start = list(found.points[start : start + count]), start + count
    host = np.stack([
        draw_faces(frame, list(found), points[index]) if found else frame
        for index, (frame, found) in enumerate(zip(host_frames, faces, strict=True))
    ])  # fmt: skip
    on_device = DeviceFrames(torch.from_numpy(planes.copy()), host_frames.copy())
    draw_marks(on_device, faces, points)
    # the same pixels in the same colours as the OpenCV path's frames: boxes, points, scores
    assert np.array_equal(on_device.host, host)
    assert np.all(on_device.host == np.array(BOX_COLOUR, np.uint8), axis=-1).sum() > 300 * frames
    device = on_device.planes.numpy()
    height = host_frames.shape[1]
    if clip == "d18.mp4":  # the face, and a copy whose box's top crosses its eyes: drawn in the host's order
        moved = [[*found, *(_shifted(f, 6, float(f.landmarks[0, 1] - f.box[1])) for f in found)] for found in faces]
        twice = np.stack([draw_faces(frame, found) for frame, found in zip(host_frames, moved, strict=True)])
        overlapping = DeviceFrames(torch.from_numpy(planes.copy()), host_frames.copy())
        draw_marks(overlapping, moved, [])
        assert np.array_equal(overlapping.host, twice)
    for index in range(frames):
        expected = cv2.cvtColor(host[index], cv2.COLOR_BGR2YUV_I420)
        assert _psnr(device[index], expected) >= 40, f"frame {index}"
        marked = np.any(host[index] != host_frames[index], axis=-1)
        assert np.array_equal(device[index, :height][marked], expected[:height][marked]), f"frame {index}"
