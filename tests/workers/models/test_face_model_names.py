"""Each name a job can choose is typed once, in ``shared/options.py`` (and its option modules); everything that must
know it agrees: the model registry, the modules that feed each model, the doctor's list of heavy models, and the
processor modules."""

from __future__ import annotations

import pkgutil
from pathlib import Path
from typing import get_args

import workers.processors
from shared.age_options import AgeModifierModel
from shared.deep_swap_options import DEFAULT_DEEP_SWAPPER, DeepSwapperCatalogue
from shared.options import (
    FRAME_ENHANCER_SCALES,
    PRESETS,
    BackgroundRemoverModel,
    Detector,
    Enhancer,
    FrameColorizerModel,
    FrameEnhancerModel,
    JobOptions,
    LipSyncerModel,
    ProcessorName,
    Swapper,
    choices,
)
from tests.support.faces import cpu_settings
from workers.doctor import processors_models
from workers.faces.detection import DETECTORS
from workers.faces.enhancing import ENHANCERS
from workers.faces.swapping import SWAPPERS
from workers.live_portrait import EDITOR_PARTS, RESTORER_PARTS
from workers.models.download import model_urls
from workers.models.registry import REGISTRY
from workers.processors import registered
from workers.processors.age_modifier import AgeModifierProcessor
from workers.processors.crop_paste import CropPasteProcessor
from workers.processors.deep_swapper import DeepSwapperProcessor
from workers.processors.expression_restorer import ExpressionRestorerProcessor
from workers.processors.face_editor import FaceEditorProcessor
from workers.processors.face_enhancer import FaceEnhancerProcessor
from workers.processors.face_swapper import FaceSwapperProcessor
from workers.processors.lip_syncer import LipSyncerProcessor

# Modules of workers/processors that hold no processor: the interface and registry, the crop-and-paste template.
NOT_PROCESSORS = {"base", "crop_paste"}


def _registered_of_kind(kind: str) -> set[str]:
    return {name for name, spec in REGISTRY.items() if spec.kind == kind}


def test_every_swapper_a_job_can_choose_is_registered_and_fed_and_no_other() -> None:
    assert _registered_of_kind("swapper") == set(choices(Swapper))
    assert set(SWAPPERS) == set(choices(Swapper))
    for name, spec in SWAPPERS.items():
        assert spec.model is REGISTRY[name], name
        assert {spec.target_input, spec.source_input} == set(spec.model.input_names), name
        if spec.converter is not None:
            assert REGISTRY[spec.converter.name].kind == "embedding_converter"


def test_every_enhancer_a_job_can_choose_is_registered_and_fed_and_no_other() -> None:
    assert _registered_of_kind("enhancer") == set(choices(Enhancer))
    assert set(ENHANCERS) == set(choices(Enhancer))
    for name, spec in ENHANCERS.items():
        assert spec.model is REGISTRY[name], name
        assert spec.image_input in spec.model.input_names, name


def test_every_frame_enhancer_a_job_can_choose_is_registered_with_its_scale_and_no_other() -> None:
    assert _registered_of_kind("frame_enhancer") == set(choices(FrameEnhancerModel)) == set(FRAME_ENHANCER_SCALES)
    for name, scale in FRAME_ENHANCER_SCALES.items():
        assert f"_x{scale}" in name, name  # the scale the output size follows is the model's own
        assert REGISTRY[name].input_size and REGISTRY[name].licence, name


def test_every_age_model_a_job_can_choose_is_registered_with_its_licence_and_no_other() -> None:
    assert _registered_of_kind("age_modifier") == set(choices(AgeModifierModel))
    assert "MIT" in REGISTRY["fran"].licence and "non-commercial" in REGISTRY["styleganex_age"].licence
    assert {REGISTRY[name].template for name in choices(AgeModifierModel)} == {"ffhq_512", "styleganex_384"}
    assert JobOptions().age_modifier.model == "fran" and issubclass(AgeModifierProcessor, CropPasteProcessor)


def test_every_deep_swapper_model_a_job_can_choose_is_registered_from_its_hugging_face_repository() -> None:
    """The catalogue's 157 ids (FaceFusion's: six scopes), each a registry entry whose file lies under its scope
    and is downloaded from FaceFusion's Hugging Face repository of that scope only."""
    catalogue = set(choices(DeepSwapperCatalogue))
    assert len(catalogue) == 157 and _registered_of_kind("deep_swapper") == catalogue
    assert {model_id.split("/")[0] for model_id in catalogue} == {
        "druuzil",
        "edel",
        "iperov",
        "jen",
        "mats",
        "rumateus",
    }
    assert JobOptions().deep_swapper.model == DEFAULT_DEEP_SWAPPER == "iperov/elon_musk_224"
    bases = ["https://github.com/facefusion/facefusion-assets/releases/download", "https://huggingface.co/facefusion"]
    for model_id in catalogue:
        spec = REGISTRY[model_id]
        scope, name = model_id.split("/")
        assert spec.file_name == f"{scope}/{name}.dfm" and spec.input_size == int(name.rsplit("_", 1)[1]), model_id
        assert 224 <= spec.input_size <= 448 and spec.template == "dfl_whole_face" and spec.licence
        url = f"https://huggingface.co/facefusion/deepfacelive-models-{scope}/resolve/main/{name}.dfm"
        assert model_urls(spec, bases) == [url], model_id


