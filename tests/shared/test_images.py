"""Source image headers: format and size read without decoding, for every accepted format; anything else is not a
source image."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from shared.images import read_header
from tests.support.hostile import png_claiming


def _image(path: Path, size: str = "123x45", extra: tuple[str, ...] = ()) -> Path:
    subprocess.run(
        ["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", f"testsrc2=size={size}", "-frames:v", "1", *extra,
         str(path)],
        check=True,
    )  # fmt: skip
    return path


@pytest.mark.parametrize(
    ("name", "extra", "kind"),
    [
        ("a.jpg", (), "jpeg"),
        ("a.png", (), "png"),
        ("a.webp", ("-lossless", "1"), "webp"),  # VP8L
        ("b.webp", ("-lossless", "0"), "webp"),  # VP8
        ("a.bmp", (), "bmp"),
        ("a.tif", (), "tiff"),
    ],
)
def test_the_header_gives_format_and_size(tmp_path: Path, name: str, extra: tuple[str, ...], kind: str) -> None:
    header = read_header(_image(tmp_path / name, extra=extra))
    assert header is not None and (header.format, header.width, header.height) == (kind, 122, 44)  # testsrc2: even


def test_a_header_that_lies_about_its_size_is_read_as_it_claims(tmp_path: Path) -> None:
    header = read_header(png_claiming(tmp_path / "huge.png", 40000, 40000))
    assert header is not None and header.pixels == 1_600_000_000 and header.extension == ".png"


@pytest.mark.parametrize(
    "content",
    [b"", b"not an image at all", b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff\xe0\x00\x10JFIF", b"GIF89a" + bytes(20)],
    ids=["empty", "text", "png-signature-only", "jpeg-without-frame", "gif"],
)
def test_anything_else_is_not_a_source_image(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "x.png"
    path.write_bytes(content)
    assert read_header(path) is None
