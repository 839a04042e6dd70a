"""Where each video frame of a file sits in time, read from its packets (no decoding): the planner cuts
frame-exact chunks from it, and the stitch checks its output by it. Reads name their demuxers and protocols as
every read of a user's file does (:func:`shared.media.input_args`).
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from pathlib import Path

from shared.errors import MediaLimitError, UnreadableMediaError
from shared.media import TARGET_DEMUXERS, as_number, check_stderr, input_args
from shared.processes import FFPROBE, start


@dataclass(frozen=True)
class FrameScan:
    """The video frames of a file as its packets give them (see :func:`scan_frames`)."""

    times: list[float]  # presentation times (seconds) in display order
    keyframes: list[int]  # display indices of the keyframes
    untimed: int = 0  # packets without a presentation time: every frame was timed by its decode time instead
    dropped: int = 0  # packets without any time: left out

    @property
    def span(self) -> float:
        """Seconds from the first frame to the last."""
        return self.times[-1] - self.times[0] if self.times else 0.0


def frame_times(path: Path, *, declared: int | None = None, demuxer: str | None = None) -> list[float]:
    """Presentation times (seconds) of every video frame, in display order; see :func:`scan_frames`."""
    return scan_frames(path, declared=declared, demuxer=demuxer).times


def frame_index(
    path: Path, *, declared: int | None = None, demuxer: str | None = None
) -> tuple[list[float], list[int]]:
    """Presentation times of every video frame and the keyframes' display indices; see :func:`scan_frames`."""
    scan = scan_frames(path, declared=declared, demuxer=demuxer)
    return scan.times, scan.keyframes


SCAN_TIMEOUT = 1800.0


def scan_frames(
    path: Path,
    *,
    declared: int | None = None,
    demuxer: str | None = None,
    max_frames: int | None = None,
    max_seconds: float | None = None,
) -> FrameScan:
    """Presentation times (seconds) of every video frame in display order, and the display indices of the
    keyframes (where decoding can start), read from packets (no decoding) — what the file holds, whatever its
    header says.

    ffprobe's packet lines are read as they come and counted: past ``max_frames`` frames or ``max_seconds`` of
    frames the scan stops at once, so a hostile file costs the scan no more than the limits. Packets the demuxer
    marks as discarded (before an edit list's start) are not frames of the video. When some packets carry no
    presentation time (AVI with B-frames), every frame is timed by its decode time instead (``untimed``); a packet
    with no time at all is left out (``dropped``). ``declared`` is the frame count the header states: a file with
    fewer packets than that ends early — a truncated upload, whose header still describes the whole video.

    Raises:
        FfmpegError: ``ffmpeg_missing``: ffprobe is not installed.
        UnreadableMediaError: ``media_truncated``: fewer packets than ``declared``.
        MediaLimitError: ``too_many_frames`` / ``media_too_long``: the file holds more than a limit.
        MediaFormatError: the file is not in the whitelisted containers.
    """
    args = [FFPROBE, "-v", "error", "-select_streams", "v:0", "-show_entries", "packet=pts_time,dts_time,flags",
            "-of", "csv=p=0", *input_args(path, demuxer, (demuxer,) if demuxer else TARGET_DEMUXERS)]  # fmt: skip
    proc, stderr = start(args, name="ffprobe-stderr", stdout=True)
    assert proc.stdout is not None
    timer = threading.Timer(SCAN_TIMEOUT, proc.kill)
    timer.daemon = True
    timer.start()
    packets: list[tuple[float | None, float | None, bool]] = []
    discarded = 0
    low, high = math.inf, -math.inf
    try:
        for raw in proc.stdout:
            line = raw.decode(errors="replace").strip()
            if not line:
                continue
            pts_text, dts_text, flags = (line.split(",") + ["", "", ""])[:3]
            if "D" in flags:
                discarded += 1  # counted against the header, but not a frame
                continue
            pts, dts = as_number(pts_text), as_number(dts_text)
            packets.append((pts, dts, "K" in flags))
            if max_frames is not None and len(packets) > max_frames:
                raise MediaLimitError(
                    f"the video holds more than {max_frames} frames, the limit", code="too_many_frames"
                )
            moment = pts if pts is not None else dts
            if moment is not None:
                low, high = min(low, moment), max(high, moment)
                if max_seconds is not None and high - low > max_seconds:
                    raise MediaLimitError(
                        f"the video holds more than {max_seconds:.0f}s of frames, the limit", code="media_too_long"
                    )
    finally:
        if proc.poll() is None:
            proc.kill()
        code = proc.wait()
        timer.cancel()
        proc.stdout.close()
    check_stderr(stderr.text())
    if code != 0 and not packets:
        raise UnreadableMediaError("not a readable media file")
    if declared is not None and len(packets) + discarded < declared:
        raise UnreadableMediaError(
            f"the file ends after {len(packets) + discarded} of the {declared} frames its header declares (truncated?)",
            code="media_truncated",
        )
    return _index(packets)


def _index(packets: list[tuple[float | None, float | None, bool]]) -> FrameScan:
    untimed = sum(1 for pts, _, _ in packets if pts is None)
    by_decode = untimed > 0  # one clock for every frame: mixing the two would misplace the ones with both
    timed: list[tuple[float, bool]] = []
    dropped = 0
    for pts, dts, key in packets:
        moment = dts if by_decode else pts
        if moment is None:
            dropped += 1
            continue
        timed.append((moment, key))
    timed.sort()
    return FrameScan(
        times=[t for t, _ in timed],
        keyframes=[i for i, (_, key) in enumerate(timed) if key],
        untimed=untimed,
        dropped=dropped,
    )
