"""The models' licences, and the operator's choice of the licences the farm may not use.

Every model of the registry (``workers.models.registry``) has one licence here, by its name: the API needs the
licences to refuse a job at submission, and may not import the worker code. A test checks that the two name the
same models.

``disabled_licences`` (``SWAPFARM_DISABLED_LICENCES``, a JSON list) names licences the farm may not use: licence
ids (``cc-by-nc-4.0``, ``insightface`` …), or ``non-commercial``: every licence whose terms forbid commercial use.
:func:`disabled` is the one decision; :func:`check_job` makes it for a job's options at submission (every entry
point: ``shared.submission``), :func:`check_model` for one model as a worker loads it (``workers.models.download``),
so a model a job's options do not name, but that a worker would load on the way, is refused there.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal, get_args

from shared.deep_swap_options import DeepSwapperCatalogue
from shared.errors import LicenceDisabledError

__all__ = [
    "LICENCES", "MODEL_LICENCES", "Licence", "LicenceId", "LicenceRule", "check_job", "check_model", "disabled",
    "disabled_models", "licence_of",
]  # fmt: skip

LicenceId = Literal[
    "apache-2.0", "mit", "bsd-3-clause", "gpl-3.0", "agpl-3.0", "cc-by-4.0", "cc-by-nc-4.0", "s-lab-1.0",
    "insightface", "wav2lip", "kim-vocal", "bria-rmbg", "corridor-key", "none-stated", "unrecorded",
]  # fmt: skip
LicenceRule = LicenceId | Literal["non-commercial"]
"""What ``disabled_licences`` may name: one licence, or ``non-commercial``, every licence that forbids commercial
use."""


@dataclass(frozen=True)
class Licence:
    """A licence's terms as far as the farm decides by them.

    Attributes:
        title: what ``swapfarm models list`` shows.
        commercial: whether the terms allow commercial use; ``None`` where they are not recorded here.
    """

    title: str
    commercial: bool | None


LICENCES: Mapping[LicenceId, Licence] = MappingProxyType(
    {
        "apache-2.0": Licence("Apache License 2.0", True),
        "mit": Licence("MIT License", True),
        "bsd-3-clause": Licence("BSD 3-Clause License", True),
        "gpl-3.0": Licence("GNU GPL 3.0", True),
        "agpl-3.0": Licence("GNU AGPL 3.0", True),
        "cc-by-4.0": Licence("Creative Commons Attribution 4.0", True),
        "cc-by-nc-4.0": Licence("Creative Commons Attribution-NonCommercial 4.0", False),
        "s-lab-1.0": Licence("S-Lab License 1.0 (non-commercial)", False),
        "insightface": Licence("insightface pretrained weights: non-commercial research only", False),
        "wav2lip": Licence("Wav2Lip: non-commercial research only", False),
        "kim-vocal": Licence("Kim Vocal: non-commercial only", False),
        "bria-rmbg": Licence("Bria RMBG: non-commercial (commercial use by agreement with Bria)", False),
        "corridor-key": Licence("CorridorKey: non-commercial (FaceFusion's licence string)", False),
        # no licence given: no right to use beyond what the law allows, and a real person's likeness besides
        "none-stated": Licence("no licence stated by the author (DeepFaceLive community models)", False),
        "unrecorded": Licence("terms not recorded here", None),
    }
)

_BACKGROUND: dict[str, LicenceId] = {
    "modnet": "apache-2.0", "ben_2": "mit", "birefnet_general": "mit", "birefnet_portrait": "mit",
    "corridor_key_1024": "corridor-key", "corridor_key_2048": "corridor-key", "isnet_general": "apache-2.0",
    "ormbg": "apache-2.0", "rmbg_1.4": "bria-rmbg", "rmbg_2.0": "bria-rmbg", "silueta": "apache-2.0",
    "u2net_cloth": "mit", "u2net_general": "apache-2.0", "u2net_human": "apache-2.0", "u2netp": "apache-2.0",
}  # fmt: skip

_LIVE_PORTRAIT_PARTS = (
    "feature_extractor", "motion_extractor", "generator", "eye_retargeter", "lip_retargeter", "stitcher",
)  # fmt: skip

MODEL_LICENCES: Mapping[str, LicenceId] = MappingProxyType(
    {
        "yunet": "apache-2.0",
        "scrfd_2.5g": "insightface",
        "retinaface_10g": "insightface",
        "yoloface_8n": "agpl-3.0",
        "arcface_w600k_r50": "insightface",
        "inswapper_128": "insightface",
        "inswapper_128_fp16": "insightface",
        "hyperswap_1a_256": "unrecorded",
        "hyperswap_1b_256": "unrecorded",
        "hyperswap_1c_256": "unrecorded",
        "simswap_256": "cc-by-nc-4.0",
        "simswap_unofficial_512": "cc-by-nc-4.0",
        "crossface_simswap": "unrecorded",
        "crossface_ghost": "unrecorded",
        "crossface_hififace": "unrecorded",
        "ghost_1_256": "apache-2.0",
        "ghost_2_256": "apache-2.0",
        "ghost_3_256": "apache-2.0",
        "blendswap_256": "unrecorded",
        "uniface_256": "unrecorded",
        "hififace_unofficial_256": "unrecorded",
        "gfpgan_1.2": "apache-2.0",
        "gfpgan_1.3": "apache-2.0",
        "gfpgan_1.4": "apache-2.0",
        "gpen_bfr_256": "unrecorded",
        "gpen_bfr_512": "unrecorded",
        "gpen_bfr_1024": "unrecorded",
        "gpen_bfr_2048": "unrecorded",
        "codeformer": "s-lab-1.0",
        "restoreformer_plus_plus": "apache-2.0",
        "2dfan4": "bsd-3-clause",
        "fan_68_5": "unrecorded",
        "xseg_1": "gpl-3.0",
        "xseg_2": "gpl-3.0",
        "xseg_3": "gpl-3.0",
        "bisenet_resnet_18": "mit",
        "bisenet_resnet_34": "mit",
        "fairface": "cc-by-4.0",
        "nsfw_1": "unrecorded",
        "nsfw_2": "unrecorded",
        "nsfw_3": "unrecorded",
        "real_esrgan_x2": "bsd-3-clause",
        "real_esrgan_x2_fp16": "bsd-3-clause",
        "real_esrgan_x4": "bsd-3-clause",
        "real_esrgan_x4_fp16": "bsd-3-clause",
        "wav2lip_96": "wav2lip",
        "wav2lip_gan_96": "wav2lip",
        "edtalk_256": "apache-2.0",
        "kim_vocal_1": "kim-vocal",
        "kim_vocal_2": "kim-vocal",
        "uvr_mdxnet": "mit",
        "ddcolor": "apache-2.0",
        "ddcolor_artistic": "apache-2.0",
        "deoldify": "mit",
        "deoldify_artistic": "mit",
        "deoldify_stable": "mit",
        **{f"live_portrait_{part}": "mit" for part in _LIVE_PORTRAIT_PARTS},
        **_BACKGROUND,
        "fran": "mit",
        "styleganex_age": "s-lab-1.0",
        **dict.fromkeys(get_args(DeepSwapperCatalogue), "none-stated"),
    }
)
"""Every model's licence, by the registry's model name."""


def licence_of(model: str) -> LicenceId:
    """The licence of ``model``; a model this table does not know counts as ``unrecorded``."""
    return MODEL_LICENCES.get(model, "unrecorded")


def disabled(licence: LicenceId, rules: Iterable[LicenceRule]) -> bool:
    """Whether ``rules`` (the operator's ``disabled_licences``) disable ``licence``: it is named, or it forbids
    commercial use and ``non-commercial`` is named.

    >>> disabled("s-lab-1.0", ["non-commercial"]), disabled("unrecorded", ["non-commercial"])
    (True, False)
    >>> disabled("mit", ["mit"]), disabled("mit", [])
    (True, False)
    """
    named = set(rules)
    return licence in named or ("non-commercial" in named and LICENCES[licence].commercial is False)


def disabled_models(models: Iterable[str], rules: Iterable[LicenceRule]) -> dict[str, LicenceId]:
    """The models of ``models`` whose licence ``rules`` disable, with that licence, in their order."""
    listed = list(rules)
    return {model: licence_of(model) for model in dict.fromkeys(models) if disabled(licence_of(model), listed)}


def check_job(models: Iterable[str], rules: Iterable[LicenceRule]) -> None:
    """Refuse a job whose options need ``models`` (``shared.job_models.job_models``) when a rule disables one.

    Raises:
        LicenceDisabledError: ``model_licence_disabled``, naming each model and its licence.
    """
    found = disabled_models(models, rules)
    if found:
        named = ", ".join(f"{model} ({licence})" for model, licence in found.items())
        raise LicenceDisabledError(
            f"the job needs {named}, under a licence this farm's operator disabled (disabled_licences); ask for "
            "another model"
        )


def check_model(model: str, rules: Iterable[LicenceRule]) -> None:
    """Refuse to load ``model`` when a rule disables its licence (a worker, as it loads a model).

    Raises:
        LicenceDisabledError: ``model_licence_disabled``.
    """
    check_job([model], rules)
