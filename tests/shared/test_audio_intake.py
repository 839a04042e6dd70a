"""What the intake reads of a source audio, with the real ffprobe: the audio containers and codecs of the whitelist
only, through local files only, a video refused, the duration limit; and which chains may take one."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.audio import probe_audio
from shared.errors import AudioTooLongError, InvalidOptionsError, MediaFormatError, UnreadableAudioError
from shared.lip_sync import check_lip_sync
from shared.options import JobOptions
from tests.support import hostile
from tests.support.audio import make_speech
from tests.support.media import make_clip


@pytest.mark.parametrize(("suffix", "demuxer", "codec"), [(".wav", "wav", "pcm_s16le"), (".mp3", "mp3", "mp3"),
                                                          (".m4a", "mov", "aac"), (".flac", "flac", "flac"),
                                                          (".ogg", "ogg", "opus")])  # fmt: skip
def test_each_whitelisted_audio_is_described(tmp_path: Path, suffix: str, demuxer: str, codec: str) -> None:
    audio = make_speech(tmp_path / f"speech{suffix}", seconds=1.0)
    spooled = audio.rename(tmp_path / "source_audio-0")  # the upload's own name: the content decides
    info = probe_audio(spooled)
    assert (info.demuxer, info.codec) == (demuxer, codec)
    assert info.duration == pytest.approx(1.0, abs=0.1)
    assert probe_audio(spooled, info.demuxer) == info  # read again with the demuxer forced


def test_a_text_file_named_wav_is_unreadable(tmp_path: Path) -> None:
    text = tmp_path / "speech.wav"
    text.write_text("RIFF? no, just a note about the take\n" * 20)
    with pytest.raises(UnreadableAudioError) as refused:
        probe_audio(text)
    assert refused.value.code == "audio_unreadable" and refused.value.http_status == 422


def test_a_playlist_is_refused_before_it_opens_anything(tmp_path: Path) -> None:
    segment = make_speech(tmp_path / "other-tenant.wav", seconds=0.5)
    with pytest.raises(MediaFormatError) as refused:
        probe_audio(hostile.hls_playlist(tmp_path / "source_audio-0", segment))
    assert refused.value.code == "media_format_refused"


def test_a_video_is_not_an_audio_source(tmp_path: Path) -> None:
    clip = make_clip(tmp_path / "clip.mp4", seconds=0.5, size="64x64")  # an MP4 with AAC: the container passes
    with pytest.raises(MediaFormatError) as refused:
        probe_audio(clip)
    assert refused.value.code == "media_format_refused" and "video" in refused.value.message


def test_an_audio_longer_than_the_limit_is_refused(tmp_path: Path) -> None:
    info = probe_audio(make_speech(tmp_path / "long.wav", seconds=3.0))
    info.check(max_seconds=3.5)
    with pytest.raises(AudioTooLongError) as refused:
        info.check(max_seconds=2.0)
    assert refused.value.code == "audio_too_long"


@pytest.mark.parametrize(
    ("processors", "audio", "says"),
    [
        (["lip_syncer"], False, "needs a source audio"),
        (["face_blur"], True, "only used by the lip_syncer"),
    ],
)
def test_chains_that_cannot_use_the_audio_are_refused(processors: list[str], audio: bool, says: str) -> None:
    with pytest.raises(InvalidOptionsError) as refused:
        check_lip_sync(JobOptions.model_validate({"processors": processors}), has_audio=audio)
    assert refused.value.code == "options_invalid" and says in refused.value.message


def test_the_chain_face_swapper_lip_syncer_face_enhancer_is_taken() -> None:
    check_lip_sync(JobOptions(processors=["face_swapper", "lip_syncer", "face_enhancer"]), has_audio=True)
