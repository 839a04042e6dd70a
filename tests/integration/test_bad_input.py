"""A corpus of bad and awkward inputs, each case a test, through the API and real workers.

Every case ends one of three ways, and never another: a clear 4xx at submission (nothing stored, no job row, no
spooled upload left), a failed job with a stable code and message, or a correct output. The workers stay up
throughout: one farm serves the whole module, and each case checks it is still alive.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from shared.db import session_scope
from shared.media import probe
from shared.models import Chunk, Job
from shared.settings import Settings
from tests.conftest import farm_settings
from tests.integration.conftest import PLAIN_BLUR, download, submit, wait_finished
from tests.support import hostile
from tests.support.faces import MODELS
from tests.support.farm import Farm
from tests.support.media import assert_frames_match, make_clip, read_frames, stream_info
from tests.support.replicas import arcface_w600k_r50, constant_colour_swapper, install_replica
from workers.video.frame_scan import frame_times

pytestmark = pytest.mark.integration

LOSSLESS = {"processors": ["passthrough"], "encoder": {"lossless": True, "preset": "ultrafast"}}
# Every accepted or failing case runs through both render paths: the one-process transcode (passthrough) and the
# pipes through a processor that touches every pixel (face_blur: decode → BGR frames → detector → encode).
PIPELINES = {
    "transcode": LOSSLESS,
    "pixels": {"processors": ["face_blur"], "encoder": {"lossless": True, "preset": "ultrafast"}, "face": PLAIN_BLUR},
}
MAX_UPLOAD = 3 * 1024 * 1024
MAX_SOURCE = 512 * 1024


# -- one farm for the module ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def settings(database_url: str, broker_url: str, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """The test settings, for the whole module, with small upload limits and the face models (when present)."""
    home = tmp_path_factory.mktemp("bad-input")
    models = home / "models"
    models.mkdir()
    if MODELS.exists():
        shutil.copy(MODELS / "yunet_2023mar.onnx", models / "yunet_2023_mar.onnx")
        install_replica(arcface_w600k_r50(), "arcface_w600k_r50", models)
        install_replica(constant_colour_swapper((0, 255, 0)), "inswapper_128_fp16", models)  # the `fast` swapper
    return farm_settings(
        database_url,
        broker_url,
        home,
        lease_seconds=10,
        max_upload_bytes=MAX_UPLOAD,
        max_source_bytes=MAX_SOURCE,
        family="cpu",
        models_dir=models,
        model_cache_dir=home / "model-cache",
        allow_model_hash_mismatch=True,
        model_base_urls=[],
    )


@pytest.fixture(scope="module")
def farm(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Farm]:
    farm = Farm(settings, tmp_path_factory.mktemp("bad-input-logs"))
    farm.worker("w1")
    farm.worker("w2")
    farm.beat()
    yield farm
    farm.stop()


@pytest.fixture(autouse=True)
def _workers_stay_up(farm: Farm) -> Iterator[None]:
    yield
    for key in ("w1", "w2", "beat"):
        assert farm.procs[key].poll() is None, f"{key} died:\n{farm.log(key)[-3000:]}"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("corpus")


def _ffmpeg(*args: str) -> None:
    subprocess.run(["ffmpeg", "-v", "error", "-y", *args], check=True)


def _still(path: Path) -> Path:
    """A still image with no face (a test pattern)."""
    _ffmpeg("-f", "lavfi", "-i", "testsrc2=size=320x180", "-frames:v", "1", str(path))
    return path


# -- refused at submission --------------------------------------------------------------------------------------


def _truncated(folder: Path) -> Path:
    whole = make_clip(folder / "whole.mp4", seconds=2)  # the index (moov) is written last, so it is cut off
    cut = folder / "truncated.mp4"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    return cut


def _random(folder: Path) -> Path:
    path = folder / "random.mp4"
    path.write_bytes(random.Random(7).randbytes(200_000))
    return path


def _png_renamed(folder: Path) -> Path:
    return _still(folder / "picture.png").rename(folder / "picture.mp4")


def _jpeg_renamed(folder: Path) -> Path:
    return _still(folder / "photo.jpg").rename(folder / "photo.mp4")


def _audio_only(folder: Path) -> Path:
    path = folder / "audio-only.mp4"
    _ffmpeg("-f", "lavfi", "-i", "sine=duration=2", "-c:a", "aac", str(path))
    return path


def _empty(folder: Path) -> Path:
    path = folder / "empty.mp4"
    path.write_bytes(b"")
    return path


def _y4m_header(folder: Path, width: int, height: int) -> Path:
    """A raw video whose header declares ``width``×``height`` frames; the file itself is a few bytes."""
    path = folder / f"declares-{width}x{height}.mp4"
    path.write_bytes(f"YUV4MPEG2 W{width} H{height} F30:1 Ip A1:1 C420jpeg\nFRAME\n".encode() + bytes(4096))
    return path


def _mkv_declaring(folder: Path, side: int) -> Path:
    """A Matroska file whose header says ``side``×``side`` (a 256×256 file with its size fields rewritten)."""
    small = folder / "small.mkv"
    _ffmpeg("-f", "lavfi", "-i", "color=size=256x256:duration=0.2:rate=10", "-c:v", "rawvideo", str(small))
    data = small.read_bytes()
    for element in (b"\xb0\x82", b"\xba\x82"):  # PixelWidth, PixelHeight: two-byte values, 0x0100 → side
        assert data.count(element + b"\x01\x00") == 1
        data = data.replace(element + b"\x01\x00", element + side.to_bytes(2, "big"))
    path = folder / f"declares-{side}x{side}.mkv"
    path.write_bytes(data)
    return path


def _stored_elsewhere(folder: Path) -> Path:
    """A file of the farm's storage, as a playlist would name it."""
    return make_clip(folder / "someone-elses-output.mp4", seconds=1, audio=False)


