"""The frame back-end contract (workers/frames/backend.py), on every back-end: the host's (numpy/OpenCV), torch's
on CPU tensors, and torch's on CUDA where a GPU is lent. Each operation keeps the batch's planes and BGR view in
step, touches no pixel outside its region's 2x2 blocks, and agrees with the host back-end to a PSNR bound."""

from __future__ import annotations

from collections.abc import Callable

import cv2
import numpy as np
import pytest

from tests.support.faces import image
from tests.support.media import psnr
from workers.faces.alignment import box_mask, estimate_transform
from workers.frames.backend import FrameBackend, blur_shrink, even_box
from workers.frames.batch import Frames
from workers.frames.host import HostBackend

torch = pytest.importorskip("torch")
pytest.importorskip("kornia")

from workers.frames.torch import TorchBackend  # noqa: E402  (torch is optional)

HEIGHT, WIDTH = 48, 64
BOUND = 38.0  # dB: torch vs host on a region the operation rewrote


def _backends() -> list[object]:
    cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU lent to this run")
    return [
        pytest.param("host", id="host"),
        pytest.param("cpu", id="torch-cpu"),
        pytest.param("cuda", id="torch-cuda", marks=cuda),
    ]


@pytest.fixture(params=_backends())
def backend(request: pytest.FixtureRequest) -> FrameBackend[object]:
    name = request.param
    return HostBackend() if name == "host" else TorchBackend(name)  # type: ignore[return-value]


def _scene(count: int = 2) -> np.ndarray:
    """Smooth BGR frames with some texture: gradients, a ring, a stripe pattern."""
    ys, xs = np.mgrid[0:HEIGHT, 0:WIDTH].astype(np.float32)
    frames = []
    for index in range(count):
        b = 40 + 3 * xs + 10 * index
        g = 30 + 4 * ys
        r = 128 + 90 * np.sin(xs / 5 + index) * np.cos(ys / 7)
        frames.append(np.stack([b, g, r], axis=-1))
    return np.asarray(np.clip(np.stack(frames), 0, 255), np.uint8)


def _planes(bgr: np.ndarray) -> np.ndarray:
    return np.asarray(np.stack([cv2.cvtColor(frame, cv2.COLOR_BGR2YUV_I420) for frame in bgr]), np.uint8)


def _batch(backend: FrameBackend[object], *, planes: bool, bgr: bool) -> Frames[object]:
    scene = _scene()
    return backend.frames(
        planes=backend.upload(_planes(scene)) if planes else None, bgr=backend.upload(scene) if bgr else None
    )


def _host(backend: FrameBackend[object], frames: Frames[object]) -> Views:
    planes = backend.download(frames.planes) if frames.planes is not None else None
    bgr = backend.download(frames.bgr) if frames.bgr is not None else None
    return planes, bgr


Views = tuple[np.ndarray | None, np.ndarray | None]


def _reference(operation: Callable[[FrameBackend[object], Frames[object]], None], *, planes: bool, bgr: bool) -> Views:
    host = HostBackend()
    frames = _batch(host, planes=planes, bgr=bgr)  # type: ignore[arg-type]
    operation(host, frames)  # type: ignore[arg-type]
    return _host(host, frames)  # type: ignore[arg-type]


def test_upload_download_round_trip(backend: FrameBackend[object]) -> None:
    scene = _scene()
    assert np.array_equal(backend.download(backend.upload(scene)), scene)


def test_whole_frame_conversion_is_opencvs(backend: FrameBackend[object]) -> None:
    """The detector sees the same pixels on every back-end: the conversions are OpenCV's to the bit."""
    scene = _scene()
    planes = _planes(scene)
    bgr = backend.download(backend.to_bgr(backend.upload(planes)))
    expected = np.stack([cv2.cvtColor(frame, cv2.COLOR_YUV2BGR_I420) for frame in planes])
    assert np.array_equal(bgr, expected)
    assert np.array_equal(backend.download(backend.to_planes(backend.upload(expected))), _planes(expected))


def test_ensure_bgr_converts_once(backend: FrameBackend[object]) -> None:
    frames = _batch(backend, planes=True, bgr=False)
    first = backend.ensure_bgr(frames)
    assert backend.ensure_bgr(frames) is first
    assert (frames.height, frames.width, len(frames)) == (HEIGHT, WIDTH, 2)


