"""Model files: found offline, downloaded into the cache (resumed, retried, checked), or refused clearly.

Downloads go to a real HTTP server on 127.0.0.1 that honours ``Range`` requests.
"""

from __future__ import annotations

import logging
import shutil
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from shared.errors import ModelError
from shared.settings import Settings
from tests.support.replicas import identity_swapper, install_replica
from workers.models.download import ModelStatus, resolve, verify
from workers.models.registry import REGISTRY

YUNET = Path(__file__).resolve().parents[4] / "shared" / "data" / "models" / "yunet_2023mar.onnx"
YUNET_URL_PATH = "/models-3.4.0/yunet_2023_mar.onnx"


@dataclass
class ModelServer:
    """What the test server serves and what it was asked."""

    url: str
    files: dict[str, bytes] = field(default_factory=dict)
    ranges: bool = True
    failures_before_success: int = 0
    requests: list[tuple[str, str | None]] = field(default_factory=list)


@pytest.fixture
def server() -> Iterator[ModelServer]:
    state = ModelServer(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            state.requests.append((self.path, self.headers.get("Range")))
            if state.failures_before_success > 0:
                state.failures_before_success -= 1
                self.send_error(503)
                return
            body = state.files.get(self.path)
            if body is None:
                self.send_error(404)
                return
            wanted = self.headers.get("Range")
            start = int(wanted.removeprefix("bytes=").split("-")[0]) if wanted and state.ranges else 0
            self.send_response(206 if start else 200)
            if start:
                self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
            self.send_header("Content-Length", str(len(body) - start))
            self.end_headers()
            self.wfile.write(body[start:])

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield state
    httpd.shutdown()
    httpd.server_close()
    thread.join()


def _settings(tmp_path: Path, base_urls: list[str], **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "environment": "test",
        "model_cache_dir": tmp_path / "cache",
        "model_base_urls": base_urls,
        "family": "cpu",
    }
    return Settings(**(values | overrides))


def test_downloads_a_model_into_the_cache_and_verifies_it(server: ModelServer, tmp_path: Path) -> None:
    server.files[YUNET_URL_PATH] = YUNET.read_bytes()
    settings = _settings(tmp_path, [server.url])

    path = resolve("yunet", settings)

    assert path == tmp_path / "cache" / "yunet_2023_mar.onnx"
    assert path.read_bytes() == YUNET.read_bytes()
    assert verify("yunet", settings).status is ModelStatus.VERIFIED
    assert sorted(p.name for p in path.parent.iterdir() if not p.name.endswith(".lock")) == [path.name]


def test_an_interrupted_download_resumes_from_its_partial_file(server: ModelServer, tmp_path: Path) -> None:
    content = YUNET.read_bytes()
    server.files[YUNET_URL_PATH] = content
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "yunet_2023_mar.onnx.part").write_bytes(content[:100_000])

    path = resolve("yunet", _settings(tmp_path, [server.url]))

    assert path.read_bytes() == content
    assert server.requests == [(YUNET_URL_PATH, "bytes=100000-")]


def test_a_server_that_ignores_range_still_gives_a_whole_file(server: ModelServer, tmp_path: Path) -> None:
    content = YUNET.read_bytes()
    server.files[YUNET_URL_PATH] = content
    server.ranges = False
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "yunet_2023_mar.onnx.part").write_bytes(b"stale bytes from another file")

    path = resolve("yunet", _settings(tmp_path, [server.url]))

    assert path.read_bytes() == content


def test_a_download_with_the_wrong_hash_is_deleted_and_the_error_names_the_model(
    server: ModelServer, tmp_path: Path
) -> None:
    server.files[YUNET_URL_PATH] = b"not the model" * 1000

    with pytest.raises(ModelError) as raised:
        resolve("yunet", _settings(tmp_path, [server.url]))

    assert raised.value.code == "model_hash_mismatch"
    assert "yunet" in raised.value.message
    assert not any(p.suffix in {".onnx", ".part"} for p in (tmp_path / "cache").iterdir())


