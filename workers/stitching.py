"""The ``stitch`` step: concatenate the chunks by stream copy, add the original audio once, publish atomically.

The output is written to a temporary name and moved into place, so no reader ever sees half a file; a stitcher
killed mid-way leaves only the job's lease to expire, and the reaper sends the stitch again.
"""

from __future__ import annotations

import logging
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from shared import control, jobs, quotas, tallies
from shared.containers import carries_alpha, container_of
from shared.db import session_scope
from shared.dispatch import send_all
from shared.errors import LeaseLostError, StitchMismatchError, SwapfarmError
from shared.events import EventKind, record
from shared.media import MediaInfo
from shared.options import JobOptions
from shared.output_frames import FrameRange, frame_range, output_rate, render_sizes, resampled_frames
from shared.states import JobStatus
from workers import degradations
from workers.leases import job_heartbeat
from workers.runtime import Runtime
from workers.video import ffmpeg, frame_index, mp4_timing, stills
from workers.video.frame_scan import frame_times

logger = logging.getLogger(__name__)


def stitch(job_id: str, rt: Runtime) -> None:
    lease, limit = rt.settings.lease_seconds, rt.settings.max_running_jobs_per_tenant
    with session_scope(rt.db) as session:
        token = jobs.begin_stitch(session, job_id, lease, worker=rt.hostname)
        job = jobs.get_job(session, job_id) if token else None
        if token is None or job is None:
            logger.info("job %s: not stitching (done, held, or not ready)", job_id)
            return
        chunk_urls = jobs.chunk_outputs(session, job_id)
        options = JobOptions.model_validate(job.options)
        media = MediaInfo.from_json(job.media or {})
        target_url, frames_total = job.target_url, job.frames_total
        audio = (job.audio_url, job.audio_media) if "lip_syncer" in options.processors and job.audio_url else None
    extension = container_of(options.encoder.encoder).extension  # the chunks' container, and the output's
    output_url = rt.storage.job_url(job_id, f"output{extension}")
    started = time.monotonic()
    scratch = rt.scratch / job_id
    scratch.mkdir(parents=True, exist_ok=True)
    try:
        with (
            tempfile.TemporaryDirectory(dir=scratch) as tmp_name,
            ExitStack() as stack,
            job_heartbeat(rt, job_id, token) as beat,
        ):
            tmp = Path(tmp_name)
            parts = [stack.enter_context(rt.storage.local_copy(url, tmp)) for url in chunk_urls]
            list_file = tmp / "chunks.txt"
            list_file.write_text(ffmpeg.concat_list(parts))
            stitched = tmp / f"output{extension}"
            with rt.targets.local(rt.storage, target_url, rt.scratch) as target:
                with degradations.collecting() as found:
                    every = frame_index.load(rt.storage, job_id, target, media.demuxer)
                    result = _stitch(list_file, target, every, media, options, stitched)
                degradations.record(rt.db, job_id, found)
                if audio is not None and audio[1] is not None:
                    stitched = _source_audio(rt, job_id, stitched, audio[0], audio[1], result, media, options, tmp)
                output_times = frame_times(stitched)
                counted = len(output_times)
                if frames_total is not None and counted != result.expected(frames_total):
                    raise StitchMismatchError(
                        f"stitched output has {counted} frames, expected {result.expected(frames_total)}"
                    )
                _stills(rt, job_id, target, stitched, result, output_times, media, tmp)
            if not beat.alive:
                raise LeaseLostError(f"job {job_id}: stitch lease lost")
            output_bytes = stitched.stat().st_size
            rt.storage.upload(stitched, output_url)
        with session_scope(rt.db) as session:
            tallies.record_job_totals(session, job_id)  # before ``succeeded``; undone with it if the lease is lost
            finished = jobs.finish_job(session, job_id, token, output_url, default_limit=limit)
            if not finished.changed:
                raise LeaseLostError(f"job {job_id}: stitch lease lost before publishing")
            quotas.add_stored(session, job_id, output_bytes)
    except LeaseLostError:
        with session_scope(rt.db) as session:
            job = jobs.get_job(session, job_id)
            cancelled = job is not None and job.status == JobStatus.CANCELLED
        if cancelled:  # what this stitcher published must not outlive the cancel
            logger.info("job %s: cancelled while stitching; its files are deleted", job_id)
            rt.storage.delete(rt.storage.job_url(job_id), recursive=True)
        else:
            logger.info("job %s: stitch lease lost; another stitcher owns it", job_id)
        return
    except SwapfarmError as exc:
        logger.error("job %s: stitch failed: %s", job_id, exc)
        with session_scope(rt.db) as session:
            failed = jobs.fail_job(session, job_id, exc, default_limit=limit)
        send_all(rt.dispatcher, failed.messages)
        return
    rt.metrics.stitch_seconds.observe(time.monotonic() - started)
    delete_chunks(rt, job_id)  # stopped before it is done, the reaper does it (workers.reaping)
    logger.info("job %s: succeeded, %s", job_id, output_url)
    send_all(rt.dispatcher, finished.messages)


