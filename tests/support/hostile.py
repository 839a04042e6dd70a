"""Hostile and lying media for the intake tests, made with ffmpeg and a few byte edits.

Each builder writes a file a hostile tenant could upload: manifests and scripts that name other files, headers that
lie about length or size, streams whose decoder floods its stderr, packets without timestamps.
"""

from __future__ import annotations

import random
import struct
import subprocess
import zlib
from pathlib import Path


def ffmpeg(*args: str) -> None:
    subprocess.run(["ffmpeg", "-v", "error", "-y", *args], check=True)


def hls_playlist(path: Path, segment: Path) -> Path:
    """An HLS playlist with no extension whose one segment is ``segment`` (as ffmpeg would read it: file:)."""
    path.write_text(f"#EXTM3U\n#EXT-X-TARGETDURATION:10\n#EXTINF:2.0,\nfile:{segment}\n#EXT-X-ENDLIST\n")
    return path


def dash_manifest(path: Path, media: Path) -> Path:
    """A DASH manifest with no extension whose one representation is ``media``."""
    path.write_text(
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<MPD xmlns="urn:mpeg:dash:schema:mpd:2011" type="static" mediaPresentationDuration="PT2S" '
        'minBufferTime="PT1S" profiles="urn:mpeg:dash:profile:isoff-on-demand:2011"><Period>'
        '<AdaptationSet mimeType="video/mp4"><Representation id="1" bandwidth="100000" width="320" height="180" '
        f'codecs="avc1.640015"><BaseURL>file:{media}</BaseURL></Representation></AdaptationSet></Period></MPD>\n'
    )
    return path


def ffconcat(path: Path, media: Path) -> Path:
    """An ``ffconcat`` script with no extension that plays ``media``."""
    path.write_text(f"ffconcat version 1.0\nfile '{media}'\n")
    return path


def mkv_claiming(path: Path, *, seconds: float, claimed_seconds: float, rate: int = 30) -> Path:
    """A Matroska file holding ``seconds`` of video whose header claims ``claimed_seconds`` (Segment Duration)."""
    made = path.with_suffix(".made.mkv")
    ffmpeg("-f", "lavfi", "-i", f"testsrc2=size=160x90:rate={rate}:duration={seconds}",
           "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", str(made))  # fmt: skip
    data = made.read_bytes()
    marker = b"\x44\x89\x88"  # Duration, an 8-byte float, in TimestampScale units (ms by ffmpeg's default)
    at = data.index(marker) + len(marker)
    data = data[:at] + struct.pack(">d", claimed_seconds * 1000.0) + data[at + 8 :]
    path.write_bytes(data)
    made.unlink()
    return path


def png_claiming(path: Path, width: int, height: int) -> Path:
    """A tiny PNG whose header (IHDR, with a valid checksum) declares ``width`` × ``height`` pixels."""
    made = path.with_suffix(".made.png")
    ffmpeg("-f", "lavfi", "-i", "color=red:size=64x64", "-frames:v", "1", str(made))
    data = bytearray(made.read_bytes())
    data[16:24] = struct.pack(">II", width, height)
    data[29:33] = struct.pack(">I", zlib.crc32(bytes(data[12:29])))
    path.write_bytes(bytes(data))
    made.unlink()
    return path


def corrupt_h264(path: Path, *, seconds: float = 10, size: str = "1280x720", slice_mbs: int = 8) -> Path:
    """An H.264 MP4 (720p unless ``size`` says otherwise) of many small slices (``slice_mbs`` macroblocks each), one
    byte of every slice's data flipped: the index and the NAL structure are intact (every frame is there), the
    decoder reports an error for nearly every slice. Its stderr per frame grows with the slices of a frame, so a
    small frame cut into one-macroblock slices floods as much as a large one cut into a few times more."""
    clean = path.with_suffix(".clean.mp4")
    ffmpeg("-f", "lavfi", "-i", f"testsrc2=size={size}:rate=30:duration={seconds}", "-c:v", "libx264",
           "-preset", "ultrafast", "-x264-params", f"slice-max-mbs={slice_mbs}", "-pix_fmt", "yuv420p",
           str(clean))  # fmt: skip
    data = bytearray(clean.read_bytes())
    clean.unlink()
    pos = 0
    while True:
        size, kind = struct.unpack(">I4s", data[pos : pos + 8])
        if kind == b"mdat":
            start, end = pos + 8, pos + size
            break
        pos += size
    rng = random.Random(3)
    nal = start  # one track, so the media data is the samples' length-prefixed NAL units, back to back
    while nal + 4 < end:
        (length,) = struct.unpack(">I", data[nal : nal + 4])
        if data[nal + 4] & 0x1F in (1, 5) and length > 12:  # a slice: flip a byte in its second half
            data[nal + 4 + rng.randrange(length // 2, length)] ^= 0xFF
        nal += 4 + length
    path.write_bytes(bytes(data))
    return path


def stderr_bytes_of_decoding(path: Path) -> int:
    """How much ffmpeg writes to stderr decoding ``path`` at the farm's log level (errors only)."""
    done = subprocess.run(
        ["ffmpeg", "-hide_banner", "-nostdin", "-loglevel", "error", "-i", str(path), "-f", "null", "-"],
        capture_output=True,
    )
    return len(done.stderr)


def avi_with_b_frames(path: Path, *, seconds: float = 2) -> Path:
    """An AVI of H.264 with B-frames: its packets carry decode times only, no presentation time."""
    ffmpeg("-f", "lavfi", "-i", f"testsrc2=size=320x180:rate=30:duration={seconds}", "-c:v", "libx264",
           "-bf", "2", "-preset", "veryfast", "-pix_fmt", "yuv420p", str(path))  # fmt: skip
    return path


def mkv_with_rotation_tag(path: Path, tag: str) -> Path:
    """A Matroska file whose video stream has a ``rotate`` tag of ``tag`` (not necessarily a number): written as
    another tag, whose name is then rewritten (ffmpeg's muxer drops a ``rotate`` tag it cannot use)."""
    made = path.with_suffix(".made.mkv")
    ffmpeg("-f", "lavfi", "-i", "testsrc2=size=160x90:rate=30:duration=1", "-c:v", "libx264", "-preset",
           "ultrafast", "-pix_fmt", "yuv420p", "-metadata:s:v:0", f"rotatx={tag}", str(made))  # fmt: skip
    data = made.read_bytes()
    assert data.count(b"ROTATX") == 1
    path.write_bytes(data.replace(b"ROTATX", b"rotate"))
    made.unlink()
    return path


def mp4_at_rate(path: Path, rate: int, *, frames: int = 20) -> Path:
    """An MP4 of ``frames`` frames at ``rate`` frames per second."""
    ffmpeg("-f", "lavfi", "-i", f"testsrc2=size=160x90:rate={rate}", "-frames:v", str(frames), "-c:v", "libx264",
           "-preset", "ultrafast", "-pix_fmt", "yuv420p", str(path))  # fmt: skip
    return path
