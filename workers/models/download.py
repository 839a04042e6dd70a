"""Finding model files: the offline folder, then the cache, then a download; and checking them by sha256.

:func:`resolve` is what workers call before loading a model. It looks in ``settings.models_dir`` (a folder
the operator fills, never written to), then in ``settings.model_cache_dir``; only if neither holds the file
does it download it into the cache. Downloads stream into ``<file>.part`` (resumed with an HTTP ``Range``
request after an interruption), retry transient failures with exponential back-off, try each base URL in
order, and become the model file only once their sha256 matches. Processes sharing a cache take a file lock
while downloading.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from shared.errors import ModelError
from shared.licences import check_model
from shared.settings import Settings
from workers.models.registry import REGISTRY, ModelSpec

if TYPE_CHECKING:
    import httpx
    from rich.progress import Progress, TaskID

logger = logging.getLogger(__name__)

# Hosts that serve FaceFusion's model sets as Hugging Face repositories rather than GitHub releases.
_HUGGING_FACE_HOSTS = frozenset({"huggingface.co", "hf-mirror.com"})
_ATTEMPTS_PER_URL = 4
_BACKOFF_SECONDS = 1.0
_BACKOFF_MAX_SECONDS = 30.0
_CHUNK_BYTES = 1 << 20
_CONNECT_TIMEOUT_SECONDS = 15.0
_READ_TIMEOUT_SECONDS = 60.0
# Statuses worth retrying on the same URL; every other error status moves on to the next URL.
_TRANSIENT_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})


class ModelStatus(StrEnum):
    """What a local copy of a model is worth."""

    VERIFIED = "verified"  # present, sha256 matches the registry
    UNVERIFIED = "unverified"  # present, but the registry knows no sha256 to check it against
    MISMATCH = "mismatch"  # present, sha256 differs from the registry
    MISSING = "missing"  # in neither the offline folder nor the cache


@dataclass(frozen=True)
class Verification:
    """The state of one model's local file; ``path`` and ``sha256`` are ``None`` when it is missing."""

    name: str
    status: ModelStatus
    path: Path | None
    sha256: str | None
    expected_sha256: str | None


class _TransientError(Exception):
    """Worth another try on the same URL."""


class _UnavailableError(Exception):
    """This URL will not serve the file; try the next one."""


def spec_of(name: str) -> ModelSpec:
    """The registry entry of ``name``.

    Raises:
        ModelError: no model of that name is known.
    """
    try:
        return REGISTRY[name]
    except KeyError:
        raise ModelError(f"unknown model {name!r}: swapfarm models list shows the {len(REGISTRY)} known") from None


def model_urls(spec: ModelSpec, base_urls: Sequence[str]) -> list[str]:
    """The download URLs of ``spec``, one per base URL, in order.

    A GitHub release base gives ``{url}/{base}/{file}``; a Hugging Face host gives
    ``{url}/{base}/resolve/main/{file}``, as FaceFusion lays its model sets out. A model only Hugging Face serves
    (``spec.hugging_face_only``) gets no URL from the other bases.

    >>> model_urls(REGISTRY["gfpgan_1.4"], ["https://huggingface.co/facefusion"])
    ['https://huggingface.co/facefusion/models-3.0.0/resolve/main/gfpgan_1.4.onnx']
    """
    urls = []
    for url in base_urls:
        if urlsplit(url).hostname in _HUGGING_FACE_HOSTS:
            urls.append(f"{url.rstrip('/')}/{spec.base}/resolve/main/{spec.remote_name}")
        elif not spec.hugging_face_only:
            urls.append(f"{url.rstrip('/')}/{spec.base}/{spec.remote_name}")
    return urls


def sha256_of(path: Path) -> str:
    """The sha256 of a file as lowercase hex; remembered per process while the file's size and mtime hold."""
    stat = path.stat()
    return _sha256(str(path.resolve()), stat.st_size, stat.st_mtime_ns)


