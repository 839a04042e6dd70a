"""Face swapping: aligned target crops and a source identity in, swapped crops out.

What differs between swappers is data (:data:`SWAPPERS`): the registry entry (template, crop size,
normalisation, colour order), the input names, the output's value range, and how the source identity becomes
the model's latent:

* ``emap_projection`` (inswapper): ``l = e · emap / ‖e‖`` with ``emap`` the model's last initializer, as
  FaceFusion computes it (not re-normalised, so ‖l‖ is well above 1);
* ``normalised`` (hyperswap): the L2-normalised identity;
* ``converted`` (simswap, hififace): the identity through an embedding converter model (crossface), then
  L2-normalised;
* ``converted_raw`` (ghost): the identity through its crossface converter, not re-normalised;
* ``source_image`` (blendswap, uniface): no embedding at all: the source face itself, aligned to the model's
  source template and size, RGB in [0, 1] (:meth:`FaceSwapper.source_image_latent`).

The identity of several source images is the mean of their L2-normalised ArcFace embeddings.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import Literal, Protocol

import numpy as np
import numpy.typing as npt

from shared.errors import ModelError
from shared.options import Swapper
from shared.settings import Settings
from workers.engines.base import Engine
from workers.engines.batching import FittedBatches, Indices
from workers.engines.loading import LoadedModel
from workers.engines.onnx import OnnxEngine
from workers.faces.crop_model import CropModel, load_heavy
from workers.faces.tensors import Crops
from workers.models.download import resolve
from workers.models.registry import REGISTRY, ModelSpec, TemplateName

logger = logging.getLogger(__name__)

Embeddings = npt.NDArray[np.float32]
Latent = npt.NDArray[np.float32]
LatentKind = Literal["emap_projection", "normalised", "converted", "converted_raw", "source_image"]

EMBEDDING_SIZE = 512


@dataclass(frozen=True)
class SwapperSpec:
    """How to feed one swapper model; image facts come from its registry entry ``model``."""

    model: ModelSpec
    target_input: str
    source_input: str
    output_range: tuple[float, float]
    latent: LatentKind
    converter: ModelSpec | None = None
    source_crop: tuple[TemplateName, int] | None = None
    """For ``source_image`` latents: the template and side the source face is aligned to."""


SWAPPERS: Mapping[Swapper, SwapperSpec] = MappingProxyType(
    {
        "inswapper_128": SwapperSpec(REGISTRY["inswapper_128"], "target", "source", (0.0, 1.0), "emap_projection"),
        "inswapper_128_fp16": SwapperSpec(
            REGISTRY["inswapper_128_fp16"], "target", "source", (0.0, 1.0), "emap_projection"
        ),
        "hyperswap_1a_256": SwapperSpec(REGISTRY["hyperswap_1a_256"], "target", "source", (-1.0, 1.0), "normalised"),
        "simswap_256": SwapperSpec(
            REGISTRY["simswap_256"],
            "target",
            "source",
            (0.0, 1.0),
            "converted",
            REGISTRY["crossface_simswap"],
        ),
        **{
            name: SwapperSpec(
                REGISTRY[name], "target", "source", (-1.0, 1.0), "converted_raw", REGISTRY["crossface_ghost"]
            )
            for name in ("ghost_1_256", "ghost_2_256", "ghost_3_256")
        },
        "blendswap_256": SwapperSpec(
            REGISTRY["blendswap_256"],
            "target",
            "source",
            (0.0, 1.0),
            "source_image",
            source_crop=("arcface_112_v2", 112),
        ),
        "uniface_256": SwapperSpec(
            REGISTRY["uniface_256"], "target", "source", (-1.0, 1.0), "source_image", source_crop=("ffhq_512", 256)
        ),
        "hififace_unofficial_256": SwapperSpec(
            REGISTRY["hififace_unofficial_256"],
            "target",
            "source",
            (-1.0, 1.0),
            "converted",
            REGISTRY["crossface_hififace"],
        ),
        "hyperswap_1b_256": SwapperSpec(REGISTRY["hyperswap_1b_256"], "target", "source", (-1.0, 1.0), "normalised"),
        "hyperswap_1c_256": SwapperSpec(REGISTRY["hyperswap_1c_256"], "target", "source", (-1.0, 1.0), "normalised"),
        "simswap_unofficial_512": SwapperSpec(
            REGISTRY["simswap_unofficial_512"],
            "target",
            "source",
            (0.0, 1.0),
            "converted",
            REGISTRY["crossface_simswap"],
        ),
    }
)
"""Every swapper of :data:`shared.options.Swapper`, by name."""


class LatentConverter(Protocol):
    """Turns a source identity (mean of L2-normalised embeddings, ``[512]``) into a swapper's latent."""

    def __call__(self, identity: Embeddings) -> Latent: ...


