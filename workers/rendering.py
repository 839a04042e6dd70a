"""The ``render_chunk`` step: claim the chunk, decode its frames, run the processors, encode, upload, mark done.

A heartbeat thread extends the chunk's lease while the chunk renders. When the heartbeat finds the lease gone
(the reaper gave the chunk to another worker, or the job was cancelled) the render stops between batches and its
partial output is thrown away.
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy.exc import OperationalError

from shared import events, fairness, jobs, pausing, previewing, worker_health
from shared.containers import carries_alpha, container_of
from shared.db import session_scope
from shared.dispatch import send_all, send_or_leave_to_reaper
from shared.errors import LeaseLostError, ProcessorError, SwapfarmError
from shared.log_context import job_context
from shared.media import MediaInfo
from shared.options import JobOptions
from shared.output_frames import render_sizes
from shared.tallies import FaceTally
from shared.tasks import RENDER_CHUNK, STITCH, message
from shared.worker_health import join_tags
from workers import degradations, previews
from workers.engines.base import Degradation
from workers.faces.detection import FaceDetector
from workers.faces.track_feed import BatchDetection, TrackFeed, reads_landmarks
from workers.frames.choice import FALLBACK, BackendChoice, backend_for, frame_path_device, make_backend
from workers.frames.feed import FrameFeed
from workers.leases import Heartbeat
from workers.lip_sync.planning import chunk_audio
from workers.pipeline import decoded_kept, face_chain, plane_refusal, run_stages, stages_of
from workers.processors import FrameBatch, Processor, ProcessorContext, build
from workers.processors.base import Report, Tallied
from workers.runtime import Runtime
from workers.video import codecs
from workers.video.pipes import FrameReader, FrameWriter, split_frames
from workers.video.transcode import Span, transcode

if TYPE_CHECKING:
    from workers.faces.device_detection import DeviceDetector

logger = logging.getLogger(__name__)


@contextmanager
def _local_sources(rt: Runtime, urls: list[str], scratch: Path) -> Iterator[list[Path]]:
    with ExitStack() as stack:
        yield [stack.enter_context(rt.storage.local_copy(url, scratch)) for url in urls]


def render_chunk(job_id: str, chunk_id: str, rt: Runtime) -> None:
    """Render the fairest queued chunk of the message's queue (``shared.fairness``): the message is a token, so the
    chunk rendered may belong to another job than the one it names."""
    settings = rt.settings
    taker = fairness.Taker(rt.hostname, rt.family, join_tags(settings.worker_tags), settings)
    with session_scope(rt.db) as session:
        claim = fairness.claim_next(
            session, chunk_id, worker=rt.hostname, family=rt.family, lease_seconds=settings.lease_seconds,
            taker=taker,
        )  # fmt: skip
        job = jobs.get_job(session, claim.job_id) if claim else None
        if claim is None or job is None:
            logger.info("job %s chunk %s: not rendering (done, held, not for this worker, or job not rendering)",
                        job_id, chunk_id)  # fmt: skip
            _pass_on(rt, job_id, chunk_id)
            return
        options = JobOptions.model_validate(job.options)
        media = MediaInfo.from_json(job.media or {})
        target_url, source_urls, priority = job.target_url, list(job.source_urls), job.priority
    with session_scope(rt.db) as session:
        fairness.mark_served(session, claim.job_id)
        # The message named another chunk, still queued: it needs a message of its own again, so that what the
        # broker holds keeps matching what Postgres says is queued (the reaper compares them chunk by chunk; see
        # ``shared.reaper``). The claimed chunk's own message stays in the broker as a spare token.
        orphaned = fairness.still_queued(session, chunk_id) if claim.chunk_id != chunk_id else None
    if orphaned is not None:  # the claimed chunk is rendered even where the broker is away: the reaper sends this
        send_or_leave_to_reaper(rt.dispatcher, [orphaned])
    with job_context(job_id=claim.job_id, chunk_id=claim.chunk_id), degradations.collecting() as found:
        _render_claimed(rt, claim, options, media, target_url, source_urls, priority)
    degradations.record(rt.db, claim.job_id, found)


def _pass_on(rt: Runtime, job_id: str, chunk_id: str) -> None:
    """The token named a chunk still queued that this worker may not take (quarantined, blocklisted, its tags
    missing, or a soft fail left to another worker): send the token on, after a heartbeat, for a worker that may;
    and where no live worker has the tags the job requires, say why it waits (``no_worker_with_tags``)."""
    with session_scope(rt.db) as session:
        # a paused farm's tokens are spent: resuming it sends every queued chunk again (``shared.pausing``)
        again = None if pausing.farm_paused(session) else fairness.still_queued(session, chunk_id)
        if again is not None:
            worker_health.note_no_worker(session, rt.settings, again.payload.job_id)
    if again is None:
        return
    delay = rt.settings.heartbeat_seconds
    rt.dispatcher.send(again.task, again.payload, queue=again.queue, countdown=delay, priority=again.priority)


def _render_claimed(
    rt: Runtime,
    claim: jobs.ChunkClaim,
    options: JobOptions,
    media: MediaInfo,
    target_url: str,
    source_urls: list[str],
    priority: int,
) -> None:
    settings = rt.settings
    job_id, chunk_id = claim.job_id, claim.chunk_id
    logger.info(
        "job %s chunk %s: rendering frames %d..%d (attempt %d)",
        job_id, chunk_id, claim.frame_start, claim.frame_end - 1, claim.attempt,
    )  # fmt: skip
    started = time.monotonic()
    output_url: str | None = None
    tallies: list[FaceTally] = []
    how: list[str] = []  # how the frames were rendered, for the chunk_done event
    try:
        output_url = _render(rt, claim, options, media, target_url, source_urls, tallies, how)
        with session_scope(rt.db) as session:
            last = jobs.finish_chunk(session, claim, output_url, time.monotonic() - started, detail="; ".join(how))
            for tally in tallies:  # with the chunk's acceptance: an attempt whose output is thrown away counts nothing
                events.record(session, job_id, events.EventKind.FACES, chunk_index=claim.index, message=tally.message())
    except LeaseLostError:
        logger.info("job %s chunk %s: lease lost (taken over or cancelled); stopped", job_id, chunk_id)
        if output_url is not None:  # uploaded, then not accepted: the file is this attempt's alone
            rt.storage.delete(output_url)
        return
    except OperationalError:
        # The database failed, not the chunk: this is no attempt of the chunk's to record (and it could not be
        # recorded now). The task retries with back-off; the reaper re-queues the chunk once its lease expires.
        logger.warning("job %s chunk %s: database unavailable; the chunk will be retried", job_id, chunk_id)
        raise
    except Exception as exc:
        if isinstance(exc, SwapfarmError):
            error = exc
        else:  # our fault, not the input's: the client learns that much, the log keeps the rest
            logger.exception("job %s chunk %s: unexpected error in attempt %d", job_id, chunk_id, claim.attempt)
            error = ProcessorError(f"an unexpected error ({type(exc).__name__}) stopped the chunk; see the worker log")
        logger.warning("job %s chunk %s: attempt %d failed: %s", job_id, chunk_id, claim.attempt, error)
        with session_scope(rt.db) as session:
            outcome = jobs.fail_chunk(
                session, claim, error, settings.max_attempts, default_limit=settings.max_running_jobs_per_tenant,
                settings=settings,
            )  # fmt: skip
        if outcome.health.blocklisted:
            rt.metrics.worker_blocklists.inc()
            logger.warning("worker %s: blocklisted for job %s", rt.hostname, job_id)
        if outcome.health.quarantined:
            rt.metrics.worker_quarantines.inc()
            logger.error("worker %s: quarantined after failures on several jobs; it takes no work", rt.hostname)
        if outcome.retry:
            rt.metrics.retries.labels(step="render").inc()
            countdown = settings.retry_backoff_seconds * 2 ** (claim.attempt - 1)
            again = message(RENDER_CHUNK, job_id, chunk_id=chunk_id, family=options.family, priority=priority)
            rt.dispatcher.send(again.task, again.payload, queue=again.queue, countdown=countdown, priority=priority)
        send_all(rt.dispatcher, outcome.messages)  # the waiting jobs a failed job made room for
        return
    seconds = time.monotonic() - started
    rt.metrics.chunk_rendered(
        worker=rt.hostname, family=rt.family, frames=claim.frame_end - claim.frame_start, seconds=seconds
    )
    logger.info("job %s chunk %s: done in %.1fs", job_id, chunk_id, seconds)
    if last:
        send_all(rt.dispatcher, [message(STITCH, job_id, family=options.family, priority=priority)])
    if not last and options.preview > 0:
        _preview_done(rt, job_id, target_url, media)


def _preview_done(rt: Runtime, job_id: str, target_url: str, media: MediaInfo) -> None:
    """After a previewed job's chunk: once its preview's chunks are all done, its stills are made, then the job
    waits for approval (its webhook and event in that transaction). Two workers finishing the last two preview
    chunks at once may both make the stills (the same files); one moves the job."""
    with session_scope(rt.db) as session:
        ready = previewing.preview_rendered(session, job_id)
    if not ready:
        return
    previews.make_stills(rt, job_id, target_url, media)
    with session_scope(rt.db) as session:
        if previewing.await_approval(session, job_id, rt.settings.preview_ttl_seconds):
            logger.info("job %s: preview rendered; awaiting approval", job_id)


def _render(
    rt: Runtime,
    claim: jobs.ChunkClaim,
    options: JobOptions,
    media: MediaInfo,
    target_url: str,
    source_urls: list[str],
    tallies: list[FaceTally],
    how: list[str],
) -> str:
    """Render the chunk and upload it; its URL. What processors with a ``tally`` did is added to ``tallies``, the
    frame back-end the frames took to ``how``."""
    progress = [0]  # frames done, read by the heartbeat thread
    options = codecs.usable_options(options, rt.codecs)
    scratch = rt.scratch / claim.job_id
    scratch.mkdir(parents=True, exist_ok=True)
    with (
        rt.targets.local(rt.storage, target_url, rt.scratch) as target,
        _local_sources(rt, source_urls, scratch) as sources,
        tempfile.TemporaryDirectory(dir=scratch) as tmp,
        Heartbeat(lambda: _beat(rt, claim, progress[0]), rt.settings.heartbeat_seconds, claim.chunk_id) as beat,
    ):
        report = _reporter(rt, claim)
        audio = chunk_audio(rt, claim) if "lip_syncer" in options.processors else None
        context = ProcessorContext(options=options, sources=sources, settings=rt.settings, report=report, audio=audio)
        processors = [build(name, context) for name in options.processors]
        extension = container_of(options.encoder.encoder).extension  # the job's container, chunks and output alike
        encoded = Path(tmp) / f"{claim.index:05d}{extension}"
        if any(p.touches_pixels for p in processors):
            _process(rt, claim, media, options, processors, target, encoded, progress, beat, report, how)
        else:  # nothing looks at the pixels: one ffmpeg process, the same frames and timing as the pipes give
            width, height = render_sizes(media.width, media.height, options).output  # no processor changes it
            span = Span(
                target, claim.seek_seconds, claim.frame_end - claim.frame_start, width, height, media.fps,
                demuxer=media.demuxer, scale=(width, height) != (media.width, media.height),
            )  # fmt: skip
            transcode(
                span, encoded, options.encoder, progress, alive=lambda: beat.alive, what=f"chunk {claim.chunk_id}",
                stall_seconds=rt.settings.chunk_stall_seconds,
            )  # fmt: skip
            rt.metrics.batch_size.observe(claim.frame_end - claim.frame_start)  # the chunk went through as one batch
        tallies.extend(p.tally() for p in processors if isinstance(p, Tallied))
        output_url = rt.storage.job_url(claim.job_id, "chunks", f"{claim.index:05d}-{claim.token}{extension}")
        rt.storage.upload(encoded, output_url)
    return output_url


def _reporter(rt: Runtime, claim: jobs.ChunkClaim) -> Report:
    """Where this chunk's processors report a slower path their models took: a degradation like any other
    (:mod:`workers.degradations`: a log line, ``swapfarm_degradations_total{code}``, a ``warning`` event once per job
    and code). Written at once, not collected: the processors' stages run on threads of their own."""

    def report(degradation: Degradation) -> None:
        with job_context(job_id=claim.job_id, chunk_id=claim.chunk_id):
            notice = degradations.report(degradation.kind, degradation.message)
        degradations.record(rt.db, claim.job_id, [notice])

    return report


