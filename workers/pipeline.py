"""A chunk's processors as overlapping stages: each stage on a thread of its own, joined by bounded queues.

Decoding (the :class:`~workers.video.pipes.FrameReader`'s thread) → face detection, once per frame for the whole chain →
each processor's stages (align, run the model, paste back) → encoding (the :class:`~workers.video.pipes.FrameWriter`'s
thread). Every pixel a processor writes goes through the chunk's frame back-end (:mod:`workers.frames`), one
pipeline for both: where the frames travel as the decoder's 4:2:0 planes (:func:`plane_refusal` says where they
cannot), a first stage takes each batch's planes from the feed (:class:`~workers.frames.feed.FrameFeed`) and a last
one hands the planes to the encoder; else the frames are whole BGR frames on the host back-end.

numpy, OpenCV, ONNX Runtime and torch release the GIL while they compute, so while the model runs on one
batch the next is decoded, detected and aligned and the one before is pasted back and encoded: the model waits on
neither I/O nor Python. Each stage takes batches in order from one queue and hands them on in order, so frames come
out in the order and number they went in; the queues hold at most ``depth`` batches each, so memory does not grow
with the video's length.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, cast

import cv2
import numpy as np

from workers.processors.base import FrameBatch, Processor, Stage, Staged, Work, matting, on_frames

if TYPE_CHECKING:
    from workers.faces.detection import FaceDetector
    from workers.frames.feed import FrameFeed

logger = logging.getLogger(__name__)

_END = object()


def face_chain(processors: Sequence[Processor]) -> tuple[Staged, ...]:
    """The chain's processors that work on faces (those with stages after the chain's one detection)."""
    return tuple(cast(Staged, p) for p in processors if _staged(p))


def _staged(processor: object) -> bool:
    return callable(getattr(processor, "stages", None))


def stages_of(
    processors: Sequence[Processor], feed: FrameFeed[Any] | None = None, detector: FaceDetector | None = None
) -> list[Stage]:
    """The chain's stages in order: with a ``feed`` (the frames as planes), a first stage that takes each batch's
    planes and BGR on the feed's back-end; one face detection (and selection) if any processor works on faces, on
    the frames as decoded (by ``detector`` on the back-end's frames where one is given); then each processor's own
    stages (a processor without stages is one stage); with a ``feed`` a last stage that hands the planes to the
    encoder; in a chain whose frames get an alpha channel, a last stage that joins it to them (BGRA, for the
    encoder). Where the back-end is a device's own memory, the regions a processor wrote come back to the host's
    frames before a later processor reads them."""
    staged = face_chain(processors)
    stages: list[Stage] = []
    if feed is not None:
        stages.append(_taken(feed))
    if staged:
        stages.append(detection_stage(staged, detector))
    apart = feed is not None and not feed.backend.shares_host  # the back-end's memory is not the host's
    for position, processor in enumerate(processors):
        own = list(cast(Staged, processor).stages()) if _staged(processor) else [_whole(processor)]
        if apart and any(later.touches_pixels for later in processors[position + 1 :]):
            own[-1] = _synced(own[-1])
        stages.extend(own)
    if feed is not None:
        stages.append(_handed_back)
    if any(matting(processor) is not None for processor in processors):
        stages.append(with_alpha)
    return stages


def plane_refusal(processors: Sequence[Processor], width: int, height: int) -> str | None:
    """Why the chain's frames cannot travel as 4:2:0 planes (a sentence for the job's warning), or ``None``: odd
    frame sizes, or a processor that touches pixels with neither stages nor :meth:`~workers.processors.base.
    OnFrames.on_frames` (it works on whole BGR frames)."""
    if width % 2 or height % 2:
        return f"{width}x{height} frames cannot travel as 4:2:0 planes (odd size)"
    for processor in processors:
        if processor.touches_pixels and not _staged(processor) and on_frames(processor) is None:
            return f"{type(processor).__name__} works on whole BGR frames only"
    return None


def _taken(feed: FrameFeed[Any]) -> Stage:
    def take(work: Work) -> Work:
        work.backend, work.pixels = feed.backend, feed.take(work.frames)
        return work

    return take


def _handed_back(work: Work) -> Work:
    """The batch's planes on the host, for the encoder."""
    backend, pixels = work.on_backend()
    assert pixels.planes is not None
    work.frames = backend.download(pixels.planes)
    work.pixels = work.backend = None
    return work


def _synced(stage: Stage) -> Stage:
    def run(work: Work) -> Work:
        work = stage(work)
        work.synced()
        return work

    return run


def decoded_kept(processors: Sequence[Processor]) -> list[Stage]:
    """A stage to run first where a processor reads the frames as decoded (``reads_decoded``: the
    ``expression_restorer``) after another changes them: it keeps a copy of each batch as decoded on
    :attr:`~workers.processors.base.Work.decoded` (the target is not decoded twice). None otherwise: the frames are
    still as decoded when that processor reads them."""
    for position, processor in enumerate(processors):
        if getattr(processor, "reads_decoded", False) and any(p.touches_pixels for p in processors[:position]):
            return [_keep_decoded]
    return []


