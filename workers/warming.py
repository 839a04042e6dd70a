"""Warming a worker's models as its process starts (``Settings.warm_models``).

Above both the engines and the face models: it loads the face models (``workers.faces``), which load their engines
(``workers.engines.loading``), so the engines never import the face models back.
"""

from __future__ import annotations

import logging
import threading
from typing import cast

from shared.options import Enhancer, Swapper
from shared.settings import Settings
from workers.faces.enhancing import ENHANCERS, FaceEnhancer
from workers.faces.swapping import SWAPPERS, FaceSwapper

__all__ = ["warm_in_background"]

logger = logging.getLogger(__name__)


def warm_in_background(settings: Settings) -> threading.Thread:
    """Load ``settings.warm_models`` (swappers and enhancers, by name) on a daemon thread and compile each at its
    largest batch — the one a busy worker runs — so a worker process compiles as it starts, not in its first task;
    a task that needs a model meanwhile waits for it. Other batch sizes compile when first needed. Failures are
    logged: the task that needs the model will raise them."""

    def warm() -> None:
        for name in settings.warm_models:
            try:
                if name in SWAPPERS:
                    FaceSwapper.load(cast(Swapper, name), settings).engine.warmup()
                elif name in ENHANCERS:
                    FaceEnhancer.load(cast(Enhancer, name), settings).engine.warmup()
            except Exception:
                logger.exception("warm_models: warming %s failed", name)

    thread = threading.Thread(target=warm, name="swapfarm-warm-models", daemon=True)
    thread.start()
    return thread
