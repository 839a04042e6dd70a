"""A lip_syncer job's output carries its source audio: cut or padded with silence to the video's length (an
``audio_fitted`` event says which, and by how much), the target's own audio dropped — or, with
``lip_syncer.keep_target_audio``, mixed under it, ducked (a side-chain compressor lowers the target while the source
sounds)."""

from __future__ import annotations

from pathlib import Path

from shared.audio import AudioInfo, audio_input_args
from shared.processes import FFMPEG, run

RATE = 48_000
TIMEOUT = 3600.0
# below this, the two lengths are the same (a quarter of a 48 kHz AAC frame)
SAME = 0.005


def fit_message(audio: AudioInfo, seconds: float) -> str | None:
    """What fitting ``audio`` to a ``seconds``-long video does, for the job's log; ``None``: nothing to say."""
    difference = audio.duration - seconds
    if abs(difference) < SAME:
        return None
    if difference > 0:
        return f"the source audio ({audio.duration:.3f}s) is cut by {difference:.3f}s to the video's {seconds:.3f}s"
    return (
        f"the source audio ({audio.duration:.3f}s) is padded with {-difference:.3f}s of silence to the video's "
        f"{seconds:.3f}s"
    )


def unmixed_message(*, keep_target: bool, has_target: bool) -> str | None:
    """Why the target's audio is not mixed under the source audio although the job asked for it, or ``None``:
    the stitcher reports it as the ``target_audio_missing`` degradation (never silently)."""
    if keep_target and not has_target:
        return (
            "lip_syncer.keep_target_audio asked to mix the target's audio under the source audio, but the target "
            "has no audio: the output carries the source audio alone"
        )
    return None


def replace_audio(
    stitched: Path,
    audio: Path,
    info: AudioInfo,
    seconds: float,
    out: Path,
    *,
    keep_target: bool,
    has_target: bool,
    muxer: str = "mp4",
) -> None:
    """Write ``out`` (in ``muxer``, the job's container): ``stitched``'s video (copied, its metadata kept) with the
    source ``audio`` (its probed demuxer forced) fitted to ``seconds``, and ``stitched``'s own audio ducked under it
    where ``keep_target`` asks and there is one."""
    fit = f"aresample={RATE},atrim=end={seconds:.6f},apad=whole_dur={seconds:.6f}"
    if keep_target and has_target:
        graph = (
            f"[1:a:0]{fit},asplit=2[voice][key];[0:a:0]aresample={RATE},{fit.split(',', 1)[1]}[under];"
            "[under][key]sidechaincompress=threshold=0.03:ratio=8:attack=20:release=400[ducked];"
            "[voice][ducked]amix=inputs=2:duration=first:normalize=0[a]"
        )
    else:
        graph = f"[1:a:0]{fit}[a]"
    run(
        [FFMPEG, "-v", "error", "-nostdin", "-y", "-protocol_whitelist", "file", "-i", f"file:{stitched}",
         *audio_input_args(audio, info.demuxer), "-filter_complex", graph, "-map", "0:v:0", "-map", "[a]",
         "-map_metadata", "0", "-c:v", "copy", "-c:a", "aac", "-b:a", "192k",
         "-movflags", "+faststart+use_metadata_tags", "-f", muxer, f"file:{out}"],
        what="adding the source audio", timeout=TIMEOUT,
    )  # fmt: skip
