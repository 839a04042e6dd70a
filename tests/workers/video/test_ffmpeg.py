from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest

from shared.errors import FfmpegError
from shared.options import EncoderOptions
from workers.video import ffmpeg


def test_decode_seeks_before_the_input_and_reads_an_exact_frame_count() -> None:
    args = ffmpeg.decode_args(Path("in.mp4"), 12.5, 300)
    assert args[args.index("-ss") + 1] == "12.500000"
    assert args.index("-ss") < args.index("-i")  # input seeking: decode from the keyframe before, not the start
    assert args[args.index("-frames:v") + 1] == "300"
    assert args[args.index("-fps_mode") + 1] == "passthrough"  # no duplicated or dropped frames


def test_first_chunk_does_not_seek() -> None:
    assert "-ss" not in ffmpeg.decode_args(Path("in.mp4"), 0.0, 10)


@pytest.mark.parametrize(("quality", "crf"), [(100, "0"), (80, "10"), (0, "51")])
def test_quality_maps_to_crf(quality: int, crf: str) -> None:
    args = ffmpeg.encode_args(Path("o.mp4"), 640, 360, "30/1", EncoderOptions(quality=quality))
    assert args[args.index("-crf") + 1] == crf
    assert args[args.index("-c:v") + 1] == "libx264"


def test_lossless_keeps_the_pipes_chroma_and_odd_sizes_use_full_chroma() -> None:
    lossless = ffmpeg.encode_args(Path("o.mp4"), 640, 360, "30/1", EncoderOptions(lossless=True), "yuv420p")
    assert lossless[lossless.index("-qp") + 1] == "0"
    assert lossless[lossless.index("-pix_fmt") + 1] == "yuv420p"
    assert lossless[lossless.index("-pix_fmt", lossless.index("-c:v")) + 1] == "yuv420p"
    assert ffmpeg.pipe_format(641, 481) == "bgr24"
    odd = ffmpeg.encode_args(Path("o.mp4"), 641, 481, "30/1", EncoderOptions())
    assert odd[odd.index("-pix_fmt", odd.index("-c:v")) + 1] == "yuv444p"


def test_stitch_copies_video_and_takes_audio_once_from_the_input() -> None:
    args = ffmpeg.stitch_args(Path("l.txt"), Path("in.mp4"), "aac", Path("o.mp4"), provenance=True)
    assert args[args.index("-c:v") + 1] == "copy"
    assert args[args.index("-c:a") + 1] == "copy"
    assert "1:a:0?" in args
    assert f"{ffmpeg.PROVENANCE_TAG}=face-swapped" in args
    pcm = ffmpeg.stitch_args(Path("l.txt"), Path("in.mov"), "pcm_s16le", Path("o.mp4"), provenance=False)
    assert pcm[pcm.index("-c:a") + 1] == "aac"
    assert not any(ffmpeg.PROVENANCE_TAG in a for a in pcm)


def test_concat_list_quotes_odd_names(tmp_path: Path) -> None:
    listing = ffmpeg.concat_list([tmp_path / "it's.mp4"])
    assert listing == f"file '{tmp_path}/it'\\''s.mp4'\n"


def test_a_failing_command_raises_with_its_stderr(tmp_path: Path) -> None:
    with pytest.raises(FfmpegError) as info:
        ffmpeg.run(["ffmpeg", "-v", "error", "-i", str(tmp_path / "missing.mp4"), "out.mp4"], what="probe")
    assert info.value.code == "ffmpeg_failed"
    assert "missing.mp4" in info.value.message


def test_a_retimed_stitch_concatenates_without_faststart_then_remuxes_with_the_audio() -> None:
    concat = ffmpeg.concat_video_args(Path("l.txt"), Path("v.mp4"))
    assert concat[concat.index("-c:v") + 1] == "copy"
    assert "-movflags" not in concat and "-an" not in concat and "0:v:0" in concat
    remux = ffmpeg.remux_args(Path("v.mp4"), Path("in.mp4"), "aac", Path("o.mp4"), provenance=True)
    assert remux[remux.index("-i") + 1] == "v.mp4"
    assert "+faststart" in remux[remux.index("-movflags") + 1]
    assert "1:a:0?" in remux and f"{ffmpeg.PROVENANCE_TAG}=face-swapped" in remux


