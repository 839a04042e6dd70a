"""What every step needs from the process that runs it: settings, storage, a dispatcher and who it is."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from shared.dispatch import Dispatcher
from shared.settings import Settings
from shared.storage import Storage
from workers.metrics import WorkerMetrics
from workers.video.codecs import CodecSupport, probed
from workers.video.targets import TargetCache

if TYPE_CHECKING:
    from celery import Celery


@dataclass(frozen=True)
class Runtime:
    settings: Settings
    storage: Storage
    dispatcher: Dispatcher
    hostname: str
    family: str
    metrics: WorkerMetrics = field(default_factory=WorkerMetrics)
    celery: Celery | None = (
        None  # the Celery application of the process, where it has one (the reaper reads its broker)
    )
    codecs: CodecSupport = field(default_factory=probed)  # probed once per process, as it starts taking tasks
    targets: TargetCache = field(default_factory=TargetCache)  # jobs' targets, fetched once per process

    @property
    def db(self) -> str:
        return self.settings.database_url

    @property
    def scratch(self) -> Path:
        path = self.settings.work_dir.expanduser().resolve()
        path.mkdir(parents=True, exist_ok=True)
        return path
