"""A chunk's processors as overlapping stages: each stage on a thread of its own, joined by bounded queues.

Decoding (the :class:`~workers.video.pipes.FrameReader`'s thread) → face detection, once per frame for the whole chain →
each processor's stages (align, run the model, paste back) → encoding (the :class:`~workers.video.pipes.FrameWriter`'s
thread). numpy, OpenCV, ONNX Runtime and torch release the GIL while they compute, so while the model runs on one
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
from typing import cast

from workers.processors.base import FrameBatch, Processor, Stage, Staged, Work

logger = logging.getLogger(__name__)

_END = object()


def face_chain(processors: Sequence[Processor]) -> tuple[Staged, ...]:
    """The chain's processors that work on faces (those with stages after the chain's one detection)."""
    return tuple(cast(Staged, p) for p in processors if callable(getattr(p, "stages", None)))


def stages_of(processors: Sequence[Processor]) -> list[Stage]:
    """The chain's stages in order: one face detection (and selection) if any processor works on faces, on the
    frames as decoded, then each processor's own stages (a processor without stages is one stage)."""
    staged = [cast(Staged, p) for p in processors if callable(getattr(p, "stages", None))]
    stages: list[Stage] = []
    if staged:
        stages.append(detection_stage(staged))
    for processor in processors:
        if callable(getattr(processor, "stages", None)):
            stages.extend(cast(Staged, processor).stages())
        else:
            stages.append(_whole(processor))
    return stages


def detection_stage(staged: Sequence[Staged]) -> Stage:
    """The chain's one face detection (and selection), skipped for work whose faces tracks decided already."""
    detector = staged[0].detector
    targeter = next((p.targeter for p in staged if p.targeter is not None), None)

    def detect(work: Work) -> Work:
        if work.faces is not None:  # decided already, by tracks (workers.track_feed)
            return work
        work.faces = detector.detect(work.frames)
        work.targets = targeter.select(work.frames, work.faces) if targeter is not None else work.faces
        return work

    return detect


def _whole(processor: Processor) -> Stage:
    def run(work: Work) -> Work:
        work.frames = processor.process(work.frames)
        return work

    return run


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
        try:
            for batch in batches:
                if not put(queues[0], batch if isinstance(batch, Work) else Work(batch)):
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
