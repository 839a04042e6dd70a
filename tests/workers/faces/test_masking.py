"""Paste-back masks (box, occlusion, region, area), 68-point landmarks and pixel boost, on real clips with the real
YuNet detector and replicas of the swapper, occluder, parser and landmarkers."""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path

import cv2
import numpy as np
import numpy.typing as npt
import onnx
import onnxruntime
import pytest
import torch

from shared.errors import InvalidOptionsError
from shared.options import FaceOptions, JobOptions
from tests.support import mask_replicas
from tests.support.engines import CountingEngine
from tests.support.faces import MEDIA, MODELS, clip_frames, detector, engine, image, psnr
from tests.support.replicas import (
    arcface_w600k_r50,
    constant_colour_swapper,
    gfpgan_1_4,
    identity_swapper,
    install_replica,
    replica_settings,
)
from workers.engines.base import Engine, Tensor
from workers.engines.batching import FittedBatches
from workers.engines.onnx_to_torch import convert
from workers.faces.alignment import estimate_transform, paste_region
from workers.faces.boosting import boost_factor, explode, implode
from workers.faces.detection import Face
from workers.faces.landmarks import FaceLandmarker, five_from_68
from workers.faces.masking import FaceOccluder, FaceRegionParser
from workers.faces.recognition import FaceEmbedder
from workers.faces.swapping import SWAPPERS, EmapProjection, FaceSwapper, read_emap
from workers.models.registry import REGISTRY
from workers.processors import ProcessorContext, build
from workers.processors.face_swapper import FaceSwapperProcessor

pytestmark = pytest.mark.skipif(not MODELS.exists(), reason="the reference data folder is not beside the checkout")

GREEN = (0, 255, 0)
# Where the mouth sits in an arcface_128 crop (x1, y1, x2, y2 as fractions): around its mouth corners' template
# points (0.387, 0.722) and (0.615, 0.720).
MOUTH = (0.33, 0.64, 0.67, 0.80)
MOUTH_CLASS = 11

PARITY: Mapping[str, Callable[[], onnx.ModelProto]] = {
    "xseg": mask_replicas.xseg,
    "bisenet": mask_replicas.bisenet,
    "2dfan4": mask_replicas.fan_2dfan4,
    "fan_68_5": mask_replicas.fan_68_5,
}

REGISTERED = {"xseg": "xseg_1", "bisenet": "bisenet_resnet_34", "2dfan4": "2dfan4", "fan_68_5": "fan_68_5"}


@pytest.fixture
def models(tmp_path: Path) -> Path:
    folder = tmp_path / "models"
    folder.mkdir()
    shutil.copy(MODELS / "yunet_2023mar.onnx", folder / "yunet_2023_mar.onnx")
    install_replica(arcface_w600k_r50(), "arcface_w600k_r50", folder)
    return folder


def _swap(models: Path, face: FaceOptions, frames: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint8]:
    context = ProcessorContext(
        options=JobOptions(processors=["face_swapper"], face=face),
        sources=[MEDIA / "s0.jpg"],
        settings=replica_settings(models),
    )
    processor = build("face_swapper", context)
    return np.concatenate([processor.process(frames[start : start + 4]) for start in range(0, len(frames), 4)])


def _crop_box_in_frame(
    shape: tuple[int, ...],
    face: Face,
    box: tuple[float, float, float, float],
    size: int = 128,
    grow: int = 3,
    template: str = "arcface_128",
) -> npt.NDArray[np.bool_]:
    """The frame pixels a box of the face's aligned crop lands on once warped back, grown by ``grow`` px."""
    inverse = cv2.invertAffineTransform(estimate_transform(face.landmarks, template, size))
    x1, y1, x2, y2 = (value * size for value in box)
    corners = np.array([[x1, y1], [x2, y1], [x2, y2], [x1, y2]]) @ inverse[:, :2].T + inverse[:, 2]
    inside = np.zeros(shape[:2], np.uint8)
    cv2.fillConvexPoly(inside, np.round(corners).astype(np.int32), 1)
    return cv2.dilate(inside, np.ones((2 * grow + 1, 2 * grow + 1), np.uint8)).astype(bool)


