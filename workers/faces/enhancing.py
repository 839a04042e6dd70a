"""Face enhancement (restoration): aligned crops in, restored crops out.

What differs between enhancers is data (:data:`ENHANCERS`): the registry entry (template, crop size,
normalisation, colour order), the image input's name, the output's value range, and whether the model takes a
fidelity ``weight`` (CodeFormer: a float64 ``[1]`` tensor, 0 = most restoration, 1 = most faithful).
Blending the result back over the original is the caller's choice (``enhancer_blend``), not done here.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np
import numpy.typing as npt

from shared.options import Enhancer
from shared.settings import Settings
from workers.engines.base import Engine
from workers.engines.batching import FittedBatches
from workers.engines.loading import LoadedModel
from workers.faces.crop_model import CropModel, load_heavy
from workers.faces.tensors import Crops
from workers.models.registry import REGISTRY, ModelSpec

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class EnhancerSpec:
    """How to feed one enhancer model; image facts come from its registry entry ``model``."""

    model: ModelSpec
    image_input: str
    output_range: tuple[float, float]
    weight_input: str | None = None


ENHANCERS: Mapping[Enhancer, EnhancerSpec] = MappingProxyType(
    {
        "gfpgan_1.4": EnhancerSpec(REGISTRY["gfpgan_1.4"], "input", (-1.0, 1.0)),
        "gpen_bfr_512": EnhancerSpec(REGISTRY["gpen_bfr_512"], "input", (-1.0, 1.0)),
        "codeformer": EnhancerSpec(REGISTRY["codeformer"], "input", (-1.0, 1.0), weight_input="weight"),
        **{
            name: EnhancerSpec(REGISTRY[name], "input", (-1.0, 1.0))
            for name in (
                "gfpgan_1.2",
                "gfpgan_1.3",
                "gpen_bfr_256",
                "gpen_bfr_1024",
                "gpen_bfr_2048",
                "restoreformer_plus_plus",
            )
        },
    }
)
"""Every enhancer of :data:`shared.options.Enhancer`, by name."""


class FaceEnhancer(CropModel):
    """One enhancer model, ready to restore batches of aligned crops.

    Build it with :meth:`load`; tests may build it from any :class:`~workers.engines.base.Engine` and a spec.

    Example::

        enhancer = FaceEnhancer.load("codeformer", settings)
        restored = enhancer.enhance(crops, weight=0.5)   # [N, 512, 512, 3] BGR → same
    """

    def __init__(
        self,
        spec: EnhancerSpec,
        engine: Engine,
        *,
        fixed_batch: int | None = None,
        batches: FittedBatches | None = None,
        loaded: LoadedModel | None = None,
    ) -> None:
        """``fixed_batch`` is the batch size the model is fixed to, ``None`` if its batch is dynamic;
        ``batches`` how many crops a caller should pass per :meth:`enhance` (fitted to memory by the loader).

        Raises:
            ModelError: the engine lacks an input the spec names, or the spec's model does not take face
                crops.
        """
        inputs = [spec.image_input] + ([spec.weight_input] if spec.weight_input else [])
        super().__init__(spec.model, engine, inputs=inputs, fixed_batch=fixed_batch, batches=batches, loaded=loaded)
        self._spec = spec

    @classmethod
    def load(cls, name: Enhancer, settings: Settings) -> FaceEnhancer:
        """Resolve (download if needed) and load enhancer ``name``.

        Raises:
            ModelError: the model cannot be found, verified or loaded.
        """
        spec = ENHANCERS[name]
        _, loaded = load_heavy(spec.model, settings, batch_input=spec.image_input)
        return cls(spec, loaded.engine, fixed_batch=loaded.fixed_batch, batches=loaded.batches, loaded=loaded)

    def enhance(self, crops: Crops, weight: float = 0.5) -> Crops:
        """Restore every crop; one engine call for the batch where the model allows.

        Args:
            crops: uint8 ``[N, S, S, 3]`` BGR, aligned to :attr:`template` at :attr:`size`.
            weight: fidelity in [0, 1] for models that take one (CodeFormer); ignored by the others.

        Raises:
            ValueError: the crops are not ``[N, size, size, 3]`` uint8, or ``weight`` is outside [0, 1].
        """
        if not 0.0 <= weight <= 1.0:
            raise ValueError(f"weight must be in [0, 1], got {weight}")
        shared: dict[str, npt.NDArray[np.generic]] = (
            {self._spec.weight_input: np.array([weight], np.float64)} if self._spec.weight_input else {}
        )
        return self._crops_through(crops, self._spec.image_input, lambda items: shared, self._spec.output_range)