def _input_options(args: list[str], url: str) -> dict[str, str]:
    """The options given to the input ``url`` (those between the previous input, if any, and its ``-i``)."""
    at = args.index(url)
    assert args[at - 1] == "-i"
    before = args[: at - 1]
    start = max((i + 2 for i, a in enumerate(before) if a == "-i"), default=0)
    while start < len(before) and not before[start].startswith("-"):  # past the global options' values
        start += 1
    pairs = before[start:]
    flags = [i for i, a in enumerate(pairs) if a.startswith("-")]
    return {pairs[i]: pairs[i + 1] for i in flags if i + 1 < len(pairs) and not pairs[i + 1].startswith("-")}


USER_FILE = Path("/in/target.mp4")
URL = f"file:{USER_FILE}"
CUT = ffmpeg.AudioCut(1.666, 3.333)


@pytest.mark.parametrize(
    "args",
    [
        ffmpeg.decode_args(USER_FILE, 2.0, 10, demuxer="mov", size=(320, 180)),
        ffmpeg.transcode_args(USER_FILE, 2.0, 10, Path("c.mp4"), 320, 180, "30/1", EncoderOptions(), demuxer="mov"),
        ffmpeg.stitch_args(Path("l.txt"), USER_FILE, "aac", Path("o.mp4"), provenance=False, audio_demuxer="mov"),
        ffmpeg.remux_args(Path("v.mp4"), USER_FILE, "aac", Path("o.mp4"), provenance=False, audio_demuxer="mov",
                          audio_cut=CUT),
        ffmpeg.still_args(USER_FILE, 1.0, Path("s.jpg"), "mov", max_width=640),
    ],
    ids=["decode", "transcode", "stitch", "remux", "still"],
)  # fmt: skip
def test_every_read_of_a_users_file_is_local_whitelisted_and_forces_the_probed_demuxer(args: list[str]) -> None:
    options = _input_options(args, URL)
    assert options["-protocol_whitelist"] == "file,pipe"
    assert options["-format_whitelist"] == "mov,matroska,avi,mpegts"
    assert options["-f"] == "mov"
    assert args[0] == "ffmpeg" and "-nostdin" in args


def test_output_height_scales_the_decoded_frames_in_both_render_paths() -> None:
    decode = ffmpeg.decode_args(USER_FILE, 0.0, 10, "yuv420p", demuxer="mov", size=(320, 180))
    assert "scale=w=320:h=180:flags=bicubic" in decode[decode.index("-filter_complex") + 1]
    assert decode[decode.index("-frames:v") + 1] == "10"
    assert "-filter_complex" not in ffmpeg.decode_args(USER_FILE, 0.0, 10, demuxer="mov")
    transcode = ffmpeg.transcode_args(
        USER_FILE, 0.0, 10, Path("c.mp4"), 320, 180, "30/1", EncoderOptions(), demuxer="mov", scale=True
    )
    graph = transcode[transcode.index("-filter_complex") + 1]
    assert graph.index("scale=w=320:h=180") < graph.index("settb=expr=1/30") < graph.index("setpts=expr=N")


def test_a_trimmed_stitch_cuts_the_audio_at_the_sample_and_re_encodes_it() -> None:
    args = ffmpeg.stitch_args(
        Path("l.txt"), USER_FILE, "aac", Path("o.mp4"), provenance=False, audio_demuxer="mov", audio_cut=CUT
    )
    options = _input_options(args, URL)
    assert options["-ss"] == "1.666000" and options["-t"] == "3.333000"
    assert args[args.index("-c:a") + 1] == "aac", "a stream copy cuts between packets"
    assert args[args.index("-c:v") + 1] == "copy"
    untrimmed_start = ffmpeg.stitch_args(
        Path("l.txt"), USER_FILE, "aac", Path("o.mp4"), provenance=False, audio_cut=ffmpeg.AudioCut(0.0, 2.0)
    )
    assert "-ss" not in untrimmed_start and "-t" in untrimmed_start


def test_an_output_rate_re_encodes_the_stitch_through_the_fps_filter() -> None:
    resample = ffmpeg.Resample(Fraction(30000, 1001), 320, 180, EncoderOptions(quality=90))
    args = ffmpeg.stitch_args(Path("l.txt"), None, None, Path("o.mp4"), provenance=True, resample=resample)
    assert "fps=fps=30000/1001" in args[args.index("-filter_complex") + 1]
    assert args[args.index("-c:v") + 1] == "libx264" and args[args.index("-crf") + 1] == "5"
    assert "-c:a" not in args and f"{ffmpeg.PROVENANCE_TAG}=face-swapped" in args
    assert f"comment={ffmpeg.PROVENANCE_TEXT}" in args
