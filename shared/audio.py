"""The source audio of a ``lip_syncer`` job: what the file is (:func:`probe_audio`) and how it is read.

The same intake rules as the target video (``shared.media``): every read names the demuxers it may use
(:data:`AUDIO_DEMUXERS`: WAV, FLAC, MP3, AAC/M4A, Ogg) and the protocols (``file``, ``pipe``), so playlists and
scripts that open other files (HLS, DASH, ``ffconcat``) are refused before they open anything, whatever the file is
called; the codec of its one audio stream must be on :data:`AUDIO_CODECS`; a file that holds a video stream is
refused (the source audio is an audio file, not a second target); once probed, the audio is read with its
demuxer forced (:func:`audio_input_args`). Each refusal has its code: ``media_format_refused`` (not on a
whitelist), ``audio_unreadable`` (not a readable audio file), ``audio_too_long`` (over ``max_audio_seconds``,
checked by :meth:`AudioInfo.check`; the decode at planning stops at the same limit, whatever the header said).
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from shared.errors import AudioTooLongError, MediaFormatError, MediaLimitError, UnreadableAudioError
from shared.media import PROTOCOLS, as_number, check_stderr
from shared.processes import FFPROBE, capture

__all__ = ["AUDIO_CODECS", "AUDIO_DEMUXERS", "AudioInfo", "audio_input_args", "probe_audio"]

# The audio containers the farm reads, by their demuxers' first names, and the extension each is stored with
# (``mov`` admits MP4/M4A; ``aac`` is raw ADTS; ``ogg`` holds Opus or Vorbis).
AUDIO_DEMUXERS: tuple[str, ...] = ("wav", "flac", "mp3", "mov", "aac", "ogg")
EXTENSIONS = {"wav": ".wav", "flac": ".flac", "mp3": ".mp3", "mov": ".m4a", "aac": ".aac", "ogg": ".ogg"}
AUDIO_CODECS = frozenset(
    {"pcm_s16le", "pcm_s24le", "pcm_s32le", "pcm_f32le", "pcm_f64le", "pcm_u8", "flac", "mp3", "aac", "opus",
     "vorbis", "alac"}
)  # fmt: skip
PROBE_TIMEOUT = 60.0
_REFUSED = (
    "the source audio is not a plain audio file the farm reads (WAV, FLAC, MP3, AAC/M4A, Opus/Vorbis in Ogg); "
    "playlists, manifests and scripts that name other files are refused"
)


def audio_input_args(path: Path, demuxer: str | None = None) -> list[str]:
    """ffmpeg/ffprobe options that open ``path`` as a plain local audio file (``demuxer`` forced when given),
    ending with ``-i``.

    >>> audio_input_args(Path("/in/audio.wav"), "wav")[-4:]
    ['-f', 'wav', '-i', 'file:/in/audio.wav']
    """
    forced = ["-f", demuxer] if demuxer else []
    allowed = (demuxer,) if demuxer else AUDIO_DEMUXERS
    return ["-protocol_whitelist", PROTOCOLS, "-format_whitelist", ",".join(allowed), *forced, "-i", f"file:{path}"]


@dataclass(frozen=True)
class AudioInfo:
    duration: float
    codec: str
    sample_rate: int
    channels: int
    container: str

    @property
    def demuxer(self) -> str:
        """The demuxer every reader of the file forces."""
        return self.container.split(",")[0]

    @property
    def extension(self) -> str:
        return EXTENSIONS[self.demuxer]

    def check(self, max_seconds: float) -> None:
        """Raises:
        AudioTooLongError: ``audio_too_long``: it lasts longer than ``max_seconds``.
        """
        if self.duration > max_seconds:
            raise AudioTooLongError(f"the source audio lasts {self.duration:.1f}s; the limit is {max_seconds:.0f}s")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> AudioInfo:
        return cls(**data)


def probe_audio(path: Path, demuxer: str | None = None) -> AudioInfo:
    """Describe the one audio stream of ``path``, read with ``demuxer`` (forced) or one of the whitelist's.

    Raises:
        MediaFormatError: ``media_format_refused``: not an audio container or codec the farm reads, or the file
            holds a video.
        UnreadableAudioError: ``audio_unreadable``: ffprobe cannot read it, it has no audio stream or a
            nonsense duration, rate or channel count.
    """
    args = [FFPROBE, "-v", "error", "-show_format", "-show_streams", "-of", "json", *audio_input_args(path, demuxer)]
    try:
        done = capture(args, timeout=PROBE_TIMEOUT)
    except subprocess.TimeoutExpired as exc:
        raise UnreadableAudioError("ffprobe timed out reading the source audio") from exc
    try:
        check_stderr(done.stderr.decode(errors="replace"))
    except MediaFormatError as exc:
        raise MediaFormatError(_REFUSED) from exc
    except MediaLimitError as exc:  # frames too large to decode: a video, not audio
        raise MediaFormatError("the source audio holds a video; send an audio file") from exc
    if done.returncode != 0:
        raise UnreadableAudioError("the source audio is not a readable audio file")
    try:
        data = json.loads(done.stdout.decode(errors="replace") or "{}")
    except json.JSONDecodeError as exc:
        raise UnreadableAudioError("the source audio is not a readable audio file") from exc
    streams: list[dict[str, Any]] = data.get("streams", [])
    fmt: dict[str, Any] = data.get("format", {})
    container = str(fmt.get("format_name", ""))
    if container.split(",")[0] not in AUDIO_DEMUXERS:
        raise MediaFormatError(_REFUSED)
    if any(s.get("codec_type") == "video" and not s.get("disposition", {}).get("attached_pic") for s in streams):
        raise MediaFormatError("the source audio holds a video stream; send the audio alone (WAV, FLAC, MP3, M4A …)")
    audio = [s for s in streams if s.get("codec_type") == "audio"]
    if not audio:
        raise UnreadableAudioError("the source audio has no audio stream")
    codec = str(audio[0].get("codec_name", ""))
    if codec not in AUDIO_CODECS:
        raise MediaFormatError(f"the source audio's codec {codec or '(none)'!r} is not one the farm reads")
    rate = int(as_number(audio[0].get("sample_rate")) or 0)
    channels = int(as_number(audio[0].get("channels")) or 0)
    if not 1000 <= rate <= 384_000 or not 1 <= channels <= 16:
        raise UnreadableAudioError(f"the source audio declares {rate} Hz and {channels} channels")
    duration = as_number(audio[0].get("duration"))
    if duration is None:
        duration = as_number(fmt.get("duration"))
    if duration is None or duration <= 0:
        raise UnreadableAudioError("the source audio declares no duration")
    return AudioInfo(duration=duration, codec=codec, sample_rate=rate, channels=channels, container=container)
