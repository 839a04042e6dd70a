"""Which hardware encoders and decoders work on this machine: probed once per worker process, never assumed.

ffmpeg lists the encoders it was built with, not the ones the machine can drive: a build with NVENC lists
``h264_nvenc`` on a host without an NVIDIA driver, and an H100/H200 has NVDEC but no NVENC at all. So at worker
start each candidate encoder that ffmpeg lists encodes one frame (:func:`encode_probe_args`), and ``-hwaccel cuda``
decodes one (:func:`decode_probe_args`); what succeeds is what the worker uses (:class:`CodecSupport`). A probe that
needs a device node the machine lacks (``/dev/dri/renderD128`` for VA-API, an NVIDIA one for NVENC and CUDA) is
not run: it fails, with that as its reason.

A job that asks for a hardware encoder this worker cannot drive is encoded by the software encoder of the same
codec (``h264_nvenc`` → ``libx264``, ``hevc_nvenc`` → ``libx265``) and told so: a ``warning`` event
``encoder_unavailable`` (:mod:`workers.degradations`: a log line and ``swapfarm_degradations_total`` too). Decoding
takes ``-hwaccel cuda`` where the probe decoded with it, the software decoder otherwise (``doctor`` shows which).
The command lines are pure functions, tested without running ffmpeg.
"""

from __future__ import annotations

import glob
import logging
import re
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from shared.errors import FfmpegError
from shared.options import EncoderOptions, JobOptions
from shared.processes import FFMPEG, capture
from workers import degradations
from workers.video.encoders import CANDIDATE_ENCODERS, SOFTWARE_FALLBACK

__all__ = [
    "CANDIDATE_ENCODERS",
    "SOFTWARE_FALLBACK",
    "CodecSupport",
    "decode_probe_args",
    "encode_probe_args",
    "listed_encoders",
    "probe",
    "probed",
    "usable_options",
]

logger = logging.getLogger(__name__)

VAAPI_DEVICE = "/dev/dri/renderD128"
NVIDIA_DEVICES = ("/dev/nvidia[0-9]*", "/dev/dxg")
"""The device nodes NVENC and ``-hwaccel cuda`` reach the GPU through: the driver's, or WSL's GPU bridge."""
HWACCEL = "cuda"
_BASE = [FFMPEG, "-hide_banner", "-nostdin", "-loglevel", "error", "-y"]
# One small frame from ffmpeg's own generator: nothing of a user's reaches a probe. NVENC wants at least 145x49.
_TEST_SOURCE = ["-f", "lavfi", "-i", "color=c=gray:s=256x256:r=1"]
PROBE_TIMEOUT = 20.0


@dataclass(frozen=True)
class CodecSupport:
    """What the probe found: ``listed`` hardware encoders, those that encoded a frame (``working``), why the
    others failed (``failed``: encoder → the cause ffmpeg gave), and the decode path (``hwaccel``: ``cuda`` or None
    for the software decoder) with the reason it was chosen."""

    listed: tuple[str, ...] = ()
    working: tuple[str, ...] = ()
    failed: dict[str, str] = field(default_factory=dict)
    hwaccel: str | None = None
    decode_reason: str = "not probed"

    def works(self, encoder: str) -> bool:
        return encoder not in SOFTWARE_FALLBACK and encoder not in CANDIDATE_ENCODERS or encoder in self.working


def listed_encoders(listing: str) -> list[str]:
    """The candidate hardware encoders named in the output of ``ffmpeg -encoders``, in listing order.

    Example::

        listed_encoders(" V....D h264_nvenc   NVIDIA NVENC H.264 encoder") == ["h264_nvenc"]
    """
    names = []
    for line in listing.splitlines():
        parts = line.split()
        if len(parts) >= 2 and re.fullmatch(r"V[.A-Z]{5}", parts[0]) and parts[1] in CANDIDATE_ENCODERS:
            names.append(parts[1])
    return names


def listing_of(*args: str, timeout: float = PROBE_TIMEOUT) -> str:
    """The output of an ffmpeg listing (``-encoders``, ``-decoders``, ``-hwaccels``, ``-version``).

    Raises:
        FfmpegError: ffmpeg is missing, or the listing failed (exited non-zero).
        subprocess.TimeoutExpired: it took longer than ``timeout`` seconds.
    """
    done = capture([FFMPEG, "-hide_banner", *args], timeout=timeout)
    if done.returncode != 0:
        raise FfmpegError(f"ffmpeg {' '.join(args)} exited with {done.returncode}", stderr=done.stderr.decode())
    return done.stdout.decode(errors="replace")


def encode_probe_args(encoder: str) -> list[str]:
    """Encode one generated frame with ``encoder`` and throw it away (VAAPI uploads it to its device first)."""
    if encoder.endswith("_vaapi"):
        upload = ["-vf", "format=nv12,hwupload"]
        return [*_BASE, "-vaapi_device", VAAPI_DEVICE, *_TEST_SOURCE, *upload, "-frames:v", "1", "-c:v", encoder,
                "-f", "null", "-"]  # fmt: skip
    return [*_BASE, *_TEST_SOURCE, "-frames:v", "1", "-pix_fmt", "yuv420p", "-c:v", encoder, "-f", "null", "-"]


