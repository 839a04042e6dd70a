"""expression_restorer: the blend of expressions against values worked out by hand, the face restored from the
frame as decoded (not from what the processors before it made of it), the render pipeline keeping those frames
for it only where it needs them, faces batched across frames giving what one frame at a time gives, the torch
engine giving ONNX Runtime's frames, only the face's crop changed, and where it may sit in a chain."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest

from shared.errors import InvalidOptionsError
from shared.options import JobOptions
from shared.processor_order import check_order
from tests.support.faces import clip_frames
from tests.support.portrait_replicas import generator, portrait_models
from tests.support.replicas import install_replica, replica_settings
from workers.engines.base import Degradation
from workers.faces.alignment import estimate_transform, paste_region
from workers.live_portrait import EXPRESSION_MAX, EXPRESSION_MIN
from workers.pipeline import decoded_kept, run_stages, stages_of
from workers.processors import ProcessorContext, Work, build
from workers.processors.expression_restorer import ExpressionRestorerProcessor, restored_expression

UPPER = [1, 2, 6, 10, 11, 12, 13, 15, 16]
LOWER = [3, 7, 14, 17, 18, 19, 20]


def test_the_restored_expression_blends_the_decoded_one_over_the_working_one_on_the_chosen_areas() -> None:
    original = np.full((1, 21, 3), 0.01, np.float32)
    working = np.full((1, 21, 3), -0.01, np.float32)
    # factor 50: f = 0.6, so 0.6·0.01 + 0.4·(-0.01) = 0.002 on the chosen keypoints, -0.01 on the others; then
    # clipped to the table (most z bounds are far tighter than 0.002)
    half = restored_expression(original, working, 50, ["upper-face", "lower-face"])[0]
    expected = np.where(np.isin(np.arange(21), UPPER + LOWER)[:, None], 0.002, -0.01)
    assert np.allclose(half, np.clip(expected, EXPRESSION_MIN, EXPRESSION_MAX), atol=1e-7)
    assert half[19, 1] == pytest.approx(0.002) and half[0, 0] == pytest.approx(-0.01)  # 0 keeps the working one
    assert half[12, 0] == pytest.approx(0.0008757)  # keypoint 12's x may not pass 0.0008757
    upper = restored_expression(original, working, 50, ["upper-face"])[0]
    assert upper[11, 1] == pytest.approx(0.002) and upper[19, 1] == pytest.approx(-0.01)
    # factor 100: f = 1.2, a fifth past the decoded expression: 1.2·0.01 - 0.2·(-0.01) = 0.014
    full = restored_expression(original, working, 100, ["lower-face"])[0]
    assert full[19, 1] == pytest.approx(0.014) and full[3, 0] == pytest.approx(0.014)
    assert full[11, 1] == pytest.approx(-0.01) and full[12, 0] == pytest.approx(-0.008343)  # upper: working, clipped
    none = restored_expression(original, working, 0, ["upper-face", "lower-face"])[0]
    assert np.allclose(none, np.clip(working[0], EXPRESSION_MIN, EXPRESSION_MAX))


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return portrait_models(tmp_path_factory.mktemp("restorer") / "models")


def _restorer(models: Path, **options: Any) -> ExpressionRestorerProcessor:
    job = JobOptions.model_validate({"processors": ["expression_restorer"], "expression_restorer": options})
    processor = build(
        "expression_restorer", ProcessorContext(options=job, sources=[], settings=replica_settings(models))
    )
    assert isinstance(processor, ExpressionRestorerProcessor)
    return processor


def _frames(count: int = 2) -> np.ndarray:
    return clip_frames("d18.mp4", list(range(0, 8 * count, 8)))


def _blurred(frames: np.ndarray) -> np.ndarray:
    return np.stack([cv2.GaussianBlur(frame, (0, 0), 6) for frame in frames])


def _restore(processor: ExpressionRestorerProcessor, frames: np.ndarray, decoded: np.ndarray, *, kept: bool = True):
    """The processor's stages over ``frames``, the faces found on the frames as ``decoded`` (as the pipeline finds
    them), with those frames on the work where ``kept``."""
    faces = processor.detector.detect(decoded)
    work = Work(frames, faces, faces, decoded=decoded if kept else None)
    for stage in processor.stages():
        work = stage(work)
    return work.frames


def test_the_face_gets_the_expression_of_the_frame_as_decoded_not_the_working_ones(models: Path) -> None:
    """The working frame (blurred, as a processor before it might leave it) gives the face; the decoded frame its
    expression. Without the decoded frame the restorer would read the blurred face's expression."""
    decoded = _frames()
    working = _blurred(decoded)
    restorer = _restorer(models)
    from_decoded, from_working = _restore(restorer, working, decoded), _restore(restorer, working, decoded, kept=False)
    assert np.abs(from_decoded.astype(int) - from_working).mean() > 1  # another expression, another face
    blind = _restorer(models, factor=0)  # the decoded frame only gives the expression: at factor 0 it counts not
    assert np.array_equal(_restore(blind, working, decoded), _restore(blind, working, decoded, kept=False))


def test_the_render_pipeline_keeps_the_decoded_frames_where_a_processor_before_the_restorer_changes_them(
    models: Path,
) -> None:
    settings = replica_settings(models)
    options = JobOptions.model_validate(
        {"processors": ["face_blur", "expression_restorer"], "face": {"blur_strict": False}}
    )
    context = ProcessorContext(options=options, sources=[], settings=settings)
    blur, restorer = build("face_blur", context), build("expression_restorer", context)
    assert isinstance(restorer, ExpressionRestorerProcessor)
    assert decoded_kept([restorer]) == [] and decoded_kept([restorer, blur]) == []  # the frames are as decoded
    assert len(decoded_kept([blur, restorer])) == 1
    frames = _frames(3)
    out: list[np.ndarray] = []
    chain: Sequence[Any] = [blur, restorer]
    run_stages([frames], [*decoded_kept(chain), *stages_of(chain)], out.append)
    blurred = blur.process(frames)
    expected = _restore(restorer, blurred, frames)
    assert np.array_equal(np.concatenate(out), expected)
    assert not np.array_equal(expected, _restore(restorer, blurred, frames, kept=False))


