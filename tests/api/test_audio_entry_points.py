"""The source audio through the console's submit form and ``swapfarm run --source-audio``: the same intake as
``POST /v1/jobs`` (``shared.submission.submit``), its refusals shown where the caller looks."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from shared.db import session_scope
from shared.models import Job
from shared.settings import Settings
from tests.support.audio import make_speech
from tests.support.live import live_api
from tests.support.media import make_clip
from tests.support.tenants import make_key


@pytest.fixture
def console(settings: Settings) -> Iterator[tuple[TestClient, str]]:
    with TestClient(create_app(settings), follow_redirects=False) as client:
        key = make_key(settings)
        form = client.get("/ui/sign-in", params={"next": "/ui/jobs"})
        token = re.search(r'name="csrf_token" value="([^"]+)"', form.text)
        assert token is not None
        client.post("/ui/sign-in", data={"key": key, "csrf_token": token.group(1), "next": "/ui/jobs"})
        page = client.get("/ui/jobs/new")
        csrf = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
        assert csrf is not None and 'name="source_audio"' in page.text
        yield client, csrf.group(1)


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_clip(tmp_path_factory.mktemp("clip") / "clip.mp4", seconds=1, size="64x64")


def test_the_console_form_takes_a_source_audio(
    console: tuple[TestClient, str], settings: Settings, clip: Path, tmp_path: Path
) -> None:
    client, csrf = console
    speech = make_speech(tmp_path / "voice.flac", seconds=1.0)
    done = client.post(
        "/ui/jobs",
        files=[("target", ("clip.mp4", clip.read_bytes(), "video/mp4")),
               ("source_audio", ("voice.flac", speech.read_bytes(), "audio/flac"))],
        data={"options.processors": "lip_syncer", "csrf_token": csrf},
    )  # fmt: skip
    assert done.status_code == 303, done.text
    job_id = done.headers["location"].rsplit("/", 1)[1]
    with session_scope(settings.database_url) as s:
        job = s.get(Job, job_id)
        assert job is not None and job.audio_url is not None and job.audio_url.endswith("/input/audio.flac")


def test_the_console_shows_an_unreadable_audio_next_to_its_field(
    console: tuple[TestClient, str], clip: Path, tmp_path: Path
) -> None:
    client, csrf = console
    refused = client.post(
        "/ui/jobs",
        files=[("target", ("clip.mp4", clip.read_bytes(), "video/mp4")),
               ("source_audio", ("voice.wav", b"not audio\n" * 50, "audio/wav"))],
        data={"options.processors": "lip_syncer", "csrf_token": csrf},
    )  # fmt: skip
    assert refused.status_code == 422
    assert re.search(r'id="source-audio-error"[^>]*>[^<]*not a readable audio file', refused.text), refused.text[-2000:]


def test_swapfarm_run_takes_source_audio_and_refuses_it_without_lip_syncer(clip: Path, tmp_path: Path) -> None:
    speech = make_speech(tmp_path / "voice.wav", seconds=1.0)
    done = subprocess.run(
        [sys.executable, "-m", "cli", "run", "--target", str(clip), "--source-audio", str(speech),
         "--processor", "passthrough", "-o", str(tmp_path / "out.mp4"), "--state-dir", str(tmp_path / "state")],
        capture_output=True, text=True, timeout=120, env={"PATH": "/usr/bin:/bin", "COLUMNS": "200"},
    )  # fmt: skip
    assert done.returncode == 1 and "options_invalid" in done.stderr and "lip_syncer" in done.stderr, done.stderr
    assert not (tmp_path / "out.mp4").exists()


def test_swapfarm_submit_uploads_the_source_audio(settings: Settings, clip: Path, tmp_path: Path) -> None:
    speech = make_speech(tmp_path / "voice.mp3", seconds=1.0)
    with live_api(settings, tmp_path) as api:
        done = subprocess.run(
            [sys.executable, "-m", "cli", "submit", str(clip), "--source-audio", str(speech),
             "--processor", "lip_syncer", "--url", api.url, "--key", make_key(settings)],
            capture_output=True, text=True, timeout=120, env={"PATH": "/usr/bin:/bin", "COLUMNS": "200"},
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip()
    with session_scope(settings.database_url) as s:
        job = s.get(Job, job_id)
        assert job is not None and job.audio_url is not None and job.audio_url.endswith("/input/audio.mp3")
