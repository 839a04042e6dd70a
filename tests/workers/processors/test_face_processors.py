"""The face processors end to end on real clips: real detectors; swapper, enhancer and ArcFace replicas."""

from __future__ import annotations

import shutil
from pathlib import Path

import cv2
import numpy as np
import pytest

from shared.errors import InvalidOptionsError, NoFaceInSourceError
from shared.options import FaceOptions, JobOptions, ProcessorName
from tests.support import mask_replicas
from tests.support.engines import CountingEngine
from tests.support.faces import MEDIA, MODELS, clip_frames, cpu_settings, detector, engine, image, psnr
from tests.support.replicas import (
    arcface_w600k_r50,
    codeformer,
    constant_colour_swapper,
    gfpgan_1_4,
    identity_swapper,
    install_replica,
    realistic_emap,
    replica_settings,
)
from workers.faces.alignment import estimate_transform, paste_region
from workers.faces.detection import Face
from workers.faces.landmarks import FaceLandmarker
from workers.faces.recognition import FaceEmbedder, largest_face, source_identity
from workers.faces.swapping import SWAPPERS, EmapProjection, FaceSwapper
from workers.faces.targeting import FaceTargeter, identity_sources, reference_source
from workers.processors import ProcessorContext, build, registered
from workers.processors.face_blur import face_region
from workers.processors.face_debugger import LANDMARK_68_COLOUR
from workers.processors.face_swapper import FaceSwapperProcessor

pytestmark = pytest.mark.skipif(not MODELS.exists(), reason="the reference data folder is not beside the checkout")

GREEN = (0, 255, 0)


@pytest.fixture
def models(tmp_path: Path) -> Path:
    """A models folder with the real YuNet and the ArcFace replica, as ``resolve`` looks for them."""
    folder = tmp_path / "models"
    folder.mkdir()
    shutil.copy(MODELS / "yunet_2023mar.onnx", folder / "yunet_2023_mar.onnx")
    install_replica(arcface_w600k_r50(), "arcface_w600k_r50", folder)
    return folder


def _context(
    models: Path, processor: ProcessorName, face: FaceOptions, sources: list[Path], batch_size: int = 8
) -> ProcessorContext:
    options = JobOptions(processors=[processor], face=face)
    return ProcessorContext(options=options, sources=sources, settings=replica_settings(models, batch_size=batch_size))


def _run(processor_build: ProcessorContext, name: ProcessorName, frames: np.ndarray, batch: int = 8) -> np.ndarray:
    """Process ``frames`` through the processor as the render loop does: batch by batch."""
    processor = build(name, processor_build)
    parts = [processor.process(frames[start : start + batch]) for start in range(0, len(frames), batch)]
    return np.concatenate(parts)


def _face_regions(frame: np.ndarray, faces: list[Face], template: str, size: int) -> np.ndarray:
    """Where pasting ``faces`` back may touch the frame: the union of their paste regions."""
    inside = np.zeros(frame.shape[:2], bool)
    for face in faces:
        x1, y1, x2, y2 = paste_region(frame.shape, size, estimate_transform(face.landmarks, template, size))
        inside[y1:y2, x1:x2] = True
    return inside


def test_the_face_processors_are_registered() -> None:
    assert {"face_swapper", "face_enhancer", "face_blur", "face_debugger"} <= set(registered())


def test_identity_swap_keeps_d18_above_40_db(models: Path) -> None:
    install_replica(identity_swapper(), "inswapper_128", models)
    context = _context(models, "face_swapper", FaceOptions(swapper="inswapper_128"), [MEDIA / "s0.jpg"])
    frames = clip_frames("d18.mp4", slice(0, None, 9))
    result = _run(context, "face_swapper", frames)
    assert result.shape == frames.shape and result.dtype == np.uint8
    for before, after in zip(frames, result, strict=True):
        assert not np.array_equal(before, after)  # the face went through the swapper and back
        assert psnr(after, before) >= 40.0


def test_constant_colour_swap_changes_only_the_detected_faces(models: Path) -> None:
    install_replica(constant_colour_swapper(GREEN), "inswapper_128", models)
    context = _context(models, "face_swapper", FaceOptions(swapper="inswapper_128"), [MEDIA / "s0.jpg"])
    frames = clip_frames("d20.mp4", slice(0, None, 12))
    result = _run(context, "face_swapper", frames)
    for before, after, faces in zip(frames, result, detector().detect(frames), strict=True):
        assert faces
        inside = _face_regions(before, faces, "arcface_128", 128)
        assert np.array_equal(after[~inside], before[~inside])
        nose_x, nose_y = np.round(largest_face(faces).landmarks[2]).astype(int)
        assert np.abs(after[nose_y, nose_x].astype(int) - GREEN).max() <= 1


