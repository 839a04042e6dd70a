"""Trim and resize options at submission: a range the video's header shows to be outside its frames, an empty
range or an output over the pixel limit is refused with a 4xx and a stable code, before anything is stored; the
console's submit form offers the options and shows such an error next to its field."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from shared.settings import Settings
from tests.support.tenants import bearer

PASSTHROUGH: dict[str, Any] = {"processors": ["passthrough"]}


@pytest.fixture
def limited(settings: Settings) -> Settings:
    return settings.model_copy(update={"max_frame_pixels": 640 * 640})


@pytest.fixture
def client(limited: Settings, api_key: str) -> Iterator[TestClient]:
    with TestClient(create_app(limited), headers=bearer(api_key), follow_redirects=False) as client:
        yield client


@pytest.fixture(scope="module")
def d18(data_dir: Path) -> Path:
    return data_dir / "media" / "d18.mp4"  # 216 frames, 480x480


def _stored(settings: Settings) -> list[Path]:
    root = Path(settings.storage_url.removeprefix("file://"))
    return [p for p in root.rglob("*") if p.is_file()] if root.exists() else []


def _post(client: TestClient, target: Path, options: dict[str, Any]) -> Any:
    return client.post(
        "/v1/jobs",
        files={"target": (target.name, target.read_bytes(), "video/mp4")},
        data={"options": json.dumps({**PASSTHROUGH, **options})},
    )


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"trim_start_frame": 216}, "trim_start_frame"),
        ({"trim_start_frame": 10, "trim_end_frame": 217}, "trim_end_frame"),
    ],
)
def test_a_range_outside_the_video_is_refused_and_nothing_is_stored(
    client: TestClient, limited: Settings, d18: Path, options: dict[str, int], field: str
) -> None:
    response = _post(client, d18, options)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "trim_out_of_range"
    assert error["message"].startswith(field) and "216 frames" in error["message"]
    assert _stored(limited) == []


def test_a_range_ending_where_it_starts_is_invalid_options_naming_the_field(client: TestClient, d18: Path) -> None:
    response = _post(client, d18, {"trim_start_frame": 100, "trim_end_frame": 100})
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "options_invalid" and "trim_end_frame" in error["message"]


def test_an_output_over_the_pixel_limit_is_refused(client: TestClient, d18: Path) -> None:
    response = _post(client, d18, {"output_height": 1080})
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "resolution_too_large" and "1080x1080" in error["message"]


def test_a_range_inside_the_video_with_an_output_size_and_rate_is_accepted(client: TestClient, d18: Path) -> None:
    response = _post(
        client, d18, {"trim_start_frame": 50, "trim_end_frame": 150, "output_height": 240, "output_fps": 15}
    )
    assert response.status_code == 202, response.text


def test_the_submit_form_offers_the_options_and_shows_a_range_error_next_to_its_field(
    client: TestClient, d18: Path
) -> None:
    form = client.get("/ui/jobs/new")
    assert form.status_code == 200
    for name, bounds in (
        ("trim_start_frame", 'min="0"'),
        ("trim_end_frame", 'min="1"'),
        ("output_height", 'step="2" min="16" max="4320"'),
        ("output_fps", 'min="1" max="240"'),
    ):
        field = re.search(rf'<input id="opt-{name.replace("_", "-")}" name="options.{name}"[^>]*>', form.text)
        assert field is not None, f"no {name} field"
        assert bounds in field.group(0), field.group(0)
    refused = client.post(
        "/ui/jobs",
        files={"target": ("d18.mp4", d18.read_bytes(), "video/mp4")},
        data={"options.processors": "passthrough", "options.trim_start_frame": "10", "options.trim_end_frame": "300"},
    )
    assert refused.status_code == 422
    error = re.search(r'id="opt-trim-end-frame-error"[^>]*>([^<]+)<', refused.text)
    assert error is not None and "216 frames" in error.group(1)
    made = client.post(
        "/ui/jobs",
        files={"target": ("d18.mp4", d18.read_bytes(), "video/mp4")},
        data={"options.processors": "passthrough", "options.trim_start_frame": "50", "options.trim_end_frame": "150"},
    )
    assert made.status_code == 303, made.text


def test_the_frame_enhancer_is_in_the_schema_and_its_output_size_is_checked_at_submission(
    client: TestClient, limited: Settings, d18: Path
) -> None:
    """×2 on d18 is a 960² output, over the 640² limit; listed before another processor it is invalid options;
    either way nothing is stored."""
    schema = json.dumps(client.get("/openapi.json").json())
    for name in ("real_esrgan_x2", "real_esrgan_x4_fp16", "frame_enhancer"):
        assert f'"{name}"' in schema
    too_large = _post(client, d18, {"processors": ["frame_enhancer"]})
    assert too_large.status_code == 422
    assert too_large.json()["error"]["code"] == "resolution_too_large" and "960x960" in too_large.text
    misplaced = _post(client, d18, {"processors": ["frame_enhancer", "face_blur"], "output_height": 240})
    assert misplaced.status_code == 422
    assert misplaced.json()["error"]["code"] == "options_invalid" and "last processor" in misplaced.text
    assert _stored(limited) == []
    accepted = _post(client, d18, {"processors": ["face_blur", "frame_enhancer"], "output_height": 480})
    assert accepted.status_code == 202, accepted.text  # decoded at 240², upscaled to 480²
