"""Background removal (the ``background_remover``): each whole frame's matte from a matting model, then the
background filled with a colour, the foreground's edges despilled, and the matte kept as the frame's alpha.

As FaceFusion's ``background_remover`` (``docs/MODELS.md`` 10.2):

* input: the frame resized to the model's square side (bilinear), RGB, ``(x / 255 - mean) / std`` per channel, as
  ``input`` ``[N, 3, S, S]``; corridor_key takes a fourth, unnormalised channel, a green-screen hint
  ``1 - clip(2 (G - max(R, B)), 0, 1)`` of the RGB in [0, 1];
* matte: output ``[0]`` squeezed, clipped to [0, 1], times 255 as uint8, resized to the frame (bilinear);
  u2net_cloth gives class scores, its matte is where the argmax is not the background's (0); corridor_key's second
  output, the foreground's RGB in [0, 1], replaces the frame's colour;
* despill (first): each channel ``c`` of the despill colour ``C`` (alpha ``A``) pulls the frame's ``x_c`` down to
  at most half the sum of its other two, by ``(A / 255) C_c / max(C)``;
* fill: ``k = (1 - m) A / 255`` with the fill colour's ``A`` and the matte ``m`` in [0, 1]; ``x = x (1 - k) + C k``;
* alpha: the matte (the decoder gives no alpha of the input's: FaceFusion's ``min(matte, input alpha)`` is the
  matte here).

Every frame of a batch goes through the engine together, in batches fitted to memory
(:class:`~workers.engines.batching.FittedBatches`); the input's normalisation, the despill and the fill run frame
by frame (a frame's planes stay in cache), the fill as one OpenCV blend.
"""

from __future__ import annotations

from typing import Literal

import cv2
import numpy as np
import numpy.typing as npt

from shared.background_options import RGBA, BackgroundRemoverModel
from shared.errors import ModelError
from shared.settings import Settings
from workers.engines.base import Degradation, Engine
from workers.engines.batching import FittedBatches, Indices, run_in_batches
from workers.engines.loading import LoadedModel, load_model
from workers.models.download import resolve
from workers.models.registry import REGISTRY, ModelSpec

Frames = npt.NDArray[np.uint8]
Mattes = npt.NDArray[np.uint8]
Family = Literal["matte", "classes", "keyer"]


def despill(frame: npt.NDArray[np.float32], colour: RGBA) -> None:
    """Take ``colour``'s spill out of a float BGR ``frame`` in place (nothing where its alpha or colour is 0)."""
    strongest = max(colour[:3])
    if colour[3] == 0 or strongest == 0:
        return
    for rgb_index, bgr_index in enumerate((2, 1, 0)):
        weight = colour[3] / 255 * colour[rgb_index] / strongest
        if weight == 0:
            continue
        channel = frame[..., bgr_index]
        others = (frame.sum(axis=2) - channel) / 2
        channel += (np.minimum(channel, others) - channel) * weight


def fill(frame: Frames, matte: Mattes, colour: RGBA, solid: Frames | None = None) -> Frames:
    """A uint8 BGR ``frame`` with its background (where ``matte``, 0–255, is below 255) filled with ``colour`` by
    its alpha: one pass of OpenCV's per-pixel weighted blend (rounded). ``solid``: the colour as a frame, to reuse."""
    if colour[3] == 0:
        return frame
    if solid is None:
        solid = np.empty_like(frame)
        solid[:] = colour[2::-1]
    weight = (255 - matte).astype(np.float32) * np.float32(colour[3] / 255 / 255)
    return np.asarray(cv2.blendLinear(frame, solid, 1 - weight, weight), np.uint8)


