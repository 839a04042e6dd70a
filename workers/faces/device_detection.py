"""Face detection on the worker's torch device: the chain's one detection where the frames already are.

:class:`DeviceDetector` is a :class:`~workers.faces.detection.FaceDetector` whose batches run on the device: the
frames prepared in torch, the detector's ONNX graph run by an ordinary
:class:`~workers.engines.torch_engine.TorchEngine` (converted, compiled on a GPU as the heavy models are, its
buckets, padding and eager fallback the engine's own: :func:`converted_engine`), the decode and NMS in torch
(:mod:`workers.faces.batched_decoding`). tests/workers/faces/test_device_detection.py holds it to ONNX Runtime's faces.

On a GPU the detector takes the frames the feed converted there (:func:`detection_on_feed` for the tracks, the
batch's frames on the back-end for the detection stage): nothing is uploaded again.
"""

from __future__ import annotations

import ctypes
import functools
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch
import torch.nn.functional as F

from shared.errors import ModelError
from shared.families import AcceleratorFamily
from shared.options import JobOptions
from shared.settings import CompileMode, Settings
from shared.strict_blur import ZOOM_UP_TO
from workers import degradations
from workers.engines.base import Degradation
from workers.engines.choosing import compile_mode
from workers.engines.compiling import Compiler, compile_module, use_compile_cache
from workers.engines.family import detect_family
from workers.engines.onnx_to_torch import convert
from workers.engines.torch_engine import TorchEngine
from workers.faces.batched_decoding import DECODERS, survivors
from workers.faces.detection import Face, FaceDetector, Frame
from workers.faces.track_feed import BatchDetection
from workers.models.download import resolve
from workers.processors.base import FrameBatch, Report, Reporter

if TYPE_CHECKING:
    from workers.frames.feed import FrameFeed

__all__ = [
    "DETECTION_FALLBACK",
    "EAGER_FALLBACK",
    "DeviceDetector",
    "calling_thread_on_one",
    "converted_engine",
    "detection_mode",
    "detection_on_feed",
    "device_detector",
    "host_passes",
    "on_device",
]

logger = logging.getLogger(__name__)

EAGER_FALLBACK = "eager_fallback"
"""The degradation code of a compiled model that runs uncompiled, compiling having failed (the heavy models' too)."""


def converted_engine(
    path: Path, device: str = "cpu", *, mode: CompileMode = "eager", max_batch: int = 8,
    compiler: Compiler = compile_module,
) -> TorchEngine:  # fmt: skip
    """The detector model at ``path`` as an ordinary torch engine on ``device`` (fp32), run eagerly or compiled
    (``compiler``: a seam, tests pass one that fails).

    Raises:
        ModelError, ValueError: the converter cannot take the graph (an operator it does not know).
    """
    return TorchEngine(convert(path), device=device, precision="fp32", mode=mode, max_batch=max_batch,
                       compiler=compiler)  # fmt: skip


def _degradations(name: str, engine: TorchEngine) -> Callable[[], list[Degradation]]:
    """The slower path the detector's engine is on: eager instead of compiled, once compiling failed."""

    def found() -> list[Degradation]:
        reason = engine.stats.fallback_reason
        if not reason:
            return []
        message = f"detector {name}: torch.compile failed, so it runs uncompiled (slower): {reason}"
        return [Degradation(EAGER_FALLBACK, name, message.splitlines()[0][:500])]

    return found


@functools.cache
def _omp_set_num_threads() -> Callable[[int], None] | None:
    try:
        return cast(Callable[[int], None], ctypes.CDLL(None).omp_set_num_threads)
    except (AttributeError, OSError):  # torch without OpenMP: nothing to set
        logger.info("no OpenMP runtime in the process: the detector on the CPU uses torch's threads")
        return None


def calling_thread_on_one() -> None:
    """Set the calling thread's own OpenMP thread count to one (where the process has an OpenMP runtime).

    ``omp_set_num_threads`` sets the calling thread's own count; ``torch.set_num_threads`` would also change the
    default of every thread started later (the models' among them)."""
    setter = _omp_set_num_threads()
    if setter is not None:
        torch.get_num_threads()  # torch's lazy per-thread initialisation first, or it would undo the setting
        setter(1)


