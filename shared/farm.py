"""What a caller's request acts through: the farm's settings (limits, quotas, retention), its storage and its
dispatcher. An API process holds one; ``swapfarm run`` makes its own."""

from __future__ import annotations

from dataclasses import dataclass

from shared.dispatch import Dispatcher
from shared.settings import Settings
from shared.storage import Storage

__all__ = ["Farm"]


@dataclass(frozen=True)
class Farm:
    settings: Settings
    storage: Storage
    dispatcher: Dispatcher