def _ring(region: np.ndarray) -> None:
    cv2.circle(region, (14, 14), 6, (0, 0, 255), 2)


BOX = (13, 9, 41, 37)  # odd edges: the planes are rewritten in whole 2x2 blocks around it
INNER = (6, 6, 22, 22)
OPERATIONS: dict[str, Callable[[FrameBackend[object], Frames[object]], None]] = {
    "blur": lambda b, f: b.blur(f, 1, BOX, 9),
    "blur-soft": lambda b, f: b.blur(f, 1, BOX, 9, INNER),
    "blur-wide": lambda b, f: b.blur(f, 1, (0, 0, 64, 8), 31),  # a kernel longer than the region is tall
    "blur-long": lambda b, f: b.blur(f, 1, (3, 1, 64, 42), 61, (8, 8, 50, 32)),  # run shrunk (blur_shrink)
    "pixelate": lambda b, f: b.pixelate(f, 1, BOX, 7),
    "pixelate-soft": lambda b, f: b.pixelate(f, 1, BOX, 7, INNER),
    "fill": lambda b, f: b.fill(f, 1, BOX),
    "fill-soft": lambda b, f: b.fill(f, 1, BOX, INNER),
    "draw": lambda b, f: b.draw(f, 1, BOX, _ring),
}


@pytest.mark.parametrize("name", sorted(OPERATIONS))
@pytest.mark.parametrize("views", ["planes", "bgr", "both"])
def test_region_operation(backend: FrameBackend[object], name: str, views: str) -> None:
    """A region operation changes the region (and, in the planes, nothing beyond its 2x2 blocks), keeps both views
    in step, and agrees with the host back-end."""
    operation = OPERATIONS[name]
    planes, bgr = views in ("planes", "both"), views in ("bgr", "both")
    frames = _batch(backend, planes=planes, bgr=bgr)
    operation(backend, frames)
    got_planes, got_bgr = _host(backend, frames)
    want_planes, want_bgr = _reference(operation, planes=planes, bgr=bgr)
    scene = _scene()
    box = {"blur-wide": (0, 0, 64, 8), "blur-long": (3, 1, 64, 42)}.get(name, BOX)
    assert frames.written == [(1, box)], "the region rewritten is listed, for a copy elsewhere to take over"
    x1, y1, x2, y2 = even_box(box, HEIGHT, WIDTH)
    if got_bgr is not None:
        assert want_bgr is not None
        outside = np.ones((HEIGHT, WIDTH), bool)
        outside[box[1] : box[3], box[0] : box[2]] = False
        assert np.array_equal(got_bgr[0], scene[0]), "another frame changed"
        assert np.array_equal(got_bgr[1][outside], scene[1][outside]), "pixels outside the region changed"
        assert not np.array_equal(got_bgr[1], scene[1]), "the region did not change"
        assert psnr(got_bgr[1, box[1] : box[3], box[0] : box[2]], want_bgr[1, box[1] : box[3], box[0] : box[2]]) > BOUND
    if got_planes is not None:
        assert want_planes is not None
        original = _planes(scene)
        assert np.array_equal(got_planes[0], original[0])
        as_bgr = cv2.cvtColor(got_planes[1], cv2.COLOR_YUV2BGR_I420)
        before = cv2.cvtColor(original[1], cv2.COLOR_YUV2BGR_I420)
        outside = np.ones((HEIGHT, WIDTH), bool)
        outside[y1:y2, x1:x2] = False
        assert np.array_equal(as_bgr[outside], before[outside]), "planes outside the region's blocks changed"
        want = cv2.cvtColor(want_planes[1], cv2.COLOR_YUV2BGR_I420)
        assert psnr(as_bgr[y1:y2, x1:x2], want[y1:y2, x1:x2]) > BOUND
        if got_bgr is not None:  # both views hold the same frames: the planes are the BGR view's, converted
            assert np.array_equal(got_planes, _planes(got_bgr))


def _transforms(size: int) -> tuple[np.ndarray, np.ndarray]:
    """Two faces' arcface transforms: one in frame 0, one in frame 1 at the frame's edge."""
    points = np.array([[24, 20], [40, 20], [32, 28], [26, 36], [38, 36]], np.float32)
    edge = points + np.array([20, 8], np.float32)
    transforms = np.stack([estimate_transform(p, "arcface_112_v2", size) for p in (points, edge)])
    return transforms, np.array([0, 1], np.int64)