@pytest.mark.parametrize("name", sorted(PARITY))
def test_each_mask_and_landmark_replica_matches_onnxruntime_when_converted_to_torch(name: str) -> None:
    model = PARITY[name]()
    rng = np.random.default_rng(0)
    feeds = {}
    for value in model.graph.input:
        dims = [d.dim_value or 2 for d in value.type.tensor_type.shape.dim]
        feeds[value.name] = rng.uniform(0, 1, dims).astype(np.float32)
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, feeds)
    module = convert(model)
    with torch.inference_mode():
        actual = module(*[torch.from_numpy(feeds[spec.name]) for spec in module.inputs])
    spec = REGISTRY[REGISTERED[name]]
    assert [value.name for value in model.graph.input] == list(spec.input_names)
    assert [value.name for value in model.graph.output] == list(spec.output_names)
    for want, got in zip(expected, actual, strict=True):
        assert got.shape == want.shape
        assert np.abs(got.numpy() - want).max() <= 1e-3


def test_a_region_mask_of_the_mouth_leaves_every_pixel_outside_the_mouth_unchanged(models: Path) -> None:
    install_replica(constant_colour_swapper(GREEN), "inswapper_128", models)
    install_replica(mask_replicas.region_parser(MOUTH_CLASS, MOUTH), "bisenet_resnet_34", models)
    frames = clip_frames("d20.mp4", slice(0, None, 12))
    face = FaceOptions(swapper="inswapper_128", mask_types=["box", "region"], mask_regions=["mouth"])
    result = _swap(models, face, frames)
    boxed = _swap(models, FaceOptions(swapper="inswapper_128"), frames)
    for before, after, box_only, faces in zip(frames, result, boxed, detector().detect(frames), strict=True):
        assert faces
        mouth = np.zeros(before.shape[:2], bool)
        for found in faces:
            mouth |= _crop_box_in_frame(before.shape, found, MOUTH)
        assert np.array_equal(after[~mouth], before[~mouth])
        changed = np.any(after != before, axis=2)
        assert changed.sum() > 0, "the mouth was swapped"
        assert np.any(box_only != before, axis=2).sum() > 3 * changed.sum(), "the box alone takes the whole face"
        mouth_centre = np.mean([(x, y) for x, y in (faces[0].landmarks[3], faces[0].landmarks[4])], axis=0)
        x, y = np.round(mouth_centre).astype(int)
        # Mostly green: the softened mask of a mouth 20 px tall in the crop is about 0.9 at its centre.
        assert np.abs(after[y, x].astype(int) - GREEN).max() <= 40


def test_a_region_mask_of_other_classes_changes_nothing(models: Path) -> None:
    install_replica(constant_colour_swapper(GREEN), "inswapper_128", models)
    install_replica(mask_replicas.region_parser(MOUTH_CLASS, MOUTH), "bisenet_resnet_34", models)
    frames = clip_frames("d20.mp4", [0, 24])
    face = FaceOptions(swapper="inswapper_128", mask_types=["box", "region"], mask_regions=["skin", "nose"])
    assert np.array_equal(_swap(models, face, frames), frames)


def test_an_occlusion_mask_keeps_what_the_occluder_says_covers_the_face(models: Path) -> None:
    """The occluder sees the face only in the crop's upper half: the swap stays above the mouth."""
    install_replica(constant_colour_swapper(GREEN), "inswapper_128", models)
    visible = (0.0, 0.0, 1.0, 0.5)
    install_replica(mask_replicas.constant_occluder(visible), "xseg_1", models)
    frames = clip_frames("d18.mp4", [0, 30])
    face = FaceOptions(swapper="inswapper_128", mask_types=["box", "occlusion"])
    result = _swap(models, face, frames)
    for before, after, faces in zip(frames, result, detector().detect(frames), strict=True):
        upper = np.zeros(before.shape[:2], bool)
        for found in faces:
            upper |= _crop_box_in_frame(before.shape, found, visible)
        assert np.array_equal(after[~upper], before[~upper])
        x, y = np.round(faces[0].landmarks[2]).astype(int)  # the nose tip, below the visible half
        assert np.array_equal(after[y + 20, x], before[y + 20, x])
        eye_x, eye_y = np.round(faces[0].landmarks[0]).astype(int)
        assert np.abs(after[eye_y, eye_x].astype(int) - GREEN).max() <= 20  # the box and the occluder soften it


def test_the_enhancer_takes_the_occlusion_mask_too(models: Path) -> None:
    install_replica(gfpgan_1_4(), "gfpgan_1.4", models)
    visible = (0.0, 0.0, 1.0, 0.5)
    install_replica(mask_replicas.constant_occluder(visible), "xseg_1", models)
    frames = clip_frames("d18.mp4", [0, 30])
    face = FaceOptions(enhancer="gfpgan_1.4", mask_types=["box", "occlusion"], enhancer_blend=100)
    context = ProcessorContext(
        options=JobOptions(processors=["face_enhancer"], face=face), sources=[], settings=replica_settings(models)
    )
    result = build("face_enhancer", context).process(frames)
    for before, after, faces in zip(frames, result, detector().detect(frames), strict=True):
        upper = np.zeros(before.shape[:2], bool)
        for found in faces:
            upper |= _crop_box_in_frame(before.shape, found, visible, 512, template="ffhq_512")
        assert np.array_equal(after[~upper], before[~upper])
        assert not np.array_equal(after[upper], before[upper])


