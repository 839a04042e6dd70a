"""Giving a stitched MP4's video frames the input's presentation times.

Chunks are encoded at a constant rate, so a variable-frame-rate input keeps every frame but loses its timing.
The stitcher concatenates the chunks into an MP4 whose index (``moov``) follows its media data (no faststart),
then :func:`retime_video` rewrites the video track's sample timing in that index: ``stts`` (decode durations),
``ctts`` (composition offsets, for B-frames), the edit list, and the durations in ``mdhd``, ``tkhd`` and
``mvhd``. Sample sizes and offsets are untouched, and since the index comes after the media data, changing its
size moves no sample. A later ``-c copy`` remux writes the final (faststart) file.

Frame ``k`` in display order gets ``times[k] - times[0]`` (rounded to the track's timescale); decode time ``i``
is the ``i``-th presentation time, and a constant composition shift (removed again by the edit list) keeps every
composition offset non-negative (``ctts`` version 0, as FFmpeg writes it). Only the index is read into memory.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import BinaryIO

# Boxes whose payload is a list of boxes on the way to the sample tables.
_CONTAINERS = frozenset({b"moov", b"trak", b"mdia", b"minf", b"stbl", b"edts"})


class Mp4TimingError(ValueError):
    """The file is not an MP4 whose video timing can be rewritten this way (or the frame count differs)."""


def follows_rate(times: Sequence[float], fps: str | Fraction) -> bool:
    """Whether frames at ``times`` (seconds, sorted) sit on a constant ``fps`` grid from the first frame.

    That grid is where a constant-rate encode puts them. A frame may be off by up to a millisecond (a quarter
    interval at high rates): containers with millisecond timestamps round a 29.97 fps grid by half of that.
    """
    rate = Fraction(fps)
    if rate <= 0:
        raise ValueError(f"not a frame rate: {fps}")
    if not times:
        return True
    tolerance = min(0.001, 0.25 / float(rate))
    start = times[0]
    step_num, step_den = rate.denominator, rate.numerator  # one frame interval, in seconds
    return all(abs((t - start) - k * step_num / step_den) <= tolerance for k, t in enumerate(times))


def shown_seconds(times: Sequence[float], fps: str) -> Fraction | float:
    """How long frames at ``times`` last as stitched: on the constant grid, a frame interval each; else from the
    first to the last, and the last as long as the interval before it."""
    if not times or follows_rate(times, fps):
        return Fraction(len(times)) / Fraction(fps)
    last = times[-1] - times[-2] if len(times) > 1 else float(1 / Fraction(fps))
    return times[-1] - times[0] + last


@dataclass(frozen=True)
class SampleTiming:
    """A video track's new timing, in its media timescale, samples in decode order."""

    durations: list[int]  # stts: decode time to the next sample
    offsets: list[int]  # ctts: composition minus decode time, all >= 0
    shift: int  # the edit list's media time: the first frame's composition time, shown at 0
    span: int  # from the first frame shown to the end of the last one


def plan_timing(composition: Sequence[int], ticks: Sequence[int], last_duration: int) -> SampleTiming:
    """New timing for samples whose present composition times (decode order) are ``composition``.

    Display order stays as it is (samples ranked by composition time); the sample shown ``k``-th gets
    presentation time ``ticks[k]`` (strictly increasing, from 0) and the last one lasts ``last_duration``.
    """
    n = len(composition)
    if n != len(ticks):
        raise Mp4TimingError(f"the video has {n} frames, {len(ticks)} frame times were given")
    if n == 0:
        return SampleTiming([], [], 0, 0)
    if ticks[0] != 0 or any(b <= a for a, b in zip(ticks, ticks[1:], strict=False)) or last_duration < 1:
        raise ValueError("ticks must start at 0 and increase; the last duration must be positive")
    order = sorted(range(n), key=lambda i: (composition[i], i))
    shown = [0] * n  # each sample's new presentation time, decode order
    for rank, sample in enumerate(order):
        shown[sample] = ticks[rank]
    # Decode time i is the i-th presentation time (strictly increasing); the shift makes decode <= composition.
    shift = max(0, max(ticks[i] - shown[i] for i in range(n)))
    durations = [b - a for a, b in zip(ticks, ticks[1:], strict=False)] + [last_duration]
    offsets = [shown[i] + shift - ticks[i] for i in range(n)]
    return SampleTiming(durations, offsets, shift, ticks[-1] + last_duration)


def to_ticks(times: Sequence[float], timescale: int) -> list[int]:
    """``times`` (seconds, sorted) from the first as whole ``timescale`` units, nudged to strictly increase."""
    if not times:
        return []
    start = times[0]
    ticks: list[int] = []
    for t in times:
        tick = round((t - start) * timescale)
        ticks.append(max(tick, ticks[-1] + 1) if ticks else 0)
    return ticks


# -- boxes ------------------------------------------------------------------------------------------------------


