"""The age modifier (workers/processors/age_modifier.py, workers/faces/aging.py) on d18 frames with the fran and
styleganex_age replicas: fran told each face's FairFace age and the age wanted, styleganex_age fed the face alone
warped from its wider crop, the face changed and the rest of the frame not, batches that change nothing, and the
torch converter's parity with ONNX Runtime."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
import torch

from shared.age_options import AgeModifierModel
from shared.options import JobOptions
from tests.support import mask_replicas
from tests.support.age_replicas import SHIFT_RGB, fran, styleganex_age
from tests.support.faces import MODELS, clip_frames, psnr
from tests.support.replicas import install_replica, replica_settings
from workers.engines.onnx_to_torch import convert
from workers.faces.aging import fran_directions
from workers.faces.alignment import estimate_transform, paste_region, warp_faces
from workers.faces.attributes import AGE_BRACKETS, FaceAttributes
from workers.faces.cropping import gather_crops
from workers.faces.detection import Face
from workers.processors import ProcessorContext, Work, build
from workers.processors.age_modifier import AgeModifierProcessor

AGE_BRACKET = 3  # the FairFace replica's answer for every face: 20-29, whose mean FaceFusion takes as 24


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("age") / "models"
    folder.mkdir()
    shutil.copy(MODELS / "yunet_2023mar.onnx", folder / "yunet_2023_mar.onnx")
    install_replica(mask_replicas.fairface(answer=(0, 1, AGE_BRACKET)), "fairface", folder)
    install_replica(fran(), "fran", folder)
    install_replica(styleganex_age(), "styleganex_age", folder)
    return folder


@pytest.fixture(scope="module")
def frames() -> np.ndarray:
    return clip_frames("d18.mp4", slice(0, 2))  # 480², one face each


def _processor(
    models: Path, model: AgeModifierModel = "fran", direction: int = 0, **settings: str
) -> AgeModifierProcessor:
    options = JobOptions(processors=["age_modifier"], age_modifier={"model": model, "direction": direction})
    context = ProcessorContext(options=options, sources=[], settings=replica_settings(models, **settings))
    processor = build("age_modifier", context)
    assert isinstance(processor, AgeModifierProcessor)
    return processor


def _targets(processor: AgeModifierProcessor, frames: np.ndarray) -> list[list[Face]]:
    assert processor.targeter is not None
    return processor.targeter.select(frames, processor.detector.detect(frames))


def _pasted(frame: np.ndarray, face: Face, template: str) -> np.ndarray:
    """Where pasting the face's 1024 crop back may touch the frame."""
    inside = np.zeros(frame.shape[:2], bool)
    x1, y1, x2, y2 = paste_region(frame.shape, 1024, estimate_transform(face.landmarks, template, 1024))
    inside[y1:y2, x1:x2] = True
    return inside


def _face_box(frame: np.ndarray, face: Face) -> np.ndarray:
    inside = np.zeros(frame.shape[:2], bool)
    x1, y1, x2, y2 = face.box.astype(int)
    inside[y1:y2, x1:x2] = True
    return inside


@pytest.mark.parametrize(
    ("bracket", "years", "expected"),
    [(3, 20, (0.24, 0.44)), (0, -30, (0.005, 0.0)), (8, 40, (0.845, 1.0)), (5, 0, (0.44, 0.44))],
)
def test_fran_is_told_the_mean_of_the_faces_fairface_bracket_and_that_age_plus_the_years(
    bracket: int, years: int, expected: tuple[float, float]
) -> None:
    """As FaceFusion: mean(range(first, last)) of the bracket (0.5, 5.5, 14 … 84.5), then clipped to 0-100 years."""
    found = fran_directions([FaceAttributes("male", AGE_BRACKETS[bracket])], years)
    assert found.dtype == np.float32 and found.shape == (1, 2)
    np.testing.assert_allclose(found[0], expected, atol=1e-6)


def test_each_face_of_a_batch_gets_its_fairface_age_in_one_classifier_call(models: Path, frames: np.ndarray) -> None:
    processor = _processor(models, direction=30)
    targets = _targets(processor, frames)
    state = processor.face_state(frames, targets)
    assert state is not None and state.shape == (2, 2)  # one face a frame, one row a face
    np.testing.assert_allclose(state, [[0.24, 0.54]] * 2, atol=1e-6)


def test_fran_ages_the_face_and_leaves_the_rest_of_the_frame(models: Path, frames: np.ndarray) -> None:
    """The replica adds (wanted − age) · SHIFT_RGB: 40 years make the face redder and less blue; nothing outside
    the pasted crop changes; 0 years give the face back (the replica's identity, resampled twice)."""
    aged = _processor(models, direction=40).process(frames)
    same = _processor(models, direction=0).process(frames)
    faces = _targets(_processor(models), frames)
    for index, frame in enumerate(frames):
        face = faces[index][0]
        outside = ~_pasted(frame, face, "ffhq_512")
        assert np.array_equal(aged[index][outside], frame[outside])
        box = _face_box(frame, face)
        change = aged[index][box].astype(float).mean(axis=0) - frame[box].astype(float).mean(axis=0)  # B, G, R
        assert change[2] > 0.4 * 255 * SHIFT_RGB[0] * 0.6 and change[0] < -20, change  # redder, less blue
        assert psnr(same[index][box], frame[box]) > 35


