"""The limits on what a job takes in and what it writes out.

A target is checked against the duration, frame size and frame count limits; what the job will write is checked
against the same frame size and frame count limits, and its pixels in all (frames x width x height) against
``max_output_pixels``: ``output_fps`` multiplies the frames, ``output_height`` and the frame enhancer's scale the
frame size (``shared.output_frames.job_output``). Both are checked twice: at submission from the header ffprobe reads
(:meth:`MediaLimits.check_submitted`), and at planning from what the file holds, the frames counted one by one
(:meth:`MediaLimits.check_output` with the planner's count) — a header may lie, or not say.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from shared.errors import MediaTooLongError, ResolutionError, TooManyFramesError
from shared.media import MediaInfo
from shared.options import JobOptions
from shared.output_frames import JobOutput, job_output
from shared.settings import Settings

__all__ = ["MediaLimits", "submitted_frames"]


@dataclass(frozen=True)
class MediaLimits:
    max_duration_seconds: float
    max_frame_pixels: int
    max_frames: int
    max_output_pixels: int
    max_source_pixels: int | None = None

    @classmethod
    def of(cls, settings: Settings) -> MediaLimits:
        """The limits every job is checked against (duration, frame size, frames, output pixels, source pixels)."""
        return cls(
            max_duration_seconds=settings.max_duration_seconds,
            max_frame_pixels=settings.max_frame_pixels,
            max_frames=settings.max_frames,
            max_output_pixels=settings.max_output_pixels,
            max_source_pixels=settings.max_source_pixels,
        )

    def check(self, media: MediaInfo) -> None:
        """The target, as its header describes it.

        Raises:
            MediaLimitError: ``media_too_long``, ``resolution_too_large`` or ``too_many_frames``.
        """
        if media.duration > self.max_duration_seconds:
            raise MediaTooLongError(
                f"the video lasts {media.duration:.1f}s; the limit is {self.max_duration_seconds:.0f}s"
            )
        if media.width * media.height > self.max_frame_pixels:
            raise ResolutionError(
                f"frames of {media.width}x{media.height} are over the limit of {self.max_frame_pixels} pixels"
            )
        frames = _header_frames(media)
        if frames > self.max_frames:
            raise TooManyFramesError(f"the video has about {frames} frames; the limit is {self.max_frames}")

    def check_submitted(self, media: MediaInfo, options: JobOptions) -> JobOutput:
        """What a job of this target will write, judged from the header (its frame count, or its duration times
        its rate where it declares none), and checked (:meth:`check_output`)."""
        frames = submitted_frames(media, options)
        seconds = Fraction(frames) / Fraction(media.fps) if media.fps_value > 0 else media.duration
        return self.check_output(media.width, media.height, options, frames=frames, seconds=seconds)

    def check_output(
        self, width: int, height: int, options: JobOptions, *, frames: int, seconds: Fraction | float
    ) -> JobOutput:
        """What a job writes from ``frames`` rendered frames (after the trim) lasting ``seconds`` of a ``width`` x
        ``height`` target (``shared.output_frames.job_output``), refused past a limit.

        Raises:
            MediaLimitError: ``too_many_frames`` (more output frames than ``max_frames``) or
                ``resolution_too_large`` (an output frame over ``max_frame_pixels``, or the whole output over
                ``max_output_pixels``).
            InvalidOptionsError: ``output_height`` is not a multiple of the frame enhancer's scale.
        """
        out = job_output(width, height, options, frames=frames, seconds=seconds)
        if out.frame_pixels > self.max_frame_pixels:
            raise ResolutionError(
                f"an output of {out.width}x{out.height} is over the limit of {self.max_frame_pixels} pixels a frame"
            )
        if out.frames > self.max_frames:
            raise TooManyFramesError(
                f"the job would write {out.frames} frames (output_fps and the trim included); "
                f"the limit is {self.max_frames}"
            )
        if out.pixels > self.max_output_pixels:
            raise ResolutionError(
                f"the job would write {out.frames} frames of {out.width}x{out.height}, {out.pixels} pixels; "
                f"the limit is {self.max_output_pixels} pixels a job"
            )
        return out


def submitted_frames(media: MediaInfo, options: JobOptions) -> int:
    """The frames a job renders (its range, after the trim), judged from the target's header before the planner
    counts them.

    >>> from shared.media import MediaInfo
    >>> clip = MediaInfo(64, 64, "25/1", 4.0, None, "h264", "yuv420p", 0, 0.0, False, None, "mp4")
    >>> submitted_frames(clip, JobOptions(trim_start_frame=10)), submitted_frames(clip, JobOptions(trim_end_frame=500))
    (90, 100)
    """
    total = _header_frames(media)
    start = min(options.trim_start_frame or 0, total)
    end = total if options.trim_end_frame is None else min(options.trim_end_frame, total)
    return max(0, end - start)


def _header_frames(media: MediaInfo) -> int:
    """The frames the header declares, else its duration times its rate."""
    return media.frame_count or round(media.duration * media.fps_value)
