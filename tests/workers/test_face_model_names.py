"""Each name a job can choose is typed once, in ``shared/options.py``; everything that must know it agrees: the model
registry, the modules that feed each model, the doctor's list of heavy models, and the processor modules."""

from __future__ import annotations

import pkgutil

import workers.processors
from shared.options import (
    FRAME_ENHANCER_SCALES,
    PRESETS,
    Detector,
    Enhancer,
    FrameEnhancerModel,
    JobOptions,
    ProcessorName,
    Swapper,
    choices,
)
from workers.doctor import HEAVY_MODELS
from workers.faces.detection import DETECTORS
from workers.faces.enhancing import ENHANCERS
from workers.faces.swapping import SWAPPERS
from workers.models.registry import REGISTRY
from workers.processors import registered
from workers.processors.crop_paste import CropPasteProcessor
from workers.processors.face_enhancer import FaceEnhancerProcessor
from workers.processors.face_swapper import FaceSwapperProcessor

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


def test_every_detector_a_job_can_choose_names_a_registered_detector() -> None:
    assert set(DETECTORS) == set(choices(Detector))
    assert {spec.model for spec in DETECTORS.values()} == _registered_of_kind("detector")


def test_the_doctor_reports_every_heavy_model_a_job_can_choose() -> None:
    assert set(HEAVY_MODELS) == set(choices(Swapper)) | set(choices(Enhancer))
    assert all(REGISTRY[name].kind in {"swapper", "enhancer"} for name in HEAVY_MODELS)


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
    for processor in (FaceSwapperProcessor, FaceEnhancerProcessor):
        assert issubclass(processor, CropPasteProcessor), processor.__name__
        for name in ("process", "stages", "_align", "_transform", "_paste"):
            assert getattr(processor, name) is getattr(CropPasteProcessor, name), (processor.__name__, name)
        assert processor.transform is not CropPasteProcessor.transform, processor.__name__
