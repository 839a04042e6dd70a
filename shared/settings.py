"""Settings, read from the environment (prefix ``SWAPFARM_``) once per process.

Nothing here runs at import time: entry points call :func:`get_settings` (cached), tests build their own
:class:`Settings` and pass it down.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from shared.options import AcceleratorFamily

Environment = Literal["development", "test", "production"]
DEFAULT_SECRET = "change-me"


class Settings(BaseSettings):
    """One model for every process kind; each kind reads the fields it needs."""

    model_config = SettingsConfigDict(env_prefix="SWAPFARM_", env_file=None, extra="ignore")

    environment: Environment = "development"
    database_url: str = "postgresql+psycopg://postgres@127.0.0.1:5432/swapfarm"
    broker_url: str = "redis://127.0.0.1:6379/0"
    storage_url: str = Field("file://./var/storage", description="Root of job files: file:// or s3://")
    work_dir: Path = Field(Path("./var/work"), description="Local scratch space of a worker")
    secret_key: SecretStr = SecretStr(DEFAULT_SECRET)

    # API limits
    max_upload_bytes: int = 4 * 1024**3
    max_source_bytes: int = 20 * 1024**2

    # Scheduling and leases
    chunk_seconds: float = Field(10.0, gt=0, description="Default chunk length when a job does not say")
    lease_seconds: float = Field(60.0, gt=0, description="A chunk not heartbeaten for this long is reclaimed")
    heartbeat_seconds: float = Field(10.0, gt=0)
    max_attempts: int = Field(3, ge=1, description="Render attempts per chunk before the job fails")
    reap_interval_seconds: float = Field(15.0, gt=0)
    requeue_after_seconds: float = Field(
        300.0,
        gt=0,
        description="A queued chunk or job whose message may have been lost is re-sent after this",
    )
    task_time_limit_seconds: int = Field(3600, gt=0)
    retry_backoff_seconds: float = Field(2.0, ge=0)

    # Worker
    family: AcceleratorFamily | Literal["auto"] = "auto"
    worker_concurrency: int = Field(1, ge=1)
    batch_size: int = Field(8, ge=1, le=1024, description="Frames (and faces) per inference batch")
    models_dir: Path | None = Field(None, description="Offline folder searched for model files before download")
    model_cache_dir: Path = Path("~/.cache/swapfarm/models")
    model_base_urls: list[str] = Field(
        default_factory=lambda: [
            "https://github.com/facefusion/facefusion-assets/releases/download",
            "https://huggingface.co/facefusion",
        ]
    )
    allow_model_hash_mismatch: bool = Field(
        False, description="Use local model files whose sha256 differs (custom models); logged as a warning"
    )
    execution_providers: list[str] | None = Field(None, description="ONNX Runtime providers, in order")

    @model_validator(mode="after")
    def _enforce_non_default_secrets(self) -> Settings:
        if self.environment == "production" and self.secret_key.get_secret_value() == DEFAULT_SECRET:
            raise ValueError("SWAPFARM_SECRET_KEY must be set to a non-default value in production")
        return self

    @property
    def queue_family(self) -> str:
        return "cpu" if self.family == "auto" else self.family


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process's settings, built on first use from the environment."""
    return Settings()
