"""The render path on the device: its stages, and which chains it can run.

One code path, two devices: where the worker's engine setting resolves to torch
(:func:`workers.device.selection.frame_path_device`), a chunk's frames go through torch on the worker's device —
its GPU, or the CPU, as in CI — instead of OpenCV/numpy on the host, which stays the path of the ONNX Runtime
engine. The stages (:meth:`DevicePath.stages`):

1. take the batch's 4:2:0 planes and BGR frames on the device, uploaded and converted there once, as the host
   stages' BGR frames were (:class:`~workers.device.feed.PlaneFeed`);
2. the chain's one face detection on the device (:class:`~workers.device.detection.DeviceDetector`: the batch's
   frames prepared, the converted detector run, its outputs decoded and suppressed, all in torch; the faces
   handed to the targeter as on the OpenCV path), or on the host where the detector cannot be converted;
3. per processor: ``face_blur`` hides the faces in the planes, in every style — blur, pixelate, fill
   (:func:`~workers.device.blurring.blur_faces_in_planes`); a crop-and-paste processor (``face_swapper``,
   ``face_enhancer``) cuts its crops on the device, runs its model stage as on the host path, and pastes the
   results back on the device, rewriting only the pasted regions' planes; ``face_debugger`` runs its 68-point
   landmarker (if configured) as on the host path, then draws the boxes, points and scores into the frames on the
   device (:func:`~workers.device.debugging.draw_marks`), rewriting only the marked regions' planes;
   ``frame_enhancer``, last in its chain, upscales the whole frames there and replaces the planes with the larger
   frames' (:func:`~workers.device.upscaling.enhance_frames`);
4. the planes back to the host, for the encoder (through pinned memory on CUDA).

A chain the device path cannot run (odd frame sizes; a processor that touches pixels and has no device stage)
renders on the OpenCV path, and says so (:func:`plan`): never silently.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from workers.device.blurring import blur_faces_in_planes
from workers.device.cropping import gather_crops, paste_crops, paste_region
from workers.device.debugging import draw_marks
from workers.device.detection import DeviceDetector
from workers.device.feed import DeviceFrames, PlaneFeed, to_host
from workers.device.threads import one_thread
from workers.device.upscaling import enhance_frames
from workers.faces.alignment import template_points
from workers.faces.cropping import FaceCrops
from workers.pipeline import detection_stage, face_chain
from workers.processors.base import Processor, Stage, Staged, Work
from workers.processors.crop_paste import Aligned, CropPasteProcessor, Transformed
from workers.processors.face_blur import FaceBlurProcessor, grown_region
from workers.processors.face_debugger import FaceDebuggerProcessor, Located
from workers.processors.frame_enhancer import FrameEnhancerProcessor

__all__ = ["DevicePath", "plan"]

# the processors with device stages
_STAGED = (FaceBlurProcessor, CropPasteProcessor, FaceDebuggerProcessor, FrameEnhancerProcessor)


def plan(
    processors: Sequence[Processor],
    device: str,
    *,
    width: int,
    height: int,
    detector: DeviceDetector | None = None,
    convert_on_device: bool | None = None,
) -> DevicePath | str:
    """The device path of the chain, or why it has none (a sentence for the job's warning); ``detector``: the
    chain's detector on the device (``None``: the chain's own, on the host); ``convert_on_device``: the feed's
    (:class:`~workers.device.feed.PlaneFeed`)."""
    if width % 2 or height % 2:
        return f"{width}x{height} frames cannot travel as 4:2:0 planes (odd size)"
    for processor in processors:
        name = type(processor).__name__
        if processor.touches_pixels and not isinstance(processor, _STAGED):
            return f"{name} has no device stage yet"
    return DevicePath(processors, device, detector, convert_on_device=convert_on_device)


class DevicePath:
    """The chain's stages on ``device``; build with :func:`plan`.

    Args:
        processors: the chain (each a ``face_blur``, a crop-and-paste processor, a ``face_debugger``, or one that
            touches no pixels).
        device: ``cpu``, ``cuda`` …
        detector: the chain's detector on the device, or ``None`` to detect with the chain's own on the host.
        convert_on_device: where the feed converts the planes (:class:`~workers.device.feed.PlaneFeed`).
    """

    def __init__(
        self,
        processors: Sequence[Processor],
        device: str,
        detector: DeviceDetector | None = None,
        *,
        convert_on_device: bool | None = None,
    ) -> None:
        self.processors = processors
        self.device = device
        self.detector = detector
        self.feed = PlaneFeed(device, convert_on_device=convert_on_device)

    def stages(self) -> list[Stage]:
        """Upload, detection, each processor's device stages, download (see the module's docstring). On the CPU
        the pixel stages run on one OpenMP thread each (:mod:`workers.device.threads`), the model's as it is."""
        pixels = one_thread if torch.device(self.device).type == "cpu" else _as_is
        stages: list[Stage] = [self._upload]
        staged = face_chain(self.processors)
        if staged:
            stages.append(detection_stage(staged) if self.detector is None else _detection(staged, self.detector))
        for position, processor in enumerate(self.processors):
            if isinstance(processor, FaceBlurProcessor):
                chained = any(later.touches_pixels for later in self.processors[position + 1 :])
                stages.append(pixels(_blur_stage(processor, chained=chained)))
            elif isinstance(processor, CropPasteProcessor):
                align, model, paste = _crop_paste_stages(processor)
                stages.extend([pixels(align), model, pixels(paste)])
            elif isinstance(processor, FaceDebuggerProcessor):
                locate, draw = _debugger_stages(processor)
                stages.extend([locate, pixels(draw)])
            elif isinstance(processor, FrameEnhancerProcessor):
                stages.append(_enhance_stage(processor))
        stages.append(_download)
        return stages

    def _upload(self, work: Work) -> Work:
        work.device = self.feed.take(work.frames)
        return work


