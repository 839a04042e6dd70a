"""The base of every loaded model of aligned face crops: swappers, enhancers, recognisers and the classifier.

What they share is here once: the registry entry (template, crop size, normalisation, colour order, through
:class:`~workers.faces.tensors.CropFormat`), the engine and the inputs it must have, loading a heavy model on the
engine chosen for it (:func:`load_heavy`), the slower paths it reports, and running crops through the engine in
batches the model allows. What differs (a swapper's source latent, an enhancer's weight, an embedding instead of
crops) stays in the subclass.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
import numpy.typing as npt

from shared.errors import ModelError
from shared.settings import Settings
from workers.engines.base import Degradation, Engine
from workers.engines.batching import FittedBatches, Indices, run_in_batches
from workers.engines.loading import LoadedModel, load_model
from workers.faces.tensors import CropFormat, Crops
from workers.models.download import resolve
from workers.models.registry import ModelSpec, TemplateName

logger = logging.getLogger(__name__)

Inputs = Callable[[Indices], dict[str, npt.NDArray[np.generic]]]
"""The engine inputs for some of a call's items, by input name."""


def load_heavy(model: ModelSpec, settings: Settings, *, batch_input: str) -> tuple[Path, LoadedModel]:
    """Resolve (download if needed) ``model`` and load it on the engine chosen for it and this worker's family,
    with batches fitted to memory; its path too, for what else the caller reads from the file.

    Raises:
        ModelError: the model cannot be found, verified or loaded.
    """
    path = resolve(model.name, settings)
    loaded = load_model(path, settings, name=model.name, batch_input=batch_input)
    if loaded.fixed_batch is not None:
        logger.info(
            "%s %s takes %s face(s) per call; larger batches are split", model.kind, model.name, loaded.fixed_batch
        )
    return path, loaded


class CropModel:
    """A model of aligned face crops, loaded.

    Args:
        model: its registry entry.
        engine: the engine that runs it.
        inputs: the input names the engine must have.
        fixed_batch: the batch size the model is fixed to, ``None`` if its batch is dynamic.
        batches: how many crops a caller should pass per call (fitted to memory by the loader).
        loaded: the loaded model (:func:`load_heavy`), whose slower paths :meth:`degradations` reports.

    Raises:
        ModelError: the engine lacks one of ``inputs``, or ``model`` does not take face crops.
    """

    def __init__(
        self,
        model: ModelSpec,
        engine: Engine,
        *,
        inputs: Iterable[str],
        fixed_batch: int | None = None,
        batches: FittedBatches | None = None,
        loaded: LoadedModel | None = None,
    ) -> None:
        missing = set(inputs) - set(engine.input_names)
        if missing:
            raise ModelError(f"model {model.name} has no input {sorted(missing)}: {engine.input_names}")
        self._model = model
        self._engine = engine
        self._fixed_batch = fixed_batch
        self.batches = batches
        self._loaded = loaded
        self._format = CropFormat.of(model)

    @property
    def name(self) -> str:
        """The model's registry name."""
        return self._model.name

    @property
    def engine(self) -> Engine:
        """The engine that runs the model (for ``warmup``)."""
        return self._engine

    @property
    def fixed_batch(self) -> int | None:
        """The batch size the model file is fixed to (calls are split and padded to it); ``None``: dynamic."""
        return self._fixed_batch

    def degradations(self) -> list[Degradation]:
        """The slower paths the model is on (another engine than chosen, uncompiled), if it was loaded here."""
        return self._loaded.degradations() if self._loaded is not None else []

    @property
    def template(self) -> TemplateName:
        """The alignment template the crops must be warped to."""
        return self._format.template

    @property
    def size(self) -> int:
        """The side of the square crops, in pixels."""
        return self._format.size

    def _outputs(self, count: int, inputs: Inputs) -> list[npt.NDArray[np.generic]]:
        """The model's outputs for ``count`` items; one engine call for all where the model allows."""
        return run_in_batches(self._engine, count, inputs, self._fixed_batch)

    def _crops_through(self, crops: Crops, name: str, extra: Inputs, output_range: tuple[float, float]) -> Crops:
        """``crops`` through the model as its input ``name`` (with ``extra`` inputs per call), back as crops."""
        tensor = self._format.to_tensor(crops)
        if len(crops) == 0:
            return crops.copy()

        def inputs(items: Indices) -> dict[str, npt.NDArray[np.generic]]:
            return {name: tensor[items], **extra(items)}

        return self._format.to_crops(self._outputs(len(crops), inputs)[0], output_range)