@dataclass(frozen=True)
class EmapProjection:
    """inswapper's latent: ``identity · emap / ‖identity‖`` (FaceFusion's formula)."""

    emap: npt.NDArray[np.float32]

    def __call__(self, identity: Embeddings) -> Latent:
        return (identity @ self.emap / np.linalg.norm(identity)).astype(np.float32)


@dataclass(frozen=True)
class Normalised:
    """The L2-normalised identity itself."""

    def __call__(self, identity: Embeddings) -> Latent:
        return (identity / np.linalg.norm(identity)).astype(np.float32)


@dataclass(frozen=True)
class Converted:
    """The identity through an embedding converter model (one ``[N, 512]`` input), then L2-normalised."""

    engine: Engine

    def __call__(self, identity: Embeddings) -> Latent:
        unit = (identity / np.linalg.norm(identity)).astype(np.float32)
        converted = np.asarray(self.engine.run({self.engine.input_names[0]: unit[None]})[0][0], np.float32)
        return (converted / np.linalg.norm(converted)).astype(np.float32)


@dataclass(frozen=True)
class ConvertedRaw:
    """The identity through an embedding converter model, as it comes out (ghost's latent)."""

    engine: Engine

    def __call__(self, identity: Embeddings) -> Latent:
        unit = (identity / np.linalg.norm(identity)).astype(np.float32)
        return np.asarray(self.engine.run({self.engine.input_names[0]: unit[None]})[0][0], np.float32)


@dataclass(frozen=True)
class SourceImageOnly:
    """The latent of a model that takes the source face as an image: no embedding can make it."""

    model: str

    def __call__(self, identity: Embeddings) -> Latent:
        raise ValueError(f"swapper {self.model} takes the source face as an image (source_image_latent)")


def read_emap(path: Path) -> npt.NDArray[np.float32]:
    """The ``[512, 512]`` emap of an inswapper file: its last initializer (read once per process and file).

    Raises:
        ModelError: the last initializer is not ``[512, 512]``.
    """
    resolved = path.resolve()
    with _EMAP_READ:
        emap = _read_emap(str(resolved), resolved.stat().st_mtime_ns)
    return emap.copy()


_EMAP_READ = threading.Lock()
"""One emap read at a time: a second caller (a worker warming its models while its first task asks for the swapper)
waits for the first's result instead of loading the whole model file beside it (530 MB for inswapper)."""


@cache
def _read_emap(path: str, mtime_ns: int) -> npt.NDArray[np.float32]:
    import onnx
    from onnx import numpy_helper

    model = onnx.load(path)
    emap = np.asarray(numpy_helper.to_array(model.graph.initializer[-1]), np.float32)
    if emap.shape != (EMBEDDING_SIZE, EMBEDDING_SIZE):
        raise ModelError(f"{Path(path).name}: last initializer is {list(emap.shape)}, not an emap [512, 512]")
    return emap


def _load_emap_projection(spec: SwapperSpec, path: Path, settings: Settings) -> LatentConverter:
    return EmapProjection(read_emap(path))


def _load_normalised(spec: SwapperSpec, path: Path, settings: Settings) -> LatentConverter:
    return Normalised()


def _load_converted(spec: SwapperSpec, path: Path, settings: Settings) -> LatentConverter:
    if spec.converter is None:
        raise ModelError(f"swapper {spec.model.name} needs a converter model and names none")
    return Converted(OnnxEngine.load(resolve(spec.converter.name, settings), settings))


def _load_converted_raw(spec: SwapperSpec, path: Path, settings: Settings) -> LatentConverter:
    if spec.converter is None:
        raise ModelError(f"swapper {spec.model.name} needs a converter model and names none")
    return ConvertedRaw(OnnxEngine.load(resolve(spec.converter.name, settings), settings))


def _load_source_image(spec: SwapperSpec, path: Path, settings: Settings) -> LatentConverter:
    return SourceImageOnly(spec.model.name)


_LATENT_LOADERS: Mapping[LatentKind, Callable[[SwapperSpec, Path, Settings], LatentConverter]] = {
    "emap_projection": _load_emap_projection,
    "normalised": _load_normalised,
    "converted": _load_converted,
    "converted_raw": _load_converted_raw,
    "source_image": _load_source_image,
}