def _process(
    rt: Runtime,
    claim: jobs.ChunkClaim,
    media: MediaInfo,
    options: JobOptions,
    processors: list[Processor],
    target: Path,
    encoded: Path,
    progress: list[int],
    beat: Heartbeat,
    report: Report,
    how: list[str],
) -> None:
    """Decode the chunk's frames through a pipe, run the processors' stages overlapped (:mod:`workers.pipeline`),
    encode through a pipe; the frame back-end they took is added to ``how``."""
    frames = claim.frame_end - claim.frame_start
    sizes = render_sizes(media.width, media.height, options)
    width, height = sizes.decoded
    choice, planes, detector = _frame_path(rt, options, processors, width, height, report)
    how.append(f"frames on {choice}")
    on_device = None
    if planes is not None and detector is not None:  # the tracks' detection too, on the feed's device frames
        from workers.faces.device_detection import detection_on_feed

        on_device = detection_on_feed(detector, planes)
    feed = _track_feed(rt, options, processors, detector, on_device)
    behind, ahead = 0, 0
    if feed is not None:
        behind, ahead = min(feed.context, claim.frame_start), feed.context
    read = partial(
        FrameReader,
        target,
        width=width,
        height=height,
        batch_size=rt.settings.batch_size,
        demuxer=media.demuxer,
        stall_seconds=rt.settings.chunk_stall_seconds,
        hwaccel=rt.codecs.hwaccel,
        scale=(width, height) != (media.width, media.height),
        planes=planes is not None,
    )
    lookbehind: FrameReader | None = None
    if behind and claim.lead_frames == behind and claim.lead_seek_seconds is not None:
        # One decoder for the look-behind (the frames before the chunk, context for its tracks), the chunk's frames
        # and the look-ahead, from the planner's seek to the look-behind's first frame (from its frame index).
        reader = read(seek_seconds=claim.lead_seek_seconds, frames=behind + frames, extra=ahead)
    else:
        reader = read(seek_seconds=claim.seek_seconds, frames=frames, extra=ahead)
        if behind:  # a chunk planned without its lead: the look-behind's own decoder. Seeking by the nominal
            # frame rate lands exactly on constant-rate video; on variable-rate video it may land a frame or so off,
            # which shifts only what the tracks see before the chunk, never the frames it outputs.
            seconds = max(0.0, claim.seek_seconds - behind / media.fps_value) if claim.frame_start > behind else 0.0
            lookbehind = read(seek_seconds=seconds, frames=behind, optional=True)
    writer = FrameWriter(  # at the output size: the frame enhancer, if any, upscaled the frames to it
        encoded, width=sizes.output[0], height=sizes.output[1], fps=media.fps, options=options.encoder,
        stall_seconds=rt.settings.chunk_stall_seconds, planes=planes is not None, alpha=carries_alpha(options),
    )  # fmt: skip

    def sink(batch: FrameBatch) -> None:
        rt.metrics.batch_size.observe(len(batch))
        writer.write(batch)
        progress[0] += len(batch)
        if not beat.alive:
            raise LeaseLostError(f"chunk {claim.chunk_id}: lease lost or job cancelled")

    try:
        with ExitStack() as decoders:
            for decoder in (d for d in (reader, lookbehind) if d is not None):
                decoders.enter_context(decoder)
            behind_frames, own = split_frames(reader, behind) if lookbehind is None else (lookbehind, reader)
            chunk, before = (
                (own, behind_frames)
                if planes is None
                else (planes.frames(own, taken=frames), planes.frames(behind_frames, keep=False))
            )
            origin = claim.frame_start - behind  # the video's number of the first frame the feed detects
            work = feed.work(before if behind else (), chunk, frames, origin=origin) if feed else chunk
            stages = stages_of(processors, planes, detector)
            run_stages(work, [*decoded_kept(processors), *stages], sink)
        writer.close()
        if planes is not None:
            planes.report()
    except BaseException:
        writer.abort()
        raise
    if writer.frames_written != frames:
        raise ProcessorError(f"chunk produced {writer.frames_written} frames, expected {frames}")


