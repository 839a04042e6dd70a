"""Nothing degrades silently: each way a job can get worse without failing becomes a ``warning`` event the user
sees (API, event stream, ``swapfarm status``), a log line and ``swapfarm_degradations_total{code}`` — through the
real API, Postgres, Redis, worker processes and ffmpeg. Faults come from the process boundaries the farm owns
(ffmpeg found on PATH, the storage's files) or from this machine as it is (no GPU, no MPS)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from shared.broker import make_celery
from shared.options import JobOptions
from shared.settings import Settings
from tests.integration.conftest import BLUR, download, events_of, submit, wait_finished, with_face_models
from tests.support import hostile
from tests.support.farm import Farm, settings_env, wait_for
from tests.support.live import live_api
from tests.support.media import assert_frames_match, make_clip, read_frames
from tests.support.replicas import arcface_w600k_r50, constant_colour_swapper, install_replica
from tests.support.services import free_port
from workers.local import run_local
from workers.video.frame_scan import frame_times

pytestmark = pytest.mark.integration

PASSTHROUGH: dict[str, Any] = {"processors": ["passthrough"], "encoder": {"preset": "ultrafast"}}


def _warnings(api: TestClient, job_id: str) -> dict[str, str]:
    return {e["error_code"]: e["message"] for e in events_of(api, job_id, "warning")}


def _serving(port: int) -> bool:
    """Whether a worker's metrics endpoint answers yet: a GPU worker's control consumer can answer the broker's
    inspect before the ``worker_ready`` signal starts its metrics server (a CI run was refused in between)."""
    try:
        httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10)
    except httpx.ConnectError:
        return False
    return True


def _degradations(port: int) -> dict[str, float]:
    """``swapfarm_degradations_total`` by code, from a worker's metrics endpoint."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    found: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("swapfarm_degradations_total{"):
            code = line.split('code="', 1)[1].split('"', 1)[0]
            found[code] = float(line.rsplit(" ", 1)[1])
    return found


# -- variable frame times that cannot be kept -------------------------------------------------------------------

# ffmpeg as the stitcher finds it on PATH (the process boundary the farm owns): it writes the concatenated video
# with its index first (faststart), the one layout whose timing cannot be rewritten in place. Everything else runs
# the real ffmpeg unchanged.
_FASTSTART_FFMPEG = """#!{python}
import os, sys
args = sys.argv[1:]
if "concat" in args and "-movflags" not in args:
    args = args[:-1] + ["-movflags", "+faststart", args[-1]]
os.execv({ffmpeg!r}, [{ffmpeg!r}, *args])
"""


class TestVariableTimingLost:
    @pytest.fixture
    def settings(self, settings: Settings) -> Settings:
        return settings.model_copy(update={"worker_metrics_port": free_port()})

    def test_a_stitch_that_cannot_keep_variable_frame_times_says_so(
        self, farm: Farm, api: TestClient, settings: Settings, tmp_path: Path
    ) -> None:
        real = shutil.which("ffmpeg")
        assert real is not None
        shim = tmp_path / "bin"
        shim.mkdir()
        (shim / "ffmpeg").write_text(_FASTSTART_FFMPEG.format(python=sys.executable, ffmpeg=real))
        (shim / "ffmpeg").chmod(0o755)
        clip = make_clip(tmp_path / "vfr.mp4", seconds=3, vfr=True)
        farm.worker("w1", env={"PATH": f"{shim}:{Path(real).parent}"})
        job_id = submit(api, clip, {**PASSTHROUGH, "chunk_frames": 30})
        body = wait_finished(api, job_id, farm)
        assert body["status"] == "succeeded", body  # every frame is there …
        assert len(frame_times(download(api, job_id, tmp_path / "out.mp4"))) == len(frame_times(clip))
        warnings = _warnings(api, job_id)  # … and the job says what it lost
        assert "vfr_timing_lost" in warnings and "constant" in warnings["vfr_timing_lost"], warnings
        assert "degraded (vfr_timing_lost)" in farm.log("w1")
        assert settings.worker_metrics_port is not None
        assert _degradations(settings.worker_metrics_port).get("vfr_timing_lost") == 1


# -- a GPU worker whose ONNX Runtime has no GPU provider ---------------------------------------------------------


