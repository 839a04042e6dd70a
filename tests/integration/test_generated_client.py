"""A Python client generated from the live ``/openapi.json`` with ``openapi-python-client`` (offline: no formatter
hooks, nothing fetched) drives a job on the real farm: submit it paused, resume, pause and resume it, follow it to
the end, read its events and download its output — each call named after the operation's id (``jobs-create`` …)."""

from __future__ import annotations

import importlib
import io
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest

from shared.settings import Settings
from tests.support.farm import Farm, wait_for
from tests.support.live import live_api
from tests.support.media import make_clip, read_frames
from tests.support.tenants import make_key

pytestmark = pytest.mark.integration

PACKAGE = "swapfarm_client"
CONFIG = f"post_hooks: []\nproject_name_override: swapfarm-client\npackage_name_override: {PACKAGE}\n"
OPTIONS: dict[str, Any] = {
    "processors": ["passthrough"], "encoder": {"lossless": True, "preset": "ultrafast"}, "start_paused": True,
}  # fmt: skip


def _generate(schema: bytes, folder: Path) -> None:
    (folder / "openapi.json").write_bytes(schema)
    (folder / "config.yaml").write_text(CONFIG)
    generator = Path(sys.executable).with_name("openapi-python-client")
    done = subprocess.run(
        [
            str(generator), "generate", "--path", str(folder / "openapi.json"), "--meta", "none",
            "--output-path", str(folder / PACKAGE), "--config", str(folder / "config.yaml"),
        ],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Unsupported content_type" not in done.stdout + done.stderr, "a binary answer was left out"


@pytest.fixture
def generated(tmp_path: Path) -> Iterator[Path]:
    folder = tmp_path / "client"
    folder.mkdir()
    sys.path.insert(0, str(folder))
    try:
        yield folder
    finally:
        sys.path.remove(str(folder))
        for name in [m for m in sys.modules if m == PACKAGE or m.startswith(f"{PACKAGE}.")]:
            del sys.modules[name]


def _module(name: str) -> ModuleType:
    return importlib.import_module(f"{PACKAGE}.{name}")


def test_a_client_generated_from_the_live_schema_submits_pauses_resumes_and_reads_a_job(
    farm: Farm, settings: Settings, generated: Path, tmp_path: Path
) -> None:
    clip = make_clip(tmp_path / "tiny.mp4", seconds=1, size="64x64")
    key = make_key(settings)
    with live_api(settings, farm.logs) as server:
        _generate(httpx.get(f"{server.url}/openapi.json", timeout=10).content, generated)
        types, models = _module("types"), _module("models")
        create, get = _module("api.jobs.jobs_create"), _module("api.jobs.jobs_get")
        pause, resume = _module("api.jobs.jobs_pause"), _module("api.jobs.jobs_resume")
        events, output = _module("api.progress.jobs_events"), _module("api.output.jobs_output")
        client = _module("client").AuthenticatedClient(base_url=server.url, token=key, timeout=httpx.Timeout(30))
        try:
            body = models.JobsCreateFilesBody(
                target=types.File(payload=io.BytesIO(clip.read_bytes()), file_name="tiny.mp4", mime_type="video/mp4"),
                options=models.JobOptions.from_dict(OPTIONS),
            )
            job = create.sync(client=client, body=body)
            assert isinstance(job, models.JobView), job
            assert str(job.status.value) == "paused"
            # No worker yet: the job stays where each call puts it.
            assert str(resume.sync(job.id, client=client).status.value) in {"waiting", "queued"}
            assert str(pause.sync(job.id, client=client).status.value) == "paused"
            assert str(resume.sync(job.id, client=client).status.value) in {"waiting", "queued"}

            farm.worker("w1")

            def ended() -> Any:
                view = get.sync(job.id, client=client)
                return view if str(view.status.value) in {"succeeded", "failed", "cancelled"} else None

            final = wait_for(ended, timeout=300, what="the job to end")
            assert str(final.status.value) == "succeeded", final  # type: ignore[attr-defined]
            refused = pause.sync_detailed(job.id, client=client)
            assert refused.status_code == 409 and refused.parsed.error.code == "job_not_pausable"

            kinds = [str(e.kind.value) for e in events.sync(job.id, client=client).events]
            assert kinds[:5] == ["submitted", "resumed", "admitted", "paused", "resumed"], kinds
            assert kinds[-1] == "succeeded"
            video = output.sync(job.id, client=client)
            assert isinstance(video, types.File)
            path = tmp_path / "out.mp4"
            path.write_bytes(video.payload.read())
            assert len(read_frames(path)) == len(read_frames(clip)) == 30
        finally:
            client.get_httpx_client().close()
