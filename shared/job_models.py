"""The models a job's options make a worker load, by the registry's names: what a submission is checked against
(the operator's disabled licences, ``shared.licences``) before anything is stored.

It lists only what the options load for certain; a model a worker loads only on the way (the landmark lifter of a
track, say) is checked as the worker loads it (``workers.models.download.resolve``), so no model of a disabled
licence runs either way. ``tests/workers/models/test_licences.py`` checks these tables against the workers' own.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Literal, get_args, get_origin

from shared.options import Detector, JobOptions, MaskType, ProcessorName, Swapper

__all__ = [
    "CONTENT_ANALYSERS", "DETECTOR_MODELS", "RECOGNISER", "SWAPPER_CONVERTERS", "job_models", "processor_models",
]  # fmt: skip

DETECTOR_MODELS: Mapping[Detector, str] = MappingProxyType(
    {"yunet": "yunet", "scrfd": "scrfd_2.5g", "retinaface": "retinaface_10g", "yolo_face": "yoloface_8n"}
)
"""Each detector choice's model file (``workers.faces.detection.DETECTORS``)."""

SWAPPER_CONVERTERS: Mapping[Swapper, str] = MappingProxyType(
    {
        "simswap_256": "crossface_simswap",
        "simswap_unofficial_512": "crossface_simswap",
        "ghost_1_256": "crossface_ghost",
        "ghost_2_256": "crossface_ghost",
        "ghost_3_256": "crossface_ghost",
        "hififace_unofficial_256": "crossface_hififace",
    }
)
"""The swappers whose source identity goes through an embedding converter, and its model
(``workers.faces.swapping.SWAPPERS``)."""

RECOGNISER = "arcface_w600k_r50"
"""The face recogniser: every swapper's source identity, and the reference face of ``reference`` mode."""
CONTENT_ANALYSERS = ("nsfw_1", "nsfw_2", "nsfw_3")
"""The operator's content policy's analysers (``workers.content.ANALYSERS``), run on every job when it is on."""

_FACE: frozenset[ProcessorName] = frozenset(
    {"face_swapper", "face_enhancer", "face_blur", "face_debugger", "lip_syncer", "expression_restorer", "face_editor",
     "age_modifier", "deep_swapper"}
)  # fmt: skip


def job_models(options: JobOptions, *, content_policy: bool = False) -> list[str]:
    """The models ``options`` load for certain, in the order of the chain, each once; with ``content_policy``
    (the farm's setting) the content analysers first.

    >>> job_models(JobOptions(processors=["face_blur"]))
    ['yunet']
    >>> job_models(JobOptions(processors=["background_remover", "frame_enhancer"]))
    ['modnet', 'real_esrgan_x2']
    """
    found: list[str] = list(CONTENT_ANALYSERS) if content_policy else []
    chain, face = options.processors, options.face
    if _FACE.intersection(chain):
        found.append(DETECTOR_MODELS[face.detector])
        if face.selector_mode == "reference":
            found.append(RECOGNISER)
        if face.filters_by_attribute:
            found.append("fairface")
    if "face_blur" in chain and face.blur_strict and face.tracking and face.strict_second_detector is not None:
        found.append(DETECTOR_MODELS[face.strict_second_detector])
    for name in chain:
        found += _processor_models(name, options)
    return list(dict.fromkeys(found))


