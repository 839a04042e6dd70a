"""Whole-frame upscaling (the ``frame_enhancer``): frames cut into overlapping tiles, the tiles batched through a
Real-ESRGAN model, the results put back together at the model's scale.

The tiling is FaceFusion's (``create_tile_frames`` / ``merge_tile_frames``): tiles of the model's side ``T``
(256) step by ``T - 2·pad`` (240), so each tile overlaps its neighbours by ``pad`` (8) pixels on each side; after
the model, each tile's outer ``scale·pad`` pixels are cropped and only its core is kept. A convolutional model whose
reach is under ``pad`` pixels therefore gives exactly what it gives on the whole frame: no seams. Unlike FaceFusion,
the frame is extended by repeating its edge pixels rather than with black, so the tiles along the frame's edges see
the frame continued instead of a black border (the model's output near the edge does not darken).

Every tile of a batch of frames goes through the engine together, in batches fitted to memory
(:class:`~workers.engines.batching.FittedBatches`).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import cv2
import numpy as np
import numpy.typing as npt

from shared.errors import ModelError
from shared.options import FRAME_ENHANCER_SCALES, FrameEnhancerModel
from shared.settings import Settings
from workers.engines.base import Degradation, Engine
from workers.engines.batching import FittedBatches, Indices, run_in_batches
from workers.engines.loading import LoadedModel, load_model
from workers.models.download import resolve
from workers.models.registry import REGISTRY, ModelSpec

logger = logging.getLogger(__name__)

Frames = npt.NDArray[np.uint8]

TILE_PAD = 8
"""Pixels each tile overlaps its neighbours by on each side (FaceFusion's, for every Real-ESRGAN model)."""


@dataclass(frozen=True)
class Tiling:
    """Overlapping square tiles of side ``tile`` whose cores (``tile - 2·pad``) cover a frame exactly once.

    Example::

        tiling = Tiling(256, 8)
        tiles = tiling.split(frames)                          # [N·k, 256, 256, 3]
        big = tiling.join(model(tiles), len(frames), 480, 640, scale=2)  # [N, 960, 1280, 3]
    """

    tile: int
    pad: int

    def __post_init__(self) -> None:
        if self.pad < 0 or self.tile - 2 * self.pad < 1:
            raise ValueError(f"a tile of {self.tile} has no core left with a pad of {self.pad}")

    @property
    def core(self) -> int:
        """The side of the part of each tile that is kept."""
        return self.tile - 2 * self.pad

    def grid(self, height: int, width: int) -> tuple[int, int]:
        """Rows and columns of tiles a ``height`` x ``width`` frame is cut into."""
        return math.ceil(height / self.core), math.ceil(width / self.core)

    def split(self, frames: Frames) -> Frames:
        """The tiles of every frame, frame by frame, row by row: ``[N·rows·cols, tile, tile, C]``."""
        count, height, width = frames.shape[:3]
        rows, cols = self.grid(height, width)
        bottom = self.pad + rows * self.core - height
        right = self.pad + cols * self.core - width
        padded = np.pad(frames, ((0, 0), (self.pad, bottom), (self.pad, right), (0, 0)), mode="edge")
        tiles = np.empty((count, rows, cols, self.tile, self.tile, frames.shape[3]), frames.dtype)
        for row in range(rows):
            for col in range(cols):
                top, left = row * self.core, col * self.core
                tiles[:, row, col] = padded[:, top : top + self.tile, left : left + self.tile]
        return tiles.reshape(-1, self.tile, self.tile, frames.shape[3])

    def join(self, tiles: Frames, count: int, height: int, width: int, *, scale: int) -> Frames:
        """The frames ``split`` cut, from their tiles ``scale`` times larger: ``[N, scale·height, scale·width, C]``.

        Raises:
            ValueError: ``tiles`` are not what :meth:`split` gives for these frames, at ``scale``.
        """
        rows, cols = self.grid(height, width)
        side, pad, core = self.tile * scale, self.pad * scale, self.core * scale
        if tiles.shape[:3] != (count * rows * cols, side, side):
            raise ValueError(f"expected {count * rows * cols} tiles of {side}x{side}, got {tiles.shape}")
        cores = tiles.reshape(count, rows, cols, side, side, -1)[:, :, :, pad : pad + core, pad : pad + core]
        # [N, rows, core, cols, core, C]: rows of cores side by side, then rows one above the other
        joined = cores.transpose(0, 1, 3, 2, 4, 5).reshape(count, rows * core, cols * core, -1)
        return np.ascontiguousarray(joined[:, : height * scale, : width * scale])


def blend(frames: Frames, upscaled: Frames, percent: int) -> Frames:
    """``percent`` of ``upscaled`` over ``frames`` resized to its size (bilinear), as FaceFusion's
    ``frame_enhancer_blend``; 100 returns ``upscaled`` itself."""
    if percent >= 100:
        return upscaled
    weight = percent / 100
    size = (upscaled.shape[2], upscaled.shape[1])
    out = np.empty_like(upscaled)
    for index, (frame, big) in enumerate(zip(frames, upscaled, strict=True)):
        resized = cv2.resize(frame, size, interpolation=cv2.INTER_LINEAR)
        out[index] = cv2.addWeighted(big, weight, resized, 1 - weight, 0)
    return out


class FrameEnhancer:
    """A Real-ESRGAN model, loaded, upscaling whole frames through overlapping tiles.

    Build it with :meth:`load`; tests may build it from any :class:`~workers.engines.base.Engine` and a spec.

    Example::

        enhancer = FrameEnhancer.load("real_esrgan_x2", settings)
        big = enhancer.upscale(frames)   # [N, H, W, 3] BGR → [N, 2H, 2W, 3]

    Raises:
        ModelError: the engine lacks the spec's input, or the spec is no frame enhancer's.
    """

    def __init__(
        self,
        model: ModelSpec,
        scale: int,
        engine: Engine,
        *,
        fixed_batch: int | None = None,
        batches: FittedBatches | None = None,
        loaded: LoadedModel | None = None,
    ) -> None:
        if model.kind != "frame_enhancer" or model.input_size is None or model.normalisation is None:
            raise ModelError(f"model {model.name} is not a frame enhancer")
        self.input_name = model.input_names[0]
        if self.input_name not in engine.input_names:
            raise ModelError(f"model {model.name} has no input {self.input_name!r}: {engine.input_names}")
        self.model, self.scale, self.engine = model, scale, engine
        self.tiling = Tiling(model.input_size, TILE_PAD)
        self.fixed_batch, self._loaded = fixed_batch, loaded
        self.batches = batches or FittedBatches(64)
        self.rgb = model.colour_order == "rgb"  # frames are BGR
        # in the model's channel order, as the tensors it takes and gives
        self.mean = np.array(model.normalisation.mean, np.float32).reshape(1, 3, 1, 1)
        self.std = np.array(model.normalisation.std, np.float32).reshape(1, 3, 1, 1)
        self._order = slice(None, None, -1) if self.rgb else slice(None)

    @classmethod
    def load(cls, name: FrameEnhancerModel, settings: Settings) -> FrameEnhancer:
        """Resolve (download if needed) and load frame enhancer ``name``.

        Raises:
            ModelError: the model cannot be found, verified or loaded.
        """
        spec = REGISTRY[name]
        loaded = load_model(resolve(name, settings), settings, name=name, batch_input=spec.input_names[0])
        return cls(
            spec,
            FRAME_ENHANCER_SCALES[name],
            loaded.engine,
            fixed_batch=loaded.fixed_batch,
            batches=loaded.batches,
            loaded=loaded,
        )

    def degradations(self) -> list[Degradation]:
        """The slower paths the model is on (another engine than chosen, uncompiled), if it was loaded here."""
        return self._loaded.degradations() if self._loaded is not None else []

    def upscale(self, frames: Frames) -> Frames:
        """Every frame ``scale`` times wider and taller: uint8 BGR ``[N, H, W, 3]`` → ``[N, sH, sW, 3]``.

        Raises:
            ValueError: the frames are not uint8 ``[N, H, W, 3]``.
            ModelError: the model's output is not its input ``scale`` times larger.
        """
        if frames.dtype != np.uint8 or frames.ndim != 4 or frames.shape[3] != 3:
            raise ValueError(f"frames must be uint8 [N, H, W, 3], got {frames.dtype} {frames.shape}")
        count, height, width = frames.shape[:3]
        if count == 0:
            return np.empty((0, height * self.scale, width * self.scale, 3), np.uint8)
        tiles = self.tiling.split(frames)
        upscaled = self.batches.map(tiles, self.run_tiles)
        return self.tiling.join(np.asarray(upscaled, np.uint8), count, height, width, scale=self.scale)

    def run_tiles(self, tiles: Frames) -> Frames:
        """One batch of uint8 BGR tiles ``[n, T, T, 3]`` through the engine (in calls of the model's fixed batch,
        if it has one): ``[n, sT, sT, 3]``.

        Raises:
            ModelError: as :meth:`check_output`.
        """
        tensor = (tiles[..., self._order].transpose(0, 3, 1, 2).astype(np.float32) - self.mean) / self.std

        def inputs(items: Indices) -> dict[str, npt.NDArray[np.generic]]:
            return {self.input_name: tensor[items]}

        output = np.asarray(run_in_batches(self.engine, len(tiles), inputs, self.fixed_batch)[0], np.float32)
        self.check_output(output.shape)
        pixels = np.clip(output * self.std + self.mean + 0.5, 0, 255).astype(np.uint8)
        return np.ascontiguousarray(pixels.transpose(0, 2, 3, 1)[..., self._order])

    def check_output(self, shape: tuple[int, ...]) -> None:
        """Raises :class:`~shared.errors.ModelError` unless ``shape`` is a batch of tiles ``scale`` times larger
        (``[n, 3, sT, sT]``)."""
        side = self.tiling.tile * self.scale
        if tuple(shape[1:]) != (3, side, side):
            raise ModelError(
                f"model {self.model.name} gave {tuple(shape[1:])} for a {self.tiling.tile}px tile; a x{self.scale} "
                f"model gives (3, {side}, {side})"
            )
