"""A worker's self-test at start: encode a few frames of ffmpeg's own generator the way a chunk is encoded.

A quarantined worker (``shared.worker_health``) that restarts and passes it is released: whatever broke its renders
(a broken ffmpeg build, a full scratch disk) is fixed. The frames come from ffmpeg's generator, nothing of a user's;
the output is named as a chunk's encoded file is, in the worker's scratch folder, so it takes the path a chunk's
encode takes.
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

from shared.errors import FfmpegError
from shared.processes import FFMPEG, capture

TIMEOUT = 30.0


def self_test(scratch: Path) -> str | None:
    """``None`` when the test encode worked, else why not (ffmpeg's last line of stderr)."""
    scratch.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=scratch, prefix="selftest-") as tmp:
        out = Path(tmp) / "00000.mp4"
        args = [
            FFMPEG, "-hide_banner", "-nostdin", "-loglevel", "error", "-y", "-f", "lavfi",
            "-i", "testsrc2=s=64x64:r=8", "-frames:v", "4", "-c:v", "libx264", "-preset", "ultrafast",
            "-pix_fmt", "yuv420p", str(out),
        ]  # fmt: skip
        try:
            done = capture(args, timeout=TIMEOUT)
        except (OSError, FfmpegError, subprocess.TimeoutExpired) as error:
            return str(error)[:300]
        if done.returncode != 0 or not out.is_file() or out.stat().st_size == 0:
            lines = done.stderr.decode(errors="replace").strip().splitlines()
            return (lines[-1] if lines else f"exit {done.returncode}")[:300]
    return None