def test_a_model_no_url_serves_is_unavailable_after_trying_every_url(server: ModelServer, tmp_path: Path) -> None:
    mirrors = [f"{server.url}/first", f"{server.url}/second"]

    with pytest.raises(ModelError) as raised:
        resolve("gfpgan_1.4", _settings(tmp_path, mirrors))

    assert raised.value.code == "model_unavailable"
    assert "gfpgan_1.4" in raised.value.message
    assert [path for path, _ in server.requests] == [
        "/first/models-3.0.0/gfpgan_1.4.onnx",
        "/second/models-3.0.0/gfpgan_1.4.onnx",
    ]


def test_the_next_url_is_tried_when_one_does_not_have_the_file(server: ModelServer, tmp_path: Path) -> None:
    server.files["/mirror" + YUNET_URL_PATH] = YUNET.read_bytes()

    path = resolve("yunet", _settings(tmp_path, [f"{server.url}/missing", f"{server.url}/mirror"]))

    assert path.read_bytes() == YUNET.read_bytes()


def test_a_transient_server_error_is_retried(server: ModelServer, tmp_path: Path) -> None:
    server.files[YUNET_URL_PATH] = YUNET.read_bytes()
    server.failures_before_success = 1

    path = resolve("yunet", _settings(tmp_path, [server.url]))

    assert path.read_bytes() == YUNET.read_bytes()
    assert len(server.requests) == 2


def test_the_offline_folder_is_used_without_touching_the_network(server: ModelServer, tmp_path: Path) -> None:
    offline = tmp_path / "offline"
    offline.mkdir()
    shutil.copy(YUNET, offline / "yunet_2023_mar.onnx")
    settings = _settings(tmp_path, [server.url], models_dir=offline)

    assert resolve("yunet", settings) == offline / "yunet_2023_mar.onnx"
    assert verify("yunet", settings).status is ModelStatus.VERIFIED
    assert server.requests == []


def test_a_local_file_with_the_wrong_hash_is_refused_unless_explicitly_allowed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    offline = tmp_path / "offline"
    replica = install_replica(identity_swapper(), "inswapper_128_fp16", offline)

    with pytest.raises(ModelError) as raised:
        resolve("inswapper_128_fp16", _settings(tmp_path, [], models_dir=offline))
    assert raised.value.code == "model_hash_mismatch"
    assert "inswapper_128_fp16" in raised.value.message
    assert replica.exists(), "an operator's offline file is never deleted"
    assert verify("inswapper_128_fp16", _settings(tmp_path, [], models_dir=offline)).status is ModelStatus.MISMATCH

    with caplog.at_level(logging.WARNING, logger="workers.models.download"):
        allowed = resolve(
            "inswapper_128_fp16", _settings(tmp_path, [], models_dir=offline, allow_model_hash_mismatch=True)
        )
    assert allowed == replica
    assert "allow_model_hash_mismatch" in caplog.text


def test_a_model_without_a_known_hash_is_reported_unverified(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    assert REGISTRY["scrfd_2.5g"].sha256 is None
    offline = tmp_path / "offline"
    offline.mkdir()
    (offline / "scrfd_2.5g.onnx").write_bytes(b"whatever the operator put here")
    settings = _settings(tmp_path, [], models_dir=offline)

    assert verify("scrfd_2.5g", settings).status is ModelStatus.UNVERIFIED
    with caplog.at_level(logging.WARNING, logger="workers.models.download"):
        assert resolve("scrfd_2.5g", settings) == offline / "scrfd_2.5g.onnx"
    assert "unverified" in caplog.text


def test_a_corrupt_cached_file_is_downloaded_again(server: ModelServer, tmp_path: Path) -> None:
    server.files[YUNET_URL_PATH] = YUNET.read_bytes()
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "yunet_2023_mar.onnx").write_bytes(b"truncated")

    path = resolve("yunet", _settings(tmp_path, [server.url]))

    assert path.read_bytes() == YUNET.read_bytes()


def test_missing_and_unknown_models(tmp_path: Path) -> None:
    settings = _settings(tmp_path, [])
    assert verify("codeformer", settings).status is ModelStatus.MISSING
    with pytest.raises(ModelError, match="unknown model 'nope'"):
        resolve("nope", settings)