def test_every_detector_a_job_can_choose_names_a_registered_detector() -> None:
    assert set(DETECTORS) == set(choices(Detector))
    assert {spec.model for spec in DETECTORS.values()} == _registered_of_kind("detector")


def test_the_doctor_reports_every_model_each_processor_can_choose_and_only_registered_ones(tmp_path: Path) -> None:
    """The doctor's list is the job models' table (``shared.job_models``) read for each choice of a processor's
    model: every choice the options give, the helpers it loads, and the operator's custom deep swapper models."""
    (tmp_path / "custom").mkdir()
    (tmp_path / "custom" / "mine.dfm").write_bytes(b"")
    reported = processors_models(cpu_settings(tmp_path, models_dir=tmp_path))
    chosen: dict[str, set[str]] = {
        "face_swapper": set(choices(Swapper)),
        "face_enhancer": set(choices(Enhancer)),
        "frame_enhancer": set(choices(FrameEnhancerModel)),
        "lip_syncer": set(choices(LipSyncerModel)) | {"kim_vocal_2", "fan_68_5"},
        "frame_colorizer": set(choices(FrameColorizerModel)),
        "background_remover": set(choices(BackgroundRemoverModel)),
        "age_modifier": set(choices(AgeModifierModel)) | {"fairface"},
        "deep_swapper": {*get_args(DeepSwapperCatalogue), "custom/mine"},
        "expression_restorer": {f"live_portrait_{part}" for part in RESTORER_PARTS},
        "face_editor": {f"live_portrait_{part}" for part in EDITOR_PARTS},
        "face_debugger": {"fan_68_5", "2dfan4"},
    }
    assert set(reported) == set(chosen), "every processor that loads a model, and no other"
    for processor, models in chosen.items():
        assert models <= set(reported[processor]), processor
        assert len(reported[processor]) == len(set(reported[processor])), f"{processor}: each model once"
    assert _registered_of_kind("swapper") | _registered_of_kind("embedding_converter") <= set(reported["face_swapper"])
    for processor, models in reported.items():
        assert all(model in REGISTRY for model in models if model != "custom/mine"), processor


def test_each_preset_chooses_models_a_job_can_choose() -> None:
    for preset in PRESETS:
        face = JobOptions.model_validate({"preset": preset}).face
        assert face.swapper is None or face.swapper in SWAPPERS
        assert face.enhancer is None or face.enhancer in ENHANCERS


def test_every_processor_a_job_can_name_has_a_module_that_registers_it_and_no_module_is_left_over() -> None:
    """The API accepts every ``ProcessorName``: a name without a module would fail only on a worker."""
    modules = {m.name for m in pkgutil.iter_modules(workers.processors.__path__)} - NOT_PROCESSORS
    assert modules == set(choices(ProcessorName)), "one module per processor, named as the processor"
    assert set(registered()) == set(choices(ProcessorName))


def test_the_processors_that_crop_and_paste_back_run_the_one_template_and_give_only_their_transform() -> None:
    """Alignment, masks and paste-back are decided once: a processor with its own stages would miss the next fix."""
    for processor in (
        FaceSwapperProcessor, FaceEnhancerProcessor, LipSyncerProcessor, AgeModifierProcessor, DeepSwapperProcessor,
        ExpressionRestorerProcessor, FaceEditorProcessor,
    ):  # fmt: skip
        assert issubclass(processor, CropPasteProcessor), processor.__name__
        for name in ("process", "stages", "_align", "_transform", "_paste"):
            assert getattr(processor, name) is getattr(CropPasteProcessor, name), (processor.__name__, name)
        assert processor.transform is not CropPasteProcessor.transform, processor.__name__


def test_the_livePortrait_processors_load_the_registrys_livePortrait_files_and_no_other() -> None:
    """expression_restorer loads three of them, face_editor all six; the registry holds no seventh."""
    assert _registered_of_kind("live_portrait") == {f"live_portrait_{part}" for part in EDITOR_PARTS}
    assert set(RESTORER_PARTS) <= set(EDITOR_PARTS)
    assert {"expression_restorer", "face_editor"} <= set(choices(ProcessorName)) & set(registered())
    assert JobOptions(processors=["expression_restorer"]).changes_faces  # a regenerated face: a provenance tag
    assert JobOptions(processors=["face_editor"]).changes_faces