class FaceSwapper(CropModel):
    """One swapper model, ready to swap batches of aligned crops.

    Build it with :meth:`load`; tests may build it from any :class:`~workers.engines.base.Engine` and a spec.

    Example::

        swapper = FaceSwapper.load("hyperswap_1a_256", settings)
        latent = swapper.source_latent(source_embeddings)   # [K, 512] raw ArcFace → [512]
        swapped = swapper.swap(crops, latent)                # [N, 256, 256, 3] BGR → same
    """

    def __init__(
        self,
        spec: SwapperSpec,
        engine: Engine,
        latent: LatentConverter,
        *,
        fixed_batch: int | None = None,
        batches: FittedBatches | None = None,
        loaded: LoadedModel | None = None,
    ) -> None:
        """``fixed_batch`` is the batch size the model is fixed to, ``None`` if its batch is dynamic;
        ``batches`` how many crops a caller should pass per :meth:`swap` (fitted to memory by the loader).

        Raises:
            ModelError: the engine lacks the target or source input the spec names, or the spec's model does
                not take face crops.
        """
        inputs = (spec.target_input, spec.source_input)
        super().__init__(spec.model, engine, inputs=inputs, fixed_batch=fixed_batch, batches=batches, loaded=loaded)
        self._spec = spec
        self._latent = latent

    @classmethod
    def load(cls, name: Swapper, settings: Settings) -> FaceSwapper:
        """Resolve (download if needed) and load swapper ``name`` and whatever its latent needs.

        Raises:
            ModelError: the model (or its converter) cannot be found, verified or loaded.
        """
        spec = SWAPPERS[name]
        path, loaded = load_heavy(spec.model, settings, batch_input=spec.target_input)
        latent = _LATENT_LOADERS[spec.latent](spec, path, settings)
        return cls(spec, loaded.engine, latent, fixed_batch=loaded.fixed_batch, batches=loaded.batches, loaded=loaded)

    def source_latent(self, embeddings: Embeddings) -> Latent:
        """The latent of a source identity, from the raw ArcFace embeddings ``[K, 512]`` of its K images.

        Raises:
            ValueError: ``embeddings`` is not ``[K, 512]`` with K ≥ 1, or an embedding is zero.
        """
        vectors = np.asarray(embeddings, np.float32)
        if vectors.ndim != 2 or vectors.shape[0] < 1 or vectors.shape[1] != EMBEDDING_SIZE:
            raise ValueError(f"embeddings must be [K, {EMBEDDING_SIZE}] with K ≥ 1, got {list(vectors.shape)}")
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        if not np.all(norms > 0):
            raise ValueError("an embedding is all zeros")
        identity = np.mean(vectors / norms, axis=0).astype(np.float32)
        if not np.linalg.norm(identity) > 0:
            raise ValueError("the source embeddings cancel out")
        return self._latent(identity)

    @property
    def weighted(self) -> bool:
        """Whether the model's latent can be mixed with the target's identity (``face.swapper_weight``): the
        families whose FaceFusion mix is documented (inswapper, hyperswap, simswap)."""
        return self._spec.latent in ("emap_projection", "normalised", "converted")

    @property
    def source_crop(self) -> tuple[TemplateName, int] | None:
        """The template and side a source face is aligned to for a model that takes it as an image, else
        ``None`` (the model takes an embedding: :meth:`source_latent`)."""
        return self._spec.source_crop

    def source_image_latent(self, crop: npt.NDArray[np.uint8]) -> Latent:
        """The latent of a model that takes the source face as an image: the aligned source crop (uint8
        ``[S, S, 3]`` BGR at :attr:`source_crop`) as ``[3, S, S]`` RGB in [0, 1], as FaceFusion feeds it.

        Raises:
            ValueError: the model takes an embedding, or the crop is not at the model's source size.
        """
        if self._spec.source_crop is None:
            raise ValueError(f"swapper {self.name} takes a source embedding, not an image")
        side = self._spec.source_crop[1]
        if crop.dtype != np.uint8 or crop.shape != (side, side, 3):
            raise ValueError(f"the source crop must be uint8 [{side}, {side}, 3], got {crop.dtype} {list(crop.shape)}")
        return np.ascontiguousarray(crop[..., ::-1].transpose(2, 0, 1).astype(np.float32) / np.float32(255.0))

    def swap_each(self, crops: Crops, latents: Latent) -> Crops:
        """Like :meth:`swap`, with one latent per crop (``[N, ...]``, e.g. mixed with each target's identity).

        Raises:
            ValueError: the crops are not ``[N, size, size, 3]`` uint8, or the latents are not one per crop.
        """
        if len(latents) != len(crops):
            raise ValueError(f"{len(latents)} latents for {len(crops)} crops")
        return self._swap(crops, np.asarray(latents, np.float32))

    def swap(self, crops: Crops, latent: Latent) -> Crops:
        """Swap the identity ``latent`` into every crop; one engine call for the batch where the model allows.

        Args:
            crops: uint8 ``[N, S, S, 3]`` BGR, aligned to :attr:`template` at :attr:`size`.
            latent: from :meth:`source_latent`.

        Raises:
            ValueError: the crops are not ``[N, size, size, 3]`` uint8.
        """
        return self._swap(crops, np.asarray(latent, np.float32)[None])

    def _swap(self, crops: Crops, sources: Latent) -> Crops:
        """Swap ``sources`` (one latent for all crops, ``[1, ...]``, or one per crop) into ``crops``."""

        def per_call(items: Indices) -> dict[str, npt.NDArray[np.generic]]:
            source = np.repeat(sources, len(items), axis=0) if len(sources) == 1 else sources[items]
            return {self._spec.source_input: source}

        return self._crops_through(crops, self._spec.target_input, per_call, self._spec.output_range)