def _as_is(stage: Stage) -> Stage:
    return stage


def _frames(work: Work) -> DeviceFrames:
    assert isinstance(work.device, DeviceFrames)
    return work.device


def _detection(staged: Sequence[Staged], detector: DeviceDetector) -> Stage:
    """:func:`workers.pipeline.detection_stage` with the faces found in the batch's frames on the device."""
    targeter = next((p.targeter for p in staged if p.targeter is not None), None)

    def detect(work: Work) -> Work:
        if work.faces is not None:  # decided already, by tracks (workers.track_feed), detected on the device too
            return work
        work.faces = detector.detect(_frames(work).bgr)
        work.targets = targeter.select(work.frames, work.faces) if targeter is not None else work.faces
        return work

    return detect


def _download(work: Work) -> Work:
    work.frames = to_host(_frames(work).planes)
    work.device = None
    return work


def _blur_stage(processor: FaceBlurProcessor, *, chained: bool) -> Stage:
    """``face_blur`` on the planes; ``chained`` (a later processor reads the frames): on the BGR frames and the
    host's batch too, which the later processors' stages read, as on the OpenCV path."""

    def hide(work: Work) -> Work:
        assert work.faces is not None
        frames = _frames(work)
        style, margin = processor.style, processor.margin
        bgr = frames.bgr if chained else None
        blur_faces_in_planes(frames.planes, work.faces, processor.strength, style=style, margin=margin, bgr=bgr)
        if chained and not frames.shared:  # on a GPU the host's batch is a copy of its own
            for index, found in enumerate(work.faces):
                for face in found:
                    frames.store(index, grown_region(face, margin, (frames.height, frames.width)))
        for faces in work.faces:
            processor.hidden += len(faces)
            processor.filled += sum(face.filled for face in faces)
        return work

    return hide


def _crop_paste_stages(processor: CropPasteProcessor) -> tuple[Stage, Stage, Stage]:
    """Align on the device, the processor's own model stage, paste back on the device."""
    size = processor.crop_size
    template = torch.from_numpy(template_points(processor.template, size))

    def align(work: Work) -> Work:
        targets, points = processor.refine(work)
        flat = [(index, face) for index, faces in enumerate(targets) for face in faces]
        if not flat:
            empty = FaceCrops(np.zeros((0, size, size, 3), np.uint8), np.zeros((0, 2, 3)), np.zeros(0, np.int64))
            work.state = Aligned(empty)
            return work
        frame_of = torch.tensor([index for index, _ in flat])
        landmarks = torch.from_numpy(np.stack([face.landmarks for _, face in flat]).astype(np.float64))
        crops, transforms = gather_crops(_frames(work).bgr, landmarks, frame_of, template, size)
        faces = FaceCrops(
            crops.to(torch.uint8).permute(0, 2, 3, 1).contiguous().cpu().numpy(),
            transforms.numpy(),
            frame_of.numpy().astype(np.int64),
        )
        work.state = processor.aligned(work, faces, targets, points)
        return work

    def paste(work: Work) -> Work:
        if isinstance(work.state, Transformed):
            done = work.state
            frames = _frames(work)
            device = frames.planes.device
            crops = torch.from_numpy(np.ascontiguousarray(done.transformed)).to(device).permute(0, 3, 1, 2).float()
            scale = done.transformed.shape[1] / done.faces.crops.shape[1]
            transforms = torch.from_numpy(done.faces.transforms * scale)
            frame_of = torch.from_numpy(done.faces.frame_indices)
            masks = torch.tensor(done.masks, dtype=torch.float32)  # a copy: the box mask is a read-only cache
            paste_crops(frames.bgr, crops, transforms, frame_of, masks)
            side = done.transformed.shape[1]
            for transform, index in zip(transforms, done.faces.frame_indices.tolist(), strict=True):
                frames.store(int(index), paste_region(transform, side, frames.height, frames.width))
        work.state = None
        return work

    return align, processor.stages()[1], paste


def _debugger_stages(processor: FaceDebuggerProcessor) -> tuple[Stage, Stage]:
    """The faces to draw (the 68-point landmarker's model run as on the host path), then the marks drawn on the
    device."""

    def locate(work: Work) -> Work:
        work.state = processor.locate(work)
        return work

    def draw(work: Work) -> Work:
        located = work.state
        assert isinstance(located, Located)
        draw_marks(_frames(work), located.faces, located.points)
        work.state = None
        return work

    return locate, draw


def _enhance_stage(processor: FrameEnhancerProcessor) -> Stage:
    """The whole frames upscaled on the device (the model's threads as they are, on the CPU too)."""

    def enhance(work: Work) -> Work:
        enhance_frames(_frames(work), processor.enhancer, processor.blend)
        processor.report()
        return work

    return enhance