def test_a_batch_of_frames_is_aged_as_its_frames_one_at_a_time(
    models: Path, frames: np.ndarray, tmp_path: Path
) -> None:
    folder = tmp_path / "models"
    shutil.copytree(models, folder)
    install_replica(fran(residual=0.5), "fran", folder)
    processor = _processor(folder, direction=25)
    batched = processor.process(frames)
    single = np.concatenate([processor.process(frames[i : i + 1]) for i in range(len(frames))])
    assert np.abs(batched.astype(int) - single).max() <= 1


def test_styleganex_sees_the_face_alone_warped_from_its_wider_crop_as_if_cut_from_the_frame(
    models: Path, frames: np.ndarray
) -> None:
    """The crop pasted back is styleganex_384 at 1024 from the five points widened ×0.875 about the nose; the matrix
    of each face's state takes it to the ffhq_512 crop at 256 that FaceFusion cuts from the frame."""
    processor = _processor(models, "styleganex_age")
    frame = frames[:1]
    targets = _targets(processor, frame)
    widened, _ = processor.refine(Work(frame, targets, targets))
    crop = gather_crops(frame, widened, "styleganex_384", 1024).crops[0]
    state = processor.face_state(frame, widened)
    assert state is not None and state.shape == (1, 6)
    face = warp_faces(crop, [state[0].reshape(2, 3).astype(np.float64)], 256)[0]
    expected = gather_crops(frame, targets, "ffhq_512", 256).crops[0]
    assert psnr(face, expected) > 30


def test_styleganex_adds_the_models_detail_and_keeps_the_crops_colour(models: Path, frames: np.ndarray) -> None:
    """Its replica draws fine stripes by the direction: they show on the face; the colour match keeps the face's
    mean colour; at direction 0 the face comes back; outside the pasted crop nothing changes."""
    frame = frames[:1]
    face = _targets(_processor(models, "styleganex_age"), frame)[0][0]
    box = _face_box(frame[0], face)
    older = _processor(models, "styleganex_age", direction=80).process(frame)[0]
    same = _processor(models, "styleganex_age", direction=0).process(frame)[0]
    original = frame[0]

    def stripes(image: np.ndarray) -> float:  # row-to-row change inside the face box
        rows = image[box.any(axis=1)][:, box.any(axis=0)].astype(float)
        return float(np.abs(np.diff(rows, axis=0)).mean())

    assert stripes(older) > 2 * stripes(original)
    assert np.abs(older[box].astype(float).mean(axis=0) - original[box].astype(float).mean(axis=0)).max() < 4
    assert psnr(same[box], original[box]) > 30
    wide = np.asarray(face.landmarks)
    nose = wide[2]
    outside = ~_pasted(
        original, Face(face.box, (nose + (wide - nose) * 0.875).astype(np.float32), 1.0), "styleganex_384"
    )
    assert np.array_equal(older[outside], original[outside])


@pytest.mark.parametrize("name", ["fran", "styleganex_age"])
def test_the_converter_runs_the_replica_as_onnx_runtime_does(name: str) -> None:
    model = fran(residual=1.0, batch=2) if name == "fran" else styleganex_age(residual=1.0, batch=2)
    rng = np.random.default_rng(0)
    if name == "fran":
        feeds = {
            "target": rng.uniform(0, 1, (2, 3, 1024, 1024)).astype(np.float32),
            "direction": np.array([0.24, 0.64], np.float32),
        }
    else:
        feeds = {
            "target": rng.uniform(-1, 1, (2, 3, 256, 256)).astype(np.float32),
            "target_with_background": rng.uniform(-1, 1, (2, 3, 384, 384)).astype(np.float32),
            "direction": np.array(-1.25, np.float32),
        }
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (expected,) = session.run(None, feeds)
    module = convert(model)
    with torch.inference_mode():
        (actual,) = module(*[torch.from_numpy(feeds[spec.name]) for spec in module.inputs])
    assert actual.shape == expected.shape
    assert np.abs(actual.numpy() - expected).max() <= 1e-3


@pytest.mark.parametrize("name", ["fran", "styleganex_age"])
def test_on_the_torch_engine_the_processor_ages_as_on_onnx_runtime(
    name: AgeModifierModel, models: Path, frames: np.ndarray, tmp_path: Path
) -> None:
    """The engine is chosen as for every model: the converted torch module (eager; compiling is the engine tests')
    gives ONNX Runtime's frames and reports no slower path."""
    folder = tmp_path / "models"
    shutil.copytree(models, folder)
    install_replica(fran(residual=0.5) if name == "fran" else styleganex_age(residual=0.5), name, folder)
    aged = {}
    for engine in ("onnxruntime", "torch"):
        settings = replica_settings(folder, engine=engine, torch_compile_mode="eager", torch_precision="fp32")
        options = JobOptions(processors=["age_modifier"], age_modifier={"model": name, "direction": 30})
        reported: list[object] = []
        context = ProcessorContext(options=options, sources=[], settings=settings, report=reported.append)
        processor = build("age_modifier", context)
        assert isinstance(processor, AgeModifierProcessor)
        aged[engine] = processor.process(frames[:1])
        assert reported == [], (engine, reported)
        assert type(processor.model.engine).__name__.lower().startswith("torch" if engine == "torch" else "onnx")
    assert psnr(aged["torch"], aged["onnxruntime"]) > 45


def test_the_age_replicas_have_the_registry_inputs() -> None:
    from workers.models.registry import REGISTRY

    for name, model in (("fran", fran()), ("styleganex_age", styleganex_age())):
        assert [value.name for value in model.graph.input] == list(REGISTRY[name].input_names)
        assert [value.name for value in model.graph.output] == list(REGISTRY[name].output_names)
        onnx.checker.check_model(model)
