"""A worker process fetches a job's target once and hands the same copy to every chunk it renders."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

import pytest

from shared.storage import Storage
from workers.video.targets import TargetCache


@pytest.fixture
def remote() -> Storage:
    """Storage that is not a local folder (fsspec's in-memory filesystem), so targets must be fetched."""
    return Storage(f"memory://farm-{uuid.uuid4().hex}")


def _put(storage: Storage, url: str, data: bytes, tmp_path: Path) -> None:
    source = tmp_path / f"up-{uuid.uuid4().hex}"
    source.write_bytes(data)
    storage.upload(source, url)


def test_every_chunk_of_a_job_reads_the_one_copy_fetched(remote: Storage, tmp_path: Path) -> None:
    cache = TargetCache()
    url = remote.job_url("j1", "input", "target.mp4")
    _put(remote, url, b"first", tmp_path)
    with cache.local(remote, url, tmp_path) as one:
        assert one.read_bytes() == b"first"
    _put(remote, url, b"changed", tmp_path)  # a second fetch would see this
    with cache.local(remote, url, tmp_path) as two:
        assert two == one and two.read_bytes() == b"first"
    assert cache.downloads == 1


def test_chunks_starting_together_wait_for_one_fetch(remote: Storage, tmp_path: Path) -> None:
    cache = TargetCache()
    url = remote.job_url("j1", "input", "target.mp4")
    _put(remote, url, b"x" * 1_000_000, tmp_path)
    seen: list[int] = []

    def chunk() -> None:
        with cache.local(remote, url, tmp_path) as path:
            seen.append(len(path.read_bytes()))

    threads = [threading.Thread(target=chunk) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert seen == [1_000_000] * 4 and cache.downloads == 1


def test_the_least_recently_used_copy_is_deleted_once_nobody_reads_it(remote: Storage, tmp_path: Path) -> None:
    cache = TargetCache(keep=1)
    first, second = (remote.job_url(j, "input", "target.mp4") for j in ("j1", "j2"))
    for url in (first, second):
        _put(remote, url, url.encode(), tmp_path)
    with cache.local(remote, first, tmp_path) as old:
        with cache.local(remote, second, tmp_path) as new:
            assert old.exists(), "a copy in use is kept"
            assert new.read_bytes() == second.encode()
    assert not old.exists() and new.exists()


def test_a_failed_fetch_is_tried_again_by_the_next_chunk(remote: Storage, tmp_path: Path) -> None:
    cache = TargetCache()
    url = remote.job_url("j1", "input", "target.mp4")
    with pytest.raises(FileNotFoundError), cache.local(remote, url, tmp_path):
        pass
    _put(remote, url, b"arrived", tmp_path)
    with cache.local(remote, url, tmp_path) as path:
        assert path.read_bytes() == b"arrived"


def test_a_local_target_is_read_in_place(tmp_path: Path) -> None:
    storage = Storage(str(tmp_path / "store"))
    url = storage.job_url("j1", "input", "target.mp4")
    _put(storage, url, b"here", tmp_path)
    cache = TargetCache()
    with cache.local(storage, url, tmp_path / "scratch") as path:
        assert path == Path(url.removeprefix("file://"))
    assert cache.downloads == 0