def _two_people(indices: list[int]) -> np.ndarray:
    """A 480×960 clip: the d18 man on the left, the d20 man on the right, both moving."""
    return np.concatenate([clip_frames("d18.mp4", indices), clip_frames("d20.mp4", indices)], axis=2)


def _mobilefacenet() -> FaceEmbedder:
    recogniser = engine(MODELS / "mobilefacenet_128.onnx")
    return FaceEmbedder(recogniser, batch_size=8, fixed_batch=recogniser.fixed_batch(recogniser.input_names[0]))


def test_reference_selection_swaps_only_the_chosen_person(tmp_path: Path) -> None:
    """The reference photo (another frame of d18) picks the left man; the right man is left alone."""
    reference_image = tmp_path / "reference.png"
    cv2.imwrite(str(reference_image), clip_frames("d18.mp4", [0])[0])
    # MobileFaceNet tells real people apart, which the random-weight ArcFace replica cannot; the swapper's
    # identity (which only has to be 512-d) comes from the replica.
    matcher = _mobilefacenet()
    targeter = FaceTargeter.load(
        FaceOptions(selector_mode="reference"),
        [MEDIA / "s0.jpg", reference_image],
        cpu_settings(),
        detector=detector(),
        embedder=matcher,
    )
    arcface = FaceEmbedder(engine(install_replica(arcface_w600k_r50(), "arcface_w600k_r50", tmp_path / "m")))
    identity = source_identity([MEDIA / "s0.jpg"], detector(), arcface)
    swapper = FaceSwapper(
        SWAPPERS["inswapper_128"],
        engine(install_replica(constant_colour_swapper(GREEN), "inswapper_128", tmp_path / "m")),
        EmapProjection(realistic_emap()),
    )
    processor = FaceSwapperProcessor(swapper, targeter, identity, batch_size=4)

    frames = _two_people([20, 70, 120, 170])
    result = processor.process(frames)
    assert np.array_equal(result[:, :, 480:], frames[:, :, 480:])  # the right man: untouched
    for before, after in zip(frames, result, strict=True):
        faces = detector().detect_frame(before)
        assert len(faces) == 2
        left = min(faces, key=lambda face: face.box[0])
        nose_x, nose_y = np.round(left.landmarks[2]).astype(int)
        assert np.abs(after[nose_y, nose_x].astype(int) - GREEN).max() <= 1


def test_the_faces_of_a_whole_batch_of_frames_are_swapped_batch_size_at_a_time(tmp_path: Path) -> None:
    counting = CountingEngine(engine(install_replica(identity_swapper(), "inswapper_128", tmp_path)))
    swapper = FaceSwapper(SWAPPERS["inswapper_128"], counting, EmapProjection(realistic_emap()))
    processor = FaceSwapperProcessor(swapper, FaceTargeter(detector()), np.ones(512, np.float32), batch_size=4)
    frames = np.stack([image("group6.jpg")] * 3)  # 3 frames × 6 faces
    result = processor.process(frames)
    assert counting.batches == [4, 4, 4, 4, 2]
    assert all(psnr(after, before) >= 40 for before, after in zip(frames, result, strict=True))


def test_frames_without_faces_pass_through(models: Path) -> None:
    install_replica(constant_colour_swapper(GREEN), "inswapper_128", models)
    context = _context(models, "face_swapper", FaceOptions(swapper="inswapper_128"), [MEDIA / "s0.jpg"])
    frames = np.full((3, 120, 160, 3), 90, np.uint8)
    assert np.array_equal(_run(context, "face_swapper", frames), frames)


def test_the_swapper_needs_a_source_with_a_face(models: Path, tmp_path: Path) -> None:
    install_replica(identity_swapper(), "inswapper_128", models)
    with pytest.raises(InvalidOptionsError):
        build("face_swapper", _context(models, "face_swapper", FaceOptions(swapper="inswapper_128"), []))
    blank = tmp_path / "blank.png"
    cv2.imwrite(str(blank), np.zeros((64, 64, 3), np.uint8))
    with pytest.raises(NoFaceInSourceError, match="blank.png"):
        build("face_swapper", _context(models, "face_swapper", FaceOptions(swapper="inswapper_128"), [blank]))


def test_the_last_source_is_the_reference_when_there_are_several() -> None:
    one, two, three = Path("a.png"), Path("b.png"), Path("c.png")
    assert identity_sources([one, two, three], "reference") == [one, two]
    assert reference_source([one, two, three]) == three
    assert identity_sources([one], "reference") == [one] and reference_source([one]) == one
    assert identity_sources([one, two], "all") == [one, two]
    with pytest.raises(InvalidOptionsError):
        reference_source([])