def test_an_area_mask_of_the_mouth_follows_the_68_point_hull(models: Path) -> None:
    install_replica(constant_colour_swapper(GREEN), "inswapper_128", models)
    install_replica(mask_replicas.fan_68_5(exact=True), "fan_68_5", models)
    frames = clip_frames("d18.mp4", [0, 30])
    face = FaceOptions(swapper="inswapper_128", mask_types=["box", "area"], mask_areas=["mouth"])
    result = _swap(models, face, frames)
    mouth_points = mask_replicas.mean_shape_68()[48:68].astype(np.float64)
    for before, after, faces in zip(frames, result, detector().detect(frames), strict=True):
        hull = np.zeros(before.shape[:2], np.uint8)
        for found in faces:
            inverse = cv2.invertAffineTransform(estimate_transform(found.landmarks, "ffhq_512", 1))
            points = mouth_points @ inverse[:, :2].T + inverse[:, 2]
            cv2.fillConvexPoly(hull, cv2.convexHull(np.round(points).astype(np.int32)), 1)
        inside = cv2.dilate(hull, np.ones((7, 7), np.uint8)).astype(bool)
        assert np.array_equal(after[~inside], before[~inside])
        assert np.any(after[inside] != before[inside]), "the mouth hull was swapped"


def test_mask_models_and_landmarkers_see_every_face_of_a_batch_in_one_call(tmp_path: Path) -> None:
    group = image("group6.jpg")
    frames = np.stack([group, group[:, ::-1]])
    faces = detector().detect(frames)
    count = sum(len(found) for found in faces)
    assert count >= 10
    occluder_engine = CountingEngine(engine(install_replica(mask_replicas.xseg(), "xseg_1", tmp_path)))
    parser_engine = CountingEngine(engine(install_replica(mask_replicas.bisenet(), "bisenet_resnet_34", tmp_path)))
    crops = np.random.default_rng(0).integers(0, 256, (count, 128, 128, 3), dtype=np.uint8)
    fitted = FittedBatches(32)  # what the loader fits to memory
    occlusion = FaceOccluder(REGISTRY["xseg_1"], occluder_engine, batches=fitted).masks(crops)
    region = FaceRegionParser(REGISTRY["bisenet_resnet_34"], parser_engine, batches=fitted).masks(crops, ["skin"])
    assert occlusion.shape == region.shape == (count, 128, 128)
    assert occluder_engine.batches == [count] and parser_engine.batches == [count]

    lift = CountingEngine(engine(install_replica(mask_replicas.fan_68_5(), "fan_68_5", tmp_path)))
    fan = CountingEngine(engine(install_replica(mask_replicas.fan_2dfan4(), "2dfan4", tmp_path)))
    found = FaceLandmarker(lift, fan, min_score=0.0).landmarks(frames, faces)
    assert fan.batches == [count]
    assert [len(f) for f in found.faces] == [len(f) for f in faces]
    assert all(p.shape == (68, 2) for p in found.points) and all(0.0 <= s <= 1.0 for s in found.scores)
    # A score that passes the threshold aligns the face by the 5 points of its 68; one that does not keeps the
    # detector's.
    refined = [face for frame in found.faces for face in frame]
    for face, points in zip(refined, found.points, strict=True):
        np.testing.assert_allclose(face.landmarks, five_from_68(points), atol=1e-4)
    strict = FaceLandmarker(lift, fan, min_score=1.0).landmarks(frames, faces)
    kept = [face for frame in strict.faces for face in frame]
    originals = [face for frame in faces for face in frame]
    assert all(np.array_equal(a.landmarks, b.landmarks) for a, b in zip(kept, originals, strict=True))


@pytest.mark.parametrize(("boost", "size"), [(256, 128), (384, 128), (512, 128), (1024, 128), (512, 256)])
def test_pixel_boost_tiles_reassemble_exactly(boost: int, size: int) -> None:
    factor = boost_factor(boost, size)
    crops = np.random.default_rng(boost).integers(0, 256, (3, boost, boost, 3), dtype=np.uint8)
    tiles = implode(crops, factor)
    assert tiles.shape == (3 * factor * factor, size, size, 3)
    np.testing.assert_array_equal(tiles[factor + 1], crops[0, 1::factor, 1::factor])
    np.testing.assert_array_equal(explode(tiles, factor), crops)