def _frame_path(
    rt: Runtime, options: JobOptions, processors: list[Processor], width: int, height: int, report: Report
) -> tuple[BackendChoice, FrameFeed[Any] | None, DeviceDetector | None]:
    """The chunk's frame back-end, its feed where the frames travel as 4:2:0 planes (the engine setting asks for
    torch: :func:`~workers.frames.choice.frame_path_device`), and the detector on the torch device where it takes
    the faces there. A chain whose frames cannot travel as planes (:func:`~workers.pipeline.plane_refusal`)
    renders as whole BGR frames on the host back-end with a degradation, and detection the device cannot run stays
    on the host with one (a detector that runs uncompiled, compiling having failed, is reported to ``report``)."""
    device = frame_path_device(rt.settings, rt.family)
    if device is None:
        return backend_for(None), None, None
    refused = plane_refusal(processors, width, height)
    if refused is not None:
        degradations.report(FALLBACK, f"the frames render as whole BGR frames on the host, not as planes: {refused}")
        return backend_for(None), None, None
    staged = face_chain(processors)
    detector = None
    wanted = rt.settings.device_detection == "on" or (rt.settings.device_detection == "auto" and device != "cpu")
    if staged and wanted:
        from workers.faces.device_detection import device_detector  # torch: only where the setting asks for it

        detector = device_detector(
            staged[0].detector, rt.settings, options, device, width=width, height=height, family=rt.family,
            report=report,
        )  # fmt: skip
    choice = backend_for(device)
    logger.info("frames as planes on %s", choice)
    return choice, FrameFeed(make_backend(choice)), detector