def test_only_the_faces_crop_changes_and_a_batch_gives_what_one_frame_at_a_time_gives(models: Path) -> None:
    frames = _frames(3)
    restorer = _restorer(models)
    batched = restorer.process(frames)
    single = np.concatenate([restorer.process(frames[i : i + 1]) for i in range(len(frames))])
    assert np.abs(batched.astype(int) - single).max() <= 1
    for frame, out in zip(frames, batched, strict=True):
        (face,) = restorer.detector.detect(frame[None])[0]
        x1, y1, x2, y2 = paste_region(frame.shape, 512, estimate_transform(face.landmarks, "arcface_128", 512))
        inside = np.zeros(frame.shape[:2], bool)
        inside[y1:y2, x1:x2] = True
        assert np.array_equal(out[~inside], frame[~inside])
        fx1, fy1, fx2, fy2 = face.box.astype(int)
        assert np.abs(out[fy1:fy2, fx1:fx2].astype(int) - frame[fy1:fy2, fx1:fx2]).mean() > 3  # the face redrawn


def test_on_the_torch_engine_the_restorer_gives_onnx_runtimes_frames(models: Path) -> None:
    """The engine is chosen as for every model: each of its models converted to torch (eager here; compiling is the
    engine tests') restores as ONNX Runtime does, and says it took no slower path."""
    options = JobOptions(processors=["expression_restorer"])
    frames, decoded = _blurred(_frames()), _frames()
    restored = {}
    for engine in ("onnxruntime", "torch"):
        settings = replica_settings(models, engine=engine, torch_compile_mode="eager", torch_precision="fp32")
        settings = settings.model_copy(update={"model_engines": {"yunet": "onnxruntime"}})
        reported: list[object] = []
        context = ProcessorContext(options=options, sources=[], settings=settings, report=reported.append)
        processor = build("expression_restorer", context)
        assert isinstance(processor, ExpressionRestorerProcessor)
        restored[engine] = _restore(processor, frames, decoded)
        assert reported == [], (engine, reported)
        kinds = {type(model.engine).__name__ for model in processor.portrait.models.values()}
        assert kinds == {"TorchEngine" if engine == "torch" else "OnnxEngine"}, kinds
    assert np.abs(restored["torch"].astype(int) - restored["onnxruntime"]).max() <= 2


def test_a_model_the_torch_engine_cannot_take_runs_on_onnx_runtime_and_the_job_is_told(tmp_path: Path) -> None:
    """A generator that warps by GridSample (upstream's does; the converter has no such operator): the worker set to
    torch runs it on ONNX Runtime, reports an engine_fallback naming it, and restores as the other engine does."""
    models = portrait_models(tmp_path / "models")
    install_replica(generator(warp=True), "live_portrait_generator", models)
    options = JobOptions(processors=["expression_restorer"])
    settings = replica_settings(models, engine="torch", torch_compile_mode="eager", torch_precision="fp32")
    settings = settings.model_copy(update={"model_engines": {"yunet": "onnxruntime"}})
    reported: list[Degradation] = []
    context = ProcessorContext(options=options, sources=[], settings=settings, report=reported.append)
    processor = build("expression_restorer", context)
    assert isinstance(processor, ExpressionRestorerProcessor)
    assert [(d.kind, d.model) for d in reported] == [("engine_fallback", "live_portrait_generator")]
    assert "GridSample" in reported[0].message
    kinds = {part: type(model.engine).__name__ for part, model in processor.portrait.models.items()}
    assert kinds == {"feature_extractor": "TorchEngine", "motion_extractor": "TorchEngine", "generator": "OnnxEngine"}
    frames = _frames(1)
    reference = _restorer(portrait_models(tmp_path / "plain"))
    assert np.abs(_restore(processor, frames, frames).astype(int) - _restore(reference, frames, frames)).max() <= 2


@pytest.mark.parametrize(
    ("chain", "why"),
    [
        (["expression_restorer", "face_swapper"], "face_swapper must come before expression_restorer"),
        (["lip_syncer", "expression_restorer"], "the restorer would put the decoded mouth back"),
        (["face_editor", "expression_restorer"], "expression_restorer must come before face_editor"),
        (["face_enhancer", "expression_restorer"], "expression_restorer must come before face_enhancer"),
        (["face_enhancer", "face_editor"], "face_editor regenerates the whole face"),
    ],
)
def test_a_chain_that_would_undo_a_livePortrait_processors_work_is_refused_saying_why(
    chain: list[str], why: str
) -> None:
    with pytest.raises(InvalidOptionsError, match=why) as refused:
        check_order(JobOptions.model_validate({"processors": chain}))
    assert refused.value.code == "options_invalid"


def test_the_chains_the_processors_are_made_for_are_accepted() -> None:
    for chain in (
        ["expression_restorer"],
        ["face_swapper", "expression_restorer", "face_enhancer"],
        ["face_swapper", "expression_restorer", "lip_syncer", "face_editor", "face_enhancer", "frame_enhancer"],
        ["face_blur", "face_editor"],
    ):
        check_order(JobOptions.model_validate({"processors": chain}))
