"""Hardware encoders and decoders are probed, not assumed: what this machine's ffmpeg lists but cannot drive is
not used, and a job that asked for it is still encoded, told why."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from shared.options import JobOptions
from shared.settings import Settings
from tests.support.faces import cpu_settings
from tests.support.media import make_clip
from workers.degradations import DegradationCollector
from workers.doctor import diagnose
from workers.local import run_local
from workers.video import codecs
from workers.video.ffmpeg import decode_args

NO_GPU = pytest.mark.skipif(
    torch.cuda.is_available(), reason="about a machine without a GPU (this one may decode on it)"
)

LISTING = """Encoders:
 V..... = Video
 ------
 V....D libx264              libx264 H.264 / AVC / MPEG-4 AVC (codec h264)
 V....D h264_nvenc           NVIDIA NVENC H.264 encoder (codec h264)
 V....D hevc_vaapi           H.265/HEVC (VAAPI) (codec hevc)
 V..... h264_qsv             H.264 (Intel Quick Sync Video acceleration) (codec h264)
 A....D aac                  AAC (Advanced Audio Coding)
"""


def test_the_candidates_are_the_hardware_encoders_ffmpeg_lists() -> None:
    assert codecs.listed_encoders(LISTING) == ["h264_nvenc", "hevc_vaapi"]


def test_probe_commands_encode_and_decode_one_generated_frame() -> None:
    nvenc = codecs.encode_probe_args("h264_nvenc")
    assert nvenc[nvenc.index("-c:v") + 1] == "h264_nvenc" and nvenc[nvenc.index("-frames:v") + 1] == "1"
    assert "lavfi" in nvenc and nvenc[-3:] == ["-f", "null", "-"]
    vaapi = codecs.encode_probe_args("hevc_vaapi")
    assert vaapi[vaapi.index("-vaapi_device") + 1] == codecs.VAAPI_DEVICE and "format=nv12,hwupload" in vaapi
    decode = codecs.decode_probe_args(Path("sample.mp4"))
    assert decode[decode.index("-hwaccel") + 1] == "cuda" and decode.index("-hwaccel") < decode.index("-i")


def test_the_frame_pipe_decodes_through_hwaccel_only_when_asked() -> None:
    assert "-hwaccel" not in decode_args(Path("in.mp4"), 0, 10, "yuv420p")
    args = decode_args(Path("in.mp4"), 2.0, 10, "yuv420p", hwaccel="cuda")
    assert args[args.index("-hwaccel") + 1] == "cuda" and args.index("-hwaccel") < args.index("-i")


@NO_GPU
def test_this_machine_lists_nvenc_but_the_probe_finds_no_hardware_encoder_or_decoder() -> None:
    listed = subprocess.run(["ffmpeg", "-hide_banner", "-encoders"], capture_output=True, text=True, check=True)
    support = codecs.probe()
    assert support.listed == tuple(codecs.listed_encoders(listed.stdout))
    assert support.working == (), "no GPU or VA-API device on this machine"
    assert set(support.failed) == set(support.listed)
    # an encoder is not even tried without the device node it opens (ffmpeg would only fail to open it)
    vaapi = [name for name in support.listed if name.endswith("_vaapi")]
    missing = f"no VA-API device ({codecs.VAAPI_DEVICE} is missing)"
    assert vaapi and all(support.failed[name] == missing for name in vaapi)
    nvenc = [name for name in support.listed if name.endswith("_nvenc")]
    assert nvenc and all(support.failed[name].startswith("no NVIDIA device (none of /dev/nvidia") for name in nvenc)
    assert support.hwaccel is None and "software decoder" in support.decode_reason
    assert "no NVIDIA device" in support.decode_reason
    assert support.works("libx264") and not support.works("h264_nvenc")


@NO_GPU
@pytest.mark.parametrize("kind", ["encode", "decode"])
def test_a_probe_run_where_its_device_is_missing_fails_with_ffmpegs_cause(kind: str, tmp_path: Path) -> None:
    """What the probe would say had it run NVENC or CUDA here: ffmpeg's first line, the cause, without its prefix
    (the reason the worker logs and the doctor shows on a machine with the device node but no working driver)."""
    sample = tmp_path / "sample.mp4"
    assert codecs._try(codecs.sample_args(sample)) is None
    args = codecs.encode_probe_args("h264_nvenc") if kind == "encode" else codecs.decode_probe_args(sample)
    reason = codecs._try(args)
    assert reason and not reason.startswith("["), reason
    assert "cuda" in reason.lower() or "nvenc" in reason.lower() or "device" in reason.lower(), reason


@NO_GPU
def test_doctor_shows_what_the_probe_found(tmp_path: Path) -> None:
    ffmpeg = dict(diagnose(cpu_settings(tmp_path, torch_compile_cache_dir=tmp_path / "cache")).sections["ffmpeg"])
    assert ffmpeg["encoders that work"].startswith("none")
    assert ffmpeg["decode"].startswith("software decoder (-hwaccel cuda:")
    for name in codecs.probed().listed:
        assert f"{name} fails" in ffmpeg


def _codec(path: Path) -> str:
    out = subprocess.run(
        ["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries", "stream=codec_name,nb_frames",
         "-of", "json", str(path)],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    stream = json.loads(out)["streams"][0]
    return f"{stream['codec_name']} {stream['nb_frames']}"


def _degradations(code: str) -> float:
    for family in DegradationCollector().collect():
        for sample in family.samples:
            if sample.labels.get("code") == code:
                return sample.value
    return 0.0


@pytest.mark.parametrize(
    ("processors", "encoder", "codec"),
    [(["passthrough"], "h264_nvenc", "h264"), (["face_blur"], "hevc_nvenc", "hevc")],
    ids=["transcode-path", "frame-pipe-path"],
)
def test_a_job_that_asks_for_a_hardware_encoder_this_worker_lacks_is_encoded_in_software_and_told(
    processors: list[str], encoder: str, codec: str, data_dir: Path, tmp_path: Path
) -> None:
    models = tmp_path / "models"
    models.mkdir()
    shutil.copy(data_dir / "models" / "yunet_2023mar.onnx", models / "yunet_2023_mar.onnx")
    settings = Settings(
        environment="development", family="cpu", models_dir=models, model_cache_dir=tmp_path / "model-cache",
        model_base_urls=[], allow_model_hash_mismatch=True, work_dir=tmp_path / "work",
    )  # fmt: skip
    clip = make_clip(tmp_path / "in.mp4", seconds=1, size="320x240")
    before = _degradations("encoder_unavailable")
    result = run_local(
        target=clip, sources=[], output=tmp_path / "out.mp4",
        options=JobOptions.model_validate({"processors": processors, "encoder": {"encoder": encoder}}),
        workers=1, settings=settings,
    )  # fmt: skip
    assert result.status == "succeeded", result
    assert _codec(tmp_path / "out.mp4") == f"{codec} 30"
    warned = dict(result.warnings)
    assert "encoder_unavailable" in warned and encoder in warned["encoder_unavailable"]
    assert codecs.SOFTWARE_FALLBACK[encoder] in warned["encoder_unavailable"]
    assert _degradations("encoder_unavailable") > before