@dataclass
class _Box:
    kind: bytes
    payload: bytes = b""
    children: list[_Box] | None = None

    def child(self, kind: bytes) -> _Box | None:
        return next((c for c in self.children or [] if c.kind == kind), None)

    def need(self, kind: bytes) -> _Box:
        found = self.child(kind)
        if found is None:
            raise Mp4TimingError(f"no {kind.decode()} box in {self.kind.decode()}")
        return found


def _parse(data: bytes) -> list[_Box]:
    boxes: list[_Box] = []
    pos = 0
    while pos < len(data):
        if len(data) - pos < 8:
            raise Mp4TimingError("truncated box header")
        size, kind = struct.unpack_from(">I4s", data, pos)
        header = 8
        if size == 1:
            if len(data) - pos < 16:
                raise Mp4TimingError("truncated box header")
            (size,) = struct.unpack_from(">Q", data, pos + 8)
            header = 16
        elif size == 0:
            size = len(data) - pos
        if size < header or pos + size > len(data):
            raise Mp4TimingError(f"bad size for box {kind!r}")
        body = data[pos + header : pos + size]
        boxes.append(_Box(kind, children=_parse(body)) if kind in _CONTAINERS else _Box(kind, body))
        pos += size
    return boxes


def _serialize(boxes: Sequence[_Box]) -> bytes:
    out = bytearray()
    for box in boxes:
        body = _serialize(box.children) if box.children is not None else box.payload
        if len(body) + 8 > 0xFFFFFFFF:
            out += struct.pack(">I4sQ", 1, box.kind, len(body) + 16)
        else:
            out += struct.pack(">I4s", len(body) + 8, box.kind)
        out += body
    return bytes(out)


def _version(box: _Box) -> int:
    if len(box.payload) < 4:
        raise Mp4TimingError(f"{box.kind.decode()} box too short")
    return box.payload[0]


def _read_runs(box: _Box, signed: bool) -> list[tuple[int, int]]:
    """``stts`` / ``ctts`` entries: (sample count, value)."""
    (count,) = struct.unpack_from(">I", box.payload, 4)
    if len(box.payload) < 8 + 8 * count:
        raise Mp4TimingError(f"{box.kind.decode()} box too short")
    fmt = ">Ii" if signed else ">II"
    return [struct.unpack_from(fmt, box.payload, 8 + 8 * i) for i in range(count)]


def _runs(values: Sequence[int]) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    for value in values:
        if runs and runs[-1][1] == value:
            runs[-1] = (runs[-1][0] + 1, value)
        else:
            runs.append((1, value))
    return runs


def _table(runs: Sequence[tuple[int, int]]) -> bytes:
    return struct.pack(">II", 0, len(runs)) + b"".join(struct.pack(">II", c, v) for c, v in runs)


def _timescale_and_duration(box: _Box) -> tuple[int, int, int]:
    """(timescale, offset of the duration field, its width) of an ``mdhd`` or ``mvhd`` box."""
    if _version(box) == 1:
        return struct.unpack_from(">I", box.payload, 20)[0], 24, 8
    return struct.unpack_from(">I", box.payload, 12)[0], 16, 4


def _with_field(payload: bytes, offset: int, width: int, value: int) -> bytes:
    if value >= 1 << (8 * width):
        raise Mp4TimingError("duration too large for its box")
    return payload[:offset] + value.to_bytes(width, "big") + payload[offset + width :]


def _tkhd_duration(tkhd: _Box) -> tuple[int, int]:
    return (28, 8) if _version(tkhd) == 1 else (20, 4)


def _video_track(moov: _Box) -> _Box:
    tracks = [t for t in moov.children or [] if t.kind == b"trak"]
    video = [t for t in tracks if t.need(b"mdia").need(b"hdlr").payload[8:12] == b"vide"]
    if len(video) != 1:
        raise Mp4TimingError(f"expected one video track, found {len(video)}")
    return video[0]


def _composition_times(stbl: _Box) -> list[int]:
    """Each sample's composition time (decode order), from ``stts`` and ``ctts``."""
    decode: list[int] = []
    clock = 0
    for count, delta in _read_runs(stbl.need(b"stts"), signed=False):
        for _ in range(count):
            decode.append(clock)
            clock += delta
    ctts = stbl.child(b"ctts")
    if ctts is None:
        return decode
    offsets = [value for count, value in _read_runs(ctts, signed=_version(ctts) == 1) for _ in range(count)]
    if len(offsets) != len(decode):
        raise Mp4TimingError("ctts and stts disagree on the sample count")
    return [d + o for d, o in zip(decode, offsets, strict=True)]