def _keep_decoded(work: Work) -> Work:
    work.decoded = work.frames.copy()
    return work


def detection_stage(staged: Sequence[Staged], detector: FaceDetector | None = None) -> Stage:
    """The chain's one face detection (and selection), skipped for work whose faces tracks decided already;
    ``detector``: one that takes the frames where the back-end holds them (a
    :class:`~workers.faces.device_detection.DeviceDetector`), in place of the chain's own on the host's frames."""
    chosen = detector or staged[0].detector
    targeter = next((p.targeter for p in staged if p.targeter is not None), None)

    def detect(work: Work) -> Work:
        if work.faces is not None:  # decided already, by tracks (workers.faces.track_feed)
            return work
        held = work.pixels.bgr if work.pixels is not None and detector is not None else None
        work.faces = chosen.detect(work.frames if held is None else held)
        work.targets = targeter.select(work.frames, work.faces) if targeter is not None else work.faces
        return work

    return detect


def _whole(processor: Processor) -> Stage:
    """A processor of whole frames: on the back-end where it is written so (:func:`~workers.processors.base.
    on_frames`), else on the host's BGR frames (whose batch on the back-end is then a new one)."""
    cutter, framed = matting(processor), on_frames(processor)

    def run(work: Work) -> Work:
        if framed is not None:
            backend, pixels = work.on_backend()
            work.adopt(framed.on_frames(backend, pixels))
            return work
        if cutter is not None:
            work.frames, work.alpha = cutter.cut_out(work.frames)
        else:
            work.frames = processor.process(work.frames)
        work.pixels = work.backend = None
        return work

    return run


def with_alpha(work: Work) -> Work:
    """The frames with their alpha as a fourth channel, BGRA ``[N, H, W, 4]``; an alpha of another size than the
    frames (a frame enhancer upscaled them after the matte) is resized to theirs, bilinear."""
    frames, alpha = work.frames, work.alpha
    if alpha is None:
        raise ValueError("a matting processor gave no alpha")
    count, height, width = frames.shape[:3]
    joined = np.empty((count, height, width, 4), np.uint8)
    joined[..., :3] = frames
    for index, matte in enumerate(alpha):
        if matte.shape != (height, width):
            matte = cv2.resize(matte, (width, height), interpolation=cv2.INTER_LINEAR)
        joined[index, ..., 3] = matte
    work.frames, work.alpha = joined, None
    return work


def run_stages(
    batches: Iterable[FrameBatch] | Iterable[Work],
    stages: Sequence[Stage],
    sink: Callable[[FrameBatch], None],
    *,
    depth: int = 1,
) -> None:
    """Feed ``batches`` (frames, or work with its faces decided) through ``stages``, each on its own thread, and
    hand every result to ``sink`` in order (on the calling thread, which also reads ``batches``' iterator on a
    feeder thread).

    The first error of any stage, of ``batches`` or of ``sink`` stops every stage and is raised here; a
    :class:`BaseException` from ``sink`` (e.g. a lost lease) stops the pipeline the same way.
    """
    stop = threading.Event()
    queues: list[queue.Queue[object]] = [queue.Queue(maxsize=depth) for _ in range(len(stages) + 1)]

    def put(target: queue.Queue[object], item: object) -> bool:
        while not stop.is_set():
            try:
                target.put(item, timeout=0.2)
                return True
            except queue.Full:
                continue
        return False

    def get(source: queue.Queue[object]) -> object:
        while not stop.is_set():
            try:
                return source.get(timeout=0.2)
            except queue.Empty:
                continue
        return _END

    def feed() -> None:
        fed = 0  # the chunk's number of the next frame
        try:
            for batch in batches:
                item = batch if isinstance(batch, Work) else Work(batch)
                if item.first is None:
                    item.first = fed
                fed = item.first + len(item.frames)
                if not put(queues[0], item):
                    return
            put(queues[0], _END)
        except BaseException as error:  # handed on: the caller raises it
            put(queues[0], error)

    def work(stage: Stage, source: queue.Queue[object], target: queue.Queue[object]) -> None:
        while True:
            item = get(source)
            if isinstance(item, Work):
                try:
                    item = stage(item)
                except BaseException as error:  # handed on: the caller raises it
                    item = error
            if not put(target, item) or not isinstance(item, Work):
                return

    threads = [threading.Thread(target=feed, name="pipeline-feed", daemon=True)]
    threads += [
        threading.Thread(target=work, args=(stage, queues[i], queues[i + 1]), name=f"pipeline-{i}", daemon=True)
        for i, stage in enumerate(stages)
    ]
    for thread in threads:
        thread.start()
    try:
        while True:
            item = queues[-1].get()
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            assert isinstance(item, Work)
            sink(item.frames)
    finally:
        stop.set()
        for thread in threads[1:]:
            thread.join(timeout=10)
        threads[0].join(timeout=1)  # the feeder may be waiting on the reader, which its owner closes next