class BackgroundRemover:
    """A matting model, loaded, giving every frame's matte at the frame's size.

    Build it with :meth:`load`; tests may build it from any :class:`~workers.engines.base.Engine` and a spec.

    Example::

        remover = BackgroundRemover.load("modnet", settings)
        mattes, foreground = remover.mattes(frames)   # [N, H, W] uint8, and None (corridor_key: [N, H, W, 3])

    Raises:
        ModelError: the engine lacks the spec's input, or the spec is no background remover's.
    """

    def __init__(
        self,
        model: ModelSpec,
        engine: Engine,
        *,
        fixed_batch: int | None = None,
        batches: FittedBatches | None = None,
        loaded: LoadedModel | None = None,
    ) -> None:
        if model.kind != "background_remover" or model.input_size is None or model.normalisation is None:
            raise ModelError(f"model {model.name} is not a background remover")
        self.input_name = model.input_names[0]
        if self.input_name not in engine.input_names:
            raise ModelError(f"model {model.name} has no input {self.input_name!r}: {engine.input_names}")
        self.model, self.engine, self.size = model, engine, model.input_size
        self.family: Family = (
            "keyer" if model.name.startswith("corridor_key") else "classes" if model.name == "u2net_cloth" else "matte"
        )
        self._mean = np.array(model.normalisation.mean, np.float32)
        self._std = np.array(model.normalisation.std, np.float32)
        self.fixed_batch, self._loaded = fixed_batch, loaded
        self.batches = batches or FittedBatches(16)

    @classmethod
    def load(cls, name: BackgroundRemoverModel, settings: Settings) -> BackgroundRemover:
        """Resolve (download if needed) and load background remover ``name``.

        Raises:
            ModelError: the model cannot be found, verified or loaded.
            LicenceDisabledError: its licence is disabled (``shared.licences``).
        """
        spec = REGISTRY[name]
        loaded = load_model(resolve(name, settings), settings, name=name, batch_input=spec.input_names[0])
        return cls(spec, loaded.engine, fixed_batch=loaded.fixed_batch, batches=loaded.batches, loaded=loaded)

    def degradations(self) -> list[Degradation]:
        """The slower paths the model is on (another engine than chosen, uncompiled), if it was loaded here."""
        return self._loaded.degradations() if self._loaded is not None else []

    def model_input(self, frames: Frames) -> npt.NDArray[np.float32]:
        """The frames as the model takes them: ``[N, 3, S, S]`` (``[N, 4, S, S]`` for corridor_key).

        Written frame by frame and plane by plane into the tensor (``x / std − mean / std``, the BGR planes read in
        RGB order): one pass over each plane, where whole-batch numpy took five (measured 5× the time)."""
        side = self.size
        channels = 4 if self.family == "keyer" else 3
        tensor = np.empty((len(frames), channels, side, side), np.float32)
        scale, shift = (1 / self._std).astype(np.float32), (self._mean / self._std).astype(np.float32)
        for index, frame in enumerate(frames):
            resized = cv2.resize(frame, (side, side), interpolation=cv2.INTER_LINEAR)
            for channel in range(3):  # R, G, B from the BGR frame
                plane = tensor[index, channel]
                np.multiply(resized[..., 2 - channel], scale[channel], out=plane, casting="unsafe")
                plane -= shift[channel]
            if self.family == "keyer":
                unit = resized.astype(np.float32) / 255
                green_over = 2 * (unit[..., 1] - np.maximum(unit[..., 0], unit[..., 2]))
                tensor[index, 3] = 1 - np.clip(green_over, 0, 1)
        return tensor

    def run(self, tensor: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """One batch through the engine: the matte ``[n, 1, S, S]`` in [0, 1] (corridor_key: with its foreground's
        RGB after it, ``[n, 4, S, S]``).

        Raises:
            ModelError: the model gave outputs of another layout.
        """

        def inputs(items: Indices) -> dict[str, npt.NDArray[np.generic]]:
            return {self.input_name: tensor[items]}

        outputs = [
            np.asarray(o, np.float32) for o in run_in_batches(self.engine, len(tensor), inputs, self.fixed_batch)
        ]
        self.check_outputs([o.shape for o in outputs])
        if self.family == "classes":
            classes: npt.NDArray[np.float32] = np.argmax(outputs[0], axis=1)[:, None].astype(np.float32)
            return classes
        if self.family == "keyer":
            return np.concatenate([outputs[0], outputs[1]], axis=1)
        return outputs[0]

    def check_outputs(self, shapes: list[tuple[int, ...]]) -> None:
        """Raises :class:`~shared.errors.ModelError` unless ``shapes`` are the model's outputs at its size: a matte
        ``[n, 1, S, S]``, u2net_cloth's class scores ``[n, C, S, S]``, corridor_key's matte and foreground."""
        side = (self.size, self.size)
        channels = 1 if self.family != "keyer" else 3
        good = bool(shapes) and len(shapes[0]) == 4 and tuple(shapes[0][2:]) == side
        if self.family == "matte":
            good = good and shapes[0][1] == 1
        if self.family == "keyer":
            good = good and len(shapes) >= 2 and shapes[0][1] == 1 and tuple(shapes[1][1:]) == (channels, *side)
        if not good:
            raise ModelError(
                f"model {self.model.name} gave {[list(s) for s in shapes]} for {self.size}px frames; a {self.family} "
                f"model gives [n, {'C' if self.family == 'classes' else 1}, {self.size}, {self.size}]"
                + (f" and [n, 3, {self.size}, {self.size}]" if self.family == "keyer" else "")
            )

    def mattes(self, frames: Frames) -> tuple[Mattes, Frames | None]:
        """Every frame's matte, uint8 ``[N, H, W]`` (255: foreground), and corridor_key's foreground BGR
        ``[N, H, W, 3]`` (``None`` for the other models).

        Raises:
            ValueError: the frames are not uint8 ``[N, H, W, 3]``.
            ModelError: as :meth:`check_outputs`.
        """
        if frames.dtype != np.uint8 or frames.ndim != 4 or frames.shape[3] != 3:
            raise ValueError(f"frames must be uint8 [N, H, W, 3], got {frames.dtype} {frames.shape}")
        count, height, width = frames.shape[:3]
        if count == 0:
            return np.zeros((0, height, width), np.uint8), None
        raw = np.asarray(self.batches.map(self.model_input(frames), self.run), np.float32)
        size = (width, height)
        small = (np.clip(raw[:, 0], 0, 1) * 255).astype(np.uint8)  # FaceFusion's 8-bit matte, then resized
        mattes: Mattes = np.stack([cv2.resize(m, size, interpolation=cv2.INTER_LINEAR) for m in small])
        if self.family != "keyer":
            return mattes, None
        colour = (np.clip(raw[:, 1:4], 0, 1) * 255 + 0.5).astype(np.uint8).transpose(0, 2, 3, 1)[..., ::-1]
        foreground: Frames = np.stack(
            [cv2.resize(np.ascontiguousarray(c), size, interpolation=cv2.INTER_LINEAR) for c in colour]
        )
        return mattes, foreground

    def cut_out(self, frames: Frames, *, fill_colour: RGBA, despill_colour: RGBA) -> tuple[Frames, Mattes]:
        """The frames with their edges despilled and their background filled, and their mattes (the alpha).

        Raises:
            ValueError, ModelError: as :meth:`mattes`.
        """
        mattes, foreground = self.mattes(frames)
        colour = frames if foreground is None else foreground
        spill = despill_colour[3] > 0 and max(despill_colour[:3]) > 0
        if fill_colour[3] == 0 and not spill:
            return (colour if foreground is not None else frames.copy()), mattes
        out = np.empty_like(frames)
        solid = np.empty_like(frames[0])
        solid[:] = fill_colour[2::-1]
        for index, (frame, matte) in enumerate(zip(colour, mattes, strict=True)):
            pixels = frame
            if spill:
                floats = frame.astype(np.float32)
                despill(floats, despill_colour)
                pixels = np.clip(floats + 0.5, 0, 255).astype(np.uint8)
            out[index] = fill(pixels, matte, fill_colour, solid)
        return out, mattes
