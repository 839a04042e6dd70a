"""Source audio for lip_syncer tests: spoken-like pink-noise bursts, in the containers the intake takes."""

from __future__ import annotations

import subprocess
from pathlib import Path

# codec arguments for each container the tests write
_CODECS = {
    ".wav": ["-c:a", "pcm_s16le"],
    ".flac": ["-c:a", "flac"],
    ".mp3": ["-c:a", "libmp3lame", "-b:a", "64k"],
    ".m4a": ["-c:a", "aac", "-b:a", "64k"],
    ".ogg": ["-c:a", "libopus", "-b:a", "32k"],
}


def make_speech(
    path: Path, *, seconds: float, burst: float = 0.3, gap: float = 0.3, rate: int = 48_000, channels: int = 1
) -> Path:
    """Pink noise in bursts of ``burst`` seconds, with digital silence of ``gap`` seconds between them (the first
    burst starts at 0): the shape of speech, syllables and pauses, in the container ``path``'s extension names."""
    period = burst + gap
    gate = f"volume='lt(mod(t\\,{period})\\,{burst})':eval=frame"
    subprocess.run(
        ["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i",
         f"anoisesrc=color=pink:sample_rate={rate}:amplitude=0.4:duration={seconds}:seed=7,"
         f"asetnsamples=n=48,{gate}", "-ac", str(channels), *_CODECS[path.suffix], str(path)],
        check=True,
    )  # fmt: skip
    return path