def _oversize(folder: Path) -> Path:
    path = folder / "huge.mp4"
    path.write_bytes(bytes(MAX_UPLOAD + 1))
    return path


REFUSED_TARGETS: dict[str, tuple[Callable[[Path], Path], int, str]] = {
    "truncated-mp4": (_truncated, 422, "media_unreadable"),
    "random-bytes": (_random, 422, "media_unreadable"),
    "png-renamed-mp4": (_png_renamed, 422, "media_not_video"),
    "jpeg-renamed-mp4": (_jpeg_renamed, 422, "media_not_video"),
    "audio-only": (_audio_only, 422, "media_not_video"),
    "zero-length": (_empty, 422, "media_unreadable"),
    "y4m-not-a-container-the-farm-reads": (lambda f: _y4m_header(f, 16384, 16384), 422, "media_format_refused"),
    "header-16384x16384-mkv": (lambda f: _mkv_declaring(f, 16384), 422, "resolution_too_large"),
    "header-8192x8192-over-the-limit": (lambda f: _mkv_declaring(f, 8192), 422, "resolution_too_large"),
    "over-size-upload": (_oversize, 413, "upload_too_large"),
    "hls-playlist": (lambda f: hostile.hls_playlist(f / "playlist", _stored_elsewhere(f)), 422, "media_format_refused"),
    "dash-manifest": (lambda f: hostile.dash_manifest(f / "mpd", _stored_elsewhere(f)), 422, "media_format_refused"),
    "ffconcat-script": (lambda f: hostile.ffconcat(f / "list", _stored_elsewhere(f)), 422, "media_format_refused"),
    "rotation-not-a-number": (
        lambda f: hostile.mkv_with_rotation_tag(f / "rotated.mkv", "ninety"),
        422,
        "media_metadata_invalid",
    ),
    "5000-fps": (lambda f: hostile.mp4_at_rate(f / "fast.mp4", 5000), 422, "media_rate_invalid"),
}


def _text_as_image(folder: Path) -> Path:
    path = folder / "face.jpg"
    path.write_text("this is not an image\n")
    return path


def _video_as_image(folder: Path) -> Path:
    return make_clip(folder / "face.jpg", seconds=1, audio=False, extra=["-f", "mp4"])


def _oversize_image(folder: Path) -> Path:
    path = folder / "big-face.png"
    _ffmpeg("-f", "lavfi", "-i", "nullsrc=size=1024x1024", "-vf", "noise=alls=100:allf=t", "-frames:v", "1", str(path))
    assert path.stat().st_size > MAX_SOURCE
    return path


