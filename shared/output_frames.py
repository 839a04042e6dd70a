"""Which frames of the target a job renders, and the size and rate of its output.

A job renders the frames ``[trim_start_frame, trim_end_frame)`` of its target: the start is included and the end
is not, as FaceFusion's ``trim_frame_start`` / ``trim_frame_end``, FFmpeg's ``trim`` filter and Python slices
count them; frames 50–149 are ``trim_start_frame=50, trim_end_frame=150``, 100 frames. Frame numbers are display
order from 0, as the planner counts them (``workers.video.frame_scan.scan_frames``).

``output_height`` scales the frames before the processors see them (FaceFusion's frames are extracted at the
output resolution too): a smaller output costs less to render. The width keeps the displayed aspect, rounded to
an even number, as 4:2:0 video needs. ``output_fps`` resamples the rendered frames onto a constant grid of that
rate when the chunks are stitched: the chunks stay frame-exact ranges of the input.

A chain with the ``frame_enhancer`` multiplies the frames' width and height by its model's scale
(:attr:`~shared.options.JobOptions.scale`): the frames are decoded at the output size divided by the scale, the
processors before the enhancer work at that size, and the enhancer brings them to the output size. ``output_height``
stays the output's height, so with a ×2 or ×4 enhancer it must be a multiple of 2 or 4; unset, the output is the
input's size times the scale. The enhancer runs last (the face processors find and paste faces on the frames as
decoded): a chain that lists a processor after it is refused (:func:`check_chain`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from shared.errors import InvalidOptionsError, TrimOutOfRangeError
from shared.options import JobOptions

# Rates the NTSC family writes as 29.97 and the like: a caller's 29.97 means 30000/1001.
_NTSC = tuple(Fraction(n * 1000, 1001) for n in (24, 30, 48, 60, 120))


@dataclass(frozen=True)
class FrameRange:
    """Frames ``start`` (included) to ``end`` (excluded) of the target, in display order."""

    start: int
    end: int

    @property
    def count(self) -> int:
        return self.end - self.start


def check_trim(options: JobOptions, total: int | None) -> None:
    """Check a job's range before anything is stored: its end above its start, and, where the frame count
    ``total`` is known, both within the video.

    The order of the two ends is checked here rather than by :class:`JobOptions`: JSON Schema cannot state a
    bound between two fields, and every options object the published schema allows must validate.

    Raises:
        InvalidOptionsError: ``options_invalid``: the end is not above the start; ``trim_out_of_range``: see
            :func:`frame_range`.
    """
    start, end = options.trim_start_frame, options.trim_end_frame
    if start is not None and end is not None and start >= end:
        raise InvalidOptionsError(
            f"trim_end_frame ({end}) must be above trim_start_frame ({start}): the end is excluded, so "
            f"{start + 1} or more"
        )
    if total is not None:
        frame_range(options, total)


def frame_range(options: JobOptions, total: int) -> FrameRange:
    """The frames of a ``total``-frame target that the job renders.

    >>> frame_range(JobOptions(trim_start_frame=50, trim_end_frame=150), 216)
    FrameRange(start=50, end=150)

    Raises:
        InvalidOptionsError: ``trim_out_of_range``: the range starts or ends past the video's last frame;
            ``options_invalid``: it ends where it starts or before.
    """
    start = options.trim_start_frame or 0
    end = total if options.trim_end_frame is None else options.trim_end_frame
    if start >= total:
        raise TrimOutOfRangeError(f"trim_start_frame is {start}, but the video has {total} frames (0 to {total - 1})")
    if end > total:
        raise TrimOutOfRangeError(
            f"trim_end_frame is {end}, but the video has {total} frames: the end (excluded) is at most {total}"
        )
    if end <= start:
        raise InvalidOptionsError(f"trim_end_frame ({end}) must be above trim_start_frame ({start})")
    return FrameRange(start, end)


def output_size(width: int, height: int, output_height: int | None) -> tuple[int, int]:
    """The frame size of the output: the input's (``output_height`` unset), or ``output_height`` rows and the
    width that keeps the aspect, rounded to the nearest even number (at least 2).

    >>> output_size(1920, 1080, 720), output_size(480, 480, 240), output_size(321, 181, None)
    ((1280, 720), (240, 240), (321, 181))
    """
    if output_height is None:
        return width, height
    scaled = Fraction(width * output_height, height)
    return max(2, 2 * round(scaled / 2)), output_height


@dataclass(frozen=True)
class RenderSizes:
    """The frame sizes of a job, ``(width, height)``: ``decoded``, what the processors get, and ``output``, what
    the encoder writes (``decoded`` times the chain's scale)."""

    decoded: tuple[int, int]
    output: tuple[int, int]


def render_sizes(width: int, height: int, options: JobOptions) -> RenderSizes:
    """The decoded and output frame sizes of a ``width`` x ``height`` target under ``options``.

    >>> render_sizes(480, 480, JobOptions(processors=["frame_enhancer"]))
    RenderSizes(decoded=(480, 480), output=(960, 960))
    >>> render_sizes(1920, 1080, JobOptions(processors=["frame_enhancer"], output_height=720))
    RenderSizes(decoded=(640, 360), output=(1280, 720))

    Raises:
        InvalidOptionsError: ``output_height`` is not a multiple of the chain's scale (see :func:`check_chain`).
    """
    scale = options.scale
    target = options.output_height
    if target is not None and target % scale:
        raise InvalidOptionsError(
            f"output_height ({target}) must be a multiple of {scale} with frame_enhancer "
            f"{options.frame_enhancer.model} (x{scale}): the frames are decoded at output_height / {scale}; "
            f"{target - target % scale} or {target - target % scale + scale}"
        )
    decoded = output_size(width, height, None if target is None else target // scale)
    return RenderSizes(decoded, (decoded[0] * scale, decoded[1] * scale))


def check_chain(options: JobOptions) -> None:
    """Check what the schema cannot state about the frame enhancer: it is the chain's last processor, and
    ``output_height`` is a multiple of its scale.

    Raises:
        InvalidOptionsError: ``options_invalid``, saying which.
    """
    if "frame_enhancer" in options.processors and options.processors[-1] != "frame_enhancer":
        raise InvalidOptionsError(
            f"frame_enhancer must be the last processor (got {options.processors}): the face processors work on "
            "the frames as decoded, before they are upscaled"
        )
    render_sizes(2, 2, options)  # the output_height rule does not depend on the size


@dataclass(frozen=True)
class JobOutput:
    """What a job writes: ``frames`` frames of ``width`` x ``height``."""

    frames: int
    width: int
    height: int

    @property
    def frame_pixels(self) -> int:
        return self.width * self.height

    @property
    def pixels(self) -> int:
        return self.frames * self.frame_pixels


def job_output(width: int, height: int, options: JobOptions, *, frames: int, seconds: Fraction | float) -> JobOutput:
    """What a job writes from the ``frames`` frames it renders (its range, after the trim), which last
    ``seconds``: as many frames, or with ``output_fps`` as many as the resampling makes of those seconds, at the
    output size (``output_height``, times the frame enhancer's scale).

    >>> job_output(64, 36, JobOptions(output_fps=240, output_height=4320), frames=20, seconds=20)
    JobOutput(frames=4800, width=7680, height=4320)
    >>> job_output(480, 480, JobOptions(processors=["frame_enhancer"]), frames=10, seconds=Fraction(1, 3))
    JobOutput(frames=10, width=960, height=960)

    Raises:
        InvalidOptionsError: see :func:`render_sizes`.
    """
    out_w, out_h = render_sizes(width, height, options).output
    count = frames if options.output_fps is None else resampled_frames(seconds, options.output_fps)
    return JobOutput(count, out_w, out_h)


def output_rate(output_fps: float) -> Fraction:
    """The exact rate of a requested ``output_fps``: 29.97 is NTSC's 30000/1001, others as written.

    >>> str(output_rate(29.97)), str(output_rate(25)), str(output_rate(12.5))
    ('30000/1001', '25', '25/2')
    """
    for rate in _NTSC:
        if abs(float(rate) - output_fps) < 0.005:
            return rate
    return Fraction(str(output_fps)).limit_denominator(1001)


def resampled_frames(seconds: Fraction | float, output_fps: float) -> int:
    """How many frames ``seconds`` of video become at ``output_fps``: one for each output interval that starts
    within it, a half interval rounded up — what FFmpeg's ``fps`` filter gives (measured for 100 frames at 30 fps
    to 1, 3.15, 7, 12, 24, 25, 29.97 and 60 fps).

    >>> resampled_frames(Fraction(100, 30), 15), resampled_frames(Fraction(100, 30), 25), resampled_frames(0.1, 5)
    (50, 83, 1)
    """
    return max(1, math.floor(Fraction(seconds) * output_rate(output_fps) + Fraction(1, 2)))