def _source_audio(
    rt: Runtime,
    job_id: str,
    stitched: Path,
    audio_url: str,
    audio_media: dict[str, Any],
    result: _Stitched,
    media: MediaInfo,
    options: JobOptions,
    tmp: Path,
) -> Path:
    """The stitched output with the lip_syncer job's source audio in place of the target's (``workers.lip_sync``);
    the ``audio_fitted`` event says how it was cut or padded to the video's length."""
    from shared.audio import AudioInfo
    from workers.lip_sync.soundtrack import fit_message, replace_audio, unmixed_message

    info = AudioInfo.from_json(audio_media)
    kept = result.times[result.kept.start : result.kept.end]
    if result.resampled is not None and options.output_fps is not None:
        seconds = result.resampled / options.output_fps
    else:
        seconds = float(mp4_timing.shown_seconds(kept, media.fps))
    container = container_of(options.encoder.encoder)
    out = stitched.with_name(f"with-audio{container.extension}")
    unmixed = unmixed_message(keep_target=options.lip_syncer.keep_target_audio, has_target=media.has_audio)
    if unmixed is not None:
        with degradations.collecting() as found:
            degradations.report("target_audio_missing", unmixed)
        degradations.record(rt.db, job_id, found)
    with rt.storage.local_copy(audio_url, tmp) as local:
        replace_audio(
            stitched, local, info, seconds, out, keep_target=options.lip_syncer.keep_target_audio,
            has_target=media.has_audio, muxer=container.muxer,
        )  # fmt: skip
    message = fit_message(info, seconds)
    if message is not None:
        with session_scope(rt.db) as session:
            record(session, job_id, EventKind.AUDIO_FITTED, message=message)
    stitched.unlink()
    return out


@dataclass(frozen=True)
class _Stitched:
    """What a stitch wrote: the input's frame times, the range of them the job kept, and the output's frame count
    when the video was resampled onto another rate (else the chunks' frames, one for one)."""

    times: list[float]
    kept: FrameRange
    resampled: int | None

    def expected(self, frames_total: int) -> int:
        return frames_total if self.resampled is None else self.resampled


def delete_chunks(rt: Runtime, job_id: str) -> None:
    """Delete a succeeded job's chunk files, then forget them (:func:`shared.control.leftover_chunks`)."""
    rt.storage.delete(rt.storage.job_url(job_id, "chunks"), recursive=True)
    with session_scope(rt.db) as session:
        control.forget_chunks(session, job_id)


