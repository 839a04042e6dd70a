"""Face detection on the real YuNet and SCRFD files: letterboxing, the decoders, and the batch detector."""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path

import cv2
import numpy as np
import pytest

from shared.errors import ModelError
from shared.options import FaceOptions
from tests.support.faces import MODELS, clip_frames, cpu_settings, detector, engine, image
from tests.support.forking import answer_of_forked_child
from workers.engines.base import Tensor
from workers.faces.detection import (
    DETECTORS,
    Face,
    FaceDetector,
    decode_scrfd,
    decode_yolo_face,
    decode_yunet,
    letterbox,
)
from workers.models.registry import REGISTRY

pytestmark = pytest.mark.skipif(not MODELS.exists(), reason="the reference data folder is not beside the checkout")


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    x1, y1 = np.maximum(a[:2], b[:2])
    x2, y2 = np.minimum(a[2:], b[2:])
    inter = max(x2 - x1, 0) * max(y2 - y1, 0)
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return float(inter / union)


def _landmarks_inside_boxes(faces: list[Face]) -> bool:
    return all(bool(np.all((face.landmarks >= face.box[:2]) & (face.landmarks <= face.box[2:]))) for face in faces)


def test_letterbox_shrinks_keeping_aspect_and_pads_bottom_right() -> None:
    frame = np.full((886, 1280, 3), 200, np.uint8)
    canvas, scale = letterbox(frame, 640)
    assert canvas.shape == (640, 640, 3)
    assert scale == pytest.approx(0.5)
    assert np.all(canvas[:443] == 200)
    assert np.all(canvas[443:] == 0)


def test_letterbox_never_enlarges_a_small_frame() -> None:
    frame = np.full((480, 360, 3), 7, np.uint8)
    canvas, scale = letterbox(frame, 640)
    assert scale == 1.0
    assert np.all(canvas[:480, :360] == 7)
    assert np.all(canvas[480:] == 0) and np.all(canvas[:, 360:] == 0)


@pytest.mark.parametrize("kind", ["yunet", "scrfd"])
def test_finds_all_six_faces_in_the_group_photo(kind: str) -> None:
    faces = detector(kind).detect(image("group6.jpg")[None])[0]
    assert len(faces) == 6
    assert _landmarks_inside_boxes(faces)
    assert all(0.5 <= face.score <= 1.0 for face in faces)
    assert [face.score for face in faces] == sorted((face.score for face in faces), reverse=True)


def test_yunet_and_scrfd_agree_on_where_the_faces_are() -> None:
    frame = image("group6.jpg")
    yunet = detector("yunet").detect_frame(frame)
    scrfd = detector("scrfd").detect_frame(frame)
    for face in yunet:
        best = max(scrfd, key=lambda other: _iou(face.box, other.box))
        assert _iou(face.box, best.box) > 0.7
        assert np.abs(face.landmarks - best.landmarks).max() < 0.15 * (face.box[2] - face.box[0])


def _same_as_opencv(ours: list[Face], rows: np.ndarray, scale: float) -> None:
    """Each face OpenCV's FaceDetectorYN found (``rows``, in a picture ``scale`` times the frame) is one of ``ours``:
    box and landmarks within 0.05 px, score its squared score (OpenCV's is sqrt(cls·obj))."""
    for row in rows:
        box = np.array([row[0], row[1], row[0] + row[2], row[1] + row[3]]) / scale
        face = max(ours, key=lambda candidate: _iou(candidate.box, box))
        np.testing.assert_allclose(face.box, box, atol=0.05)
        np.testing.assert_allclose(face.landmarks, row[4:14].reshape(5, 2) / scale, atol=0.05)
        assert face.score == pytest.approx(float(row[14]) ** 2, abs=1e-4)


def test_yunet_decoder_matches_opencvs_own_yunet() -> None:
    """OpenCV's FaceDetectorYN runs the same file with its C++ decoder; its score is sqrt(cls·obj)."""
    frame = image("group6.jpg")
    canvas, scale = letterbox(frame, 640)
    reference = cv2.FaceDetectorYN.create(str(MODELS / "yunet_2023mar.onnx"), "", (640, 640), 0.5, 0.4, 5000)
    _, rows = reference.detect(canvas)
    ours = detector("yunet", score=0.25).detect_frame(frame)
    assert len(ours) == len(rows) == 6
    _same_as_opencv(ours, rows, scale)