def _three_jpegs(folder: Path) -> Path:
    one = _still(folder / "one.jpg")
    path = folder / "three.jpg"
    path.write_bytes(one.read_bytes() * 3)
    return path


REFUSED_SOURCES: dict[str, tuple[Callable[[Path], Path], int, str]] = {
    "source-text-named-jpg": (_text_as_image, 422, "source_invalid"),
    "source-video-named-jpg": (_video_as_image, 422, "source_invalid"),
    "source-over-size": (_oversize_image, 413, "source_too_large"),
    "source-header-40000x40000": (
        lambda f: hostile.png_claiming(f / "face.png", 40000, 40000),
        422,
        "source_resolution_too_large",
    ),
    "source-three-pictures-in-one": (_three_jpegs, 422, "source_invalid"),
}


def _job_count(settings: Settings) -> int:
    with session_scope(settings.database_url) as s:
        return int(s.scalar(select(func.count()).select_from(Job)) or 0)


def _stored(settings: Settings) -> list[Path]:
    """Files in storage that belong to no job in the database: what a refused submission would leave behind.
    (Jobs of other tests — the reaper hands this module's workers any it finds abandoned — may write their own
    files meanwhile.)"""
    root = Path(settings.storage_url.removeprefix("file://"))
    with session_scope(settings.database_url) as s:
        known = set(s.scalars(select(Job.id)))
    files = sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []
    return [
        p for p in files if not (p.relative_to(root).parts[:1] == ("jobs",) and p.relative_to(root).parts[1] in known)
    ]


def _assert_refused(response_of: Callable[[], object], settings: Settings, spool: Path, status: int, code: str) -> None:
    jobs_before, stored_before = _job_count(settings), _stored(settings)
    response = response_of()
    assert getattr(response, "status_code", None) == status, getattr(response, "text", response)
    error = json.loads(getattr(response, "content", b"{}"))["error"]
    assert error["code"] == code and error["message"], error
    assert _job_count(settings) == jobs_before, "a refused job was inserted"
    assert _stored(settings) == stored_before, "a refused job left files in storage"
    assert not list(spool.iterdir()), "a refused job left its spooled upload behind"


@pytest.fixture
def spool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The API spools uploads under the temporary folder; this one is the test's own, to see what is left."""
    folder = tmp_path / "spool"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


@pytest.mark.parametrize("case", list(REFUSED_TARGETS))
def test_a_bad_target_is_refused_at_submission(
    case: str, api: TestClient, settings: Settings, corpus: Path, spool: Path
) -> None:
    make, status, code = REFUSED_TARGETS[case]
    folder = corpus / case
    folder.mkdir(exist_ok=True)
    target = make(folder)
    files = {"target": (target.name, target.read_bytes(), "video/mp4")}
    options = json.dumps({"processors": ["passthrough"]})
    _assert_refused(lambda: api.post("/v1/jobs", files=files, data={"options": options}), settings, spool, status, code)


@pytest.mark.parametrize("case", list(REFUSED_SOURCES))
def test_a_bad_source_is_refused_at_submission(
    case: str, api: TestClient, settings: Settings, corpus: Path, clip_short: Path, spool: Path
) -> None:
    make, status, code = REFUSED_SOURCES[case]
    folder = corpus / case
    folder.mkdir(exist_ok=True)
    source = make(folder)
    files = [
        ("target", (clip_short.name, clip_short.read_bytes(), "video/mp4")),
        ("source", (source.name, source.read_bytes(), "image/jpeg")),
    ]
    options = json.dumps({"processors": ["face_swapper"]})
    _assert_refused(lambda: api.post("/v1/jobs", files=files, data={"options": options}), settings, spool, status, code)


# -- accepted, then failed with a stable code -------------------------------------------------------------------


