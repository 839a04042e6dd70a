"""Still images as their headers describe them: format and size, read without decoding a pixel.

The API checks a source image's size against the pixel limit here, before any decoder (ffprobe's, OpenCV's)
allocates a frame for it: a 60-byte PNG may declare 40000 × 40000 pixels, 6 GB once decoded. Only the formats the
farm accepts as sources are recognised (JPEG, PNG, WebP, BMP, TIFF); anything else is not a source image.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

__all__ = ["ImageHeader", "read_header"]

# The ffprobe demuxer of each format (content-detected, single-image readers) and the extension it is stored with.
DEMUXERS = {"jpeg": "jpeg_pipe", "png": "png_pipe", "webp": "webp_pipe", "bmp": "bmp_pipe", "tiff": "tiff_pipe"}
EXTENSIONS = {"jpeg": ".jpg", "png": ".png", "webp": ".webp", "bmp": ".bmp", "tiff": ".tif"}


@dataclass(frozen=True)
class ImageHeader:
    format: str  # jpeg, png, webp, bmp, tiff
    width: int
    height: int

    @property
    def pixels(self) -> int:
        return self.width * self.height

    @property
    def demuxer(self) -> str:
        return DEMUXERS[self.format]

    @property
    def extension(self) -> str:
        return EXTENSIONS[self.format]


class _Unrecognised(ValueError):
    pass


def read_header(path: Path) -> ImageHeader | None:
    """The format and size that ``path``'s header declares; ``None`` when it is not a JPEG, PNG, WebP, BMP or TIFF
    whose header can be read (a truncated header, a zero size).

    >>> import struct, tempfile, zlib
    >>> ihdr = b"IHDR" + struct.pack(">IIBBBBB", 40000, 40000, 8, 2, 0, 0, 0)
    >>> png = b"\\x89PNG\\r\\n\\x1a\\n" + struct.pack(">I", 13) + ihdr + struct.pack(">I", zlib.crc32(ihdr))
    >>> with tempfile.NamedTemporaryFile(suffix=".bin") as f:
    ...     _ = f.write(png); f.flush(); read_header(Path(f.name))
    ImageHeader(format='png', width=40000, height=40000)
    """
    try:
        with path.open("rb") as handle:
            head = handle.read(32)
            reader = _READERS.get(_kind(head))
            if reader is None:
                return None
            handle.seek(0)
            found = reader(handle)
    except (OSError, struct.error, _Unrecognised):
        return None
    return found if found.width > 0 and found.height > 0 else None


def _kind(head: bytes) -> str:
    if head.startswith(b"\xff\xd8\xff"):
        return "jpeg"
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "png"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "webp"
    if head.startswith(b"BM"):
        return "bmp"
    if head[:4] in (b"II*\x00", b"MM\x00*"):
        return "tiff"
    return ""


def _exact(handle: BinaryIO, size: int) -> bytes:
    data = handle.read(size)
    if len(data) != size:
        raise _Unrecognised("truncated header")
    return data


def _png(handle: BinaryIO) -> ImageHeader:
    data = _exact(handle, 24)
    if data[12:16] != b"IHDR":
        raise _Unrecognised("PNG without IHDR first")
    width, height = struct.unpack(">II", data[16:24])
    return ImageHeader("png", width, height)


# Start-of-frame markers (baseline, progressive, lossless, arithmetic …): every SOFn but DHT, JPG and DAC.
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def _jpeg(handle: BinaryIO) -> ImageHeader:
    _exact(handle, 2)
    for _ in range(10_000):  # segments before the frame header: APPn (EXIF, ICC …), DQT, DHT …
        marker = _exact(handle, 2)
        while marker[1] == 0xFF:  # fill bytes
            marker = marker[1:] + _exact(handle, 1)
        if marker[0] != 0xFF:
            raise _Unrecognised("not a JPEG marker")
        kind = marker[1]
        if kind in (0xD8, 0x01) or 0xD0 <= kind <= 0xD7:
            continue  # markers without a length
        (length,) = struct.unpack(">H", _exact(handle, 2))
        if length < 2:
            raise _Unrecognised("bad segment length")
        if kind in _SOF:
            data = _exact(handle, 5)
            height, width = struct.unpack(">HH", data[1:5])
            return ImageHeader("jpeg", width, height)
        if kind in (0xD9, 0xDA):
            break  # end of image, or scan data before any frame header
        handle.seek(length - 2, 1)
    raise _Unrecognised("no JPEG frame header")


def _webp(handle: BinaryIO) -> ImageHeader:
    data = _exact(handle, 30)
    chunk = data[12:16]
    if chunk == b"VP8X":
        width = 1 + int.from_bytes(data[24:27], "little")
        height = 1 + int.from_bytes(data[27:30], "little")
    elif chunk == b"VP8L":
        if data[20] != 0x2F:
            raise _Unrecognised("bad VP8L signature")
        bits = int.from_bytes(data[21:25], "little")
        width, height = (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    elif chunk == b"VP8 ":
        if data[23:26] != b"\x9d\x01\x2a":
            raise _Unrecognised("bad VP8 start code")
        width = int.from_bytes(data[26:28], "little") & 0x3FFF
        height = int.from_bytes(data[28:30], "little") & 0x3FFF
    else:
        raise _Unrecognised("unknown WebP chunk")
    return ImageHeader("webp", width, height)


def _bmp(handle: BinaryIO) -> ImageHeader:
    data = _exact(handle, 26)
    (header_size,) = struct.unpack("<I", data[14:18])
    if header_size == 12:  # OS/2 BITMAPCOREHEADER: 16-bit sizes
        width, height = struct.unpack("<HH", data[18:22])
    else:
        width, height = struct.unpack("<ii", data[18:26])
    return ImageHeader("bmp", abs(width), abs(height))  # a negative height is a top-down bitmap


def _tiff(handle: BinaryIO) -> ImageHeader:
    head = _exact(handle, 8)
    order = "<" if head[:2] == b"II" else ">"
    (offset,) = struct.unpack(order + "I", head[4:8])
    handle.seek(offset)
    (count,) = struct.unpack(order + "H", _exact(handle, 2))
    size: dict[int, int] = {}
    for _ in range(min(count, 4096)):
        tag, kind, _, value = struct.unpack(order + "HHI4s", _exact(handle, 12))
        if tag in (256, 257):  # ImageWidth, ImageLength: SHORT or LONG
            size[tag] = struct.unpack(order + ("H" if kind == 3 else "I"), value[: 2 if kind == 3 else 4])[0]
    if len(size) != 2:
        raise _Unrecognised("TIFF without a size")
    return ImageHeader("tiff", size[256], size[257])


_READERS = {"png": _png, "jpeg": _jpeg, "webp": _webp, "bmp": _bmp, "tiff": _tiff}