def test_pixel_boost_must_be_a_multiple_of_the_swapper_size() -> None:
    with pytest.raises(ValueError, match="multiple"):
        boost_factor(384, 256)


def test_pixel_boost_512_with_an_identity_swapper_keeps_d18_above_40_db_inside_the_face(models: Path) -> None:
    install_replica(identity_swapper(), "inswapper_128", models)
    frames = clip_frames("d18.mp4", slice(0, None, 15))
    result = _swap(models, FaceOptions(swapper="inswapper_128", pixel_boost=512), frames)
    for before, after, faces in zip(frames, result, detector().detect(frames), strict=True):
        x1, y1, x2, y2 = paste_region(before.shape, 512, estimate_transform(faces[0].landmarks, "arcface_128", 512))
        assert not np.array_equal(before, after)  # the face went through the swapper and back
        assert psnr(after[y1:y2, x1:x2], before[y1:y2, x1:x2]) >= 40.0


def _two_people(indices: list[int]) -> npt.NDArray[np.uint8]:
    """A 480×960 clip: the d18 man on the left, the d20 man on the right."""
    return np.concatenate([clip_frames("d18.mp4", indices), clip_frames("d20.mp4", indices)], axis=2)


@pytest.mark.parametrize(("order", "changed_side"), [("left-right", 0), ("right-left", 1)])
def test_selector_order_decides_which_face_one_takes(models: Path, order: str, changed_side: int) -> None:
    install_replica(constant_colour_swapper(GREEN), "inswapper_128", models)
    frames = _two_people([0, 30])
    face = FaceOptions(swapper="inswapper_128", selector_mode="one", selector_order=order)  # type: ignore[arg-type]
    result = _swap(models, face, frames)
    half = frames.shape[2] // 2
    for before, after in zip(frames, result, strict=True):
        sides = [(slice(None), slice(0, half)), (slice(None), slice(half, None))]
        changed = [not np.array_equal(after[side], before[side]) for side in sides]
        assert changed == [changed_side == 0, changed_side == 1]


@pytest.mark.parametrize(
    ("gender", "ages", "swapped"),
    [("female", (25, 40), True), ("male", (0, 100), False), (None, (40, 60), False), (None, (0, 24), True)],
)
def test_gender_and_age_filters_follow_the_classifier(
    models: Path, gender: str | None, ages: tuple[int, int], swapped: bool
) -> None:
    """The replica classifier sees every face as a woman of 20–29."""
    install_replica(constant_colour_swapper(GREEN), "inswapper_128", models)
    install_replica(mask_replicas.fairface(answer=(0, 1, 3)), "fairface", models)
    frames = clip_frames("d18.mp4", [0, 30])
    face = FaceOptions(
        swapper="inswapper_128",
        selector_gender=gender,  # type: ignore[arg-type]
        selector_age_start=ages[0],
        selector_age_end=ages[1],
    )
    result = _swap(models, face, frames)
    assert (not np.array_equal(result, frames)) == swapped


def test_the_fairface_replica_matches_onnxruntime_when_converted_to_torch() -> None:
    model = mask_replicas.fairface()
    feeds = {"input": np.random.default_rng(0).uniform(-2, 2, (4, 3, 224, 224)).astype(np.float32)}
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, feeds)
    module = convert(model)
    with torch.inference_mode():
        actual = module(torch.from_numpy(feeds["input"]))
    assert [value.name for value in model.graph.output] == list(REGISTRY["fairface"].output_names)
    for want, got in zip(expected, actual, strict=True):
        np.testing.assert_array_equal(got.numpy(), want)


class RecordingEngine(CountingEngine):
    """Also keeps every ``source`` input it was fed."""

    def __init__(self, inner: Engine) -> None:
        super().__init__(inner)
        self.sources: list[npt.NDArray[np.float32]] = []

    def run(self, inputs: Mapping[str, Tensor]) -> list[Tensor]:
        self.sources.append(np.asarray(inputs["source"], np.float32))
        return super().run(inputs)


