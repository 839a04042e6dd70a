"""The deep swapper's DeepFaceLive models (``.dfm``, which are ONNX) over aligned crops (docs/MODELS.md 10.3).

A model is trained on one person and puts that person on any face: no source image. Its crop is dfl_whole_face at
the model's own side (its ``in_face:0`` [n, S, S, 3]: 224 to 448 in the catalogue). What it is fed and gives, as
FaceFusion's deep_swapper does:

* ``in_face:0``: the crop sharpened (1.75·crop − 0.75·Gaussian σ 2, saturated to uint8) / 255, NHWC BGR;
  ``morph_value:0`` f32 [1] = ``deep_swapper.morph`` / 100, only where the model has that input.
* outputs, by position (as DeepFaceLive reads them): the face's mask [n, S, S, 1], the model's face [n, S, S, 3] BGR
  in [0, 1], the model's mask [n, S, S, 1].
* the face ×255 (truncated to uint8), its colour matched to the crop's where their hue histograms agree
  (:func:`~workers.faces.colour_matching.match_colour_conditionally`); the paste-back mask the minimum of the two
  masks, eroded twice by a 3×3 ellipse and blurred (σ 6.25), combined with the job's masks by the processor.

Every file, of the catalogue or the operator's, is checked for that layout when it is loaded (:func:`dfm_layout`),
and refused with ``model_invalid`` otherwise: a file of another kind fails the job clearly, not on its first batch.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import cv2
import numpy as np
import numpy.typing as npt

from shared.deep_swap_options import CUSTOM_PREFIX
from shared.errors import ModelError, ModelInvalidError
from shared.settings import Settings
from workers.engines.base import Engine
from workers.engines.batching import FittedBatches, Indices
from workers.engines.loading import LoadedModel, load_model
from workers.faces.colour_matching import match_colour_conditionally
from workers.faces.crop_model import CropModel
from workers.faces.tensors import Crops
from workers.models.custom import custom_model, custom_spec
from workers.models.download import resolve, spec_of
from workers.models.registry import ModelSpec

if TYPE_CHECKING:
    import onnx

__all__ = ["FACE_INPUT", "MORPH_INPUT", "DeepSwapModel", "DfmLayout", "dfm_layout"]

FloatArray = npt.NDArray[np.float32]
Masks = npt.NDArray[np.float32]

FACE_INPUT = "in_face:0"
MORPH_INPUT = "morph_value:0"
_OUTPUT_CHANNELS = (1, 3, 1)  # the face's mask, the model's face, the model's mask
_SIDES = (64, 1024)  # the crop sides a model may take (the catalogue's are 224-448)
_SHARPEN = (1.75, -0.75, 2.0)  # crop weight, blurred weight, blur sigma
_ERODE = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (3, 3))
_ERODE_TIMES = 2
_MASK_SIGMA = 6.25


@dataclass(frozen=True)
class DfmLayout:
    """What a ``.dfm`` file takes: crops of ``size`` px, and ``morph_value:0`` where ``morph``."""

    size: int
    morph: bool


def _dims(value: onnx.ValueInfoProto) -> list[int | str]:
    """A graph input's or output's shape: sizes, or the dimension's name (``?`` unnamed) where it is not fixed."""
    return [
        dim.dim_value if dim.HasField("dim_value") else (dim.dim_param or "?")
        for dim in value.type.tensor_type.shape.dim
    ]


def _fits(dims: list[int | str], side: int, channels: int) -> bool:
    """Whether an output's shape is ``[n, side, side, channels]`` where the file states its sizes."""
    return len(dims) == 4 and all(
        isinstance(d, str) or d == want for d, want in zip(dims[1:], (side, side, channels), strict=True)
    )


def dfm_layout(path: Path, name: str) -> DfmLayout:
    """The layout of the ``.dfm`` file at ``path`` (model ``name``), read from its graph's inputs and outputs once
    per process while the file's size and modification time hold (a processor is built per chunk; a file is
    hundreds of MB).

    Raises:
        ModelInvalidError: ``model_invalid``: not an ONNX file; no ``in_face:0`` of ``[n, S, S, 3]`` with a fixed
            side S of 64–1024; an input besides it and ``morph_value:0``; or not three outputs ``[n, S, S, 1]``,
            ``[n, S, S, 3]``, ``[n, S, S, 1]`` (where the file states their sizes).
    """
    stat = path.stat()
    return _layout(str(path.resolve()), stat.st_size, stat.st_mtime_ns, name)


@lru_cache(maxsize=16)
def _layout(path: str, size: int, mtime_ns: int, name: str) -> DfmLayout:
    import onnx  # its graph read here, before an engine loads the file

    try:
        graph = onnx.load(path, load_external_data=False).graph
    except Exception as error:  # protobuf's decode errors have no common base worth naming
        raise ModelInvalidError(f"model {name}: not an ONNX model ({type(error).__name__})") from None
    weights = {initializer.name for initializer in graph.initializer}
    inputs = {value.name: _dims(value) for value in graph.input if value.name not in weights}
    expected = f"a DeepFaceLive model takes {FACE_INPUT} [n, S, S, 3] (and {MORPH_INPUT} [1] at most)"
    face = inputs.pop(FACE_INPUT, None)
    morph = inputs.pop(MORPH_INPUT, None) is not None
    if face is None or inputs:
        found = ", ".join(value.name for value in graph.input if value.name not in weights)
        raise ModelInvalidError(f"model {name}: its inputs are {found or 'none'}; {expected}")
    side = face[1] if len(face) == 4 else None
    if not isinstance(side, int) or face[2:] != [side, 3] or not _SIDES[0] <= side <= _SIDES[1]:
        raise ModelInvalidError(f"model {name}: {FACE_INPUT} is {face}; {expected}, S fixed, {_SIDES[0]}-{_SIDES[1]}")
    outputs = [_dims(value) for value in graph.output]
    fitting = [_fits(dims, side, channels) for dims, channels in zip(outputs, _OUTPUT_CHANNELS, strict=False)]
    if len(outputs) != len(_OUTPUT_CHANNELS) or not all(fitting):
        raise ModelInvalidError(
            f"model {name}: its outputs are {outputs}; a DeepFaceLive model gives [n, S, S, 1], [n, S, S, 3] and "
            f"[n, S, S, 1] (the face's mask, the face, the model's mask)"
        )
    return DfmLayout(side, morph)