def test_an_enhancer_that_returns_its_input_keeps_d18_above_40_db(models: Path) -> None:
    install_replica(codeformer(), "codeformer", models)  # the replica returns its input at weight 1
    face = FaceOptions(enhancer="codeformer", codeformer_weight=1.0, enhancer_blend=100)
    frames = clip_frames("d18.mp4", slice(0, None, 27))
    result = _run(_context(models, "face_enhancer", face, []), "face_enhancer", frames)
    assert all(psnr(after, before) >= 40 for before, after in zip(frames, result, strict=True))


def test_the_enhancer_changes_only_the_faces_and_blend_zero_changes_nothing(models: Path) -> None:
    install_replica(gfpgan_1_4(), "gfpgan_1.4", models)
    frames = clip_frames("d20.mp4", [30, 90])
    result = _run(_context(models, "face_enhancer", FaceOptions(enhancer="gfpgan_1.4"), []), "face_enhancer", frames)
    for before, after, faces in zip(frames, result, detector().detect(frames), strict=True):
        inside = _face_regions(before, faces, "ffhq_512", 512)
        assert np.array_equal(after[~inside], before[~inside])
        assert not np.array_equal(after[inside], before[inside])
    unblended = FaceOptions(enhancer="gfpgan_1.4", enhancer_blend=0)
    assert np.array_equal(_run(_context(models, "face_enhancer", unblended, []), "face_enhancer", frames), frames)


def test_reference_mode_without_a_source_is_an_options_error(models: Path) -> None:
    install_replica(gfpgan_1_4(), "gfpgan_1.4", models)
    face = FaceOptions(enhancer="gfpgan_1.4", selector_mode="reference")
    with pytest.raises(InvalidOptionsError):
        build("face_enhancer", _context(models, "face_enhancer", face, []))


def test_face_blur_changes_pixels_only_inside_the_face_boxes(models: Path) -> None:
    """Plain mode (strict mode widens the boxes with a margin and a soft edge:
    tests/workers/processors/test_face_blur.py)."""
    frames = np.stack([image("group6.jpg"), image("group6.jpg")[:, ::-1]])
    result = _run(_context(models, "face_blur", FaceOptions(blur_strict=False), []), "face_blur", frames)
    for before, after, faces in zip(frames, result, detector().detect(frames), strict=True):
        assert len(faces) == 6
        inside = np.zeros(before.shape[:2], bool)
        for face in faces:
            x1, y1, x2, y2 = face_region(face, before.shape)
            inside[y1:y2, x1:x2] = True
            box = (slice(y1, y2), slice(x1, x2))
            assert np.abs(after[box].astype(int) - before[box].astype(int)).mean() > 3  # really blurred
        assert np.array_equal(after[~inside], before[~inside])


def test_face_debugger_draws_on_frames_with_faces_only(models: Path) -> None:
    frames = np.concatenate([clip_frames("d18.mp4", [0]), np.zeros((1, 480, 480, 3), np.uint8)])
    result = _run(_context(models, "face_debugger", FaceOptions(), []), "face_debugger", frames)
    assert result.shape == frames.shape
    assert not np.array_equal(result[0], frames[0])
    assert np.array_equal(result[1], frames[1])


def test_face_debugger_draws_the_68_points_when_a_68_point_landmarker_is_configured(models: Path) -> None:
    """With ``landmarker_score`` > 0 the debugger draws each face's 68 points (2dfan4's) in their own colour;
    without it, none."""
    install_replica(mask_replicas.fan_68_5(exact=True), "fan_68_5", models)
    install_replica(mask_replicas.fan_2dfan4(), "2dfan4", models)
    frames = clip_frames("d18.mp4", [0, 100])
    with_68 = _run(_context(models, "face_debugger", FaceOptions(landmarker_score=0.5), []), "face_debugger", frames)
    plain = _run(_context(models, "face_debugger", FaceOptions(), []), "face_debugger", frames)
    settings = replica_settings(models)
    faces = detector().detect(frames)
    found = FaceLandmarker.load(settings, min_score=0.5).landmarks(frames, faces)
    assert [len(f) for f in found.faces] == [1, 1]
    for index, points in enumerate(found.points):
        spots = np.round(points).astype(int)
        inside = (spots[:, 0] >= 0) & (spots[:, 0] < 480) & (spots[:, 1] >= 0) & (spots[:, 1] < 480)
        xs, ys = spots[inside, 0], spots[inside, 1]
        drawn = np.all(with_68[index, ys, xs] == LANDMARK_68_COLOUR, axis=-1)
        assert inside.sum() >= 60 and drawn.mean() >= 0.9, (inside.sum(), drawn.mean())  # a few under the box
        assert not np.all(plain[index, ys, xs] == LANDMARK_68_COLOUR, axis=-1).any()