def _track_feed(
    rt: Runtime,
    options: JobOptions,
    processors: list[Processor],
    detector: FaceDetector | None = None,
    on_device: Callable[[FrameBatch], BatchDetection | None] | None = None,
) -> TrackFeed | None:
    """The chain's tracked detection (:mod:`workers.faces.track_feed`), or ``None`` where no processor works on faces
    or the job turned tracking off; ``detector`` replaces the chain's own (the torch device's), ``on_device``
    runs it on the frames the feed holds on the device."""
    staged = face_chain(processors)
    if not staged or not options.face.tracking:
        return None
    targeter = next((p.targeter for p in staged if p.targeter is not None), None)
    strict = "face_blur" in options.processors and options.face.blur_strict
    landmarks = reads_landmarks(options.processors)  # face_blur reads boxes alone
    other = options.face.strict_second_detector if strict else None
    second = None
    if other is not None and other != options.face.detector:
        second = FaceDetector.load(options.face.model_copy(update={"detector": other}), rt.settings)
    return TrackFeed(
        detector or staged[0].detector, targeter, options.face, strict=strict, landmarks=landmarks, second=second,
        batch_size=rt.settings.batch_size, on_device=on_device,
    )  # fmt: skip


def _beat(rt: Runtime, claim: jobs.ChunkClaim, frames_done: int) -> bool:
    with session_scope(rt.db) as session:
        return jobs.heartbeat(session, claim, frames_done, rt.settings.lease_seconds)