class DeepSwapModel(CropModel):
    """One DeepFaceLive model, loaded: :meth:`swap` puts its person on aligned crops.

    Build it with :meth:`load`; tests may build it from any :class:`~workers.engines.base.Engine`, a spec and the
    file's layout.
    """

    def __init__(
        self,
        spec: ModelSpec,
        engine: Engine,
        layout: DfmLayout,
        *,
        fixed_batch: int | None = None,
        batches: FittedBatches | None = None,
        loaded: LoadedModel | None = None,
    ) -> None:
        """Raises:
        ModelError: the engine lacks ``in_face:0`` (or the ``morph_value:0`` the layout says it has).
        """
        names = (FACE_INPUT, MORPH_INPUT) if layout.morph else (FACE_INPUT,)
        sized = dataclasses.replace(spec, input_size=layout.size, input_names=names)
        super().__init__(sized, engine, inputs=names, fixed_batch=fixed_batch, batches=batches, loaded=loaded)
        self.layout = layout

    @classmethod
    def load(cls, name: str, settings: Settings) -> DeepSwapModel:
        """Load deep swapper model ``name``: a catalogue id (resolved, downloaded if needed, as every registry
        model) or ``custom/<stem>`` (found in the models folder's ``custom/`` listing).

        Raises:
            ModelError: ``model_unavailable``: unknown, not in the folder, or not to be had;
                ``model_invalid``: the file is not a DeepFaceLive model (:func:`dfm_layout`).
        """
        if name.startswith(CUSTOM_PREFIX):
            path = custom_model(name, settings)
            spec = custom_spec(name, path)
        else:
            spec = spec_of(name)
            if spec.kind != "deep_swapper":
                raise ModelError(f"model {name} is not a deep swapper model")
            path = resolve(name, settings)
        layout = dfm_layout(path, name)
        loaded = load_model(path, settings, name=name, batch_input=FACE_INPUT)
        return cls(spec, loaded.engine, layout, fixed_batch=loaded.fixed_batch, batches=loaded.batches, loaded=loaded)

    def swap(self, crops: Crops, morph: int = 100) -> tuple[Crops, Masks]:
        """The crops swapped, and each one's paste-back mask from the model: uint8 ``[n, S, S, 3]`` BGR → the same
        shape and float32 ``[n, S, S]`` in [0, 1].

        Raises:
            ValueError: the crops are not ``[n, S, S, 3]`` uint8 at the model's side.
            ModelError: the model gave outputs of another layout than its file states.
        """
        size = self.size
        if crops.dtype != np.uint8 or crops.shape[1:] != (size, size, 3):
            raise ValueError(f"crops must be uint8 [n, {size}, {size}, 3], got {crops.dtype} {list(crops.shape)}")
        if len(crops) == 0:
            return crops.copy(), np.zeros((0, size, size), np.float32)
        weight, blurred_weight, sigma = _SHARPEN
        sharpened = np.stack(
            [cv2.addWeighted(c, weight, cv2.GaussianBlur(c, (0, 0), sigma), blurred_weight, 0.0) for c in crops]
        )
        tensor = (sharpened / np.float32(255)).astype(np.float32)  # NHWC BGR, as the model takes it
        extra = {MORPH_INPUT: np.array([morph / 100], np.float32)} if self.layout.morph else {}

        def inputs(items: Indices) -> dict[str, npt.NDArray[np.generic]]:
            return {FACE_INPUT: tensor[items], **extra}

        face_masks, faces, model_masks = (np.asarray(o, np.float32) for o in self._outputs(len(crops), inputs)[:3])
        for output, channels in zip((face_masks, faces, model_masks), _OUTPUT_CHANNELS, strict=True):
            if output.shape != (len(crops), size, size, channels):
                raise ModelError(f"model {self.name} gave {list(output.shape)}, not [n, {size}, {size}, {channels}]")
        swapped = np.clip(faces * 255, 0, 255).astype(np.uint8)  # truncated, as FaceFusion does
        matched = np.stack([match_colour_conditionally(raw, face) for raw, face in zip(crops, swapped, strict=True)])
        return matched, paste_masks(face_masks, model_masks)


def paste_masks(face_masks: FloatArray, model_masks: FloatArray) -> Masks:
    """The model's paste-back masks: the minimum of its two, clipped to [0, 1], eroded twice by a 3×3 ellipse (so
    the edge moves inwards) and blurred (σ 6.25); ``[n, S, S, 1]`` each → ``[n, S, S]``."""
    both = np.clip(np.minimum(face_masks, model_masks)[..., 0], 0.0, 1.0).astype(np.float32)
    out = np.empty_like(both)
    for index, mask in enumerate(both):
        eroded = cv2.erode(mask, _ERODE, iterations=_ERODE_TIMES)
        out[index] = cv2.GaussianBlur(eroded, (0, 0), _MASK_SIGMA)
    return out
