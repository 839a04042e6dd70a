"""face_editor: the edit table, the head pose and its limits, the eyes' and lips' open ratios and the widened crop
against values worked out by hand; every control moving the face and nothing outside its crop; faces batched
across frames giving what one frame at a time gives; the torch engine giving ONNX Runtime's frames."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from shared.options import JobOptions
from shared.portrait_options import FaceEditorOptions
from tests.support.faces import clip_frames
from tests.support.portrait_replicas import portrait_models
from tests.support.replicas import replica_settings
from workers.faces.alignment import estimate_transform, paste_region
from workers.faces.detection import Face
from workers.processors import ProcessorContext, build
from workers.processors.face_editor import (
    FaceEditorProcessor,
    edited_angles,
    expression_moves,
    open_ratios,
    widened,
)

X, Y, Z = 0, 1, 2


def _moves(**controls: float) -> dict[tuple[int, int], float]:
    moves = expression_moves(FaceEditorOptions(**controls))
    return {(int(k), int(a)): float(moves[k, a]) for k, a in zip(*np.nonzero(moves), strict=True)}


def _approx(found: dict[tuple[int, int], float], expected: dict[tuple[int, int], float]) -> None:
    assert found.keys() == expected.keys(), (sorted(found), sorted(expected))
    for key, value in expected.items():
        assert found[key] == pytest.approx(value, abs=1e-7), key


def test_no_control_moves_nothing() -> None:
    assert not np.any(expression_moves(FaceEditorOptions()))


def test_the_eyebrows_and_the_gaze_move_the_keypoints_facefusion_moves() -> None:
    _approx(_moves(eyebrow_direction=0.5), {(1, Y): 0.0075, (2, Y): -0.01})
    _approx(_moves(eyebrow_direction=-0.5), {(1, X): 0.0075, (2, X): -0.01, (1, Y): -0.0025, (2, Y): 0.0025})
    # the horizontal gaze's two branches swap the amounts; the vertical gaze has one branch
    _approx(
        _moves(eye_gaze_horizontal=-0.4, eye_gaze_vertical=0.2),
        {(11, X): -0.008, (15, X): -0.006, (1, Y): 0.0005, (2, Y): -0.0005, (11, Y): -0.002, (13, Y): -0.001,
         (15, Y): -0.002, (16, Y): -0.001},
    )  # fmt: skip
    _approx(_moves(eye_gaze_horizontal=1.0), {(11, X): 0.015, (15, X): 0.02})


def test_the_mouth_controls_move_the_keypoints_facefusion_moves_and_add_up() -> None:
    _approx(_moves(mouth_smile=1.0), {
        (20, Y): -0.015, (14, Y): -0.025, (17, Y): 0.01, (17, Z): 0.004, (3, Y): -0.0045, (7, Y): -0.0045,
    })  # fmt: skip
    _approx(_moves(mouth_smile=-1.0), {
        (14, Y): 0.02, (17, Y): -0.003, (19, Y): -0.02, (19, Z): 0.005, (20, Z): -0.01, (3, Y): -0.0045,
        (7, Y): -0.0045,
    })  # fmt: skip
    # grim 0.5: 17z -0.0025, 19z +0.005, 20y -0.03, 20z -0.015; pout 0.5: 19y -0.011, 19z +0.0125, 20z -0.001
    _approx(
        _moves(mouth_grim=0.5, mouth_pout=0.5),
        {(17, Z): -0.0025, (19, Z): 0.0175, (20, Y): -0.03, (20, Z): -0.016, (19, Y): -0.011},
    )
    _approx(_moves(mouth_grim=-1.0), {(19, Y): 0.05, (19, Z): 0.02, (20, Z): 0.03})
    _approx(_moves(mouth_position_horizontal=-1.0, mouth_position_vertical=1.0), {
        (19, X): -0.05, (20, X): -0.04, (19, Y): -0.04, (20, Y): -0.02,
    })  # fmt: skip
    _approx(_moves(mouth_position_vertical=-1.0), {(19, Y): 0.05, (20, Y): 0.04})
    _approx(_moves(mouth_purse=1.0), {(19, Y): -0.04, (19, Z): -0.02})
    _approx(_moves(mouth_purse=-1.0), {(14, Y): 0.02, (17, Z): -0.01, (19, Z): 0.015, (20, Z): 0.002})
    _approx(_moves(mouth_pout=-1.0), {(19, Y): -0.022, (19, Z): -0.025, (20, Z): 0.002})


def test_the_head_turns_by_the_controls_within_its_limits() -> None:
    """pitch -20°, yaw -60°, roll +15° per unit; then ±30°, ±60°, ±20°, widened to the face's own angle."""
    own = np.array([[10.0, -50.0, 5.0]], np.float32)
    turned = edited_angles(own, FaceEditorOptions(head_pitch=0.5, head_yaw=-0.5, head_roll=1.0))
    assert np.allclose(turned, [[0.0, -20.0, 20.0]])
    own = np.array([[25.0, 55.0, -18.0]], np.float32)
    turned = edited_angles(own, FaceEditorOptions(head_pitch=-1.0, head_yaw=-1.0, head_roll=-1.0))
    assert np.allclose(turned, [[30.0, 60.0, -20.0]])  # 45, 115, -33 clipped
    beyond = np.array([[40.0, -70.0, 0.0]], np.float32)  # a face already past the limits keeps its pose
    assert np.allclose(edited_angles(beyond, FaceEditorOptions()), beyond)