def test_a_frame_larger_than_yunets_input_is_detected_in_one_run_as_opencvs_own_yunet_detects_it() -> None:
    """YuNet is fully convolutional: a 1080p frame seen at 1280 px is one 1280×720 run (padded to 1280×736), not six
    640-px tiles, and finds what OpenCV's FaceDetectorYN, which sizes the same file to its input, finds there."""
    frame = clip_frames("crowd_1080p.mp4", slice(50, 51))[0]
    tiled = FaceDetector(engine(MODELS / "yunet_2023mar.onnx"), "yunet", size=1280, score=0.25)
    ours = tiled.detect_frame(frame, whole_pass=False)
    assert tiled.runs == tiled.tile_runs(1080, 1920) == 1
    reference = cv2.FaceDetectorYN.create(str(MODELS / "yunet_2023mar.onnx"), "", (1280, 720), 0.5, 0.4, 5000)
    _, rows = reference.detect(cv2.resize(frame, (1280, 720)))
    assert len(ours) == len(rows) >= 8
    _same_as_opencv(ours, rows, 1280 / 1920)


@pytest.mark.parametrize("kind", ["yunet", "scrfd"])
def test_a_face_in_every_frame_of_d18(kind: str) -> None:
    frames = clip_frames("d18.mp4", slice(None, None, 1 if kind == "yunet" else 3))
    found = detector(kind).detect(frames)
    assert len(found) == len(frames)
    assert all(len(faces) == 1 for faces in found)
    assert all(_landmarks_inside_boxes(faces) for faces in found)


def test_scrfd_outputs_are_placed_by_shape_when_unnamed_and_may_be_two_dimensional() -> None:
    """FaceFusion's scrfd_2.5g has numeric output names and 2-D outputs; the layout is told by shape."""
    scrfd = detector("scrfd")
    canvas, _ = letterbox(image("group6.jpg"), 640)
    tensor = np.ascontiguousarray(((canvas.astype(np.float32) - 127.5) / 128.0).transpose(2, 0, 1)[None])
    outputs = scrfd.engine.run({scrfd.engine.input_names[0]: tensor})
    named = dict(zip(scrfd.engine.output_names, outputs, strict=True))
    numbered = {str(400 + index): output[0] for index, output in enumerate(reversed(outputs))}
    by_name = decode_scrfd(named, 640, 0.5)
    by_shape = decode_scrfd(numbered, 640, 0.5)
    assert len(by_name.scores) == 6
    np.testing.assert_array_equal(by_name.boxes, by_shape.boxes)
    np.testing.assert_array_equal(by_name.landmarks, by_shape.landmarks)


def test_unnamed_outputs_that_shape_cannot_tell_apart_are_refused() -> None:
    """YuNet's cls and obj have the same shape: without their names, decoding would be a guess."""
    yunet = detector("yunet")
    canvas, _ = letterbox(image("group6.jpg"), 640)
    outputs = yunet.engine.run({"input": canvas.astype(np.float32).transpose(2, 0, 1)[None]})
    with pytest.raises(ModelError, match="name them"):
        decode_yunet({str(index): output for index, output in enumerate(outputs)}, 640, 0.5)


def test_outputs_of_the_wrong_size_are_refused() -> None:
    yunet = detector("yunet")
    canvas, _ = letterbox(image("group6.jpg"), 640)
    outputs = yunet.engine.run({"input": canvas.astype(np.float32).transpose(2, 0, 1)[None]})
    named = dict(zip(yunet.engine.output_names, outputs, strict=True))
    with pytest.raises(ModelError, match="rows"):
        decode_yunet(named, 320, 0.5)


def test_yolo_face_decoder_reads_centre_size_and_suppresses_overlaps() -> None:
    output = np.zeros((1, 20, 8400), np.float32)
    landmarks = [110, 120, 1, 130, 120, 1, 120, 130, 1, 112, 140, 1, 128, 140, 1]
    output[0, :, 0] = [120, 130, 40, 60, 0.9, *landmarks]
    output[0, :, 1] = [121, 131, 40, 60, 0.8, *landmarks]  # the same face again, lower score
    output[0, :, 2] = [400, 300, 20, 20, 0.7, *[0] * 15]
    output[0, :, 3] = [500, 500, 20, 20, 0.3, *[0] * 15]  # under the threshold
    found = decode_yolo_face({"output0": output}, 640, 0.5)
    np.testing.assert_allclose(found.boxes, [[100, 100, 140, 160], [390, 290, 410, 310]])
    np.testing.assert_allclose(found.scores, [0.9, 0.7])
    np.testing.assert_allclose(found.landmarks[0], np.reshape(landmarks, (5, 3))[:, :2])