def _failed_once(settings: Settings, api: TestClient, farm: Farm, job_id: str, code: str) -> dict[str, object]:
    body = wait_finished(api, job_id, farm)
    assert body["status"] == "failed", body
    error = body["error"]
    assert isinstance(error, dict) and error["code"] == code and error["message"], error
    with session_scope(settings.database_url) as s:
        attempts = list(s.scalars(select(Chunk.attempts).where(Chunk.job_id == job_id)))
    assert all(a <= 1 for a in attempts), f"bad input is not worth a retry: attempts {attempts}"
    return body


@pytest.mark.parametrize("pipeline", list(PIPELINES))
def test_a_truncated_mp4_whose_header_survives_fails_as_truncated(
    api: TestClient, farm: Farm, settings: Settings, tmp_path: Path, pipeline: str
) -> None:
    whole = make_clip(tmp_path / "whole.mp4", seconds=3, extra=["-movflags", "+faststart"])  # the index first
    cut = tmp_path / "cut.mp4"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    job_id = submit(api, cut, {**PIPELINES[pipeline], "chunk_frames": 30})
    body = _failed_once(settings, api, farm, job_id, "media_truncated")
    assert "90 frames" in str(body["error"])


def test_a_source_image_without_a_face_fails_the_job_with_source_no_face(
    api: TestClient, farm: Farm, settings: Settings, clip_short: Path, tmp_path: Path, data_dir: Path
) -> None:
    job_id = submit(api, clip_short, {"processors": ["face_swapper"], "chunk_frames": 60}, [_still(tmp_path / "s.png")])
    _failed_once(settings, api, farm, job_id, "source_no_face")


# -- accepted, with a correct output ----------------------------------------------------------------------------


def _one_frame(folder: Path) -> Path:
    path = folder / "one-frame.mp4"
    _ffmpeg("-f", "lavfi", "-i", "testsrc2=size=320x180:rate=30", "-frames:v", "1", "-pix_fmt", "yuv420p", str(path))
    return path


def _odd(folder: Path) -> Path:
    # 4:2:0 cannot hold odd sizes, so the input is 4:4:4, as such files are
    return make_clip(folder / "odd.mp4", seconds=2, size="641x481", extra=["-pix_fmt", "yuv444p"])


def _portrait(folder: Path) -> Path:
    """A phone's portrait video: frames stored 320×180 with a 90° rotation in the header (shown 180×320)."""
    stored = make_clip(folder / "stored.mp4", seconds=2)
    path = folder / "portrait.mp4"
    _ffmpeg("-i", str(stored), "-c", "copy", "-metadata:s:v:0", "rotate=90", str(path))
    assert probe(path).rotation in (90, 270)
    return path


def _hevc_10bit(folder: Path) -> Path:
    path = folder / "hevc10.mp4"
    _ffmpeg(
        "-f", "lavfi", "-i", "testsrc2=size=320x180:rate=30:duration=2",
        "-f", "lavfi", "-i", "sine=duration=2",
        "-c:v", "libx265", "-preset", "ultrafast", "-pix_fmt", "yuv420p10le", "-x265-params", "log-level=error",
        "-tag:v", "hvc1", "-c:a", "aac", "-shortest", str(path),
    )  # fmt: skip
    return path


def _vfr(folder: Path) -> Path:
    return make_clip(folder / "vfr.mp4", seconds=3, vfr=True)


ACCEPTED: dict[str, Callable[[Path], Path]] = {
    "one-frame": _one_frame,
    "odd-641x481": _odd,
    "portrait-rotation": _portrait,
    "hevc-10-bit": _hevc_10bit,
    "variable-frame-rate": _vfr,
    "avi-without-presentation-times": lambda f: hostile.avi_with_b_frames(f / "b-frames.avi"),
}


@pytest.mark.parametrize("pipeline", list(PIPELINES))
@pytest.mark.parametrize("case", list(ACCEPTED))
def test_an_awkward_video_gives_a_correct_output(
    case: str, pipeline: str, api: TestClient, farm: Farm, corpus: Path, tmp_path: Path
) -> None:
    folder = corpus / f"{case}-{pipeline}"
    folder.mkdir(exist_ok=True)
    clip = ACCEPTED[case](folder)
    job_id = submit(api, clip, {**PIPELINES[pipeline], "chunk_frames": 20})
    body = wait_finished(api, job_id, farm)
    assert body["status"] == "succeeded", body
    output = download(api, job_id, tmp_path / "out.mp4")

    src, out = probe(clip), probe(output)
    assert (out.width, out.height) == (src.width, src.height), "the output is not shown the way the input is"
    assert out.rotation == 0, "the output should be upright in its pixels, not by a header"
    assert out.pix_fmt in {"yuv420p", "yuv444p"}
    assert_frames_match(read_frames(output), read_frames(clip))
    assert len(frame_times(output)) == len(frame_times(clip))
    assert abs(out.duration - src.duration) <= 1 / src.fps_value + 1e-3
    assert ("audio" in stream_info(output)) == src.has_audio


