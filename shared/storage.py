"""Job files addressed by URL through fsspec: ``file://`` and ``s3://`` go through the same calls.

Layout under the storage root (one folder per job, so a job's files can be deleted together)::

    jobs/<job>/input/target<ext>, jobs/<job>/input/source-<i><ext>
    jobs/<job>/chunks/<index>-<token>.mp4      (one per render attempt; the row names the one that counts)
    jobs/<job>/output.mp4

No caller assumes a path shared between machines: workers fetch inputs to local scratch space and upload
results; only when the URL is itself local is the file read in place.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import fsspec
from fsspec.core import split_protocol, url_to_fs

if TYPE_CHECKING:
    from shared.settings import Settings


class Storage:
    def __init__(self, root_url: str, **storage_options: Any) -> None:
        if "://" not in root_url:
            root_url = "file://" + os.path.abspath(root_url)
        elif root_url.startswith("file://"):
            root_url = "file://" + os.path.abspath(root_url.removeprefix("file://"))
        self.root_url = root_url.rstrip("/")
        self._options = storage_options

    @classmethod
    def from_settings(cls, settings: Settings, root_url: str | None = None) -> Storage:
        """The storage at ``root_url`` (default ``settings.storage_url``) with the credentials the settings give.

        Every process builds its storage here, so the API and the workers on other machines address the same
        bucket the same way.
        """
        url = root_url or settings.storage_url
        return cls(url, **storage_options(settings, url))

    def url(self, *parts: str) -> str:
        return "/".join([self.root_url, *parts])

    def job_url(self, job_id: str, *parts: str) -> str:
        return self.url("jobs", job_id, *parts)

    def _fs(self, url: str) -> tuple[fsspec.AbstractFileSystem, str]:
        fs, path = url_to_fs(url, **self._options)
        return fs, path

    def is_local(self, url: str) -> bool:
        fs, _ = self._fs(url)
        return "file" in fs.protocol or "local" in fs.protocol

    def open_write(self, url: str) -> IO[bytes]:
        fs, path = self._fs(url)
        fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        handle: IO[bytes] = fs.open(path, "wb")
        return handle

    def open_read(self, url: str) -> IO[bytes]:
        fs, path = self._fs(url)
        handle: IO[bytes] = fs.open(path, "rb")
        return handle

    def exists(self, url: str) -> bool:
        fs, path = self._fs(url)
        return bool(fs.exists(path))

    def size(self, url: str) -> int:
        fs, path = self._fs(url)
        return int(fs.size(path))

    def upload(self, local: Path, url: str) -> None:
        """Copy a local file to ``url`` atomically: readers see the whole file or nothing."""
        fs, path = self._fs(url)
        parent = path.rsplit("/", 1)[0]
        fs.makedirs(parent, exist_ok=True)
        partial = f"{parent}/.{uuid.uuid4().hex}.part"
        fs.put_file(str(local), partial)
        fs.mv(partial, path)

    def download(self, url: str, local: Path) -> None:
        fs, path = self._fs(url)
        local.parent.mkdir(parents=True, exist_ok=True)
        fs.get_file(path, str(local))

    @contextmanager
    def local_copy(self, url: str, scratch: Path) -> Iterator[Path]:
        """A local path holding the file at ``url``: the file itself when local, else a downloaded copy."""
        fs, path = self._fs(url)
        if self.is_local(url):
            yield Path(path)
            return
        scratch.mkdir(parents=True, exist_ok=True)
        local = scratch / f"{uuid.uuid4().hex}-{Path(path).name}"
        try:
            self.download(url, local)
            yield local
        finally:
            local.unlink(missing_ok=True)

    def delete(self, url: str, *, recursive: bool = False) -> None:
        fs, path = self._fs(url)
        if fs.exists(path):
            fs.rm(path, recursive=recursive)

    def listdir(self, url: str) -> list[str]:
        fs, path = self._fs(url)
        if not fs.exists(path):
            return []
        return sorted(str(p) for p in fs.ls(path, detail=False))


def storage_options(settings: Settings, url: str) -> dict[str, Any]:
    """fsspec options for ``url``: S3 endpoint, keys and region for ``s3://``; nothing for other protocols.

    >>> from shared.settings import Settings
    >>> storage_options(Settings(s3_key="k"), "file:///tmp/x")
    {}
    """
    protocol, _ = split_protocol(url)
    if protocol not in {"s3", "s3a"}:
        return {}
    options: dict[str, Any] = {
        # Other machines write the same bucket: a cached listing would hide their files.
        "use_listings_cache": False,
    }
    if settings.s3_endpoint_url:
        options["endpoint_url"] = settings.s3_endpoint_url
    if settings.s3_key:
        options["key"] = settings.s3_key
    if settings.s3_secret is not None:
        options["secret"] = settings.s3_secret.get_secret_value()
    if settings.s3_region:
        options["client_kwargs"] = {"region_name": settings.s3_region}
    return options


def copy_stream(source: IO[bytes], target: IO[bytes], limit: int | None = None) -> int:
    """Copy in 1 MiB blocks; return the byte count. Raises ``OverflowError`` past ``limit`` bytes."""
    total = 0
    while block := source.read(1 << 20):
        total += len(block)
        if limit is not None and total > limit:
            raise OverflowError(total)
        target.write(block)
    return total


def remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
