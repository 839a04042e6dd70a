"""The two render paths give the same video: a chain that never touches pixels is rendered in one ffmpeg process
(transcode), any other through the pipes (decode → BGR frames → processors → encode). Same input, same chunks: the
same frames at the same times, whichever path rendered them."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from shared.db import session_scope
from shared.models import Chunk
from shared.settings import Settings
from tests.integration.conftest import download, submit, wait_finished, with_face_models
from tests.support.farm import Farm
from tests.support.media import make_clip, psnr, read_frames
from workers.video.frame_scan import frame_times

pytestmark = pytest.mark.integration

ENCODER = {"lossless": True, "preset": "ultrafast"}


def _two_rates(path: Path) -> Path:
    """Two seconds at 30 fps, then two at 10 fps: a variable frame rate."""
    subprocess.run(
        ["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", "testsrc2=size=320x180:rate=30:duration=2",
         "-f", "lavfi", "-i", "testsrc2=size=320x180:rate=10:duration=2", "-filter_complex",
         "[0:v][1:v]concat=n=2:v=1[v]", "-map", "[v]", "-fps_mode", "vfr", "-c:v", "libx264", "-preset", "veryfast",
         "-pix_fmt", "yuv420p", str(path)],
        check=True,
    )  # fmt: skip
    return path


CLIPS: dict[str, Callable[[Path], Path]] = {
    "constant-rate": lambda folder: make_clip(folder / "cfr.mp4", seconds=3),
    "variable-rate": lambda folder: _two_rates(folder / "vfr.mp4"),
}


@pytest.fixture
def settings(settings: Settings, data_dir: Path, tmp_path: Path) -> Settings:
    return with_face_models(settings, data_dir, tmp_path)


def _ranges(settings: Settings, job_id: str) -> list[tuple[int, int]]:
    with session_scope(settings.database_url) as s:
        rows = s.execute(select(Chunk.frame_start, Chunk.frame_end).where(Chunk.job_id == job_id).order_by(Chunk.index))
        return [(int(a), int(b)) for a, b in rows]


@pytest.mark.parametrize("clip_kind", list(CLIPS))
def test_the_transcode_and_the_pipes_give_the_same_frames_at_the_same_times(
    farm: Farm, api: TestClient, settings: Settings, tmp_path: Path, clip_kind: str
) -> None:
    clip = CLIPS[clip_kind](tmp_path)
    farm.worker("w1")
    transcoded = submit(api, clip, {"processors": ["passthrough"], "encoder": ENCODER, "chunk_frames": 25})
    # no faces; plain face_blur, since strict mode's doubtful detections may hide a test pattern's shape
    piped = submit(
        api, clip, {"processors": ["face_blur"], "encoder": ENCODER, "chunk_frames": 25, "face": {"blur_strict": False}}
    )
    for job_id in (transcoded, piped):
        assert wait_finished(api, job_id, farm)["status"] == "succeeded"
    assert _ranges(settings, transcoded) == _ranges(settings, piped), "the same chunks"

    one = download(api, transcoded, tmp_path / "transcoded.mp4")
    other = download(api, piped, tmp_path / "piped.mp4")
    assert frame_times(one) == frame_times(other), "the same timing, frame for frame"
    assert len(frame_times(one)) == len(frame_times(clip))
    a, b = read_frames(one), read_frames(other)
    assert a.shape == b.shape
    worst = min(psnr(x, y) for x, y in zip(a, b, strict=True))
    assert worst > 40, f"frames differ between the paths: worst {worst:.1f} dB"
