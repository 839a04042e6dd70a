"""The deep swapper (workers/processors/deep_swapper.py, workers/faces/deep_swapping.py) with DeepFaceLive
replicas on d18 frames: the face swapped inside the model's own mask and nothing else, morph_value fed only where a
model has it, a file checked for DeepFaceLive's layout when it is loaded (a custom one accepted, malformed ones
refused with model_invalid), custom names matched against the folder's listing, the colour match, and the torch
converter's parity with ONNX Runtime (and its fallback, reported)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
import torch
from onnx import TensorProto, helper

from shared.errors import ModelError
from shared.options import JobOptions
from tests.support.deep_swap_replicas import dfm, face_ellipse
from tests.support.faces import MODELS, clip_frames, psnr
from tests.support.replicas import install_replica, replica_settings
from workers.engines.onnx_to_torch import convert
from workers.faces.alignment import estimate_transform, paste_back, paste_region
from workers.faces.colour_matching import histogram_likeness, match_colour, match_colour_conditionally
from workers.faces.deep_swapping import DeepSwapModel
from workers.faces.detection import Face
from workers.models.custom import custom_models
from workers.models.registry import REGISTRY
from workers.processors import ProcessorContext, build
from workers.processors.deep_swapper import DeepSwapperProcessor

CATALOGUE = "iperov/elon_musk_224"  # the default; a 224 px model, the catalogue's smallest side
CUSTOM_SIDE = 128  # an operator's model may be smaller: the cheapest crops


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("deep") / "models"
    folder.mkdir()
    shutil.copy(MODELS / "yunet_2023mar.onnx", folder / "yunet_2023_mar.onnx")
    install_replica(dfm(), CATALOGUE, folder)
    (folder / "custom").mkdir()
    onnx.save(dfm(side=CUSTOM_SIDE, morph=False), str(folder / "custom" / "mine.dfm"))
    return folder


@pytest.fixture(scope="module")
def frames() -> np.ndarray:
    return clip_frames("d18.mp4", slice(0, 2))


def _processor(models: Path, model: str = CATALOGUE, morph: int = 100, **settings: str) -> DeepSwapperProcessor:
    options = JobOptions(processors=["deep_swapper"], deep_swapper={"model": model, "morph": morph})
    processor = build(
        "deep_swapper", ProcessorContext(options=options, sources=[], settings=replica_settings(models, **settings))
    )
    assert isinstance(processor, DeepSwapperProcessor)
    return processor


def _faces(processor: DeepSwapperProcessor, frames: np.ndarray) -> list[list[Face]]:
    assert processor.targeter is not None
    return processor.targeter.select(frames, processor.detector.detect(frames))


def _in_frame(frame: np.ndarray, face: Face, side: int, mask: np.ndarray) -> np.ndarray:
    """A crop mask (``[side, side]``) where it lands in the frame, as a boolean image."""
    canvas = np.zeros(frame.shape, np.uint8)
    white = np.full((side, side, 3), 255, np.uint8)
    pasted = paste_back(canvas, white, estimate_transform(face.landmarks, "dfl_whole_face", side), mask)
    return pasted[..., 0] > 127


def test_the_model_swaps_the_face_inside_its_own_mask_and_leaves_the_rest_of_the_frame(
    models: Path, frames: np.ndarray
) -> None:
    """Inside the model's mask (the replica's ellipse, eroded and blurred) the face is the model's; in the rest of
    the crop, which the feathered box alone would have pasted, the frame stays (FaceFusion's minimum of the masks);
    outside the crop nothing changes at all."""
    processor = _processor(models)
    swapped = processor.process(frames)
    faces = _faces(processor, frames)
    for index, frame in enumerate(frames):
        face = faces[index][0]
        core = _in_frame(frame, face, 224, face_ellipse(224, 0.7))
        beyond = ~_in_frame(frame, face, 224, 1 - face_ellipse(224, 1.3))  # the crop less a ring around the mask
        region = paste_region(frame.shape, 224, estimate_transform(face.landmarks, "dfl_whole_face", 224))
        outside = np.ones(frame.shape[:2], bool)
        outside[region[1] : region[3], region[0] : region[2]] = False
        assert np.array_equal(swapped[index][outside], frame[outside])
        assert psnr(swapped[index][~beyond & ~outside], frame[~beyond & ~outside]) >= 45
        assert psnr(swapped[index][core], frame[core]) < 20
        rows, columns = np.flatnonzero(core.any(axis=1)), np.flatnonzero(core.any(axis=0))
        inner = (slice(rows[0], rows[-1]), slice(columns[0], columns[-1]))
        stripes = [np.abs(np.diff(image[inner].astype(float), axis=1)).mean() for image in (swapped[index], frame)]
        assert stripes[0] > 3 * stripes[1], stripes  # the replica's person: its stripes (the colour match keeps them)


def test_morph_value_is_fed_where_the_model_takes_it(models: Path, frames: np.ndarray) -> None:
    """The replica's person shows by morph / 100: at 0 the face keeps its own look (the model's input is the
    sharpened crop); a model without the input ignores the option."""
    none, full = (_processor(models, morph=m).process(frames[:1])[0] for m in (0, 100))
    assert psnr(none, frames[0]) > 30 > psnr(full, frames[0])
    assert _processor(models, "custom/mine").model.layout.morph is False
    custom = [_processor(models, "custom/mine", morph=m).process(frames[:1])[0] for m in (0, 100)]
    assert np.array_equal(custom[0], custom[1])


def test_a_batch_of_frames_is_swapped_as_its_frames_one_at_a_time(
    models: Path, frames: np.ndarray, tmp_path: Path
) -> None:
    folder = tmp_path / "models"
    shutil.copytree(models, folder)
    install_replica(dfm(residual=0.5), CATALOGUE, folder)
    processor = _processor(folder)
    batched = processor.process(frames)
    single = np.concatenate([processor.process(frames[i : i + 1]) for i in range(len(frames))])
    assert np.abs(batched.astype(int) - single).max() <= 1


def test_a_custom_model_is_listed_by_its_stem_and_used_at_its_own_side(models: Path, frames: np.ndarray) -> None:
    settings = replica_settings(models)
    assert custom_models(settings) == {"custom/mine": models / "custom" / "mine.dfm"}
    processor = _processor(models, "custom/mine")
    assert processor.crop_size == CUSTOM_SIDE and processor.template == "dfl_whole_face"
    assert psnr(processor.process(frames[:1])[0], frames[0]) < 30  # swapped


def test_a_custom_name_the_folder_does_not_hold_is_unavailable_and_names_what_it_holds(
    models: Path, tmp_path: Path
) -> None:
    (models / "custom" / "not a name.dfm").write_bytes(b"")  # a stem a job could not give: never listed
    try:
        with pytest.raises(ModelError) as missing:
            DeepSwapModel.load("custom/theirs", replica_settings(models))
        assert missing.value.code == "model_unavailable"
        assert "custom/theirs" in missing.value.message and "custom/mine" in missing.value.message
        assert "not a name" not in missing.value.message
        with pytest.raises(ModelError) as unset:  # no models folder: no custom models at all
            DeepSwapModel.load("custom/mine", replica_settings(models).model_copy(update={"models_dir": None}))
        assert unset.value.code == "model_unavailable"
    finally:
        (models / "custom" / "not a name.dfm").unlink()


def _renamed_input(model: onnx.ModelProto, name: str) -> onnx.ModelProto:
    changed = onnx.ModelProto()
    changed.CopyFrom(model)
    old = changed.graph.input[0].name
    changed.graph.input[0].name = name
    for node in changed.graph.node:
        node.input[:] = [name if value == old else value for value in node.input]
    return changed


def _nchw(model: onnx.ModelProto) -> onnx.ModelProto:
    changed = onnx.ModelProto()
    changed.CopyFrom(model)
    dims = changed.graph.input[0].type.tensor_type.shape.dim  # [N, S, S, 3] → [N, 3, S, S]
    side = dims[1].dim_value
    dims[1].dim_value, dims[3].dim_value = 3, side
    return changed


def _two_outputs(model: onnx.ModelProto) -> onnx.ModelProto:
    changed = onnx.ModelProto()
    changed.CopyFrom(model)
    changed.graph.output.pop()
    return changed


def _extra_input(model: onnx.ModelProto) -> onnx.ModelProto:
    changed = onnx.ModelProto()
    changed.CopyFrom(model)
    changed.graph.input.append(helper.make_tensor_value_info("source", TensorProto.FLOAT, ["N", 512]))
    return changed


@pytest.mark.parametrize(
    ("malformed", "says"),
    [
        (lambda: b"not a model at all", "not an ONNX model"),
        (lambda: _renamed_input(dfm(side=CUSTOM_SIDE), "input"), "its inputs are input, morph_value:0"),
        (lambda: _extra_input(dfm(side=CUSTOM_SIDE)), "its inputs are in_face:0, morph_value:0, source"),
        (lambda: _nchw(dfm(side=CUSTOM_SIDE)), "in_face:0 is ['N', 3, 128, 128]"),
        (lambda: _two_outputs(dfm(side=CUSTOM_SIDE)), "its outputs are"),
    ],
    ids=["not-onnx", "no-in_face", "extra-input", "nchw", "two-outputs"],
)
def test_a_malformed_custom_model_is_refused_when_loaded_with_model_invalid(
    malformed: object, says: str, models: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "models"
    (folder / "custom").mkdir(parents=True)
    made = malformed()  # type: ignore[operator]
    path = folder / "custom" / "broken.dfm"
    path.write_bytes(made if isinstance(made, bytes) else made.SerializeToString())
    with pytest.raises(ModelError) as refused:
        DeepSwapModel.load("custom/broken", replica_settings(folder))
    assert refused.value.code == "model_invalid"
    assert "custom/broken" in refused.value.message and says in refused.value.message, refused.value.message


def test_the_replicas_have_the_registry_layout() -> None:
    spec = REGISTRY[CATALOGUE]
    for side, morph in ((224, True), (CUSTOM_SIDE, False)):
        model = dfm(side=side, morph=morph)
        assert [value.name for value in model.graph.output] == list(spec.output_names)
        assert [value.name for value in model.graph.input][:1] == list(spec.input_names)


@pytest.mark.parametrize("morph", [True, False])
def test_the_converter_runs_the_replica_as_onnx_runtime_does(morph: bool) -> None:
    """DeepFaceLab's export is NHWC around NCHW convolutions (Transposes at both ends): the converted module gives
    ONNX Runtime's three outputs."""
    model = dfm(side=CUSTOM_SIDE, morph=morph, residual=1.0, batch=2)
    feeds = {"in_face:0": np.random.default_rng(0).uniform(0, 1, (2, CUSTOM_SIDE, CUSTOM_SIDE, 3)).astype(np.float32)}
    if morph:
        feeds["morph_value:0"] = np.array([0.6], np.float32)
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, feeds)
    module = convert(model)
    with torch.inference_mode():
        actual = module(*[torch.from_numpy(feeds[spec.name]) for spec in module.inputs])
    for want, got in zip(expected, actual, strict=True):
        assert got.shape == want.shape
        assert np.abs(got.numpy() - want).max() <= 1e-3