def test_the_open_ratios_are_distances_over_distances_of_the_68_points() -> None:
    points = np.zeros((1, 68, 2), np.float32)
    points[0, [37, 40, 39, 36]] = [(1, 1), (1, 4), (5, 0), (1, 0)]  # left eye: 3 / 4
    points[0, [43, 46, 45, 42]] = [(0, 0), (0, 2), (4, 0), (0, 0)]  # right eye: 2 / 4
    points[0, [62, 66, 54, 48]] = [(0, 0), (0, 1), (5, 0), (0, 0)]  # lips: 1 / 5
    assert np.allclose(open_ratios(points), [[0.75, 0.5, 0.2]], atol=1e-6)


def test_the_crop_is_cut_one_and_a_half_times_wider_about_the_nose_tip() -> None:
    face = Face(
        box=np.array([0, 0, 4, 4], np.float32),
        landmarks=np.array([[0, 0], [4, 0], [2, 2], [0, 4], [4, 4]], np.float32),
        score=0.9,
    )
    assert np.allclose(widened(face).landmarks, [[-1, -1], [5, -1], [2, 2], [-1, 5], [5, 5]])
    assert np.array_equal(widened(face).box, face.box)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return portrait_models(tmp_path_factory.mktemp("editor") / "models")


def _editor(models: Path, engine: str = "onnxruntime", **controls: float) -> FaceEditorProcessor:
    job = JobOptions.model_validate({"processors": ["face_editor"], "face_editor": controls})
    settings = replica_settings(models, engine=engine, torch_compile_mode="eager", torch_precision="fp32")
    settings = settings.model_copy(update={"model_engines": {"yunet": "onnxruntime", "fan_68_5": "onnxruntime"}})
    reported: list[Any] = []
    processor = build(
        "face_editor", ProcessorContext(options=job, sources=[], settings=settings, report=reported.append)
    )
    assert isinstance(processor, FaceEditorProcessor) and reported == []
    return processor


def _framed(count: int) -> np.ndarray:
    """d18 frames with 160 px of grey about them: the editor's crop, wider than d18, fits in them."""
    frames = clip_frames("d18.mp4", list(range(0, 6 * count, 6)))
    return np.pad(frames, ((0, 0), (160, 160), (160, 160), (0, 0)), constant_values=128)


def test_every_control_moves_the_face_and_nothing_outside_its_crop(models: Path) -> None:
    frames = _framed(1)
    still = _editor(models).process(frames)[0]
    face = _editor(models).detector.detect(frames)[0][0]
    x1, y1, x2, y2 = paste_region(frames[0].shape, 512, estimate_transform(widened(face).landmarks, "ffhq_512", 512))
    inside = np.zeros(frames.shape[1:3], bool)
    inside[y1:y2, x1:x2] = True
    assert inside.mean() < 0.7
    fx1, fy1, fx2, fy2 = face.box.astype(int)
    assert np.abs(still[fy1:fy2, fx1:fx2].astype(int) - frames[0, fy1:fy2, fx1:fx2]).mean() > 3  # redrawn
    for control in ("mouth_smile", "eye_open_ratio", "lip_open_ratio", "head_yaw", "eyebrow_direction"):
        for value in (0.5, -0.5):
            edited = _editor(models, **{control: value}).process(frames)[0]
            assert np.array_equal(edited[~inside], frames[0][~inside]), (control, value)
            moved = np.abs(edited[fy1:fy2, fx1:fx2].astype(int) - still[fy1:fy2, fx1:fx2]).mean()
            assert moved > 0.5, (control, value, moved)


def test_a_batch_gives_what_one_frame_at_a_time_gives(models: Path) -> None:
    editor = _editor(models, mouth_smile=0.5, eye_open_ratio=0.3, head_pitch=-0.2)
    frames = _framed(3)
    batched = editor.process(frames)
    single = np.concatenate([editor.process(frames[i : i + 1]) for i in range(len(frames))])
    assert np.abs(batched.astype(int) - single).max() <= 1


def test_on_the_torch_engine_the_editor_gives_onnx_runtimes_frames(models: Path) -> None:
    frames = _framed(2)
    controls = {"mouth_smile": 0.5, "eye_open_ratio": -0.5, "lip_open_ratio": 0.5, "head_roll": 0.3}
    on = {engine: _editor(models, engine, **controls) for engine in ("onnxruntime", "torch")}
    kinds = {e: {type(m.engine).__name__ for m in p.portrait.models.values()} for e, p in on.items()}
    assert kinds == {"onnxruntime": {"OnnxEngine"}, "torch": {"TorchEngine"}}
    host, torch_frames = on["onnxruntime"].process(frames), on["torch"].process(frames)
    assert np.abs(torch_frames.astype(int) - host).max() <= 2
