"""Whole-frame colourising (the ``frame_colorizer``): each frame's grey fed to a DDColor or DeOldify model at the
job's square size, the colour it gives resized back to the frame and joined with the frame's own lightness in Lab.

As FaceFusion's ``frame_colorizer`` (``docs/MODELS.md`` 10.5), with two differences: the grey frame is resized to the
model's size before its colour conversions (the same input, fewer pixels converted), and DeOldify's colour is joined
with the frame's Lab lightness, as DDColor's is, where FaceFusion takes the frame's blue channel for it (on a grey
frame that brightens it: 8-bit Lab L is not the grey value).

* DDColor: ``input`` = the grey as RGB in [0, 1] with its Lab a, b set to 0; ``output`` [N, 2, S, S] = Lab a, b
  (OpenCV's float Lab) → resized to the frame → with the frame's float Lab L → BGR.
* DeOldify: ``input`` = the grey as RGB 0–255 as is; ``output`` [N, 3, S, S] RGB 0–255 → uint8 (clipped) → resized
  to the frame → 8-bit Lab a, b, with the frame's 8-bit Lab L → BGR.

Every frame of a batch goes through the engine together, in batches fitted to memory
(:class:`~workers.engines.batching.FittedBatches`); the Lab merge runs frame by frame (a frame's float Lab stays in
cache).
"""

from __future__ import annotations

from typing import Literal, TypeVar

import cv2
import numpy as np
import numpy.typing as npt

from shared.errors import ModelError
from shared.options import FrameColorizerModel
from shared.settings import Settings
from workers.engines.base import Degradation, Engine
from workers.engines.batching import FittedBatches, Indices, run_in_batches
from workers.engines.loading import LoadedModel, load_model
from workers.models.download import resolve
from workers.models.registry import REGISTRY, ModelSpec

Frames = npt.NDArray[np.uint8]
Family = Literal["ddcolor", "deoldify"]
Pixel = TypeVar("Pixel", np.uint8, np.float32)


def _rows(frames: npt.NDArray[Pixel]) -> npt.NDArray[Pixel]:
    """``[N, H, W, C]`` as one ``[N·H, W, C]`` image: OpenCV's colour conversions are per pixel, so one call
    converts the whole batch."""
    count, height, width, channels = frames.shape
    return frames.reshape(count * height, width, channels)


def blend(frames: Frames, coloured: Frames, percent: int) -> Frames:
    """``percent`` of ``coloured`` over ``frames`` (FaceFusion's ``frame_colorizer_blend``); 100 returns
    ``coloured`` itself, 0 ``frames``."""
    if percent >= 100:
        return coloured
    if percent <= 0:
        return frames
    weight = percent / 100
    mixed = cv2.addWeighted(_rows(coloured), weight, _rows(frames), 1 - weight, 0)
    return np.ascontiguousarray(mixed.reshape(frames.shape))