def _stitch(
    list_file: Path, target: Path, every: list[float], media: MediaInfo, options: JobOptions, output: Path
) -> _Stitched:
    """Concatenate the chunks into ``output`` with the audio of ``target`` (the part a trimmed job keeps), whose
    frames are at times ``every`` (the planner's index, :mod:`workers.video.frame_index`).

    Chunks are encoded at the constant average rate. When the input's frames are not on that grid (a variable
    frame rate), the concatenated video is written first, its frames given the input's times, then remuxed. If
    the times cannot be written, the job still gets every frame, at the constant rate — and a ``vfr_timing_lost``
    warning in its log (``workers.degradations``), never silently. With ``output_fps`` the video is re-encoded once,
    here, onto that rate's grid (FFmpeg's ``fps`` filter), from the frames at their input times.
    """
    audio = target if media.has_audio else None
    demuxer = media.demuxer
    kept = frame_range(options, len(every))
    times = every[kept.start : kept.end]
    cut = _audio_cut(every, kept, media) if audio is not None else None
    resample, resampled = None, None
    container = container_of(options.encoder.encoder)
    if options.output_fps is not None:
        width, height = render_sizes(media.width, media.height, options).output
        rate = output_rate(options.output_fps)
        resample = ffmpeg.Resample(rate, width, height, options.encoder, alpha=carries_alpha(options))
        resampled = resampled_frames(mp4_timing.shown_seconds(times, media.fps), options.output_fps)
    provenance = options.changes_faces
    if mp4_timing.follows_rate(times, media.fps):
        args = ffmpeg.stitch_args(
            list_file, audio, media.audio_codec, output, provenance=provenance, audio_demuxer=demuxer,
            audio_cut=cut, resample=resample, container=container,
        )  # fmt: skip
        ffmpeg.run(args, what="stitch")
        return _Stitched(every, kept, resampled)
    video = output.with_name(f"video{container.extension}")
    ffmpeg.run(ffmpeg.concat_video_args(list_file, video, container), what="stitch")
    try:
        mp4_timing.retime_video(video, times)
    except mp4_timing.Mp4TimingError as exc:  # the file is as it was: every frame, at the constant rate
        degradations.report(
            "vfr_timing_lost",
            f"the video's frames have variable times that could not be kept ({exc}); every frame is in the "
            f"output, shown at a constant {media.fps} fps",
        )
        if resampled is not None:
            resampled = resampled_frames(Fraction(len(times)) / Fraction(media.fps), options.output_fps or 0)
    args = ffmpeg.remux_args(
        video, audio, media.audio_codec, output, provenance=provenance, audio_demuxer=demuxer, audio_cut=cut,
        resample=resample, container=container,
    )  # fmt: skip
    ffmpeg.run(args, what="stitch")
    video.unlink()
    return _Stitched(every, kept, resampled)


def _audio_cut(every: list[float], kept: FrameRange, media: MediaInfo) -> ffmpeg.AudioCut | None:
    """The audio that goes with the kept frames: from the first kept frame's time to the first dropped one's
    after them; ``None`` when the job keeps every frame (the audio is taken whole, as it is)."""
    if kept.start == 0 and kept.end == len(every):
        return None
    start = every[kept.start] - media.start_time if kept.start > 0 else 0.0
    end = every[kept.end] - media.start_time if kept.end < len(every) else None
    return ffmpeg.AudioCut(max(0.0, start), None if end is None else end - max(0.0, start))


def _stills(
    rt: Runtime,
    job_id: str,
    target: Path,
    output: Path,
    stitch: _Stitched,
    output_times: list[float],
    media: MediaInfo,
    tmp: Path,
) -> None:
    """The before/after stills of the jobs console; a failure is the job's event, never the job's failure."""
    folder = tmp / "stills"
    folder.mkdir()
    try:
        made = stills.make(target, output, stitch.times, output_times, media, folder, stitch.kept.start)
        stills.publish(rt, job_id, folder, made)
    except (SwapfarmError, OSError) as exc:
        logger.warning("job %s: no before/after stills: %s", job_id, exc)
        with session_scope(rt.db) as session:
            record(session, job_id, EventKind.STILLS_FAILED, message=str(exc)[:500])