class TestGpuProviderMissing:
    @pytest.fixture
    def settings(self, settings: Settings) -> Settings:
        return settings.model_copy(update={"worker_metrics_port": free_port()})

    def test_a_cuda_worker_without_the_cuda_provider_refuses_render_work_and_says_why(
        self, farm: Farm, settings: Settings
    ) -> None:
        # This machine's ONNX Runtime is the CPU build: a worker told it is a CUDA worker is in exactly that state.
        hostname = farm.worker("w1", env={"SWAPFARM_FAMILY": "cuda"})
        celery = make_celery(settings)
        try:
            replies = wait_for(
                lambda: celery.control.inspect(destination=[hostname], timeout=2).active_queues(),
                timeout=120,
                what="the worker answering",
            )
        finally:
            celery.close()
        assert isinstance(replies, dict)
        queues = {queue["name"] for queue in replies[hostname]}
        assert queues == {"control", "stitch"}, f"a CUDA worker rendering on the CPU would be silent: {queues}"
        log = farm.log("w1")
        assert "gpu_provider_missing" in log and "CUDAExecutionProvider" in log
        assert settings.worker_metrics_port is not None
        port = settings.worker_metrics_port
        counts = wait_for(
            lambda: _serving(port) and _degradations(port) or None, timeout=60, what="the worker's metrics"
        )
        assert counts == {"gpu_provider_missing": 1.0}


# -- torch on MPS that falls back to the CPU, and a source image with several faces -----------------------------


@pytest.fixture
def tiny_clip(tmp_path: Path) -> Path:
    """What the warnings of a face job are about is the worker and the source, not the target: a second of 64×64."""
    return make_clip(tmp_path / "tiny.mp4", seconds=1, size="64x64")


def _swap_settings(settings: Settings, data_dir: Path, folder: Path, **update: object) -> Settings:
    face = with_face_models(settings, data_dir, folder)
    assert face.models_dir is not None
    install_replica(arcface_w600k_r50(), "arcface_w600k_r50", face.models_dir)
    install_replica(constant_colour_swapper((0, 255, 0)), "inswapper_128_fp16", face.models_dir)
    return face.model_copy(update={"lease_seconds": 60, **update})


class TestMpsFallback:
    @pytest.fixture
    def settings(self, settings: Settings, data_dir: Path, tmp_path: Path) -> Settings:
        # A worker of the mps family on a machine without MPS, with the swapper on the torch engine.
        update = {"family": "mps", "engine": "torch", "torch_compile_mode": "eager"}
        return _swap_settings(settings, data_dir, tmp_path, **update)

    def test_torch_without_mps_running_on_the_cpu_is_a_warning_on_the_job(
        self, farm: Farm, api: TestClient, data_dir: Path, tiny_clip: Path
    ) -> None:
        farm.worker("w1")
        options = {"processors": ["face_swapper"], "family": "mps", "chunk_frames": 30}
        job_id = submit(api, tiny_clip, options, [data_dir / "media" / "s0.jpg"])
        body = wait_finished(api, job_id, farm, timeout=600)
        assert body["status"] == "succeeded", body
        warnings = _warnings(api, job_id)
        assert "mps_unavailable" in warnings and "CPU" in warnings["mps_unavailable"], warnings
        assert "degraded (mps_unavailable)" in farm.log("w1")


class TestSeveralSourceFaces:
    @pytest.fixture
    def settings(self, settings: Settings, data_dir: Path, tmp_path: Path) -> Settings:
        return _swap_settings(settings, data_dir, tmp_path, family="cpu")

    def test_a_source_image_with_several_faces_names_the_one_used(
        self, farm: Farm, api: TestClient, settings: Settings, data_dir: Path, tiny_clip: Path
    ) -> None:
        farm.worker("w1")
        options = {"processors": ["face_swapper"], "chunk_frames": 30}
        job_id = submit(api, tiny_clip, options, [data_dir / "media" / "group6.jpg"])
        assert wait_finished(api, job_id, farm)["status"] == "succeeded"
        message = _warnings(api, job_id).get("source_several_faces", "")
        assert "source image 1 shows" in message and "the largest was used" in message and "box x" in message
        assert "group6" not in message, "the client's file name is a label, the message names the source by number"
        assert "degraded (source_several_faces)" in farm.log("w1")
        with live_api(settings, farm.logs) as server:  # and `swapfarm status` shows it
            env = {**settings_env(settings), "SWAPFARM_API_URL": server.url, "COLUMNS": "200"}
            env["SWAPFARM_API_KEY"] = str(api.headers["Authorization"]).removeprefix("Bearer ")
            status = subprocess.run(
                [sys.executable, "-m", "cli", "status", job_id], env=env, capture_output=True, text=True, timeout=120
            )
        assert status.returncode == 0, status.stderr
        assert "warning source_several_faces: source image 1 shows" in status.stdout, status.stdout

    def test_swapfarm_run_prints_the_warnings_of_its_job(
        self, settings: Settings, data_dir: Path, tiny_clip: Path, tmp_path: Path
    ) -> None:
        result = run_local(
            target=tiny_clip,
            sources=[data_dir / "media" / "group6.jpg"],
            output=tmp_path / "out.mp4",
            options=JobOptions(processors=["face_swapper"], chunk_frames=30),
            workers=1,
            settings=settings,
        )
        assert result.status == "succeeded", result
        assert [code for code, _ in result.warnings] == ["source_several_faces"]


