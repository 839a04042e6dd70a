"""Alignment against insightface's face_align on real landmarks, the box mask, and paste-back."""

from __future__ import annotations

import warnings

import cv2
import numpy as np
import numpy.typing as npt
import pytest
from insightface.utils import face_align

from tests.support.faces import MODELS, clip_frames, detector, image, psnr
from workers.faces.alignment import (
    TEMPLATES,
    box_mask,
    estimate_transform,
    paste_back,
    paste_region,
    similarity_transform,
    warp_faces,
)

pytestmark = pytest.mark.skipif(not MODELS.exists(), reason="the reference data folder is not beside the checkout")


def _insightface_norm(landmarks: npt.NDArray[np.float64], size: int) -> npt.NDArray[np.float64]:
    # skimage 0.26 deprecates SimilarityTransform.estimate, which insightface still calls.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return np.asarray(face_align.estimate_norm(landmarks, size), dtype=np.float64)


@pytest.fixture(scope="module")
def group_landmarks() -> list[npt.NDArray[np.float64]]:
    faces = detector("scrfd").detect_frame(image("group6.jpg"))
    assert len(faces) == 6
    return [face.landmarks.astype(np.float64) for face in faces]


def test_arcface_templates_are_insightfaces_points() -> None:
    np.testing.assert_allclose(TEMPLATES["arcface_112_v2"] * 112, face_align.arcface_dst, atol=1e-4)
    np.testing.assert_allclose(TEMPLATES["arcface_128"] * 128, face_align.arcface_dst + [8, 0], atol=1e-4)


@pytest.mark.parametrize(
    ("template", "size"),
    [("arcface_112_v2", 112), ("arcface_112_v2", 224), ("arcface_128", 128), ("arcface_128", 256)],
)
def test_transform_matches_insightface_estimate_norm(
    group_landmarks: list[npt.NDArray[np.float64]], template: str, size: int
) -> None:
    for landmarks in group_landmarks:
        np.testing.assert_allclose(
            estimate_transform(landmarks, template, size),
            _insightface_norm(landmarks, size),
            atol=1e-4,
            rtol=0,
        )


def _inside_frame(transform: npt.NDArray[np.float64], size: int, shape: tuple[int, ...]) -> npt.NDArray[np.bool_]:
    """Crop pixels whose bilinear sample lies wholly inside the frame (borders differ on purpose: insightface
    pads with black, FaceFusion and swapfarm replicate the edge)."""
    inverse = cv2.invertAffineTransform(transform)
    ys, xs = np.mgrid[:size, :size]
    points = np.stack([xs, ys, np.ones_like(xs)], axis=-1).reshape(-1, 3) @ inverse.T
    inside = (points[:, 0] >= 0) & (points[:, 1] >= 0)
    inside &= (points[:, 0] <= shape[1] - 2) & (points[:, 1] <= shape[0] - 2)
    return inside.reshape(size, size)


def test_crops_match_insightface_norm_crop_within_one_grey_level(
    group_landmarks: list[npt.NDArray[np.float64]],
) -> None:
    frame = image("group6.jpg")
    for template, size in (("arcface_112_v2", 112), ("arcface_128", 128)):
        transforms = [estimate_transform(landmarks, template, size) for landmarks in group_landmarks]
        crops = warp_faces(frame, transforms, size)
        assert crops.shape == (6, size, size, 3)
        for crop, landmarks, transform in zip(crops, group_landmarks, transforms, strict=True):
            reference = cv2.warpAffine(frame, _insightface_norm(landmarks, size), (size, size), borderValue=0.0)
            inside = _inside_frame(transform, size, frame.shape)
            assert inside.mean() > 0.8
            difference = np.abs(crop.astype(int) - reference.astype(int))[inside]
            assert difference.max() <= 1


