"""What each video encoder is given, and which encoders stand in for which: the one place to add an encoder.

Adding a video encoder (a new codec, or another build of one) is: its name in ``shared.options.VideoEncoder`` (what
a job may ask for, checked by the API), its quality settings in :func:`quality_options`, and — for a hardware
encoder — its place in :data:`CANDIDATE_ENCODERS` (probed at worker start: ``workers.video.codecs``) and its
software stand-in in :data:`SOFTWARE_FALLBACK`. ``tests/workers/video/test_ffmpeg.py`` encodes with every software
encoder of the list.

The container follows the encoder (``shared.containers.container_of``: MOV for ``prores_ks``, MP4 for the rest),
the same for the chunks, the stitch and the remux (``workers.video.ffmpeg``); both are box trees the timing
rewrite reads (``workers.video.mp4_timing``). Frames that carry alpha (``background_remover.transparent``) are
encoded only by the encoders of ``shared.containers.ALPHA_ENCODERS``, in a pixel format with an alpha plane.
"""

from __future__ import annotations

from typing import Any

from shared.options import EncoderOptions, VideoEncoder

CANDIDATE_ENCODERS = (
    "h264_nvenc", "hevc_nvenc", "av1_nvenc", "h264_vaapi", "hevc_vaapi", "av1_vaapi", "h264_amf", "hevc_amf",
    "av1_amf",
)  # fmt: skip
"""Hardware encoders worth probing, in order of preference per codec."""

SOFTWARE_FALLBACK: dict[str, VideoEncoder] = {"h264_nvenc": "libx264", "hevc_nvenc": "libx265"}
"""The software encoder of the same codec, for the hardware encoders a job may ask for."""


def pixel_format(width: int, height: int, encoder: VideoEncoder = "libx264", *, alpha: bool = False) -> str:
    """The pixel format a chunk is encoded in.

    >>> pixel_format(64, 36), pixel_format(65, 36), pixel_format(64, 36, "prores_ks", alpha=True)
    ('yuv420p', 'yuv444p', 'yuva444p10le')
    """
    if encoder == "prores_ks":  # ProRes 4444, with its alpha plane where the frames carry one
        return "yuva444p10le" if alpha else "yuv444p10le"
    if alpha:
        raise ValueError(f"{encoder} carries no alpha (shared.containers.ALPHA_ENCODERS)")
    # The frames are 4:2:0 on the pipe already (so "lossless" is lossless from there); odd-sized frames, which
    # 4:2:0 cannot hold, keep their size in 4:4:4 instead of being cropped.
    return "yuv444p" if width % 2 or height % 2 else "yuv420p"


def quality_options(options: EncoderOptions) -> dict[str, Any]:
    """The encoder's own options for the job's quality (CRF or CQ) and preset, or for lossless output."""
    crf = options.crf()
    match options.encoder:
        case "libx264" | "libx265":
            return {"preset": options.preset, **({"qp": 0} if options.lossless else {"crf": crf})}
        case "libvpx-vp9":
            return {"lossless": 1} if options.lossless else {"crf": crf, "b:v": 0, "row-mt": 1}
        case "libsvtav1":
            return {"crf": 0 if options.lossless else crf, "preset": 8}
        case "h264_nvenc" | "hevc_nvenc":
            return {"tune": "lossless"} if options.lossless else {"rc": "vbr", "cq": crf}
        case "prores_ks":  # a fixed quantiser, 1 (best) to 31, in place of the profile's bit budget; no lossless
            return {"profile:v": "4444", "q:v": max(1, round(31 - options.quality * 0.3)), "vendor": "apl0"}


def video_codec(options: EncoderOptions, width: int, height: int, *, alpha: bool = False) -> dict[str, Any]:
    """The encoder, its quality settings and its pixel format (with an alpha plane where ``alpha``): the same for
    every chunk of a job, so that the stitch concatenates them by stream copy."""
    pix_fmt = pixel_format(width, height, options.encoder, alpha=alpha)
    return {"c:v": options.encoder, **quality_options(options), "pix_fmt": pix_fmt}