@pytest.mark.parametrize("views", ["planes", "bgr", "both"])
def test_crops(backend: FrameBackend[object], views: str) -> None:
    transforms, frame_of = _transforms(32)
    frames = _batch(backend, planes=views != "bgr", bgr=views != "planes")
    crops = backend.crops(frames, transforms, frame_of, 32)
    reference = HostBackend()
    seen = reference.to_bgr(_planes(_scene())) if views == "planes" else _scene()  # the BGR view made of planes
    expected = reference.crops(reference.frames(bgr=seen), transforms, frame_of, 32)
    assert crops.shape == (2, 32, 32, 3) and crops.dtype == np.uint8
    assert psnr(crops, expected) > BOUND
    empty = backend.crops(frames, transforms[:0], frame_of[:0], 32)
    assert empty.shape == (0, 32, 32, 3)


@pytest.mark.parametrize("views", ["planes", "bgr", "both"])
@pytest.mark.parametrize("per_face", [False, True])
def test_paste(backend: FrameBackend[object], views: str, per_face: bool) -> None:
    """The crops blend back inside their regions only, into both views, as the host's paste does."""
    transforms, frame_of = _transforms(32)
    crops = np.full((2, 32, 32, 3), (20, 200, 60), np.uint8)
    mask = box_mask(32, 0.3)
    masks = np.stack([mask, mask * 0.5]) if per_face else mask

    def paste(b: FrameBackend[object], f: Frames[object]) -> None:
        b.paste(f, crops, transforms, frame_of, masks)

    planes, bgr = views != "bgr", views != "planes"
    frames = _batch(backend, planes=planes, bgr=bgr)
    paste(backend, frames)
    got_planes, got_bgr = _host(backend, frames)
    want_planes, want_bgr = _reference(paste, planes=planes, bgr=True)
    assert got_bgr is not None and want_bgr is not None  # pasting needs the BGR view: it is made
    assert psnr(got_bgr, want_bgr) > BOUND
    assert not np.array_equal(got_bgr, _scene())
    assert [index for index, _ in frames.written] == [0, 1]  # each face's pasted region, listed
    if planes:
        assert got_planes is not None and want_planes is not None
        assert np.array_equal(got_planes, _planes(got_bgr))
        assert psnr(got_planes, want_planes) > BOUND


def test_replace_keeps_the_form(backend: FrameBackend[object]) -> None:
    """New (larger) whole frames come back as planes where the batch travelled as planes."""
    frames = _batch(backend, planes=True, bgr=False)
    larger = np.ascontiguousarray(np.repeat(np.repeat(_scene(), 2, axis=1), 2, axis=2))
    replaced = backend.replace(frames, backend.upload(larger))
    assert (replaced.height, replaced.width) == (HEIGHT * 2, WIDTH * 2)
    assert replaced.planes is not None
    assert np.array_equal(backend.download(replaced.planes), _planes(larger))
    as_bgr = backend.replace(backend.frames(bgr=backend.upload(_scene())), backend.upload(larger))
    assert as_bgr.planes is None


@pytest.mark.parametrize("side", [61, 201])
def test_a_long_blur_is_the_gaussian_its_kernel_names(backend: FrameBackend[object], side: int) -> None:
    """A face's long kernel runs on the region shrunk (``blur_shrink``: a whole 1080p frame blurred at full size took
    seconds) and still blurs as ``cv2.GaussianBlur`` with that kernel does, run whole."""
    assert blur_shrink(side)[0] > 1
    region = np.ascontiguousarray(image("group6.jpg")[:250, :310])
    frames = backend.frames(bgr=backend.upload(region[None].copy()))
    backend.blur(frames, 0, (0, 0, 310, 250), side)
    got = backend.download(frames.bgr)[0]
    want = cv2.GaussianBlur(region, (side, side), 0, borderType=cv2.BORDER_REFLECT_101)
    assert psnr(got, want) > 45.0  # 54 and 47 dB measured
    assert psnr(got, region) < 30.0, "the region is not blurred"