def retime_moov(moov_bytes: bytes, times: Sequence[float]) -> bytes:
    """A ``moov`` box whose video track shows frame ``k`` at ``times[k] - times[0]``; see the module doc."""
    boxes = _parse(moov_bytes)
    if len(boxes) != 1 or boxes[0].kind != b"moov":
        raise Mp4TimingError("not a moov box")
    moov = boxes[0]
    if moov.child(b"mvex") is not None:
        raise Mp4TimingError("fragmented MP4s are not supported")
    trak = _video_track(moov)
    mdia = trak.need(b"mdia")
    mdhd = mdia.need(b"mdhd")
    stbl = mdia.need(b"minf").need(b"stbl")
    timescale, mdhd_at, mdhd_width = _timescale_and_duration(mdhd)
    if timescale <= 0:
        raise Mp4TimingError("the video track has no timescale")
    composition = _composition_times(stbl)
    ticks = to_ticks(times, timescale)
    if len(ticks) != len(composition):
        raise Mp4TimingError(f"the video has {len(composition)} frames, {len(ticks)} frame times were given")
    if not ticks:
        return moov_bytes
    last = ticks[-1] - ticks[-2] if len(ticks) > 1 else max(1, round(timescale / 25))
    timing = plan_timing(composition, ticks, last)

    children = stbl.children or []
    at = next(i for i, c in enumerate(children) if c.kind == b"stts")
    children[at] = _Box(b"stts", _table(_runs(timing.durations)))
    children[:] = [c for c in children if c.kind != b"ctts"]
    if any(timing.offsets):
        children.insert(at + 1, _Box(b"ctts", _table(_runs(timing.offsets))))
    mdhd.payload = _with_field(mdhd.payload, mdhd_at, mdhd_width, sum(timing.durations))

    mvhd = moov.need(b"mvhd")
    movie_scale, mvhd_at, mvhd_width = _timescale_and_duration(mvhd)
    span = round(Fraction(timing.span * movie_scale, timescale))
    if span <= 0xFFFFFFFF and timing.shift <= 0x7FFFFFFF:  # one edit: the whole track, at rate 1
        elst = struct.pack(">IIIiHH", 0, 1, span, timing.shift, 1, 0)
    else:
        elst = struct.pack(">IIQqHH", 1 << 24, 1, span, timing.shift, 1, 0)
    edts = _Box(b"edts", children=[_Box(b"elst", elst)])
    tracks = trak.children or []
    tracks[:] = [c for c in tracks if c.kind != b"edts"]
    tracks.insert(next(i for i, c in enumerate(tracks) if c.kind == b"tkhd") + 1, edts)
    tkhd = trak.need(b"tkhd")
    tkhd.payload = _with_field(tkhd.payload, *_tkhd_duration(tkhd), span)

    longest = 0
    for track in (c for c in moov.children or [] if c.kind == b"trak"):
        header = track.need(b"tkhd")
        at_, width = _tkhd_duration(header)
        longest = max(longest, int.from_bytes(header.payload[at_ : at_ + width], "big"))
    mvhd.payload = _with_field(mvhd.payload, mvhd_at, mvhd_width, longest)
    return _serialize([moov])


def _top_level(f: BinaryIO) -> list[tuple[bytes, int, int]]:
    """(kind, offset, size) of each top-level box, reading only the headers."""
    end = f.seek(0, 2)
    boxes: list[tuple[bytes, int, int]] = []
    pos = 0
    while pos < end:
        f.seek(pos)
        header = f.read(16)
        if len(header) < 8:
            raise Mp4TimingError("truncated box header")
        size, kind = struct.unpack_from(">I4s", header)
        if size == 1:
            if len(header) < 16:
                raise Mp4TimingError("truncated box header")
            (size,) = struct.unpack_from(">Q", header, 8)
        elif size == 0:
            size = end - pos
        if size < 8 or pos + size > end:
            raise Mp4TimingError(f"bad size for top-level box {kind!r}")
        boxes.append((kind, pos, size))
        pos += size
    return boxes


def retime_video(path: Path, times: Sequence[float]) -> None:
    """Rewrite, in place, the timing of the video track of the MP4 at ``path`` (see the module doc).

    Raises:
        Mp4TimingError: the index precedes the media data (faststart), the file is fragmented or malformed, or
            its video has a different number of frames than ``times``.
    """
    with path.open("r+b") as f:
        boxes = _top_level(f)
        moovs = [(offset, size) for kind, offset, size in boxes if kind == b"moov"]
        if len(moovs) != 1:
            raise Mp4TimingError(f"expected one moov box, found {len(moovs)}")
        offset, size = moovs[0]
        if any(kind in {b"mdat", b"moof"} and at > offset for kind, at, _ in boxes):
            raise Mp4TimingError("the index precedes media data (faststart or fragmented): cannot resize it")
        f.seek(offset)
        moov = retime_moov(f.read(size), times)
        tail = f.read()  # boxes after the index (none from FFmpeg): small, moved along with it
        f.seek(offset)
        f.write(moov)
        f.write(tail)
        f.truncate()