def sample_args(output: Path) -> list[str]:
    """A one-frame H.264 file made by libx264, for the decode probe."""
    return [*_BASE, *_TEST_SOURCE, "-frames:v", "1", "-pix_fmt", "yuv420p", "-c:v", "libx264", str(output)]


def decode_probe_args(sample: Path, hwaccel: str = HWACCEL) -> list[str]:
    """Decode one frame of ``sample`` through ``-hwaccel`` (which, unlike a missing encoder, fails the whole
    decode when the device is not there) into system memory, as the frame pipe would."""
    return [*_BASE, "-hwaccel", hwaccel, "-i", str(sample), "-frames:v", "1", "-f", "null", "-"]


def _try(args: list[str]) -> str | None:
    """None when the command succeeded, else why not: ffmpeg's first line of stderr (the cause, e.g. ``Cannot load
    libcuda.so.1``; the lines after it say what failed because of it), without its ``[codec @ 0x…]`` prefix."""
    try:
        done = capture(args, timeout=PROBE_TIMEOUT)
    except (OSError, FfmpegError, subprocess.TimeoutExpired) as error:
        return str(error)
    if done.returncode == 0:
        return None
    lines = done.stderr.decode(errors="replace").strip().splitlines()
    return re.sub(r"^\[[^\]]*@ 0x[0-9a-f]+\] ", "", lines[0]) if lines else f"exit {done.returncode}"


def _without_device(name: str) -> str | None:
    """Why the encoder or hwaccel ``name`` cannot work here without running ffmpeg (VA-API on a machine without the
    render node it opens, NVENC or CUDA without an NVIDIA device node), or ``None``: then only a probe tells."""
    if name.endswith("_vaapi") and not Path(VAAPI_DEVICE).exists():
        return f"no VA-API device ({VAAPI_DEVICE} is missing)"
    if (name.endswith("_nvenc") or name == "cuda") and not any(map(glob.glob, NVIDIA_DEVICES)):
        return f"no NVIDIA device (none of {', '.join(NVIDIA_DEVICES)})"
    return None


def probe() -> CodecSupport:
    """Run the probes (in parallel: each is a short ffmpeg process) and return what works here."""
    try:
        listing = listing_of("-encoders", timeout=PROBE_TIMEOUT)
    except (OSError, FfmpegError, subprocess.SubprocessError) as error:
        return CodecSupport(decode_reason=f"ffmpeg is not usable: {error}")
    listed = listed_encoders(listing)
    # Each probe that cannot work without a device node this machine lacks is not run: a short ffmpeg process each,
    # at every worker start (about 0.4 CPU-s for the four of a machine without a GPU).
    decode_error = _without_device(HWACCEL)
    with tempfile.TemporaryDirectory(prefix="swapfarm-codecs-") as tmp, ThreadPoolExecutor(4) as pool:
        sample = Path(tmp) / "sample.mp4"
        made = pool.submit(_try, sample_args(sample)) if decode_error is None else None
        runnable = [name for name in listed if _without_device(name) is None]
        results = {name: _without_device(name) for name in listed}
        results.update(zip(runnable, pool.map(_try, [encode_probe_args(name) for name in runnable]), strict=True))
        if made is not None:
            sample_error = made.result()
            decode_error = _try(decode_probe_args(sample)) if sample_error is None else f"no sample: {sample_error}"
    working = tuple(name for name, error in results.items() if error is None)
    failed = {name: error for name, error in results.items() if error is not None}
    if decode_error is None:
        hwaccel, reason = HWACCEL, f"-hwaccel {HWACCEL} decoded a test frame"
    else:
        hwaccel, reason = None, f"software decoder (-hwaccel {HWACCEL}: {decode_error})"
    support = CodecSupport(tuple(listed), working, failed, hwaccel, reason)
    logger.info(
        "codec probe: hardware encoders working %s (listed %s); decode: %s",
        ", ".join(working) or "none", ", ".join(listed) or "none", reason,
    )  # fmt: skip
    return support


@cache
def probed() -> CodecSupport:
    """This process's probe, run on first use (a worker's runtime is built as it starts taking tasks)."""
    return probe()


def usable_options(options: JobOptions, support: CodecSupport) -> JobOptions:
    """``options`` with an encoder this worker can drive: the job's own, or — reported as the degradation
    ``encoder_unavailable`` — the software encoder of the same codec."""
    wanted = options.encoder.encoder
    if support.works(wanted):
        return options
    fallback = SOFTWARE_FALLBACK.get(wanted, "libx264")
    why = support.failed.get(wanted, "not built into this ffmpeg")
    degradations.report(
        "encoder_unavailable",
        f"the {wanted} encoder does not work on this worker ({why}); encoded with {fallback} instead",
    )
    encoder = EncoderOptions.model_validate(options.encoder.model_dump() | {"encoder": fallback})
    return options.model_copy(update={"encoder": encoder})