def test_similarity_transform_recovers_a_known_similarity() -> None:
    rng = np.random.default_rng(3)
    points = rng.uniform(0, 500, (5, 2))
    angle, scale, shift = 0.3, 0.7, np.array([12.0, -40.0])
    rotation = scale * np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
    matrix = similarity_transform(points, points @ rotation.T + shift)
    np.testing.assert_allclose(matrix, np.c_[rotation, shift], atol=1e-9)


def test_box_mask_is_feathered_to_zero_at_the_edges_and_one_inside() -> None:
    mask = box_mask(128, 0.3, (0, 0, 0, 0))
    assert mask.shape == (128, 128) and mask.dtype == np.float32
    assert mask[64, 64] == pytest.approx(1.0, abs=1e-3)
    assert mask[0, 64] < 0.1 and mask[64, 0] < 0.1 and mask[127, 64] < 0.1 and mask[64, 127] < 0.1
    np.testing.assert_allclose(mask, mask.T, atol=1e-6)  # symmetric
    assert np.all(np.diff(mask[64, :64]) >= -1e-6)  # rises monotonically towards the centre


def test_box_mask_padding_cuts_that_side_away() -> None:
    mask = box_mask(100, 0.0, (20, 0, 0, 10))
    assert np.all(mask[:20] == 0) and np.all(mask[:, :10] == 0)
    assert np.all(mask[20:99, 10:99] == 1)


def test_paste_back_changes_only_the_region_the_crop_covers() -> None:
    frame = clip_frames("d18.mp4", [0])[0]
    face = detector().detect_frame(frame)[0]
    transform = estimate_transform(face.landmarks, "arcface_128", 128)
    pasted = paste_back(frame, np.full((128, 128, 3), 255, np.uint8), transform, box_mask(128, 0.3))
    x1, y1, x2, y2 = paste_region(frame.shape, 128, transform)
    outside = np.ones(frame.shape[:2], bool)
    outside[y1:y2, x1:x2] = False
    assert np.array_equal(pasted[outside], frame[outside])
    assert (pasted[y1:y2, x1:x2] != frame[y1:y2, x1:x2]).any()
    cx, cy = face.landmarks[2].astype(int)  # the nose tip: full mask weight
    assert pasted[cy, cx].tolist() == [255, 255, 255]


def test_paste_back_writes_into_out_when_given() -> None:
    frame = clip_frames("d18.mp4", [0])[0]
    face = detector().detect_frame(frame)[0]
    transform = estimate_transform(face.landmarks, "arcface_128", 128)
    crop = np.zeros((128, 128, 3), np.uint8)
    expected = paste_back(frame, crop, transform, box_mask(128, 0.3))
    target = frame.copy()
    assert paste_back(target, crop, transform, box_mask(128, 0.3), out=target) is target
    assert np.array_equal(target, expected)


def test_a_crop_outside_the_frame_pastes_nothing() -> None:
    frame = np.full((100, 100, 3), 9, np.uint8)
    transform = np.array([[1.0, 0.0, -500.0], [0.0, 1.0, -500.0]])  # the crop lies at (500, 500)
    assert paste_region(frame.shape, 64, transform) == (100, 100, 100, 100)
    assert np.array_equal(paste_back(frame, np.zeros((64, 64, 3), np.uint8), transform, box_mask(64, 0.3)), frame)


@pytest.mark.parametrize(("template", "size"), [("arcface_128", 128), ("arcface_128", 256), ("ffhq_512", 512)])
def test_warp_then_paste_back_unchanged_keeps_d18_above_40_db(template: str, size: int) -> None:
    frames = clip_frames("d18.mp4", slice(0, None, 9))
    found = detector().detect(frames)
    mask = box_mask(size, 0.3)
    for frame, faces in zip(frames, found, strict=True):
        transforms = [estimate_transform(face.landmarks, template, size) for face in faces]
        result = frame
        for crop, transform in zip(warp_faces(frame, transforms, size), transforms, strict=True):
            result = paste_back(result, crop, transform, mask)
        assert psnr(result, frame) >= 40.0
