"""The source audio as the lip-sync models hear it: decoded, its voice extracted, as a mel spectrogram.

As FaceFusion computes it (docs/MODELS.md §10.7): 16 kHz mono, scaled so its peak is 1, pre-emphasis 0.97, an STFT
of periodic Hann windows of 800 samples every 200 (400 zeros of padding at each end, ÷ the window's sum), 80
adjacent, unnormalised HTK-mel triangles from 55 Hz to 7600 Hz, and ``clip(1.6·log10(max(mel, 1e-5)) + 3.2, −4,
4)``: 80 columns a second. The samples never sit in memory whole: ffmpeg decodes them to a scratch file that is
mapped, and the columns are computed block by block (each column needs only its own 800 samples, so a block's
columns are those of the whole); a block of digital silence is silent columns without an FFT.

Frame ``n`` of the rendered range reads the 16 columns from :func:`frame_columns`'s ``n``-th start: 0.2 s of audio
from the frame's time, counted from the range's first frame (its presentation time, so a variable rate is followed),
computed in 64-bit floats and integers (no wrap at any length).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from shared.audio import audio_input_args
from shared.lip_sync import HOP, MEL_BANDS, MEL_COLUMNS_PER_SECOND, SAMPLE_RATE, WINDOW
from shared.processes import FFMPEG, run

FloatArray = npt.NDArray[np.float32]
SILENT = -4.0  # the value of a column of silence
BLOCK_COLUMNS = 8192  # columns computed (and stored) at once: about 100 s
DECODE_TIMEOUT = 3600.0


def decode(
    path: Path, demuxer: str, out: Path, *, seconds: float, rate: int = SAMPLE_RATE, channels: int = 1
) -> npt.NDArray[np.float32]:
    """The first ``seconds`` of the audio as float32 samples [N, channels] at ``rate`` Hz, decoded by ffmpeg with
    the probed demuxer forced into the scratch file ``out`` and mapped (not read into memory)."""
    run(
        [FFMPEG, "-v", "error", "-nostdin", "-y", *audio_input_args(path, demuxer), "-t", f"{seconds:.6f}", "-vn",
         "-ac", str(channels), "-ar", str(rate), "-f", "f32le", f"file:{out}"],
        what="decoding the source audio", timeout=DECODE_TIMEOUT,
    )  # fmt: skip
    if out.stat().st_size == 0:
        return np.zeros((0, channels), np.float32)
    return np.memmap(out, dtype=np.float32, mode="r").reshape(-1, channels)


def resample(samples: npt.NDArray[np.float32], rate: int, out: Path) -> npt.NDArray[np.float32]:
    """Stereo float32 ``samples`` [N, 2] at ``rate`` Hz (mapped from a scratch file) → 16 kHz mono (the
    channels' mean), by ffmpeg, mapped from the scratch file ``out``."""
    raw = out.with_suffix(".in")
    with raw.open("wb") as handle:
        for start in range(0, len(samples), 1 << 20):
            handle.write(np.ascontiguousarray(samples[start : start + (1 << 20)], np.float32).tobytes())
    run(
        [FFMPEG, "-v", "error", "-nostdin", "-y", "-f", "f32le", "-ar", str(rate), "-ac", "2",
         "-i", f"file:{raw}", "-af", "pan=mono|c0=0.5*c0+0.5*c1", "-ar", str(SAMPLE_RATE), "-f", "f32le",
         f"file:{out}"],
        what="resampling the voice", timeout=DECODE_TIMEOUT,
    )  # fmt: skip
    raw.unlink()
    if out.stat().st_size == 0:
        return np.zeros((0, 1), np.float32)
    return np.memmap(out, dtype=np.float32, mode="r").reshape(-1, 1)


def mel_filters() -> FloatArray:
    """The 80 adjacent, unnormalised HTK-mel triangles over the 401 bins of an 800-point FFT at 16 kHz."""
    low, high = (2595.0 * math.log10(1.0 + f / 700.0) for f in (55.0, 7600.0))
    hertz = 700.0 * (10.0 ** (np.linspace(low, high, MEL_BANDS + 2) / 2595.0) - 1.0)
    bins = np.floor((WINDOW + 1) * hertz / SAMPLE_RATE).astype(np.int64)
    filters = np.zeros((MEL_BANDS, WINDOW // 2 + 1), np.float32)
    for i in range(MEL_BANDS):
        start, end = int(bins[i]), int(bins[i + 1])
        filters[i, start:end] = _triang(end - start)
    return filters


def _triang(m: int) -> FloatArray:
    """``scipy.signal.windows.triang(m)``."""
    if m <= 0:
        return np.zeros(0, np.float32)
    n = np.arange(1, (m + 1) // 2 + 1, dtype=np.float64)
    if m % 2 == 0:
        half = (2 * n - 1) / m
        return np.concatenate([half, half[::-1]]).astype(np.float32)
    half = 2 * n / (m + 1)
    return np.concatenate([half, half[-2::-1]]).astype(np.float32)


_HANN = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(WINDOW) / WINDOW)).astype(np.float32)  # periodic
_FILTERS = mel_filters()


def peak(samples: npt.NDArray[np.float32], block: int = 1 << 20) -> float:
    """The largest magnitude of the samples (read block by block)."""
    top = 0.0
    for start in range(0, len(samples), block):
        top = max(top, float(np.abs(samples[start : start + block]).max(initial=0.0)))
    return top


def spectrogram(samples: npt.NDArray[np.float32], columns: int) -> Iterator[FloatArray]:
    """The first ``columns`` columns of the mel spectrogram of mono ``samples`` [N, 1] at 16 kHz, in blocks of
    :data:`BLOCK_COLUMNS` [80, ≤ BLOCK_COLUMNS]; columns past the audio's end are silence."""
    mono = samples[:, 0] if samples.ndim == 2 else samples
    scale = peak(mono)
    scale = 1.0 / scale if scale > 0 else 0.0
    for first in range(0, columns, BLOCK_COLUMNS):
        count = min(BLOCK_COLUMNS, columns - first)
        yield _columns(mono, first, count, scale)


def _columns(mono: npt.NDArray[np.float32], first: int, count: int, scale: float) -> FloatArray:
    """Columns ``first`` … ``first + count`` of the spectrogram: each column ``c`` is the window centred on
    sample ``c · 200``."""
    start = first * HOP - WINDOW // 2 - 1  # one sample more, for the pre-emphasis of the first
    end = (first + count - 1) * HOP + WINDOW // 2
    piece = np.zeros(end - start, np.float64)
    lo, hi = max(start, 0), min(end, len(mono))
    if hi > lo:
        piece[lo - start : hi - start] = mono[lo:hi]
    if not piece.any():  # digital silence (a dub's pauses, the padding past the end): the same columns, no FFT
        return np.full((MEL_BANDS, count), SILENT, np.float32)
    piece *= scale
    emphasised = (piece[1:] - 0.97 * piece[:-1]).astype(np.float32)  # zeros before the audio: y[0] = x[0]
    frames = np.lib.stride_tricks.sliding_window_view(emphasised, WINDOW)[::HOP][:count]
    spectrum = np.abs(np.fft.rfft(frames * _HANN, axis=1)) / np.float32(_HANN.sum())
    mel = _FILTERS @ spectrum.T.astype(np.float32)
    return np.clip(1.6 * np.log10(np.maximum(mel, 1e-5)) + 3.2, -4.0, 4.0).astype(np.float32)


def frame_columns(times: Sequence[float]) -> npt.NDArray[np.int64]:
    """The first spectrogram column of each rendered frame: ``floor((t − t₀) · 80)`` for presentation times
    ``times`` (seconds), in float64 and int64 (a tolerance of a microsecond against the float's rounding)."""
    t = np.asarray(times, np.float64)
    if len(t) == 0:
        return np.zeros(0, np.int64)
    starts: npt.NDArray[np.int64] = np.floor((t - t[0]) * MEL_COLUMNS_PER_SECOND + 1e-6).astype(np.int64)
    return starts
