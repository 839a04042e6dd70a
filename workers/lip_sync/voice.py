"""Voice extraction with an MDX-Net model (kim_vocal_2, as FaceFusion's default voice extractor): the voice of
48 kHz stereo audio, the music and noise under it left out (docs/MODELS.md §10.7).

Outer chunks of 245,760 samples every 184,320 (their overlaps averaged); within a chunk, windows of
``L = (T − 1) · 1024`` samples every ``L − 7680`` (3840 samples of padding at each end, trimmed after the model);
each window's STFT (symmetric Hann 7680, hop 1024, the first 3072 bins) goes to the model as [W, 4, 3072, T]
(L.re, L.im, R.re, R.im), and the model's output of the same layout comes back through the inverse STFT.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from shared.settings import Settings
from workers.engines.base import Engine
from workers.faces.crop_model import load_heavy
from workers.models.registry import REGISTRY

FloatArray = npt.NDArray[np.float32]
RATE = 48_000
CHUNK, STEP = 245_760, 184_320
N_FFT, HOP, BINS = 7680, 1024, 3072
TRIM = N_FFT // 2  # 3840
_WINDOW = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(N_FFT) / (N_FFT - 1))).astype(np.float32)  # symmetric


@dataclass
class VoiceExtractor:
    """A loaded MDX-Net model; :meth:`extract` takes stereo samples [N, 2] at 48 kHz."""

    engine: Engine
    frames: int  # T, the model's static STFT frames a window

    @classmethod
    def load(cls, settings: Settings, name: str = "kim_vocal_2") -> VoiceExtractor:
        """Raises:
        ModelError: the model cannot be found, downloaded or loaded.
        """
        path, loaded = load_heavy(REGISTRY[name], settings, batch_input="input")
        import onnx

        shape = onnx.load(str(path), load_external_data=False).graph.input[0].type.tensor_type.shape
        frames = shape.dim[3].dim_value or 256
        return cls(loaded.engine, int(frames))

    @property
    def window(self) -> int:
        return (self.frames - 1) * HOP

    def extract(self, samples: npt.NDArray[np.float32], out: Path) -> npt.NDArray[np.float32]:
        """The voice of ``samples`` [N, 2], written to the scratch file ``out`` (float32, interleaved) and mapped
        from it: never the whole audio in memory. Consecutive chunks overlap by 61,440 samples, averaged."""
        total = len(samples)
        mapped = np.lib.format.open_memmap(out, mode="w+", dtype=np.float32, shape=(max(total, 1), 2))
        voice = mapped[:total]
        overlap = CHUNK - STEP
        for start in range(0, total, STEP):
            part = self._chunk(np.asarray(samples[start : start + CHUNK], np.float32))
            shared = min(overlap, len(part)) if start > 0 else 0
            voice[start : start + shared] = (voice[start : start + shared] + part[:shared]) / 2
            voice[start + shared : start + len(part)] = part[shared:]
            if start + CHUNK >= total:
                break
        mapped.flush()
        return voice

    def _chunk(self, chunk: FloatArray) -> FloatArray:
        length, size = len(chunk), self.window
        step = size - 2 * TRIM
        pad = (step - length % step) % step
        padded = np.concatenate([np.zeros((TRIM, 2), np.float32), chunk, np.zeros((TRIM + pad, 2), np.float32)])
        starts = range(0, length + pad, step)
        windows = np.stack([padded[s : s + size].T for s in starts])  # [W, 2, L]
        spectra = _stft(windows.reshape(-1, size))  # [W·2, BINS, T]
        spectra = spectra.reshape(len(starts), 2, BINS, -1)
        tensor = np.stack([spectra[:, 0].real, spectra[:, 0].imag, spectra[:, 1].real, spectra[:, 1].imag], axis=1)
        out = self.engine.run({"input": tensor.astype(np.float32)})[0]
        values: FloatArray = np.asarray(out, np.float32)
        back = np.stack([values[:, 0] + 1j * values[:, 1], values[:, 2] + 1j * values[:, 3]], axis=1)  # [W, 2, BINS, T]
        signal = _istft(back.reshape(-1, BINS, back.shape[-1]), size).reshape(len(starts), 2, size)
        trimmed = signal[:, :, TRIM : size - TRIM]  # [W, 2, step]
        joined = np.concatenate(list(trimmed), axis=1).T
        return joined[:length].astype(np.float32)


def _stft(x: FloatArray) -> npt.NDArray[np.complex64]:
    """[B, L] → [B, BINS, T]: centred frames (zeros of padding, as scipy.signal.stft), hop 1024, the first 3072 bins."""
    padded = np.pad(x, ((0, 0), (N_FFT // 2, N_FFT // 2)))
    frames = np.lib.stride_tricks.sliding_window_view(padded, N_FFT, axis=1)[:, ::HOP]  # [B, T, N_FFT]
    spectrum = np.fft.rfft(frames * _WINDOW, axis=2)[:, :, :BINS]
    return np.transpose(spectrum, (0, 2, 1)).astype(np.complex64)


def _istft(spectra: npt.NDArray[np.complex64], length: int) -> FloatArray:
    """The inverse of :func:`_stft` (missing bins zero), overlap-added and ÷ the windows' squared sum."""
    batch, _, frames = spectra.shape
    full = np.zeros((batch, N_FFT // 2 + 1, frames), np.complex64)
    full[:, :BINS] = spectra
    pieces = np.fft.irfft(np.transpose(full, (0, 2, 1)), n=N_FFT, axis=2) * _WINDOW  # [B, T, N_FFT]
    total = N_FFT + HOP * (frames - 1)
    out = np.zeros((batch, total), np.float64)
    norm = np.zeros(total, np.float64)
    for t in range(frames):
        out[:, t * HOP : t * HOP + N_FFT] += pieces[:, t]
        norm[t * HOP : t * HOP + N_FFT] += _WINDOW.astype(np.float64) ** 2
    out /= np.maximum(norm, 1e-8)
    return out[:, N_FFT // 2 : N_FFT // 2 + length].astype(np.float32)
