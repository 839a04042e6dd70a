"""A lip_syncer job's source audio through ``POST /v1/jobs``: a multipart part or a URL in a JSON body, taken by
what it holds, refused with its code and nothing stored (real Postgres, Redis and ffprobe)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from api.app import create_app
from shared.db import session_scope
from shared.models import Job
from shared.settings import Settings
from tests.support import hostile
from tests.support.audio import make_speech
from tests.support.media import make_clip
from tests.support.tenants import bearer

LIP_SYNC = json.dumps({"processors": ["lip_syncer"]})


@pytest.fixture
def client(settings: Settings, api_key: str, tmp_path: Path) -> Iterator[TestClient]:
    allowed = settings.model_copy(update={"max_audio_seconds": 2.0, "input_url_prefixes": [f"file://{tmp_path}/in/"]})
    with TestClient(create_app(allowed), headers=bearer(api_key)) as client:
        yield client


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_clip(tmp_path_factory.mktemp("clip") / "clip.mp4", seconds=1, size="64x64")


def _jobs(settings: Settings) -> int:
    with session_scope(settings.database_url) as s:
        return int(s.scalar(select(func.count()).select_from(Job)) or 0)


def _stored(settings: Settings) -> list[Path]:
    root = Path(settings.storage_url.removeprefix("file://"))
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


def _post(client: TestClient, clip: Path, audio: Path | None, options: str = LIP_SYNC) -> tuple[int, dict]:
    files = [("target", ("clip.mp4", clip.read_bytes(), "video/mp4"))]
    if audio is not None:
        files.append(("source_audio", (audio.name, audio.read_bytes(), "audio/wav")))
    response = client.post("/v1/jobs", files=files, data={"options": options})
    return response.status_code, response.json()


@pytest.mark.parametrize(("suffix", "stored_as"), [(".wav", ".wav"), (".mp3", ".mp3"), (".m4a", ".m4a")])
def test_a_wav_an_mp3_and_an_m4a_are_taken_and_stored_by_their_content(
    client: TestClient, settings: Settings, clip: Path, tmp_path: Path, suffix: str, stored_as: str
) -> None:
    audio = make_speech(tmp_path / f"narration{suffix}", seconds=1.0)
    status, body = _post(client, clip, audio)
    assert status == 202, body
    with session_scope(settings.database_url) as s:
        job = s.get(Job, body["id"])
        assert job is not None and job.audio_url is not None and job.audio_media is not None
        assert job.audio_url.endswith(f"/input/audio{stored_as}") and job.audio_media["duration"] > 0.9
    assert [p.name for p in _stored(settings)] == [f"audio{stored_as}", "target.mp4"]


def _refusals(tmp_path: Path, clip: Path) -> dict[str, tuple[Path, str]]:
    text = tmp_path / "speech.wav"
    text.write_text("not audio at all, only a name\n" * 40)
    return {
        "too long": (make_speech(tmp_path / "long.wav", seconds=3.0), "audio_too_long"),
        "text named .wav": (text, "audio_unreadable"),
        "HLS playlist": (hostile.hls_playlist(tmp_path / "list.wav", make_speech(tmp_path / "seg.wav", seconds=0.5)),
                         "media_format_refused"),
        "a video": (clip, "media_format_refused"),
    }  # fmt: skip


@pytest.mark.parametrize("case", ["too long", "text named .wav", "HLS playlist", "a video"])
def test_each_bad_audio_is_refused_with_its_code_and_nothing_is_stored(
    client: TestClient, settings: Settings, clip: Path, tmp_path: Path, case: str
) -> None:
    audio, code = _refusals(tmp_path, clip)[case]
    before = _jobs(settings)
    status, body = _post(client, clip, audio)
    assert (status, body["error"]["code"]) == (422, code), body
    assert _jobs(settings) == before and _stored(settings) == []


def test_lip_syncer_without_audio_and_audio_without_lip_syncer_are_refused(
    client: TestClient, settings: Settings, clip: Path, tmp_path: Path
) -> None:
    status, body = _post(client, clip, None)
    assert (status, body["error"]["code"]) == (422, "options_invalid") and "source audio" in body["error"]["message"]
    audio = make_speech(tmp_path / "speech.wav", seconds=1.0)
    status, body = _post(client, clip, audio, json.dumps({"processors": ["passthrough"]}))
    assert (status, body["error"]["code"]) == (422, "options_invalid") and "lip_syncer" in body["error"]["message"]
    assert _stored(settings) == []


def test_a_source_audio_by_url_in_a_json_body(
    client: TestClient, settings: Settings, clip: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    shutil.copy(clip, folder / "clip.mp4")
    make_speech(folder / "voice.mp3", seconds=1.0)
    body = {"target": {"url": f"file://{folder}/clip.mp4"}, "source_audio": {"url": f"file://{folder}/voice.mp3"},
            "options": {"processors": ["lip_syncer"]}}  # fmt: skip
    response = client.post("/v1/jobs", json=body)
    assert response.status_code == 202, response.text
    assert [p.name for p in _stored(settings)] == ["audio.mp3", "target.mp4"]
    outside = {**body, "source_audio": {"url": f"file://{tmp_path}/elsewhere.mp3"}}
    refused = client.post("/v1/jobs", json=outside)
    assert refused.status_code == 422 and refused.json()["error"]["code"] == "input_url_forbidden"


def test_an_audio_over_the_byte_limit_is_refused_as_it_streams(
    settings: Settings, api_key: str, clip: Path, tmp_path: Path
) -> None:
    small = settings.model_copy(update={"max_audio_bytes": 10_000})
    with TestClient(create_app(small), headers=bearer(api_key)) as client:
        status, body = _post(client, clip, make_speech(tmp_path / "long.wav", seconds=1.0))  # 96 kB
    assert (status, body["error"]["code"]) == (413, "audio_too_large"), body
    assert _stored(settings) == []