def test_on_the_torch_engine_the_processor_swaps_as_on_onnx_runtime(
    models: Path, frames: np.ndarray, tmp_path: Path
) -> None:
    folder = tmp_path / "models"
    shutil.copytree(models, folder)
    install_replica(dfm(residual=0.5), CATALOGUE, folder)
    swapped = {}
    for engine in ("onnxruntime", "torch"):
        settings = replica_settings(folder, engine=engine, torch_compile_mode="eager", torch_precision="fp32")
        options = JobOptions(processors=["deep_swapper"], deep_swapper={"morph": 70})
        reported: list[object] = []
        processor = build(
            "deep_swapper", ProcessorContext(options=options, sources=[], settings=settings, report=reported.append)
        )
        assert isinstance(processor, DeepSwapperProcessor)
        swapped[engine] = processor.process(frames[:1])
        assert reported == [], (engine, reported)
        assert type(processor.model.engine).__name__.lower().startswith("torch" if engine == "torch" else "onnx")
    assert psnr(swapped["torch"], swapped["onnxruntime"]) > 45


def test_a_custom_model_the_converter_cannot_take_runs_on_onnx_runtime_and_says_so(
    models: Path, frames: np.ndarray, tmp_path: Path
) -> None:
    """An operator's file with an operator the converter lacks (Sin): the same engine_fallback the other models
    report, and the job goes on."""
    model = onnx.ModelProto()
    model.CopyFrom(dfm(side=CUSTOM_SIDE, morph=False))
    graph = model.graph
    graph.node[0].input[0] = "/face_in"  # the Transpose that takes in_face:0 now takes it through Sin · 0
    head = [
        helper.make_node("Sin", ["in_face:0"], ["/wave"], name="/wave"),
        helper.make_node("Mul", ["/wave", "/zero"], ["/nothing"], name="/nothing"),
        helper.make_node("Add", ["in_face:0", "/nothing"], ["/face_in"], name="/face_in"),
    ]
    nodes = [*head, *graph.node]
    del graph.node[:]
    graph.node.extend(nodes)
    graph.initializer.append(helper.make_tensor("/zero", TensorProto.FLOAT, [], [0.0]))
    onnx.checker.check_model(model)
    folder = tmp_path / "models"
    shutil.copytree(models, folder)
    onnx.save(model, str(folder / "custom" / "odd.dfm"))
    reported: list[object] = []
    settings = replica_settings(folder, engine="torch", torch_compile_mode="eager", torch_precision="fp32")
    options = JobOptions(processors=["deep_swapper"], deep_swapper={"model": "custom/odd"})
    processor = build(
        "deep_swapper", ProcessorContext(options=options, sources=[], settings=settings, report=reported.append)
    )
    assert psnr(processor.process(frames[:1])[0], frames[0]) < 30
    kinds = [(getattr(d, "kind", None), getattr(d, "model", None)) for d in reported]
    assert kinds == [("engine_fallback", "custom/odd")], reported
    assert "Sin" in getattr(reported[0], "message", "")


def test_the_colour_match_takes_the_references_low_frequencies_and_keeps_the_images_detail() -> None:
    rng = np.random.default_rng(0)
    crop = clip_frames("d18.mp4", [0])[0][100:324, 120:344]
    detail = rng.integers(-20, 21, crop.shape)
    image = np.clip(crop.astype(int) + detail + np.array([40, -30, 10]), 0, 255).astype(np.uint8)  # shifted, noisy
    matched = match_colour(crop, image)
    assert np.abs(matched.astype(float).mean(axis=(0, 1)) - crop.astype(float).mean(axis=(0, 1))).max() < 2
    high = matched.astype(float) - crop
    assert np.corrcoef(high.ravel(), detail.ravel())[0, 1] > 0.8  # the image's own detail kept
    assert histogram_likeness(crop, crop) == pytest.approx(1.0)
    assert np.array_equal(match_colour_conditionally(crop, crop), crop)
    blue = np.zeros_like(crop)
    blue[..., 0] = 255
    assert histogram_likeness(crop, blue) < 0.6  # unlike colours: little of the match
