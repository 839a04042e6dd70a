"""What a ``lip_syncer`` job asks for, decided once for every entry point, and where each frame's audio lies.

Submission (:func:`check_lip_sync`): a chain with ``lip_syncer`` needs a source audio, and a source audio is only
taken by such a chain (it would be stored and never used). Its place in the chain (after the swappers, before the
enhancer) is :func:`shared.processor_order.check_order`'s.

The mel spectrogram (``workers.lip_sync.mel``) has :data:`MEL_COLUMNS_PER_SECOND` columns a second (16 kHz, hop
200). Rendered frame ``n`` (counted from the first frame the job renders, after the trim, at the rate the frames
are shown) reads the :data:`WINDOW_COLUMNS` columns from :func:`mel_column` on: 0.2 s of audio from ``n / fps``.
The index is computed exactly (integers and fractions), so a two-hour audio's last second maps to the last frames
(FaceFusion's 16-bit index wraps past about 409 s; this one does not).
"""

from __future__ import annotations

from fractions import Fraction

from sqlalchemy.orm import Session

from shared import quotas
from shared.errors import InvalidOptionsError
from shared.models import Job
from shared.options import JobOptions

__all__ = ["MEL_COLUMNS_PER_SECOND", "SAMPLE_RATE", "WINDOW_COLUMNS", "check_lip_sync", "mel_column", "mel_columns"]

SAMPLE_RATE = 16_000
HOP = 200
WINDOW = 800
MEL_BANDS = 80
MEL_COLUMNS_PER_SECOND = SAMPLE_RATE // HOP  # 80
WINDOW_COLUMNS = 16  # 0.2 s of audio a frame


def check_lip_sync(options: JobOptions, *, has_audio: bool) -> None:
    """Raises:
    InvalidOptionsError: ``options_invalid``: ``lip_syncer`` without a source audio, or a source audio without
        ``lip_syncer``.
    """
    chain = options.processors
    if "lip_syncer" not in chain:
        if has_audio:
            raise InvalidOptionsError(
                "a source audio is only used by the lip_syncer processor; add lip_syncer to processors or leave "
                "source_audio out (the output keeps the target's own audio)"
            )
        return
    if not has_audio:
        raise InvalidOptionsError("lip_syncer needs a source audio (source_audio): the mouths follow it")


def mel_column(frame: int, fps: Fraction) -> int:
    """The first mel column of rendered frame ``frame`` at ``fps`` frames a second: ``floor(frame * 80 / fps)``,
    exact for any frame number.

    >>> mel_column(25, Fraction(25))
    80
    >>> mel_column(7_200 * 30_000 // 1001 - 1, Fraction(30_000, 1001))  # the last frame of two hours at 29.97
    575996
    """
    value = Fraction(frame) * MEL_COLUMNS_PER_SECOND / fps
    return value.numerator // value.denominator


def mel_columns(frames: int, fps: Fraction) -> int:
    """How many mel columns ``frames`` rendered frames need: up to the end of the last frame's window."""
    return mel_column(frames - 1, fps) + WINDOW_COLUMNS if frames > 0 else 0


def record_mel(session: Session, job_id: str, sha256: str, size: int) -> None:
    """Keep the SHA-256 of a lip_syncer job's planned mel spectrogram on its row (its chunks check it), and count
    its ``size`` bytes against the job's stored bytes (the tenant's storage quota) the first time: planned again
    (a retry), the spectrogram replaces its earlier self."""
    job = session.get(Job, job_id)
    if job is not None:
        if job.mel_sha256 is None:
            quotas.add_stored(session, job_id, size)
        job.mel_sha256 = sha256
