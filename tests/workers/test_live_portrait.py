"""LivePortrait's shared pieces (workers/live_portrait.py): the keypoint maths against values worked out by hand,
the replicas of its six files through the loader (names, shapes, a fixed batch of 1 with 0-d angles, batches that
change nothing), the torch converter's parity with ONNX Runtime on every file, and the registry's entries."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
import torch

from tests.support.portrait_replicas import PARTS, install_portrait, replicas
from tests.support.replicas import replica_settings
from workers.engines.onnx_to_torch import convert
from workers.live_portrait import (
    EDITOR_PARTS,
    EXPRESSION_MAX,
    EXPRESSION_MIN,
    RESTORER_PARTS,
    LivePortrait,
    Motion,
    clip_angles,
    clip_expression,
    rotation,
)
from workers.models.registry import REGISTRY

X, Y, Z = np.eye(3, dtype=np.float32)


def test_the_rotation_turns_about_x_then_y_then_z_by_degrees() -> None:
    """pitch about x, yaw about y, roll about z, applied in that order: R = Rz·Ry·Rx."""
    assert np.allclose(rotation([[90, 0, 0]])[0] @ Y, Z, atol=1e-6)  # pitch 90°: y onto z
    assert np.allclose(rotation([[0, 90, 0]])[0] @ Z, X, atol=1e-6)  # yaw 90°: z onto x
    assert np.allclose(rotation([[0, 0, 90]])[0] @ X, Y, atol=1e-6)  # roll 90°: x onto y
    both = rotation([[90, 90, 0]])[0]  # Ry(90)·Rx(90): x stays for Rx, then goes to -z; y goes to z, then to x
    assert np.allclose(both @ X, -Z, atol=1e-6) and np.allclose(both @ Y, X, atol=1e-6)
    yaw_roll = rotation([[0, 90, 90]])[0]  # Rz(90)·Ry(90): y stays for Ry, then goes to -x (the other order: y)
    assert np.allclose(yaw_roll @ Y, -X, atol=1e-6)
    turned = rotation([[0, 0, 30]])[0]
    assert np.allclose(turned @ X, [np.cos(np.pi / 6), 0.5, 0], atol=1e-6)
    assert rotation(np.zeros((4, 3))).shape == (4, 3, 3)


def test_the_keypoints_are_scale_times_the_turned_canonical_points_plus_expression_plus_translation() -> None:
    canonical = np.array([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]], np.float32)
    motion = Motion(
        angles=np.array([[0.0, 90.0, 0.0]], np.float32),  # yaw 90°: x → -z, y stays
        scale=np.array([[2.0]], np.float32),
        translation=np.array([[0.1, 0.2, 0.3]], np.float32),
        expression=np.array([[[0.01, 0.0, 0.0], [0.0, 0.0, 0.02]]], np.float32),
        canonical=canonical,
    )
    # 2·((0, 0, -1) + (0.01, 0, 0)) + (0.1, 0.2, 0.3) and 2·((0, 1, 0) + (0, 0, 0.02)) + (0.1, 0.2, 0.3)
    expected = [[0.12, 0.2, -1.7], [0.1, 2.2, 0.34]]
    assert np.allclose(motion.keypoints()[0], expected, atol=1e-6)
    other = np.zeros((1, 2, 3), np.float32)  # another expression, no turn: 2·c + t
    assert np.allclose(motion.keypoints(other, np.zeros((1, 3), np.float32))[0], [[2.1, 0.2, 0.3], [0.1, 2.2, 0.3]])


def test_an_expression_is_clipped_to_each_keypoints_bounds() -> None:
    huge = np.full((1, 21, 3), 1.0, np.float32)
    assert np.array_equal(clip_expression(huge)[0], EXPRESSION_MAX)
    assert np.array_equal(clip_expression(-huge)[0], EXPRESSION_MIN)
    # FaceFusion's table: keypoint 19 (the lips) may move furthest down, keypoint 5 furthest up
    assert clip_expression(huge)[0, 19, 1] == pytest.approx(0.1806)
    assert clip_expression(-huge)[0, 5, 1] == pytest.approx(-0.2238)
    inside = (EXPRESSION_MIN + EXPRESSION_MAX)[None] / 2
    assert np.array_equal(clip_expression(inside), inside)


def test_a_head_pose_is_clipped_to_its_limits_widened_to_the_faces_own() -> None:
    """±30° pitch, ±60° yaw, ±20° roll; a face already past a limit may stay where it is, not go further."""
    original = np.array([[10.0, -70.0, 25.0]], np.float32)
    assert np.allclose(clip_angles([[45.0, -90.0, -30.0]], original), [[30.0, -70.0, -20.0]])
    assert np.allclose(clip_angles([[-45.0, 80.0, 30.0]], original), [[-30.0, 60.0, 25.0]])
    assert np.allclose(clip_angles([[5.0, -65.0, 24.0]], original), [[5.0, -65.0, 24.0]])


@pytest.fixture(scope="module")
def portrait(tmp_path_factory: pytest.TempPathFactory) -> LivePortrait:
    models = tmp_path_factory.mktemp("portrait") / "models"
    install_portrait(models)
    return LivePortrait.load("ffhq_512", EDITOR_PARTS, replica_settings(models))


def _crops(count: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 256, (count, 64, 64, 3), dtype=np.uint8)
    return np.stack([np.kron(crop, np.ones((8, 8, 1), np.uint8)) for crop in base])  # 512², blocky: texture


def test_the_crops_are_fed_at_256_rgb_in_0_1() -> None:
    blue = np.zeros((1, 512, 512, 3), np.uint8)
    blue[..., 0] = 255  # BGR
    tensor = LivePortrait.prepare(blue)
    assert tensor.shape == (1, 3, 256, 256) and tensor.dtype == np.float32
    assert np.all(tensor[0, 2] == 1.0) and np.all(tensor[0, :2] == 0.0)  # blue is the third channel in RGB


def test_the_motion_extractor_gives_a_pose_scale_translation_expression_and_keypoints_per_face(
    portrait: LivePortrait,
) -> None:
    motion = portrait.motion(portrait.prepare(_crops(3)))
    assert len(motion) == 3
    assert motion.angles.shape == (3, 3) and motion.scale.shape == (3, 1) and motion.translation.shape == (3, 3)
    assert motion.expression.shape == motion.canonical.shape == (3, 21, 3)
    assert np.abs(motion.angles).max() <= 20 and np.abs(motion.expression).max() <= 0.02
    assert not np.allclose(motion.expression[0], motion.expression[1])  # faces differ, their motion too


def test_a_file_fixed_to_one_face_with_0_d_angles_gives_what_the_dynamic_one_gives(
    portrait: LivePortrait, tmp_path: Path
) -> None:
    """FaceFusion reads the angles of a one-face call as 0-d tensors: several faces go through one call each."""
    install_portrait(tmp_path / "models", batch=1)
    fixed = LivePortrait.load("ffhq_512", RESTORER_PARTS, replica_settings(tmp_path / "models"))
    assert fixed.models["motion_extractor"].fixed_batch == 1
    tensor = portrait.prepare(_crops(3))
    one, many = fixed.motion(tensor), portrait.motion(tensor)
    for name in ("angles", "scale", "translation", "expression", "canonical"):
        assert np.allclose(getattr(one, name), getattr(many, name), atol=1e-5), name
    volume = fixed.features(tensor)
    assert np.array_equal(fixed.generate(volume, one.keypoints(), one.keypoints()).shape, (3, 512, 512, 3))


def test_a_batch_of_faces_through_each_model_gives_what_one_face_at_a_time_gives(
    portrait: LivePortrait,
) -> None:
    crops = _crops(4, seed=1)
    tensor = portrait.prepare(crops)
    volume, motion = portrait.features(tensor), portrait.motion(tensor)
    source = motion.keypoints(clip_expression(motion.expression + 0.01))
    batched = portrait.generate(volume, source, motion.keypoints())
    single = np.concatenate(
        [portrait.generate(volume[i : i + 1], source[i : i + 1], motion.keypoints()[i : i + 1]) for i in range(4)]
    )
    assert batched.shape == (4, 512, 512, 3) and batched.dtype == np.uint8
    assert np.abs(batched.astype(int) - single).max() <= 1
    stitched = portrait.stitch(source, motion.keypoints())
    assert stitched.shape == (4, 21, 3) and np.abs(stitched - source).max() <= 0.01  # the replica's small fit
    eyes = portrait.retarget("eye_retargeter", np.zeros((4, 66), np.float32))
    assert eyes.shape == (4, 21, 3)


@pytest.mark.parametrize("part", PARTS)
def test_the_converter_runs_each_replica_as_onnx_runtime_does(part: str) -> None:
    model = onnx.load_from_string(replicas()[part])
    rng = np.random.default_rng(0)
    feeds = {}
    for value in model.graph.input:
        dims = [2 if d.dim_param else d.dim_value for d in value.type.tensor_type.shape.dim]
        feeds[value.name] = rng.random(dims, np.float32) * (0.1 if part in ("stitcher", "generator") else 1.0)
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, feeds)
    with torch.inference_mode():
        actual = convert(model)(*(torch.from_numpy(feeds[v.name]) for v in model.graph.input))
    actual = actual if isinstance(actual, tuple | list) else (actual,)
    assert len(actual) == len(expected)
    for mine, theirs in zip(actual, expected, strict=True):
        assert tuple(mine.shape) == theirs.shape
        assert np.abs(mine.numpy() - theirs).max() <= 1e-4 * max(1.0, float(np.abs(theirs).max()))


def test_the_registry_has_livePortraits_six_files_with_their_licence() -> None:
    registered = {name for name, spec in REGISTRY.items() if spec.kind == "live_portrait"}
    assert registered == {f"live_portrait_{part}" for part in EDITOR_PARTS} == {f"live_portrait_{p}" for p in PARTS}
    assert set(RESTORER_PARTS) < set(EDITOR_PARTS)
    for name in registered:
        spec = REGISTRY[name]
        assert spec.base == "models-3.0.0" and spec.file_name == f"{name}.onnx" and "MIT" in spec.licence
        assert "output_names" in spec.unverified  # FaceFusion reads them by position
    # the replicas carry the registry's names
    for part in PARTS:
        model = onnx.load_from_string(replicas()[part])
        spec = REGISTRY[f"live_portrait_{part}"]
        assert tuple(v.name for v in model.graph.input) == spec.input_names, part
        assert tuple(v.name for v in model.graph.output) == spec.output_names, part
