"""Before/after stills are the same frame of input and output, found exactly even in a variable-rate video."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest
from fastapi.testclient import TestClient

from shared.settings import Settings
from tests.integration.conftest import download, submit, wait_finished
from tests.support.farm import Farm
from tests.support.media import Frames, make_clip, psnr, read_frames

pytestmark = pytest.mark.integration


def _still(api: TestClient, url: str) -> Frames:
    response = api.get(url)
    assert response.status_code == 200 and response.headers["content-type"] == "image/jpeg"
    image = cv2.imdecode(np.frombuffer(response.content, np.uint8), cv2.IMREAD_COLOR)
    return np.ascontiguousarray(image[:, :, ::-1])  # RGB, as read_frames gives


def _is_frame(still: Frames, frames: Frames, index: int) -> None:
    """The still is frame ``index``: closer to it than to either neighbour (the clip's counter moves each frame)."""
    own = psnr(still, frames[index])
    assert own > 22, f"frame {index}: {own:.1f} dB"  # a JPEG of sharp test graphics
    for other in (index - 1, index + 1):
        assert own > psnr(still, frames[other]), f"the still of frame {index} looks like frame {other}"


def test_stills_show_the_same_frames_of_input_and_output(
    farm: Farm, api: TestClient, settings: Settings, tmp_path: Path
) -> None:
    clip = make_clip(tmp_path / "vfr.mp4", seconds=3, vfr=True)
    farm.worker("w1")
    job_id = submit(api, clip, {"processors": ["passthrough"], "chunk_frames": 25, "encoder": {"quality": 95}})
    assert wait_finished(api, job_id, farm)["status"] == "succeeded"
    manifest = json.loads(
        (Path(settings.storage_url.removeprefix("file://")) / "jobs" / job_id / "stills" / "stills.json").read_text()
    )
    frames_in = read_frames(clip)
    frames_out = read_frames(download(api, job_id, tmp_path / "out.mp4"))
    total = len(frames_in)
    assert [s["frame"] for s in manifest["stills"]] == [total // 6, total // 2, total * 5 // 6]
    for still in manifest["stills"]:
        base = f"/ui/jobs/{job_id}/stills/"
        _is_frame(_still(api, base + still["before"]), frames_in, still["frame"])
        _is_frame(_still(api, base + still["after"]), frames_out, still["frame"])
    page = api.get(f"/ui/jobs/{job_id}").text
    assert page.count('alt="Frame ') == 6