class DeviceDetector(FaceDetector):
    """:class:`~workers.faces.detection.FaceDetector` whose batches run on the device: the frames letterboxed and
    normalised in torch, the converted model run by its torch engine (:func:`converted_engine`), the boxes and
    landmarks decoded and suppressed in torch (:mod:`workers.faces.batched_decoding`); the faces are the same
    :class:`~workers.faces.detection.Face` objects the host's detector hands the tracker and the targeter.

    :meth:`detect` takes host frames or frames on the device (uint8 ``[N, H, W, 3]`` BGR, numpy or torch: the
    frame back-ends' layout). Frames that need tiles (:meth:`tiles`) and the single-frame calls of the strict sweep
    (:meth:`detect_frame`) take the host's route through ``host``'s engine.

    Args:
        host: the job's detector (its family, sizes, score and its ONNX Runtime engine).
        converted: the same model on the torch engine, on the worker's device (:func:`converted_engine`).
        report: where a slower path the converted model took is reported (compiling failed), once, now if it
            failed already and after the batch where it fails (default: :func:`workers.degradations.report`).
    """

    def __init__(self, host: FaceDetector, converted: TorchEngine, report: Report | None = None) -> None:
        super().__init__(host.engine, host.detector, size=host.view, score=host.score, input_size=host.size)
        self.converted = converted
        self._reporter = Reporter(report or _notice, _degradations(Path(host.spec.model).stem, converted))
        self.decode = DECODERS[host.detector]
        normalisation = self.spec.normalisation
        self._mean = torch.tensor(normalisation.mean, dtype=torch.float32).view(1, 3, 1, 1)
        self._std = torch.tensor(normalisation.std, dtype=torch.float32).view(1, 3, 1, 1)
        self._order = [2, 1, 0] if self.spec.colour_order == "rgb" else [0, 1, 2]
        self.batches = 0  # batches detected on the device (what tells a test the device detected)
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
            batch = frames.permute(0, 3, 1, 2)
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

    @property
    def compiled(self) -> bool:
        """Whether the converted model runs compiled (configured so, and compiling has not failed)."""
        return self.converted.mode != "eager"

    def _run_model(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        """The converted model on the prepared batch. On a GPU in one run (the engine's buckets); on the CPU one
        frame at a time, the outputs stacked ``[B, …]``, on one OpenMP thread of the calling thread (the
        pipeline's detection thread): on the shared 2-core CPU where this was measured, batches of 8 took 1.5–3x
        as long per frame as single frames, and two intra-op threads 3–10x as long as one, the other stages
        keeping the cores busy (benchmarks/device_pipeline.py)."""
        name = self.converted.input_names[0]
        if tensor.device.type != "cpu":
            return self.converted.run_on_device({name: tensor})
        calling_thread_on_one()
        runs = [self.converted.run_on_device({name: tensor[i : i + 1]}) for i in range(len(tensor))]
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
"""The degradation code of a chunk whose frames are on a torch device but whose faces are detected on the host, in
part or whole."""


def _notice(degradation: Degradation) -> None:
    degradations.report(degradation.kind, degradation.message)


@functools.lru_cache(maxsize=4)
def _converted(path: str, mtime_ns: int, device: str, mode: CompileMode, max_batch: int) -> TorchEngine:
    # Converting a graph takes a second or so (compiling it, longer): once per model file, device and mode, not
    # once per chunk.
    return converted_engine(Path(path), device, mode=mode, max_batch=max_batch)


def forget_converted() -> None:
    """Forget the detectors converted in this process (see :func:`workers.engines.loading.release_models`)."""
    _converted.cache_clear()


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
    :func:`converted_engine` takes them), or why it cannot be (a sentence for the job's warning: the converter
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


def detection_on_feed(detector: DeviceDetector, feed: FrameFeed[Any]) -> Callable[[FrameBatch], BatchDetection | None]:
    """The track feed's detection on the device (:class:`workers.faces.track_feed.TrackFeed`'s ``on_device``): for a
    batch ``feed`` yielded, ``detector`` on the BGR frames the feed holds on the device for it (no upload), or
    ``None`` where the feed's frames are the host's (the host back-end's)."""

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
    (to ``report``, default :func:`workers.degradations.report`: now, and after the batch where it fails)."""
    mode = detection_mode(settings, device, family)
    if mode != "eager":
        use_compile_cache(settings.torch_compile_cache_dir)  # before the first compile of the process
    path = resolve(host.spec.model, settings)
    found = on_device(host, path, device, mode=mode, max_batch=settings.batch_size, report=report)
    if isinstance(found, str):
        degradations.report(DETECTION_FALLBACK, f"faces are detected on the host, not the {device} device: {found}")
        return None
    face = options.face
    strict = "face_blur" in options.processors and face.blur_strict and face.tracking
    passes = [host_passes(host, width, height, strict=strict)]
    if strict and face.strict_second_detector not in (None, face.detector):
        passes.append(f"the strict sweep's second detector ({face.strict_second_detector})")
    if any(passes):
        on_host = "; ".join(p for p in passes if p)
        degradations.report(DETECTION_FALLBACK, f"faces are detected on the {device} device but for {on_host} (host)")
    how = "compiled, " + mode if found.compiled else "eager"
    logger.info("faces detected on the %s device (%s, converted to torch, %s)", device, host.detector, how)
    return found