@lru_cache(maxsize=64)
def _sha256(path: str, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def _search_folders(settings: Settings) -> list[Path]:
    folders = [settings.models_dir.expanduser()] if settings.models_dir is not None else []
    return [*folders, settings.model_cache_dir.expanduser()]


def verify(name: str, settings: Settings) -> Verification:
    """Check the local copy of ``name`` that :func:`resolve` would use, without downloading anything.

    Raises:
        ModelError: ``name`` is not a known model.
    """
    spec = spec_of(name)
    for folder in _search_folders(settings):
        path = folder / spec.file_name
        if path.is_file():
            actual = sha256_of(path)
            if spec.sha256 is None:
                status = ModelStatus.UNVERIFIED
            elif actual == spec.sha256:
                status = ModelStatus.VERIFIED
            else:
                status = ModelStatus.MISMATCH
            return Verification(name, status, path, actual, spec.sha256)
    return Verification(name, ModelStatus.MISSING, None, None, spec.sha256)


def resolve(name: str, settings: Settings) -> Path:
    """The local path of model ``name``, downloading it into the cache if no local copy exists.

    A local file whose sha256 differs from the registry's is refused unless
    ``settings.allow_model_hash_mismatch`` is set (then it is used with a warning); a refused file in the
    cache is deleted and downloaded again, one in the offline folder is left alone. A file whose registry
    entry has no sha256 is used with a warning that it is unverified.

    Every model a worker loads comes through here, so here a model under a licence the operator disabled is
    refused (``shared.licences``), whichever job or processor asked for it.

    Raises:
        ModelError: ``name`` is unknown; no URL serves the file (code ``model_unavailable``); or the file's
            sha256 is wrong (code ``model_hash_mismatch``; a downloaded file that fails is deleted).
        LicenceDisabledError: ``model_licence_disabled``: the model's licence is disabled.
    """
    spec = spec_of(name)
    check_model(name, settings.disabled_licences)
    found = verify(name, settings)
    if found.path is not None:
        if found.status is ModelStatus.VERIFIED:
            return found.path
        if found.status is ModelStatus.UNVERIFIED:
            logger.warning("model %s: no sha256 is known, using %s unverified", name, found.path)
            return found.path
        if settings.allow_model_hash_mismatch:
            logger.warning(
                "model %s: sha256 of %s is %s, expected %s; used anyway (allow_model_hash_mismatch)",
                name,
                found.path,
                found.sha256,
                spec.sha256,
            )
            return found.path
        if found.path.parent != settings.model_cache_dir.expanduser():
            raise ModelError(
                f"model {name}: sha256 of {found.path} is {found.sha256}, expected {spec.sha256} "
                "(set allow_model_hash_mismatch to use it anyway)",
                code="model_hash_mismatch",
            )
        logger.warning("model %s: cached %s has the wrong sha256; downloading it again", name, found.path)
        found.path.unlink()
    return _download(spec, settings)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _download(spec: ModelSpec, settings: Settings) -> Path:
    import httpx
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

    cache = settings.model_cache_dir.expanduser()
    cache.mkdir(parents=True, exist_ok=True)
    target = cache / spec.file_name
    target.parent.mkdir(parents=True, exist_ok=True)  # a model kept in a subfolder of its own
    part = target.with_name(target.name + ".part")
    with _locked(target.with_name(target.name + ".lock")):
        if target.is_file():  # another process downloaded and checked it while we waited for the lock
            return target
        console = Console(stderr=True)
        progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            console=console,
            transient=True,
            disable=not console.is_terminal,
        )
        timeout = httpx.Timeout(_READ_TIMEOUT_SECONDS, connect=_CONNECT_TIMEOUT_SECONDS)
        failures: list[str] = []
        with progress, httpx.Client(timeout=timeout, follow_redirects=True) as client:
            task = progress.add_task(spec.file_name, total=spec.size_bytes)
            for url in model_urls(spec, settings.model_base_urls):
                try:
                    _fetch_with_retries(client, url, part, progress, task)
                    break
                except (_TransientError, _UnavailableError, httpx.HTTPError) as error:
                    logger.warning("model %s: download from %s failed: %s", spec.name, url, error)
                    failures.append(f"{url}: {error}")
            else:
                reasons = "; ".join(failures) or "no model_base_urls are configured"
                raise ModelError(f"model {spec.name} could not be downloaded: {reasons}")
        actual = sha256_of(part)
        if spec.sha256 is not None and actual != spec.sha256:
            part.unlink()
            raise ModelError(
                f"model {spec.name}: downloaded file has sha256 {actual}, expected {spec.sha256}; deleted it",
                code="model_hash_mismatch",
            )
        if spec.sha256 is None:
            logger.warning("model %s: no sha256 is known, downloaded %s unverified", spec.name, target)
        os.replace(part, target)
    logger.info("model %s: downloaded to %s", spec.name, target)
    return target


def _fetch_with_retries(client: httpx.Client, url: str, part: Path, progress: Progress, task: TaskID) -> None:
    import httpx
    from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

    retrying = Retrying(
        stop=stop_after_attempt(_ATTEMPTS_PER_URL),
        wait=wait_exponential(multiplier=_BACKOFF_SECONDS, max=_BACKOFF_MAX_SECONDS),
        retry=retry_if_exception_type((_TransientError, httpx.TransportError)),
        before_sleep=lambda state: logger.info(
            "retrying %s (attempt %s failed: %s)",
            url,
            state.attempt_number,
            state.outcome.exception() if state.outcome is not None else None,
        ),
        reraise=True,
    )
    for attempt in retrying:
        with attempt:
            _fetch_once(client, url, part, progress, task)


def _fetch_once(client: httpx.Client, url: str, part: Path, progress: Progress, task: TaskID) -> None:
    """Download ``url`` into ``part``, continuing from the bytes already there if the server allows it."""
    offset = part.stat().st_size if part.is_file() else 0
    headers = {"Accept-Encoding": "identity"} | ({"Range": f"bytes={offset}-"} if offset else {})
    with client.stream("GET", url, headers=headers) as response:
        if response.status_code == 416:  # the partial file is not a prefix of what the server has
            part.unlink(missing_ok=True)
            raise _TransientError("range not satisfiable; starting over")
        if response.status_code in _TRANSIENT_STATUSES:
            raise _TransientError(f"HTTP {response.status_code}")
        if response.status_code >= 400:
            raise _UnavailableError(f"HTTP {response.status_code}")
        resumed = response.status_code == 206
        if resumed and _range_start(response) != offset:
            part.unlink(missing_ok=True)
            raise _TransientError("the server answered a different range; starting over")
        start = offset if resumed else 0
        length = response.headers.get("Content-Length")
        total = start + int(length) if length is not None else None
        progress.update(task, completed=start, total=total)
        with part.open("ab" if resumed else "wb") as handle:
            for chunk in response.iter_bytes(_CHUNK_BYTES):
                handle.write(chunk)
                progress.advance(task, len(chunk))
    received = part.stat().st_size
    if total is not None and received != total:
        raise _TransientError(f"connection ended after {received} of {total} bytes")


def _range_start(response: httpx.Response) -> int | None:
    """The first byte offset of a ``206`` response, from ``Content-Range: bytes START-END/TOTAL``."""
    unit, _, spans = response.headers.get("Content-Range", "").partition(" ")
    first = spans.partition("-")[0]
    return int(first) if unit == "bytes" and first.isdigit() else None
