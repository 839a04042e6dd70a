"""Model files the operator supplies: DeepFaceLive ``.dfm`` models in the models folder's ``custom/``
(``SWAPFARM_MODELS_DIR/custom/<stem>.dfm``), which a job names ``custom/<stem>`` as its ``deep_swapper.model``.

A name a job gives is only ever matched against this folder's listing, never joined to a path: a file whose stem a
job could not name (see :data:`shared.deep_swap_options.CUSTOM_STEM_PATTERN`) is not listed, with a warning. No
sha256 is known for such a file: what is checked is its layout, when it is loaded
(:func:`workers.faces.deep_swapping.dfm_layout`).
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

from shared.deep_swap_options import CUSTOM_PREFIX, CUSTOM_STEM_PATTERN
from shared.errors import ModelError
from shared.settings import Settings
from workers.models.registry import UNIT, ModelSpec

__all__ = ["CUSTOM_FOLDER", "custom_model", "custom_models", "custom_spec"]

logger = logging.getLogger(__name__)

CUSTOM_FOLDER = "custom"
_SUFFIX = ".dfm"
CUSTOM_LICENCE = "supplied by the operator: the operator's terms"


def custom_models(settings: Settings) -> dict[str, Path]:
    """``custom/<stem>`` → file, for each ``<stem>.dfm`` in the models folder's ``custom/`` a job may name, in
    name order; none without a models folder."""
    if settings.models_dir is None:
        return {}
    folder = settings.models_dir.expanduser() / CUSTOM_FOLDER
    if not folder.is_dir():
        return {}
    found: dict[str, Path] = {}
    for path in sorted(folder.iterdir()):
        if path.suffix != _SUFFIX or not path.is_file():
            continue
        if re.fullmatch(CUSTOM_STEM_PATTERN, path.stem) is None:
            logger.warning(
                "custom model %r: not listed, as a job cannot name it (letters, digits, '.', '_' and '-' only)",
                path.name,
            )
            continue
        found[CUSTOM_PREFIX + path.stem] = path
    return found


def custom_model(name: str, settings: Settings) -> Path:
    """The file of custom model ``name`` (``custom/<stem>``), found in the folder's listing.

    Raises:
        ModelError: ``model_unavailable``: the folder holds no such model (the message lists those it holds).
    """
    models = custom_models(settings)
    if name not in models:
        held = ", ".join(models) or "none"
        raise ModelError(f"no custom model {name!r} in the models folder's {CUSTOM_FOLDER}/ (it holds: {held})")
    return models[name]


def custom_spec(name: str, path: Path) -> ModelSpec:
    """The registry facts of custom model ``name`` at ``path``: a deep swapper model of DeepFaceLive's layout, its
    size unknown until its file is read (``input_size`` ``None``)."""
    return ModelSpec(
        name=name,
        file_name=f"{CUSTOM_FOLDER}/{path.name}",
        base=CUSTOM_FOLDER,
        kind="deep_swapper",
        sha256=None,
        size_bytes=path.stat().st_size,
        input_size=None,
        template="dfl_whole_face",
        normalisation=UNIT,
        colour_order="bgr",
        input_names=("in_face:0",),
        output_names=("out_face_mask:0", "out_celeb_face:0", "out_celeb_face_mask:0"),
        licence=CUSTOM_LICENCE,
    )