def test_no_faces_gives_empty_lists() -> None:
    frames = np.zeros((2, 240, 320, 3), np.uint8)
    assert detector("yunet").detect(frames) == [[], []]
    assert detector("scrfd").detect(frames) == [[], []]


def test_every_detector_names_a_registered_detector_model() -> None:
    for spec in DETECTORS.values():
        assert REGISTRY[spec.model].kind == "detector"
        assert spec.normalisation == REGISTRY[spec.model].normalisation
        assert spec.colour_order == "bgr"


def test_load_finds_the_model_through_the_registry(tmp_path: Path) -> None:
    models = tmp_path / "models"
    models.mkdir()
    shutil.copy(MODELS / "yunet_2023mar.onnx", models / REGISTRY["yunet"].file_name)
    settings = cpu_settings(tmp_path, models_dir=models)
    loaded = FaceDetector.load(FaceOptions(detector="yunet", detector_size=320, detector_score=0.6), settings)
    assert loaded.size == 640  # YuNet's published file takes 640 only
    assert loaded.score == 0.6
    assert len(loaded.detect_frame(image("group6.jpg"))) == 6


def test_engine_is_called_once_per_frame() -> None:
    calls: list[int] = []
    real = engine(MODELS / "yunet_2023mar.onnx")

    class Counting:
        input_names = real.input_names
        output_names = real.output_names

        def run(self, inputs: Mapping[str, Tensor]) -> list[Tensor]:
            calls.append(len(next(iter(inputs.values()))))
            return real.run(inputs)

        def warmup(self) -> None:
            real.warmup()

    FaceDetector(Counting(), "yunet").detect(clip_frames("d18.mp4", slice(0, 4)))
    assert calls == [1, 1, 1, 1]


def test_detector_size_is_honoured_by_a_fixed_size_model_at_once_and_letterboxed() -> None:
    """A file exported for 640 px sees a frame larger than that in one run of the model freed of its size (the
    SCRFD file, whose upsampling is fixed to its input, in tiles: the next test)."""
    frame = clip_frames("crowd_1080p.mp4", slice(50, 51))[0]  # 1080p; background faces about 30-60 px tall
    model = engine(MODELS / "yunet_2023mar.onnx")
    found = {size: FaceDetector(model, "yunet", size=size).detect_frame(frame) for size in (320, 640, 1280)}
    heights = {size: sorted(float(f.box[3] - f.box[1]) for f in faces) for size, faces in found.items()}
    assert len(found[1280]) > len(found[640]) >= len(found[320])
    assert min(heights[1280]) < 50 < min(heights[640])  # the small faces the default size cannot see
    for big in found[640]:  # the faces seen at 640 are still there, once each
        overlaps = [f for f in found[1280] if _iou(f.box, big.box) > 0.5]
        assert len(overlaps) == 1


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    x1, y1 = max(a[0], b[0]), max(a[1], b[1])
    x2, y2 = min(a[2], b[2]), min(a[3], b[3])
    inter = max(0.0, x2 - x1) * max(0.0, y2 - y1)
    return float(inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter))


def test_a_forked_child_detects_in_tiles_after_its_parent_did() -> None:
    """A frame's tiles run on a thread pool; a process forked after its parent detected in tiles (a prefork worker,
    a fork-started test farm) gets a pool of its own, where the parent's threads would never run its tiles."""
    frame = clip_frames("crowd_1080p.mp4", slice(50, 51))[0]
    tiled = FaceDetector(detector("scrfd").engine, "scrfd", size=1280, input_size=640)  # fixed to its input: tiled
    assert tiled.tile_runs(1080, 1920) == 6
    expected = len(tiled.detect_frame(frame))
    answer = answer_of_forked_child(lambda: str(len(tiled.detect_frame(frame))))
    assert answer == str(expected), "the forked child's tiles never ran"
