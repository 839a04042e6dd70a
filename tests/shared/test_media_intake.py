"""What the intake reads of a user's file, with the real ffprobe: plain media containers only, through local files
only; frames counted from what the file holds, streamed and stopped at the limits; nonsense metadata refused with a
code; source images checked from their headers before anything decodes them."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from shared.errors import MediaFormatError, MediaLimitError, NotAVideoError, SourceImageError, UnreadableMediaError
from shared.media import probe, probe_image
from tests.support import hostile
from tests.support.media import make_clip
from workers.video.frame_scan import scan_frames


@pytest.fixture(scope="module")
def victim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Another tenant's stored file, as a playlist would name it."""
    return make_clip(tmp_path_factory.mktemp("victim") / "output.mp4", seconds=2, audio=False)


@pytest.mark.parametrize("kind", ["hls", "dash", "ffconcat"])
def test_playlists_manifests_and_scripts_are_refused_before_they_open_anything(
    tmp_path: Path, victim: Path, kind: str
) -> None:
    make = {"hls": hostile.hls_playlist, "dash": hostile.dash_manifest, "ffconcat": hostile.ffconcat}[kind]
    upload = make(tmp_path / "target-0", victim)  # spooled uploads have no extension
    with pytest.raises(MediaFormatError) as refused:
        probe(upload)
    assert refused.value.code == "media_format_refused" and refused.value.http_status == 422
    with pytest.raises(MediaFormatError):
        scan_frames(upload)


def test_a_probed_container_is_forced_on_every_later_reader(tmp_path: Path, victim: Path) -> None:
    media = probe(victim)
    assert (media.demuxer, media.extension) == ("mov", ".mp4")
    disguised = hostile.hls_playlist(tmp_path / "target.mp4", victim)  # swapped in under the probed name
    with pytest.raises((MediaFormatError, UnreadableMediaError)):
        scan_frames(disguised, demuxer=media.demuxer)


def test_frames_are_counted_as_they_stream_and_the_count_stops_at_the_limit(tmp_path: Path) -> None:
    # An endless stream through a FIFO: a scan that read every packet line before counting would never return.
    fifo = tmp_path / "endless.ts"
    os.mkfifo(fifo)
    writer = subprocess.Popen(
        ["ffmpeg", "-v", "quiet", "-y", "-f", "lavfi", "-i", "testsrc2=size=64x64:rate=30", "-c:v", "libx264",
         "-preset", "ultrafast", "-f", "mpegts", str(fifo)],
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        with pytest.raises(MediaLimitError) as over:
            scan_frames(fifo, demuxer="mpegts", max_frames=300)
        assert over.value.code == "too_many_frames"
    finally:
        writer.kill()
        writer.wait()


def test_a_header_that_claims_an_hour_is_counted_by_what_the_file_holds(tmp_path: Path) -> None:
    clip = hostile.mkv_claiming(tmp_path / "claims-an-hour.mkv", seconds=2, claimed_seconds=3600)
    assert probe(clip).duration == 3600
    scan = scan_frames(clip, demuxer="matroska", max_frames=100, max_seconds=10)
    assert len(scan.times) == 60 and scan.span < 2
    with pytest.raises(MediaLimitError) as over:
        scan_frames(clip, demuxer="matroska", max_seconds=1)
    assert over.value.code == "media_too_long"


def test_packets_without_presentation_times_are_placed_by_decode_time_and_counted(tmp_path: Path) -> None:
    clip = hostile.avi_with_b_frames(tmp_path / "b-frames.avi")
    scan = scan_frames(clip, demuxer=probe(clip).demuxer)
    assert len(scan.times) == 60 and scan.untimed == 60 and scan.dropped == 0
    assert scan.times == sorted(set(scan.times))


def test_a_rotation_that_is_not_a_number_is_refused_with_a_code(tmp_path: Path) -> None:
    with pytest.raises(UnreadableMediaError) as refused:
        probe(hostile.mkv_with_rotation_tag(tmp_path / "rotated.mkv", "ninety"))
    assert refused.value.code == "media_metadata_invalid"


def test_an_absurd_frame_rate_is_refused_with_a_code(tmp_path: Path) -> None:
    with pytest.raises(NotAVideoError) as refused:
        probe(hostile.mp4_at_rate(tmp_path / "5000fps.mp4", 5000))
    assert refused.value.code == "media_rate_invalid"


def test_a_source_over_the_pixel_limit_is_refused_from_its_header_without_running_a_decoder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    image = hostile.png_claiming(tmp_path / "face.png", 40000, 40000)
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))  # no ffprobe to run: had one been needed, the refusal would differ
    with pytest.raises(SourceImageError) as refused:
        probe_image(image, "source 1", max_pixels=50_000_000)
    assert refused.value.code == "source_resolution_too_large"


def test_a_source_is_one_still_image(tmp_path: Path) -> None:
    one = tmp_path / "one.jpg"
    hostile.ffmpeg("-f", "lavfi", "-i", "testsrc2=size=64x64", "-frames:v", "1", str(one))
    assert probe_image(one, "source 1", max_pixels=10_000).extension == ".jpg"
    several = tmp_path / "several.jpg"
    several.write_bytes(one.read_bytes() * 3)  # a JPEG stream: three pictures back to back
    with pytest.raises(SourceImageError, match="several images"):
        probe_image(several, "source 1")
    gif = tmp_path / "anim.gif"
    hostile.ffmpeg("-f", "lavfi", "-i", "testsrc2=size=64x64:rate=5", "-frames:v", "3", str(gif))
    with pytest.raises(SourceImageError):
        probe_image(gif, "source 1")
