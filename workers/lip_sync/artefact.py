"""The mel spectrogram of a lip_syncer job, planned once and stored with the job's files; read by each chunk for
its own frames only.

Layout (``jobs/<job>/plan/mel/``): ``manifest.json`` (the rendered range's first frame, the columns, the block size
and each file's SHA-256), ``starts.bin`` (each rendered frame's first column, int64, zlib) and ``<block>.bin`` (80 x
≤ 8192 columns, float16, zlib). The job row keeps the manifest's SHA-256 (``mel_sha256``); a chunk checks the
manifest against it and every block it reads against the manifest, so a chunk never renders from another plan's
audio. A chunk reads only the blocks its frames' windows lie in: its output does not depend on where it was cut.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from shared.errors import ProcessorError
from shared.lip_sync import MEL_BANDS, WINDOW_COLUMNS
from shared.storage import Storage
from workers.lip_sync.mel import BLOCK_COLUMNS, SILENT

FloatArray = npt.NDArray[np.float32]


def _folder(storage: Storage, job_id: str, *parts: str) -> str:
    return storage.job_url(job_id, "plan", "mel", *parts)


def _put(storage: Storage, url: str, data: bytes, sizes: list[int] | None = None) -> str:
    with storage.open_write(url) as out:
        out.write(data)
    if sizes is not None:
        sizes.append(len(data))
    return hashlib.sha256(data).hexdigest()


def _get(storage: Storage, url: str, sha256: str) -> bytes:
    with storage.open_read(url) as source:
        data = source.read()
    if hashlib.sha256(data).hexdigest() != sha256:
        raise ProcessorError("the job's planned audio changed after planning (a hash does not match); retry the job")
    return data


@dataclass(frozen=True)
class Stored:
    """A stored spectrogram: its manifest's SHA-256 (kept on the job row) and the bytes it takes."""

    sha256: str
    size: int


def store(
    storage: Storage, job_id: str, *, first_frame: int, starts: npt.NDArray[np.int64], blocks: Iterable[FloatArray]
) -> Stored:
    """Store the spectrogram's ``blocks`` (each [80, ≤ 8192], in order) and the frames' ``starts``."""
    hashes, columns, sizes = [], 0, list[int]()
    for index, block in enumerate(blocks):
        data = zlib.compress(np.ascontiguousarray(block, np.float16).tobytes(), 6)
        hashes.append(_put(storage, _folder(storage, job_id, f"{index:05d}.bin"), data, sizes))
        columns += block.shape[1]
    starts_data = zlib.compress(starts.astype("<i8").tobytes())
    starts_sha = _put(storage, _folder(storage, job_id, "starts.bin"), starts_data, sizes)
    manifest = {
        "first_frame": first_frame, "frames": len(starts), "columns": columns, "bands": MEL_BANDS,
        "block_columns": BLOCK_COLUMNS, "blocks": hashes, "starts": starts_sha,
    }  # fmt: skip
    sha256 = _put(
        storage, _folder(storage, job_id, "manifest.json"), json.dumps(manifest, sort_keys=True).encode(), sizes
    )
    return Stored(sha256, sum(sizes))


@dataclass(frozen=True)
class ChunkAudio:
    """The mel windows of a chunk's frames: ``windows[i]`` [80, 16] is target frame ``first + i``'s."""

    first: int
    windows: npt.NDArray[np.float16]

    def of(self, frame: int, count: int) -> FloatArray:
        """The windows of target frames ``frame`` … ``frame + count`` [count, 80, 16] (silence outside the range)."""
        out = np.full((count, MEL_BANDS, WINDOW_COLUMNS), SILENT, np.float32)
        lo, hi = max(frame, self.first), min(frame + count, self.first + len(self.windows))
        if hi > lo:
            out[lo - frame : hi - frame] = self.windows[lo - self.first : hi - self.first]
        return out


def read_chunk(storage: Storage, job_id: str, sha256: str, frame_start: int, frame_end: int) -> ChunkAudio:
    """The windows of target frames ``frame_start`` … ``frame_end``, from the blocks they lie in only.

    Raises:
        ProcessorError: the stored plan does not match ``sha256`` (or a block its manifest).
    """
    manifest = json.loads(_get(storage, _folder(storage, job_id, "manifest.json"), sha256))
    starts = np.frombuffer(
        zlib.decompress(_get(storage, _folder(storage, job_id, "starts.bin"), manifest["starts"])), "<i8"
    )
    first, count = int(manifest["first_frame"]), frame_end - frame_start
    lo, hi = max(frame_start - first, 0), min(frame_end - first, len(starts))
    windows = np.full((count, MEL_BANDS, WINDOW_COLUMNS), SILENT, np.float16)
    if hi <= lo:
        return ChunkAudio(frame_start, windows)
    mine = starts[lo:hi]
    column_lo, column_hi = int(mine.min()), min(int(mine.max()) + WINDOW_COLUMNS, int(manifest["columns"]))
    size = int(manifest["block_columns"])
    span = np.full((MEL_BANDS, max(int(mine.max()) + WINDOW_COLUMNS - column_lo, 0)), SILENT, np.float16)
    for block in range(column_lo // size, (max(column_hi, column_lo + 1) - 1) // size + 1):
        if block >= len(manifest["blocks"]):
            break
        raw = _get(storage, _folder(storage, job_id, f"{block:05d}.bin"), manifest["blocks"][block])
        values = np.frombuffer(zlib.decompress(raw), np.float16).reshape(MEL_BANDS, -1)
        begin = block * size
        a, b = max(begin, column_lo), min(begin + values.shape[1], column_hi)
        if b > a:
            span[:, a - column_lo : b - column_lo] = values[:, a - begin : b - begin]
    offsets = mine - column_lo
    index = offsets[:, None] + np.arange(WINDOW_COLUMNS)[None, :]  # [F, 16]
    windows[lo - (frame_start - first) : hi - (frame_start - first)] = np.transpose(span[:, index], (1, 0, 2))
    return ChunkAudio(frame_start, windows)