@pytest.mark.parametrize("weight", [0.0, 0.5, 1.0])
def test_swapper_weight_mixes_each_faces_own_identity_into_the_latent(models: Path, weight: float) -> None:
    path = install_replica(identity_swapper(), "inswapper_128", models)
    settings = replica_settings(models)
    recording = RecordingEngine(engine(path))
    swapper = FaceSwapper(SWAPPERS["inswapper_128"], recording, EmapProjection(read_emap(path)))
    face = FaceOptions(swapper="inswapper_128", swapper_weight=weight)
    context = ProcessorContext(
        options=JobOptions(processors=["face_swapper"], face=face), sources=[MEDIA / "s0.jpg"], settings=settings
    )
    processor = FaceSwapperProcessor.from_context(context, swapper=swapper)
    frames = _two_people([0, 30])
    processor.process(frames)

    embedder = FaceEmbedder.load(settings)
    targets = [face for frame in embedder.embed_frames(frames, detector().detect(frames)) for face in frame]
    units = np.stack([t.embedding / np.linalg.norm(t.embedding) for t in targets if t.embedding is not None])
    mix = {0.0: 0.35, 0.5: 0.0, 1.0: -0.35}[weight]
    expected = processor.latent[None] * (1 - mix) + units * mix
    fed = np.concatenate(recording.sources)
    assert fed.shape == (len(targets), 512)
    np.testing.assert_allclose(fed, expected, rtol=1e-5, atol=1e-5)


def test_a_swapper_weight_is_refused_where_the_family_has_none(models: Path) -> None:
    from tests.support.swapper_replicas import blendswap_256

    install_replica(blendswap_256(), "blendswap_256", models)
    face = FaceOptions(swapper="blendswap_256", swapper_weight=0.8)
    context = ProcessorContext(
        options=JobOptions(processors=["face_swapper"], face=face),
        sources=[MEDIA / "s0.jpg"],
        settings=replica_settings(models),
    )
    with pytest.raises(InvalidOptionsError, match="swapper_weight"):
        build("face_swapper", context)


class InputsEngine(CountingEngine):
    """Passes calls through to a real engine, keeping each call's input."""

    def __init__(self, inner: Engine) -> None:
        super().__init__(inner)
        self.inputs: list[npt.NDArray[np.float32]] = []

    def run(self, inputs: Mapping[str, Tensor]) -> list[Tensor]:
        self.inputs.append(np.asarray(next(iter(inputs.values()))))
        return super().run(inputs)


def _turned(points: npt.NDArray[np.float64], turn: int, size: tuple[int, int]) -> npt.NDArray[np.float64]:
    """Pixel positions of a frame [H, W] in that frame turned by ``cv2.rotate(frame, turn)``."""
    height, width = size
    x, y = points[..., 0], points[..., 1]
    if turn == cv2.ROTATE_90_CLOCKWISE:
        return np.stack([height - 1 - y, x], axis=-1)
    if turn == cv2.ROTATE_180:
        return np.stack([width - 1 - x, height - 1 - y], axis=-1)
    return np.stack([y, width - 1 - x], axis=-1)


@pytest.mark.parametrize("turn", [cv2.ROTATE_90_CLOCKWISE, cv2.ROTATE_180, cv2.ROTATE_90_COUNTERCLOCKWISE])
def test_2dfan4_sees_a_face_lying_on_its_side_or_upside_down_upright(tmp_path: Path, turn: int) -> None:
    frame = image("group6.jpg")
    faces = detector().detect(frame[None])[0][:3]
    turned_frame = np.ascontiguousarray(cv2.rotate(frame, turn))
    turned_faces = []
    for face in faces:
        corners = _turned(np.asarray(face.box, np.float64).reshape(2, 2), turn, frame.shape[:2])
        box = np.r_[corners.min(axis=0), corners.max(axis=0)].astype(np.float32)
        points = _turned(np.asarray(face.landmarks, np.float64), turn, frame.shape[:2]).astype(np.float32)
        turned_faces.append(dataclasses.replace(face, box=box, landmarks=points))
    lift = engine(install_replica(mask_replicas.fan_68_5(exact=True), "fan_68_5", tmp_path))
    fan = InputsEngine(engine(install_replica(mask_replicas.fan_2dfan4(), "2dfan4", tmp_path)))
    landmarker = FaceLandmarker(lift, fan, min_score=0.0)
    upright = landmarker.landmarks(frame[None], [faces])
    turned = landmarker.landmarks(turned_frame[None], [turned_faces])
    # 2dfan4 got the same upright crops both times, so it found the same points: in the turned frame, they are the
    # upright points turned with it.
    for before, after in zip(fan.inputs[0], fan.inputs[1], strict=True):
        assert psnr(before * 255, after * 255) >= 35.0
    for before, after in zip(upright.points, turned.points, strict=True):
        np.testing.assert_allclose(after, _turned(np.asarray(before, np.float64), turn, frame.shape[:2]), atol=1.0)
