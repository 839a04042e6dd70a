"""What a job's video is written in: the container of its chunks and its output, and whether it carries alpha.

The one place the container is chosen: it follows the encoder. Every encoder writes MP4 but ``prores_ks``,
whose ProRes MP4 does not carry, so it writes QuickTime MOV. Both are read back with the same demuxer (``mov``),
the concat demuxer joins either by stream copy, and their index is the same kind of box tree
(``workers.video.mp4_timing`` rewrites both).

Alpha travels only where a job asks for it (``background_remover.transparent``), and only ProRes 4444 carries
it here: Debian's FFmpeg 5.1 encodes VP9 with alpha in WebM too, and concatenates it by stream copy, but its own
VP9 decoder drops the alpha (only libvpx's, asked for by name, reads it; ffprobe reports ``yuv420p``), and a WebM
index cannot be retimed as the MP4/MOV one is. A job that asks for alpha from another encoder is refused at
submission (:func:`check_alpha`), never flattened.
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.errors import InvalidOptionsError
from shared.options import JobOptions, VideoEncoder

__all__ = ["ALPHA_ENCODERS", "MOV", "MP4", "Container", "carries_alpha", "check_alpha", "container_of"]


@dataclass(frozen=True)
class Container:
    """A container the farm writes.

    Attributes:
        muxer: FFmpeg's muxer name (``-f``).
        demuxer: the demuxer that reads it back (what ffprobe names).
        extension: the file name's extension, with its dot.
        media_type: what the API serves it as.
        audio_copy: audio codecs it takes by stream copy; any other is re-encoded to AAC.
    """

    muxer: str
    demuxer: str
    extension: str
    media_type: str
    audio_copy: frozenset[str]


MP4 = Container("mp4", "mov", ".mp4", "video/mp4", frozenset({"aac", "mp3", "ac3", "eac3", "opus", "alac", "flac"}))
# QuickTime's muxer refuses Opus and FLAC (FFmpeg 5.1 writes them in MP4 only).
MOV = Container("mov", "mov", ".mov", "video/quicktime", frozenset({"aac", "mp3", "ac3", "eac3", "alac"}))

ALPHA_ENCODERS: frozenset[VideoEncoder] = frozenset({"prores_ks"})
"""The encoders whose output carries an alpha channel (ProRes 4444, ``yuva444p10le``)."""


def container_of(encoder: VideoEncoder) -> Container:
    """The container ``encoder``'s chunks and output are written in.

    >>> container_of("libx264").extension, container_of("prores_ks").extension
    ('.mp4', '.mov')
    """
    return MOV if encoder == "prores_ks" else MP4


def carries_alpha(options: JobOptions) -> bool:
    """Whether the job's frames carry an alpha channel to the encoder (``background_remover.transparent``)."""
    return "background_remover" in options.processors and options.background_remover.transparent


def check_alpha(options: JobOptions) -> None:
    """Refuse what the encoder cannot write: alpha from an encoder without it, and lossless ProRes (which has no
    lossless mode).

    Raises:
        InvalidOptionsError: ``options_invalid``, saying which and what to ask for instead.
    """
    encoder = options.encoder.encoder
    if carries_alpha(options) and encoder not in ALPHA_ENCODERS:
        raise InvalidOptionsError(
            f"background_remover.transparent needs an encoder that carries alpha; {encoder} does not (its output "
            f"would be flattened): ask for encoder.encoder {' or '.join(sorted(ALPHA_ENCODERS))} (ProRes 4444 in "
            "a MOV file), or turn transparency off and fill the background"
        )
    if encoder == "prores_ks" and options.encoder.lossless:
        raise InvalidOptionsError("encoder.lossless: prores_ks has no lossless mode; ask for quality 100 instead")