# -- packets without timestamps ---------------------------------------------------------------------------------


class TestUntimedPackets:
    @pytest.fixture
    def settings(self, settings: Settings, data_dir: Path, tmp_path: Path) -> Settings:
        return with_face_models(settings, data_dir, tmp_path)

    def test_packets_without_presentation_times_are_planned_by_decode_time_and_said_so(
        self, farm: Farm, api: TestClient, tmp_path: Path
    ) -> None:
        clip = hostile.avi_with_b_frames(tmp_path / "b-frames.avi")
        farm.worker("w1")
        job_id = submit(api, clip, {**BLUR, "chunk_frames": 20})
        body = wait_finished(api, job_id, farm)
        assert body["status"] == "succeeded", body
        assert body["progress"]["frames_total"] == 60, "no frame left out of the plan"
        assert body["chunks"]["total"] == 1, "decode times are no seek positions: one chunk, read from the start"
        assert_frames_match(read_frames(download(api, job_id, tmp_path / "out.mp4")), read_frames(clip))
        warnings = _warnings(api, job_id)
        assert "timestamps_missing" in warnings and "decode times" in warnings["timestamps_missing"], warnings


# -- files that cannot be deleted at expiry ---------------------------------------------------------------------


def _chattr(flag: str, path: Path) -> None:
    subprocess.run(["chattr", flag, str(path)], check=True, capture_output=True)


@pytest.fixture
def immutable() -> Iterator[list[Path]]:
    """Files made undeletable (``chattr +i``: even root cannot remove them) for a test; made deletable after."""
    marked: list[Path] = []
    yield marked
    for path in marked:
        subprocess.run(["chattr", "-i", str(path)], capture_output=True)


class TestExpiryFailure:
    @pytest.fixture
    def settings(self, settings: Settings) -> Settings:
        return settings.model_copy(update={"output_ttl_seconds": 1})

    def test_files_that_cannot_be_deleted_at_expiry_are_retried_and_the_job_expires_only_once_they_are_gone(
        self, farm: Farm, api: TestClient, settings: Settings, tmp_path: Path, immutable: list[Path]
    ) -> None:
        clip = make_clip(tmp_path / "tiny.mp4", seconds=1, size="64x64")
        farm.worker("w1")
        job_id = submit(api, clip, {**PASSTHROUGH, "chunk_frames": 30})
        assert wait_finished(api, job_id, farm)["status"] == "succeeded"
        output = Path(settings.storage_url.removeprefix("file://")) / "jobs" / job_id / "output.mp4"
        try:
            _chattr("+i", output)
        except (subprocess.CalledProcessError, FileNotFoundError):
            pytest.skip("chattr +i is not available on this filesystem")
        immutable.append(output)
        farm.beat()  # the reaper (it expires jobs) starts once the file is undeletable: a 1 s retention races nothing

        wait_for(lambda: "expiry_failed" in _warnings(api, job_id), timeout=120, what="a failed deletion reported")
        assert output.exists()
        assert api.get(f"/v1/jobs/{job_id}").json()["expired"] is False, "not expired while its files are there"

        _chattr("-i", output)
        wait_for(lambda: api.get(f"/v1/jobs/{job_id}").json()["expired"], timeout=120, what="the retried deletion")
        assert not output.parent.exists()
        assert [e["kind"] for e in events_of(api, job_id)][-1] == "expired"