# -- file names -------------------------------------------------------------------------------------------------

NAMES = {
    "path-traversal": "../../../../etc/passwd.mp4",
    "windows-traversal": "..\\..\\Windows\\System32\\clip.mp4",
    "absolute-path": "/var/lib/postgresql/clip.MP4",
    "unicode": "vidéo de l'été 🎬 日本語.mp4",
    "spaces": "  my   holiday clip  .mp4",
    "no-extension": "clip",
    "lying-extension": "clip.m3u8",
}


@pytest.mark.parametrize("case", list(NAMES))
def test_a_file_name_is_only_ever_a_label(
    case: str, api: TestClient, farm: Farm, settings: Settings, tmp_path: Path
) -> None:
    name = NAMES[case]
    clip = make_clip(tmp_path / "clip.mp4", seconds=1, size="160x90")
    image = _still(tmp_path / "image.png")
    files = [
        ("target", (name, clip.read_bytes(), "video/mp4")),
        ("source", ("../" + name.rsplit(".", 1)[0] + ".png", image.read_bytes(), "image/png")),
    ]
    response = api.post("/v1/jobs", files=files, data={"options": json.dumps(LOSSLESS)})
    assert response.status_code == 202, response.text
    body = response.json()
    assert body["target_name"] == name
    job_id = body["id"]

    root = Path(settings.storage_url.removeprefix("file://"))
    inputs = root / "jobs" / job_id / "input"
    stored = sorted(p.relative_to(inputs).as_posix() for p in inputs.rglob("*") if p.is_file())
    assert stored == ["source-0.png", "target.mp4"], "names and extensions chosen by the server from the content"
    assert all(p.resolve().is_relative_to(root.resolve()) for p in root.rglob("*"))

    assert wait_finished(api, job_id, farm)["status"] == "succeeded"
    response = api.get(f"/v1/jobs/{job_id}/output")
    assert response.status_code == 200
    disposition = response.headers["content-disposition"]
    assert disposition.isascii() and "/" not in disposition and "\\" not in disposition, disposition


def _two_rates(folder: Path) -> Path:
    """Two seconds at 30 fps, then two at 10 fps: a phone or a screen recorder dropping its rate."""
    path = folder / "two-rates.mp4"
    _ffmpeg(
        "-f", "lavfi", "-i", "testsrc2=size=320x180:rate=30:duration=2",
        "-f", "lavfi", "-i", "testsrc2=size=320x180:rate=10:duration=2",
        "-filter_complex", "[0:v][1:v]concat=n=2:v=1[v]", "-map", "[v]", "-fps_mode", "vfr",
        "-c:v", "libx264", "-preset", "veryfast", "-pix_fmt", "yuv420p", str(path),
    )  # fmt: skip
    return path


@pytest.mark.parametrize("pipeline", list(PIPELINES))
def test_a_variable_frame_rate_video_keeps_its_frame_times(
    api: TestClient, farm: Farm, corpus: Path, tmp_path: Path, pipeline: str
) -> None:
    clip = _two_rates(tmp_path)
    job_id = submit(api, clip, {**PIPELINES[pipeline], "chunk_frames": 20})
    assert wait_finished(api, job_id, farm)["status"] == "succeeded"
    times_in, times_out = frame_times(clip), frame_times(download(api, job_id, tmp_path / "out.mp4"))
    assert len(times_out) == len(times_in)
    worst = max(abs(a - b) for a, b in zip(times_in, times_out, strict=True))
    assert worst <= 0.5 / 30, f"frame times moved by up to {worst:.3f} s"
