"""Settings, read from the environment (prefix ``SWAPFARM_``) once per process.

Nothing here runs at import time: entry points call :func:`get_settings` (cached), tests build their own
:class:`Settings` and pass it down.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, IPvAnyNetwork, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from shared.licences import LicenceRule
from shared.options import AcceleratorFamily, Enhancer, Swapper

Environment = Literal["development", "test", "production"]
EngineName = Literal["onnxruntime", "torch"]
CompileMode = Literal["default", "reduce-overhead", "max-autotune", "eager"]
Precision = Literal["fp32", "fp16", "bf16", "int8"]
DEFAULT_SECRET = "change-me"
# Secrets that ship as defaults somewhere (ours, MinIO's): refused in production wherever a secret is set.
KNOWN_DEFAULT_SECRETS = frozenset({DEFAULT_SECRET, "minioadmin", ""})


class Settings(BaseSettings):
    """One model for every process kind; each kind reads the fields it needs."""

    # An empty variable counts as unset (compose passes `${VAR:-}` through as ""), so the default applies.
    model_config = SettingsConfigDict(env_prefix="SWAPFARM_", env_file=None, extra="ignore", env_ignore_empty=True)

    environment: Environment = Field(
        "development", description="production: a process refuses to start with a known default secret"
    )
    database_url: str = Field(
        "postgresql+psycopg://postgres@127.0.0.1:5432/swapfarm", description="Postgres, the source of truth"
    )
    broker_url: str = Field("redis://127.0.0.1:6379/0", description="Celery's broker (Redis)")
    storage_url: str = Field("file://./var/storage", description="Root of job files: file:// or s3://")
    work_dir: Path = Field(Path("./var/work"), description="Local scratch space of a worker")
    secret_key: SecretStr = Field(
        SecretStr(DEFAULT_SECRET), description="Derives each tenant's webhook signing secret; changing it changes them"
    )

    # API limits, enforced while the upload streams in (sizes) and when the target is probed (the rest)
    max_upload_bytes: int = Field(4 * 1024**3, gt=0, description="Largest target video, in bytes")
    max_source_bytes: int = Field(20 * 1024**2, gt=0, description="Largest source image, in bytes")
    max_sources: int = Field(8, ge=0, description="Most source images per job")
    max_duration_seconds: float = Field(4 * 3600.0, gt=0, description="Longest target video")
    max_audio_bytes: int = Field(512 * 1024**2, gt=0, description="Largest source audio (lip_syncer), in bytes")
    max_audio_seconds: float = Field(4 * 3600.0, gt=0, description="Longest source audio (lip_syncer)")
    max_frame_pixels: int = Field(
        7680 * 4320, gt=0, description="Largest frame (width x height) of a target, and of a job's output"
    )
    max_frames: int = Field(2_000_000, gt=0, description="Most frames in a target video, and in a job's output")
    max_output_pixels: int = Field(
        3840 * 2160 * 60 * 4 * 3600,
        gt=0,
        description="Most pixels a job writes (output frames x width x height, after output_fps, trim, "
        "output_height and frame_enhancer); the default is four hours of 2160p at 60 fps",
    )
    content_policy: bool = Field(
        False,
        description="Refuse target videos the NSFW analysers flag (FaceFusion's three models, 2 of 3 per frame, "
        "one frame a second, refused above 10 % of them): the job fails with content_refused, no output kept",
    )
    disabled_licences: list[LicenceRule] = Field(
        default_factory=list,
        description="Licences whose models the farm may not use (a JSON list of licence ids as `swapfarm models "
        "list` shows them, or non-commercial: every licence that forbids commercial use): a job that needs such "
        "a model is refused at submission, and a worker refuses to load one (model_licence_disabled)",
    )
    max_running_jobs_per_tenant: int = Field(
        4, ge=1, description="Jobs of one tenant running at once unless the tenant says; the rest wait in order"
    )
    output_ttl_seconds: float = Field(
        7 * 24 * 3600.0, gt=0, description="A finished job's files (output, inputs) are deleted after this"
    )
    preview_ttl_seconds: float = Field(
        24 * 3600.0, gt=0, description="A preview not approved within this is cancelled and its files deleted"
    )
    events_poll_seconds: float = Field(0.5, gt=0, description="How often the event stream looks for news")

    # Hostile input, bounded work and fair share: what one tenant or one file may cost the farm
    max_source_pixels: int = Field(
        50_000_000, gt=0, description="Largest source image (width x height), checked from its header before decoding"
    )
    max_chunks_per_job: int = Field(
        1000, ge=1, description="Most chunks a job is cut into; the planner widens its chunks to stay under it"
    )
    min_chunk_frames: int = Field(8, ge=1, description="Fewest frames in a chunk (but the video's last)")
    chunk_stall_seconds: float = Field(
        120.0, gt=0, description="A chunk whose decoder or encoder makes no progress for this long is stopped"
    )
    max_streams_per_key: int = Field(4, ge=1, description="Event streams open at once per API key (all API processes)")
    max_uploads_per_key: int = Field(
        4, ge=1, description="Submissions uploading at once per API key (all API processes)"
    )
    slot_ttl_seconds: float = Field(
        30.0, gt=0, description="A place under those caps held by an API process that died comes free after this long"
    )
    upload_read_timeout_seconds: float = Field(
        60.0, gt=0, description="An upload that sends nothing for this long is ended (408 upload_timeout)"
    )
    body_timeout_seconds: float = Field(
        15.0, gt=0, description="A small body (a console form, a JSON submission) must arrive whole within this (408)"
    )
    header_timeout_seconds: float = Field(
        10.0,
        gt=0,
        description="A connection must send a whole request head within this of opening or of its first byte",
    )
    keep_alive_seconds: int = Field(5, ge=1, description="An idle keep-alive connection is closed after this long")
    max_waiting_jobs_per_tenant: int = Field(200, ge=1, description="Jobs of one tenant waiting for a place at once")
    max_stored_bytes_per_tenant: int = Field(
        1024**4, gt=0, description="Bytes of inputs and outputs one tenant keeps stored (jobs not yet expired)"
    )

    # Client (``swapfarm submit|status|list|cancel|retry|download``)
    api_url: str = Field("http://127.0.0.1:8000", description="The farm's API, for the CLI client")
    api_key: SecretStr | None = Field(None, description="The CLI client's API key")

    # Scheduling and leases
    chunk_seconds: float = Field(10.0, gt=0, description="Default chunk length of face jobs when a job does not say")
    pixel_free_chunk_seconds: float = Field(
        60.0, gt=0, description="Default chunk length of jobs whose processors leave the pixels alone (passthrough)"
    )
    # Recovery: a worker that dies is noticed within lease + reap interval (15 + 2 s); a heartbeat is one UPDATE,
    # measured at 0.5 ms of Postgres CPU and 287 bytes of WAL (benchmarks/heartbeat.py): 1,000 workers beating
    # every 3 s write 333 rows/s, a sixth of one Postgres core. A database outage shorter than lease - heartbeat
    # (12 s) costs no chunk its lease.
    lease_seconds: float = Field(
        15.0, gt=0, description="A chunk (or a plan, a stitch) not heartbeaten for this long is reclaimed"
    )
    heartbeat_seconds: float = Field(3.0, gt=0, description="How often a worker extends its lease and reports progress")
    max_attempts: int = Field(3, ge=1, description="Render attempts per chunk before the job fails")
    reap_interval_seconds: float = Field(
        2.0, gt=0, description="How often the reaper (swapfarm beat) reclaims expired leases and re-sends lost work"
    )
    requeue_after_seconds: float = Field(
        300.0,
        gt=0,
        description=(
            "Fallback where the broker's contents cannot be read (a broker other than Redis): a queued chunk or job "
            "is re-sent after this. With Redis the reaper compares Postgres with the broker at every sweep instead"
        ),
    )
    task_time_limit_seconds: int = Field(3600, gt=0, description="Celery's hard time limit of one task")
    retry_backoff_seconds: float = Field(
        2.0, ge=0, description="Wait before a failed chunk's next attempt; doubles per attempt"
    )

    # Bad workers kept out (``shared.worker_health``): failures that belong to the input never count
    blocklist_after: int = Field(
        2, ge=1, description="A worker that fails this many chunks of one job takes no more chunks of that job"
    )
    quarantine_after_jobs: int = Field(
        2, ge=1, description="A worker failing chunks of this many jobs within the window is quarantined"
    )
    quarantine_window_seconds: float = Field(
        3600.0, gt=0, description="The window in which a worker's failures on several jobs quarantine it"
    )
    # Job groups (``shared.groups``)
    max_group_members: int = Field(100, ge=1, le=10_000, description="Jobs one group submission may make")

    # Worker
    family: AcceleratorFamily | Literal["auto"] = Field(
        "auto", description="A worker's accelerator family; auto: detected (swapfarm doctor shows it)"
    )
    worker_concurrency: int = Field(1, ge=1, description="Pool processes per worker; keep 1 per GPU")
    worker_name_check_seconds: float = Field(
        1.0,
        gt=0,
        le=30,
        description="How long a starting worker waits for a running worker of its name to answer before it starts",
    )
    worker_tags: list[str] = Field(
        default_factory=list,
        description="This worker's tags (swapfarm worker --tag): jobs' required_tags narrow routing",
    )
    batch_size: int = Field(8, ge=1, le=1024, description="Frames (and faces) per inference batch")
    models_dir: Path | None = Field(None, description="Offline folder searched for model files before download")
    model_cache_dir: Path = Field(Path("~/.cache/swapfarm/models"), description="Where downloaded model files are kept")
    model_base_urls: list[str] = Field(
        default_factory=lambda: [
            "https://github.com/facefusion/facefusion-assets/releases/download",
            "https://huggingface.co/facefusion",
        ],
        description="Where model files are downloaded from, tried in order",
    )
    allow_model_hash_mismatch: bool = Field(
        False, description="Use local model files whose sha256 differs (custom models); logged as a warning"
    )
    execution_providers: list[str] | None = Field(None, description="ONNX Runtime providers, in order")
    openvino_precision: Literal["fp32", "bf16"] = Field(
        "fp32",
        description="Inference precision of ONNX Runtime's OpenVINO provider (openvino family); bf16 only on CPUs "
        "that compute it natively (AMX, AVX-512 BF16), fp32 elsewhere: faster, further from fp32 "
        "(docs/engines.md)",
    )

    # Inference engine of the heavy face models (swappers, enhancers); detectors and recognisers use ONNX Runtime.
    # Where it resolves to torch, a job's frames travel as 4:2:0 planes to the torch device (workers/frames/choice.py),
    # else as whole BGR frames on the host.
    engine: EngineName | Literal["auto"] = Field(
        "auto",
        description="auto: compiled torch on cuda/rocm; on CPUs that compute bf16 natively (AMX, AVX-512 BF16), per "
        "model, torch in bf16 or ONNX Runtime, whichever a trial on first use measured faster (kept with the compile "
        "cache); ONNX Runtime elsewhere (swapfarm doctor says which and why)",
    )
    device_detection: Literal["auto", "on", "off"] = Field(
        "auto",
        description="Where the frames are on a torch device, detect faces with the detector converted to torch there; "
        "auto: on "
        "GPUs, off on the CPU, where ONNX Runtime ran the detectors faster (measured: docs/performance.md)",
    )
    model_engines: dict[str, EngineName] = Field(
        default_factory=dict, description="Per-model engine overrides, by registry name (e.g. gfpgan_1.4)"
    )
    torch_compile_mode: CompileMode | Literal["auto"] = Field(
        "auto",
        description="torch.compile mode; auto: max-autotune on GPUs, default on the CPU",
    )
    torch_precision: Precision | Literal["auto"] = Field(
        "auto",
        description="Compute dtype of the torch engine; auto: on CPUs that compute bf16 natively, int8 where they have "
        "VNNI (PT2E, calibrated on the first faces, bf16 where it fails its guard) else bf16, timed against ONNX "
        "Runtime on first use; fp32 elsewhere; int8 set: int8 on every model, untimed",
    )
    torch_compile_cache_dir: Path = Field(
        Path("~/.cache/swapfarm/torch-compile"), description="Persistent compile cache (TORCHINDUCTOR_CACHE_DIR)"
    )
    torch_max_batch: int | None = Field(
        None, ge=1, le=1024, description="Largest batch bucket of the torch engine; default 64 on GPUs, else batch_size"
    )
    memory_safety_fraction: float = Field(0.8, gt=0, le=1, description="Share of free device memory a batch may use")
    ram_budget_bytes: int | None = Field(None, gt=0, description="RAM a CPU worker's batches may fill; default: free")
    warm_models: list[Swapper | Enhancer] = Field(
        default_factory=list,
        description="Models each worker process loads, and compiles at its largest batch, on a thread as it starts",
    )

    # Object storage, for ``s3://`` storage URLs. Unset fields fall back to boto's own chain (AWS_* variables,
    # instance roles); the API and every worker must reach the same bucket, they share no filesystem.
    s3_endpoint_url: str | None = Field(None, description="S3-compatible endpoint (MinIO, Ceph …); unset for AWS")
    s3_key: str | None = Field(None, description="S3 access key id")
    s3_secret: SecretStr | None = Field(None, description="S3 secret access key")
    s3_region: str | None = Field(None, description="S3 region name")

    # Monitoring
    flower_user: str = Field("swapfarm", description="Basic-auth user of ``swapfarm flower``")
    flower_password: SecretStr | None = Field(None, description="Basic-auth password; Flower refuses to start without")
    worker_metrics_port: int | None = Field(
        None,
        ge=1,
        le=65535,
        description="Prometheus port of a worker's pool process (the n-th process of a pool serves port + n)",
    )
    worker_metrics_address: str = Field("0.0.0.0", description="Interface the worker's metrics server binds")

    # Webhooks (a job's ``callback_url``): signed per the Standard Webhooks spec, retried with back-off
    webhook_allowed_networks: list[IPvAnyNetwork] = Field(
        default_factory=list,
        description="Networks a callback_url may resolve to although they are loopback, link-local or private "
        "(e.g. an internal receiver at 10.1.2.0/24); none by default",
    )
    webhook_timeout_seconds: float = Field(10.0, gt=0, le=60, description="One delivery attempt's time limit")
    webhook_resolve_timeout_seconds: float = Field(
        3.0,
        gt=0,
        le=30,
        description="How long the host of a callback_url may take to resolve, at submission and before each "
        "attempt; a slower lookup is callback_url_invalid, so a name server that does not answer holds no API thread",
    )
    webhook_retry_base_seconds: float = Field(5.0, gt=0, description="Wait before the first retry; doubles per try")
    webhook_retry_max_seconds: float = Field(7200.0, gt=0, description="Longest wait between two attempts")
    webhook_retry_for_seconds: float = Field(
        24 * 3600.0, gt=0, description="An event not acknowledged this long after the job ended is abandoned"
    )
    webhook_poll_seconds: float = Field(2.0, gt=0, description="How often beat looks for deliveries that are due")

    # Inputs referenced by URL in a JSON submission (``POST /v1/jobs`` with ``application/json``)
    input_url_prefixes: list[str] = Field(
        default_factory=list,
        description="URL prefixes inputs may be read from, e.g. s3://media-bucket/clips/ (s3:// and file:// only; "
        "none by default, so a file:// of the server's disk is never read unless a prefix allows it)",
    )

    # The jobs console (/ui)
    ui_session_seconds: float = Field(8 * 3600.0, gt=0, description="A browser sign-in lasts this long")

    @model_validator(mode="after")
    def _enforce_non_default_secrets(self) -> Settings:
        if self.environment != "production":
            return self
        secrets = {
            "SWAPFARM_SECRET_KEY": self.secret_key,
            "SWAPFARM_FLOWER_PASSWORD": self.flower_password,
            "SWAPFARM_S3_SECRET": self.s3_secret,
        }
        weak = [n for n, v in secrets.items() if v is not None and v.get_secret_value() in KNOWN_DEFAULT_SECRETS]
        if weak:
            raise ValueError(f"{', '.join(weak)} must be set to a non-default value in production")
        return self

    @property
    def queue_family(self) -> str:
        return "cpu" if self.family == "auto" else self.family


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process's settings, built on first use from the environment."""
    return Settings()
