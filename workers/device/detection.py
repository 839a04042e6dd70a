"""Face detection on the worker's device.

:class:`ConvertedDetector` is a detector's ONNX graph converted to torch (:mod:`workers.engines.onnx_to_torch`)
behind the :class:`~workers.engines.base.Engine` protocol, so the host's
:class:`~workers.faces.detection.FaceDetector` can run it as it runs ONNX Runtime's. :class:`DeviceDetector` is the
device path's detector: the frames prepared in torch, the converted graph run once per batch, the decode and NMS in
torch (:mod:`workers.device.decoding`). tests/workers/test_device_detection.py holds both to ONNX Runtime's faces.

On a GPU the converted model runs compiled, as the heavy models are (``torch_compile_mode``, the same compile cache:
:func:`detection_mode`); on the CPU eagerly. A compile that fails leaves it eager, and the job is told. On the
device path the detector takes the frames the feed converted on the device (:func:`detection_on_feed` for the
tracks, :class:`~workers.device.feed.DeviceFrames` for the detection stage): nothing is uploaded again.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np
import onnx
import torch
import torch.nn.functional as F

from shared.errors import ModelError
from shared.families import AcceleratorFamily
from shared.options import JobOptions
from shared.settings import CompileMode, Settings
from shared.strict_blur import ZOOM_UP_TO
from workers import notices
from workers.device.decoding import DECODERS, survivors
from workers.device.feed import PlaneFeed
from workers.device.threads import calling_thread_on_one
from workers.engines.base import Degradation, Tensor
from workers.engines.compiling import Compiled, Compiler, buckets, compile_module, plan_calls, use_compile_cache
from workers.engines.family import detect_family
from workers.engines.loading import compile_mode
from workers.engines.onnx_to_torch import convert
from workers.faces.detection import Face, FaceDetector, Frame
from workers.models.download import resolve
from workers.processors.base import FrameBatch, Report, Reporter
from workers.track_feed import BatchDetection

__all__ = [
    "DETECTION_FALLBACK",
    "EAGER_FALLBACK",
    "ConvertedDetector",
    "DeviceDetector",
    "detection_mode",
    "detection_on_feed",
    "device_detector",
    "host_passes",
    "on_device",
]

logger = logging.getLogger(__name__)

EAGER_FALLBACK = "eager_fallback"
"""The degradation code of a compiled model that runs uncompiled, compiling having failed (the heavy models' too)."""


class ConvertedDetector:
    """The detector model at ``path`` as torch on ``device`` (fp32), run eagerly or compiled.

    Compiled (``mode`` other than ``eager``: what the worker's ``torch_compile_mode`` gives the swapper on a GPU,
    :func:`detection_mode`), a batch runs in bucket-sized calls (:func:`~workers.engines.compiling.plan_calls`:
    the powers of two up to ``max_batch``, padded by at most a tenth) so that few shapes compile. If compiling
    fails the model runs eagerly from then on, and :meth:`degradations` says so.

    Args:
        path: the ONNX file.
        device: ``cpu``, ``cuda`` …
        mode: ``torch.compile`` mode, or ``eager``.
        max_batch: the largest bucket (the frames of a batch).
        compiler: how to compile (default :func:`~workers.engines.compiling.compile_module`; a seam: tests pass
            one that fails).

    Raises:
        ValueError: the converter cannot take the graph (an operator it does not know).
    """

    def __init__(
        self,
        path: Path,
        device: str = "cpu",
        *,
        mode: CompileMode = "eager",
        max_batch: int = 8,
        compiler: Compiler = compile_module,
    ) -> None:
        model = onnx.load(str(path))
        self.name = path.stem
        self.device = torch.device(device)
        self.module = convert(model).to(self.device).eval()
        self.mode = mode
        self.fallback_reason: str | None = None
        self._inputs = tuple(spec.name for spec in self.module.inputs)
        self._outputs = tuple(spec.name for spec in self.module.outputs)
        self._shape = tuple(d.dim_value or 1 for d in model.graph.input[0].type.tensor_type.shape.dim)
        self._buckets = buckets(max_batch)
        self._forward: Compiled = self.module
        # CUDA-graph replays (these modes' graphs) reuse their output buffers: one call at a time, outputs copied
        self._graphs = self.device.type == "cuda" and mode in {"reduce-overhead", "max-autotune"}
        self._lock = threading.Lock()
        if mode != "eager":
            try:
                self._forward = compiler(self.module, mode)
            except Exception as error:  # torch.compile's own checks raise plain exceptions of many kinds
                self._fall_back(error)

    @property
    def input_names(self) -> tuple[str, ...]:
        return self._inputs

    @property
    def output_names(self) -> tuple[str, ...]:
        return self._outputs

    @property
    def compiled(self) -> bool:
        """Whether the model runs compiled (configured so, and compiling has not failed)."""
        return self._forward is not self.module

    def run(self, inputs: Mapping[str, Tensor]) -> list[Tensor]:
        """One batch, as ONNX Runtime runs it: numpy in, numpy out, in the model's output order."""
        tensors = [torch.from_numpy(np.ascontiguousarray(inputs[name])).to(self.device) for name in self._inputs]
        with torch.inference_mode():
            outputs = self.module(*tensors)
        return [output.cpu().numpy() for output in outputs]

    def warmup(self) -> None:
        self.run({self._inputs[0]: np.zeros(self._shape, np.float32)})

    def forward(self, batch: torch.Tensor) -> list[torch.Tensor]:
        """The model on a prepared batch on the device, its outputs ``[B, …]`` in the model's order."""
        if not self.compiled:
            return list(self.module(batch))
        parts: list[list[torch.Tensor]] = []
        start = 0
        with self._lock:
            for size, bucket in plan_calls(len(batch), self._buckets):
                part = batch[start : start + size]
                if bucket > size:  # repeats of the last frame, computed and thrown away
                    part = torch.cat([part, part[-1:].expand(bucket - size, *part.shape[1:])])
                parts.append([out[:size].clone() if self._graphs else out[:size] for out in self._call(part)])
                start += size
        return [outputs[0] if len(outputs) == 1 else torch.cat(outputs) for outputs in zip(*parts, strict=True)]

    def _call(self, batch: torch.Tensor) -> Sequence[torch.Tensor]:
        if self._graphs:  # the previous call's outputs are copied: its CUDA-graph buffers may be reused
            compiler: Any = torch.compiler  # untyped in torch
            compiler.cudagraph_mark_step_begin()
        try:
            return self._forward(batch)
        except Exception as error:
            if not self.compiled or isinstance(error, torch.cuda.OutOfMemoryError):
                raise
            eager: tuple[torch.Tensor, ...] = self.module(batch)  # raises if the model fails, not the compiler
            self._fall_back(error)
            return eager

    def _fall_back(self, error: BaseException) -> None:
        self.fallback_reason = f"{type(error).__name__}: {error}".splitlines()[0][:500]
        self._forward = self.module
        self._graphs = False
        logger.warning("torch.compile (mode %s) of detector %s failed; running it eagerly (slower): %s",
                       self.mode, self.name, self.fallback_reason)  # fmt: skip

    def degradations(self) -> list[Degradation]:
        """The slower path the model is on: eager instead of compiled, once compiling failed (as a heavy
        model's :meth:`~workers.engines.loading.LoadedModel.degradations` says it)."""
        if self.fallback_reason is None:
            return []
        message = f"detector {self.name}: torch.compile failed, so it runs uncompiled (slower): {self.fallback_reason}"
        return [Degradation(EAGER_FALLBACK, self.name, message)]


class DeviceDetector(FaceDetector):
    """:class:`~workers.faces.detection.FaceDetector` whose batches run on the device: the frames letterboxed and
    normalised in torch, the converted model (:class:`ConvertedDetector`) run once per batch, the boxes and
    landmarks decoded and suppressed in torch (:mod:`workers.device.decoding`); the faces are the same
    :class:`~workers.faces.detection.Face` objects the host's detector hands the tracker and the targeter.

    :meth:`detect` takes host frames (uint8 ``[N, H, W, 3]`` BGR) or frames on the device (uint8
    ``[N, 3, H, W]`` BGR). Frames that need tiles (:meth:`tiles`) and the single-frame calls of the strict sweep
    (:meth:`detect_frame`) take the host's route through ``host``'s engine.

    Args:
        host: the job's detector (its family, sizes, score and its ONNX Runtime engine).
        converted: the same model converted to torch, on the worker's device.
        report: where a slower path the converted model took is reported (compiling failed), once, now if it
            failed already and after the batch where it fails (default: :func:`workers.notices.report`).
    """

    def __init__(self, host: FaceDetector, converted: ConvertedDetector, report: Report | None = None) -> None:
        super().__init__(host.engine, host.detector, size=host.view, score=host.score, input_size=host.size)
        self.converted = converted
        self._reporter = Reporter(report or _notice, converted.degradations)
        self.decode = DECODERS[host.detector]
        normalisation = self.spec.normalisation
        self._mean = torch.tensor(normalisation.mean, dtype=torch.float32).view(1, 3, 1, 1)
        self._std = torch.tensor(normalisation.std, dtype=torch.float32).view(1, 3, 1, 1)
        self._order = [2, 1, 0] if self.spec.colour_order == "rgb" else [0, 1, 2]
        self.batches = 0  # batches detected on the device (what tells a test the device path detected)
        self.uploaded = 0  # frames handed over on the host, and so uploaded here (none where the feed has them)

    def tiles(self, width: int, height: int) -> bool:
        """Whether a ``width``×``height`` frame is detected in tiles (its view exceeds the model's input)."""
        scale = min(self.view / height, self.view / width, 1.0)
        return max(1, round(width * scale)) > self.size or max(1, round(height * scale)) > self.size

    def detect(
        self, frames: FrameBatch | torch.Tensor | Sequence[Frame], score: float | None = None
    ) -> list[list[Face]]:
        """The faces of each frame, one list per frame, in order, highest score first."""
        if isinstance(frames, torch.Tensor):
            batch = frames
        else:
            stacked = np.ascontiguousarray(np.stack(list(frames)) if not isinstance(frames, np.ndarray) else frames)
            if len(stacked) == 0:
                return []
            batch = torch.from_numpy(stacked).to(self.converted.device).permute(0, 3, 1, 2)
            self.uploaded += len(batch)
        height, width = batch.shape[2], batch.shape[3]
        if len(batch) == 0:
            return []
        if self.tiles(width, height):
            host = batch.permute(0, 2, 3, 1).cpu().numpy()
            return [super(DeviceDetector, self).detect_frame(frame, score) for frame in host]
        threshold = self.score if score is None else score
        scale = min(self.view / height, self.view / width, 1.0)
        with torch.inference_mode():
            tensor = self._prepare(batch, scale)
            named = dict(zip(self.converted.output_names, self._run_model(tensor), strict=True))
            found = survivors(self.decode(named, len(batch), self.size), threshold)
        self.batches += 1
        self._reporter.check()
        faces = []
        for boxes, scores, landmarks, _ in found:
            box_rows = (boxes / scale).cpu().numpy().astype(np.float32)
            point_rows = (landmarks / scale).cpu().numpy().astype(np.float32)
            faces.append([
                Face(box=b, landmarks=p, score=float(s))
                for b, p, s in zip(box_rows, point_rows, scores.cpu().tolist(), strict=True)
            ])  # fmt: skip
        return faces

    def _run_model(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        """The converted model on the prepared batch. On a GPU in one run; on the CPU one frame at a time, the
        outputs stacked ``[B, …]``, on one OpenMP thread of the calling thread (the pipeline's detection thread):
        on the shared 2-core CPU where this was measured, batches of 8 took 1.5–3x as long per frame as single
        frames, and two intra-op threads 3–10x as long as one, the other stages keeping the cores busy
        (benchmarks/device_pipeline.py; :mod:`workers.device.threads`)."""
        if tensor.device.type != "cpu":
            return self.converted.forward(tensor)
        calling_thread_on_one()
        runs = [self.converted.forward(tensor[i : i + 1]) for i in range(len(tensor))]
        return [torch.cat(parts, dim=0) for parts in zip(*runs, strict=True)]

    def _prepare(self, batch: torch.Tensor, scale: float) -> torch.Tensor:
        """uint8 ``[N, 3, H, W]`` BGR → the model's ``[N, 3, size, size]`` input: shrunk as OpenCV's bilinear
        resize does (rounded to whole levels, as its uint8 result is), zero-padded bottom/right, normalised."""
        height, width = batch.shape[2], batch.shape[3]
        pixels = batch.float()
        if scale < 1.0:
            shape = (max(1, round(height * scale)), max(1, round(width * scale)))
            pixels = F.interpolate(pixels, size=shape, mode="bilinear", align_corners=False, antialias=False)
            pixels = pixels.round_().clamp_(0, 255)
        mean, std = self._mean.to(pixels.device), self._std.to(pixels.device)
        # The padding is zero pixels, normalised as the host's zero canvas is.
        canvas = ((0 - mean) / std).expand(len(batch), 3, self.size, self.size).clone()
        canvas[:, :, : pixels.shape[2], : pixels.shape[3]] = (pixels[:, self._order] - mean) / std
        return canvas


DETECTION_FALLBACK = "device_detection_fallback"
"""The degradation code of a chunk whose faces are detected on the host, in part or whole, on the device path."""


def _notice(degradation: Degradation) -> None:
    notices.report(degradation.kind, degradation.message)


@functools.lru_cache(maxsize=4)
def _converted(path: str, mtime_ns: int, device: str, mode: CompileMode, max_batch: int) -> ConvertedDetector:
    # Converting a graph takes a second or so (compiling it, longer): once per model file, device and mode, not
    # once per chunk.
    return ConvertedDetector(Path(path), device, mode=mode, max_batch=max_batch)


def on_device(
    host: FaceDetector,
    path: Path,
    device: str,
    *,
    mode: CompileMode = "eager",
    max_batch: int = 8,
    report: Report | None = None,
) -> DeviceDetector | str:
    """``host`` (loaded from ``path``) as a :class:`DeviceDetector` on ``device`` (``mode``, ``max_batch``: as
    :class:`ConvertedDetector` takes them), or why it cannot be (a sentence for the job's warning: the converter
    does not take the graph)."""
    try:
        converted = _converted(str(path.resolve()), path.stat().st_mtime_ns, device, mode, max_batch)
    except (ModelError, ValueError, NotImplementedError, KeyError, OSError) as error:
        return f"the {host.detector} detector cannot be converted to torch ({error})"
    return DeviceDetector(host, converted, report)


def detection_mode(settings: Settings, device: str, family: str | None = None) -> CompileMode:
    """How the converted detector runs on ``device``: on a GPU compiled as the heavy models are
    (:func:`~workers.engines.loading.compile_mode`: ``settings.torch_compile_mode`` for the worker's ``family``,
    detected where ``None``); on the CPU eagerly, where compiling it measured slower to warm."""
    if torch.device(device).type == "cpu":
        return "eager"
    return compile_mode(settings, cast(AcceleratorFamily, family) if family is not None else detect_family(settings))


def detection_on_feed(detector: DeviceDetector, feed: PlaneFeed) -> Callable[[FrameBatch], BatchDetection | None]:
    """The track feed's detection on the device (:class:`workers.track_feed.TrackFeed`'s ``on_device``): for a
    batch ``feed`` yielded, ``detector`` on the BGR frames the feed holds on the device for it (no upload), or
    ``None`` where the feed's frames are the host's (the CPU's own conversion)."""

    def of(batch: FrameBatch) -> BatchDetection | None:
        frames = feed.on_device(batch)
        if frames is None:
            return None
        return lambda start, stop, score: detector.detect(frames[start:stop], score)

    return of


def host_passes(detector: FaceDetector, width: int, height: int, *, strict: bool) -> str | None:
    """Which of a ``width``×``height`` chunk's detection passes stay on the host with a :class:`DeviceDetector`,
    or ``None``: tiles (a view larger than the model's input) and the strict sweep's enlarged pass."""
    scale = min(detector.view / height, detector.view / width, 1.0)
    if max(1, round(width * scale)) > detector.size or max(1, round(height * scale)) > detector.size:
        return f"detection in tiles (detector size {detector.view} over the model's {detector.size})"
    if strict and max(width, height) <= ZOOM_UP_TO:
        return f"the strict sweep's enlarged pass (frames up to {ZOOM_UP_TO} px)"
    return None


def device_detector(
    host: FaceDetector,
    settings: Settings,
    options: JobOptions,
    device: str,
    *,
    width: int,
    height: int,
    family: str | None = None,
    report: Report | None = None,
) -> DeviceDetector | None:
    """A chunk's detector on ``device`` (``host``, the chain's, converted; compiled on a GPU,
    :func:`detection_mode`), or ``None`` where it cannot be converted: then the faces are found on the host, and
    the job says so (a degradation: event, log line, metric). Passes that stay on the host beside it
    (:func:`host_passes`, the strict sweep's second detector) are reported too, and so is a compile that failed
    (to ``report``, default :func:`workers.notices.report`: now, and after the batch where it fails)."""
    mode = detection_mode(settings, device, family)
    if mode != "eager":
        use_compile_cache(settings.torch_compile_cache_dir)  # before the first compile of the process
    path = resolve(host.spec.model, settings)
    found = on_device(host, path, device, mode=mode, max_batch=settings.batch_size, report=report)
    if isinstance(found, str):
        notices.report(DETECTION_FALLBACK, f"faces are detected on the host, not the {device} device: {found}")
        return None
    face = options.face
    strict = "face_blur" in options.processors and face.blur_strict and face.tracking
    passes = [host_passes(host, width, height, strict=strict)]
    if strict and face.strict_second_detector not in (None, face.detector):
        passes.append(f"the strict sweep's second detector ({face.strict_second_detector})")
    if any(passes):
        on_host = "; ".join(p for p in passes if p)
        notices.report(DETECTION_FALLBACK, f"faces are detected on the {device} device but for {on_host} (host)")
    how = "compiled, " + mode if found.converted.compiled else "eager"
    logger.info("faces detected on the %s device (%s, converted to torch, %s)", device, host.detector, how)
    return found