class FrameColorizer:
    """A DDColor or DeOldify model, loaded, colouring whole frames at ``size`` x ``size``.

    Build it with :meth:`load`; tests may build it from any :class:`~workers.engines.base.Engine` and a spec.

    Example::

        colorizer = FrameColorizer.load("ddcolor", 256, settings)
        coloured = colorizer.colorize(frames)   # [N, H, W, 3] BGR → [N, H, W, 3] BGR, the same lightness

    Raises:
        ModelError: the engine lacks the spec's input, or the spec is no frame colouriser's.
    """

    def __init__(
        self,
        model: ModelSpec,
        size: int,
        engine: Engine,
        *,
        fixed_batch: int | None = None,
        batches: FittedBatches | None = None,
        loaded: LoadedModel | None = None,
    ) -> None:
        if model.kind != "frame_colorizer":
            raise ModelError(f"model {model.name} is not a frame colouriser")
        self.input_name = model.input_names[0]
        if self.input_name not in engine.input_names:
            raise ModelError(f"model {model.name} has no input {self.input_name!r}: {engine.input_names}")
        self.model, self.size, self.engine = model, size, engine
        self.family: Family = "ddcolor" if model.name.startswith("ddcolor") else "deoldify"
        self.fixed_batch, self._loaded = fixed_batch, loaded
        self.batches = batches or FittedBatches(64)

    @classmethod
    def load(cls, name: FrameColorizerModel, size: int, settings: Settings) -> FrameColorizer:
        """Resolve (download if needed) and load frame colouriser ``name``, to feed it ``size`` x ``size`` frames.

        Raises:
            ModelError: the model cannot be found, verified or loaded.
        """
        spec = REGISTRY[name]
        loaded = load_model(resolve(name, settings), settings, name=name, batch_input=spec.input_names[0])
        return cls(spec, size, loaded.engine, fixed_batch=loaded.fixed_batch, batches=loaded.batches, loaded=loaded)

    def degradations(self) -> list[Degradation]:
        """The slower paths the model is on (another engine than chosen, uncompiled), if it was loaded here."""
        return self._loaded.degradations() if self._loaded is not None else []

    def colorize(self, frames: Frames) -> Frames:
        """Every frame coloured, its lightness kept: uint8 BGR ``[N, H, W, 3]`` → the same shape.

        Raises:
            ValueError: the frames are not uint8 ``[N, H, W, 3]``.
            ModelError: as :meth:`check_output`.
        """
        if frames.dtype != np.uint8 or frames.ndim != 4 or frames.shape[3] != 3:
            raise ValueError(f"frames must be uint8 [N, H, W, 3], got {frames.dtype} {frames.shape}")
        if len(frames) == 0:
            return frames.copy()
        tensor = self.model_input(frames)
        colour = self.batches.map(tensor, self.run)
        return self.merge(frames, np.asarray(colour, np.float32))

    def model_input(self, frames: Frames) -> npt.NDArray[np.float32]:
        """The frames' grey at the model's size, as the model takes it: ``[N, 3, S, S]`` RGB."""
        side = (self.size, self.size)
        grey = np.stack(
            [cv2.resize(cv2.cvtColor(f, cv2.COLOR_BGR2GRAY), side, interpolation=cv2.INTER_LINEAR) for f in frames]
        )
        rgb = np.repeat(grey[..., None], 3, axis=3)
        if self.family == "ddcolor":  # its L alone: a = b = 0, back to RGB in [0, 1]
            lab = cv2.cvtColor(_rows((rgb / 255).astype(np.float32)), cv2.COLOR_RGB2LAB)
            lab[..., 1:] = 0
            rgb_float = cv2.cvtColor(lab, cv2.COLOR_LAB2RGB).reshape(rgb.shape)
        else:  # DeOldify takes raw 0-255
            rgb_float = rgb.astype(np.float32)
        return np.ascontiguousarray(rgb_float.transpose(0, 3, 1, 2))

    def run(self, tensor: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """One batch ``[n, 3, S, S]`` through the engine (in calls of the model's fixed batch, if it has one): its
        colour output, ``[n, 2 or 3, S, S]``.

        Raises:
            ModelError: as :meth:`check_output`.
        """

        def inputs(items: Indices) -> dict[str, npt.NDArray[np.generic]]:
            return {self.input_name: tensor[items]}

        output = np.asarray(run_in_batches(self.engine, len(tensor), inputs, self.fixed_batch)[0], np.float32)
        self.check_output(output.shape)
        return output

    def merge(self, frames: Frames, colour: npt.NDArray[np.float32]) -> Frames:
        """The model's colour ``[N, C, S, S]`` resized to the frames and joined with their own Lab lightness (frame
        by frame: a frame's float Lab stays in cache, a batch's would not)."""
        out = np.empty_like(frames)
        for index, (frame, one) in enumerate(zip(frames, colour, strict=True)):
            out[index] = self._merge_frame(frame, one)
        return out

    def _merge_frame(self, frame: npt.NDArray[np.uint8], colour: npt.NDArray[np.float32]) -> npt.NDArray[np.uint8]:
        size = (frame.shape[1], frame.shape[0])
        if self.family == "ddcolor":
            ab = cv2.resize(colour.transpose(1, 2, 0), size, interpolation=cv2.INTER_LINEAR)
            lab = cv2.cvtColor((frame / 255).astype(np.float32), cv2.COLOR_BGR2LAB)
            lab[..., 1:] = ab
            bgr = cv2.cvtColor(lab, cv2.COLOR_LAB2BGR)
            pixels: npt.NDArray[np.uint8] = np.clip(bgr * 255 + 0.5, 0, 255).astype(np.uint8)
            return pixels
        rgb = np.ascontiguousarray(np.clip(colour + 0.5, 0, 255).astype(np.uint8).transpose(1, 2, 0))
        lab = cv2.cvtColor(cv2.resize(rgb, size, interpolation=cv2.INTER_LINEAR), cv2.COLOR_RGB2LAB)
        lab[..., 0] = cv2.cvtColor(frame, cv2.COLOR_BGR2LAB)[..., 0]
        return np.asarray(cv2.cvtColor(lab, cv2.COLOR_LAB2BGR), np.uint8)

    def check_output(self, shape: tuple[int, ...]) -> None:
        """Raises :class:`~shared.errors.ModelError` unless ``shape`` is a batch of the model's colour at its input
        size: ``[n, 2, S, S]`` (DDColor's a, b) or ``[n, 3, S, S]`` (DeOldify's RGB)."""
        channels = 2 if self.family == "ddcolor" else 3
        if tuple(shape[1:]) != (channels, self.size, self.size):
            raise ModelError(
                f"model {self.model.name} gave {tuple(shape[1:])} for a {self.size}px frame; a {self.family} model "
                f"gives ({channels}, {self.size}, {self.size})"
            )
