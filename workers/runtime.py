"""What every step needs from the process that runs it: settings, storage, a dispatcher and who it is."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from shared.dispatch import Dispatcher
from shared.settings import Settings
from shared.storage import Storage
from workers.metrics import WorkerMetrics
from workers.targets import TargetCache


@dataclass(frozen=True)
class Runtime:
    settings: Settings
    storage: Storage
    dispatcher: Dispatcher
    hostname: str
    family: str
    metrics: WorkerMetrics = field(default_factory=WorkerMetrics)
    targets: TargetCache = field(default_factory=TargetCache)  # jobs' targets, fetched once per process

    @property
    def db(self) -> str:
        return self.settings.database_url

    @property
    def scratch(self) -> Path:
        path = self.settings.work_dir.expanduser().resolve()
        path.mkdir(parents=True, exist_ok=True)
        return path