def _processor_models(name: ProcessorName, options: JobOptions) -> list[str]:
    """The models processor ``name`` itself loads under ``options``."""
    face = options.face
    landmarks = ["fan_68_5", *(["2dfan4"] if face.landmarker_score > 0 else [])]
    occluder = [face.occluder] if "occlusion" in face.mask_types else []
    match name:
        case "face_swapper" if face.swapper is not None:
            converter = SWAPPER_CONVERTERS.get(face.swapper)
            masks = occluder + ([face.parser] if "region" in face.mask_types else [])
            lifted = "area" in face.mask_types or face.landmarker_score > 0
            return [
                face.swapper,
                RECOGNISER,
                *([converter] if converter else []),
                *masks,
                *(landmarks if lifted else []),
            ]
        case "face_enhancer" if face.enhancer is not None:
            return [face.enhancer, *occluder]  # its masks are the box and the occlusion alone
        case "face_debugger" if face.landmarker_score > 0:
            return landmarks
        case "frame_enhancer":
            return [options.frame_enhancer.model]
        case "lip_syncer":  # its masks are its own (box, and the lower face's area for wav2lip): no occluder, no parser
            voice = ["kim_vocal_2"] if options.lip_syncer.voice_extractor else []
            return [options.lip_syncer.model, *landmarks, *voice]
        case "frame_colorizer":
            return [options.frame_colorizer.model]
        case "background_remover":
            return [options.background_remover.model]
        case "expression_restorer":  # box and occlusion masks
            scored = landmarks if face.landmarker_score > 0 else []
            restorer = ("feature_extractor", "motion_extractor", "generator")
            return [*(f"live_portrait_{part}" for part in restorer), *occluder, *scored]
        case "face_editor":  # the box mask alone; the 68 points for the eyes' and lips' open ratios
            editor = ("feature_extractor", "motion_extractor", "generator", "eye_retargeter", "lip_retargeter")
            return [*(f"live_portrait_{part}" for part in (*editor, "stitcher")), *landmarks]
        case "age_modifier":  # fran takes each face's age from FairFace; box and occlusion masks
            ages = ["fairface"] if options.age_modifier.model == "fran" else []
            return [options.age_modifier.model, *ages, *occluder, *(landmarks if face.landmarker_score > 0 else [])]
        case "deep_swapper":  # the model's own masks and the face_swapper's; a custom model is the operator's file
            model = options.deep_swapper.model
            masks = occluder + ([face.parser] if "region" in face.mask_types else [])
            lifted = "area" in face.mask_types or face.landmarker_score > 0
            return [*([] if model.startswith("custom/") else [model]), *masks, *(landmarks if lifted else [])]
    return []


def processor_models(name: ProcessorName) -> list[str]:
    """Every model processor ``name`` can load itself: what it loads under each choice of its model (its options'
    ``model``, or the face options' swapper or enhancer), with every optional model on (each mask type, the
    68-point landmarker, lip sync's voice extractor); its choices first, in the options' order, then the models
    every choice loads. ``swapfarm doctor`` reports each one's engine.

    >>> processor_models("frame_colorizer")
    ['ddcolor', 'ddcolor_artistic', 'deoldify', 'deoldify_artistic', 'deoldify_stable']
    >>> processor_models("age_modifier")
    ['fran', 'fairface', 'styleganex_age', 'xseg_1', 'fan_68_5', '2dfan4']
    """
    wide = {"mask_types": list(get_args(MaskType)), "landmarker_score": 0.5}
    base = JobOptions.model_validate({"processors": [name], "face": wide, "lip_syncer": {"voice_extractor": True}})
    field, key = _MODEL_CHOICE.get(name, (name, "model"))
    owner = getattr(base, field) if field in type(base).model_fields else base
    values = _literal_values(type(owner).model_fields[key].annotation) if key in type(owner).model_fields else []
    variants = [base.model_copy(update={field: owner.model_copy(update={key: value})}) for value in values] or [base]
    loads = [_processor_models(name, options) for options in variants]
    every = set.intersection(*(set(models) for models in loads))
    found = list(dict.fromkeys(model for models in loads for model in models))
    return [model for model in found if model not in every] + [model for model in found if model in every]


_MODEL_CHOICE: Mapping[ProcessorName, tuple[str, str]] = MappingProxyType(
    {"face_swapper": ("face", "swapper"), "face_enhancer": ("face", "enhancer")}
)
"""Where a processor's model is chosen, for those whose options field (named as the processor) has no ``model``."""


def _literal_values(annotation: object) -> list[str]:
    """The strings of every ``Literal`` in ``annotation`` (through ``Optional``, unions and ``Annotated``)."""
    if get_origin(annotation) is Literal:
        return [value for value in get_args(annotation) if isinstance(value, str)]
    return [value for part in get_args(annotation) for value in _literal_values(part)]
