"""The operator's content policy: three NSFW analysers vote on frames sampled once a second.

With ``content_policy`` on, the plan step samples one frame per second of the target (frame numbers that are
multiples of the rounded frame rate, as FaceFusion samples), and each analyser scores every sampled frame in one
batch. A frame is flagged when at least two of the three analysers flag it; the video is refused when more than
10 % of its sampled frames are flagged (FaceFusion's ``analyse_video``). A refused job fails before any chunk is
rendered, with :class:`~shared.errors.ContentRefusedError` (``content_refused``), so no output exists to keep.

How each analyser's output becomes a score, and its threshold, are data (:data:`ANALYSERS`) and, like the
models' normalisation, not confirmed against the released files.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Literal

import cv2
import numpy as np
import numpy.typing as npt

from shared.errors import ContentRefusedError
from shared.media import MediaInfo, input_args
from shared.settings import Settings
from workers.engines.base import Engine
from workers.engines.batching import Indices, run_in_batches
from workers.engines.loading import load_model
from workers.faces.tensors import crops_to_tensor
from workers.models.download import resolve
from workers.models.registry import REGISTRY, ModelSpec
from workers.video import ffmpeg
from workers.video.ffmpeg import FFMPEG

logger = logging.getLogger(__name__)

Frames = npt.NDArray[np.uint8]
ScoreKind = Literal["best_class", "second_probability", "logit_margin"]

VOTES_TO_FLAG = 2
REFUSED_ABOVE_PERCENT = 10.0


@dataclass(frozen=True)
class AnalyserSpec:
    """One analyser: its model, how a frame's score is read from its output, and the score that flags it."""

    model: ModelSpec
    score: ScoreKind
    threshold: float


ANALYSERS: Mapping[str, AnalyserSpec] = MappingProxyType(
    {
        "nsfw_1": AnalyserSpec(REGISTRY["nsfw_1"], "best_class", 0.2),
        "nsfw_2": AnalyserSpec(REGISTRY["nsfw_2"], "second_probability", 0.25),
        "nsfw_3": AnalyserSpec(REGISTRY["nsfw_3"], "logit_margin", 10.5),
    }
)


def _scores(output: npt.NDArray[np.float32], kind: ScoreKind) -> npt.NDArray[np.float32]:
    if kind == "best_class":  # [N, 4 + classes, anchors]: the best class score of any box
        return np.asarray(output[:, 4:, :].reshape(len(output), -1).max(axis=1), np.float32)
    if kind == "second_probability":  # [N, 2]
        return np.asarray(output[:, 1], np.float32)
    return np.asarray(output[:, 1] - output[:, 0], np.float32)  # logit_margin, [N, 2]


class ContentAnalyser:
    """The three analysers, each over every sampled frame in one call."""

    def __init__(self, analysers: Sequence[tuple[AnalyserSpec, Engine]]) -> None:
        self._analysers = list(analysers)

    @classmethod
    def load(cls, settings: Settings) -> ContentAnalyser:
        """Resolve (download if needed) and load the three analysers.

        Raises:
            ModelError: a model cannot be found, verified or loaded.
        """
        analysers = []
        for name, spec in ANALYSERS.items():
            loaded = load_model(resolve(name, settings), settings, name=name, batch_input=spec.model.input_names[0])
            analysers.append((spec, loaded.engine))
        return cls(analysers)

    def flagged(self, frames: Frames) -> npt.NDArray[np.bool_]:
        """Which of ``frames`` (uint8 ``[N, H, W, 3]`` BGR) at least two analysers flag."""
        votes = np.zeros(len(frames), np.int64)
        if len(frames) == 0:
            return votes.astype(bool)
        for spec, engine in self._analysers:
            size, normalisation, colours = spec.model.input_size, spec.model.normalisation, spec.model.colour_order
            assert size is not None and normalisation is not None and colours is not None
            resized = np.stack([cv2.resize(frame, (size, size), interpolation=cv2.INTER_AREA) for frame in frames])
            tensor = crops_to_tensor(resized.astype(np.uint8), normalisation, colours)
            name = engine.input_names[0]

            def inputs(
                items: Indices, tensor: npt.NDArray[np.float32] = tensor, name: str = name
            ) -> dict[str, npt.NDArray[np.generic]]:
                return {name: tensor[items]}

            output = np.asarray(run_in_batches(engine, len(frames), inputs)[0], np.float32)
            votes += _scores(output, spec.score) > spec.threshold
        return np.asarray(votes >= VOTES_TO_FLAG)

    def refuses(self, frames: Frames) -> bool:
        """Whether more than 10 % of the sampled ``frames`` are flagged."""
        if len(frames) == 0:
            return False
        return float(self.flagged(frames).mean() * 100) > REFUSED_ABOVE_PERCENT


def sample_args(source: Path, media: MediaInfo, folder: Path, limit: int) -> list[str]:
    """ffmpeg arguments writing every ``round(fps)``-th frame of ``source`` (at most ``limit``) as PNGs into
    ``folder``: one frame a second."""
    every = max(1, round(media.fps_value))
    return [
        *(FFMPEG, "-hide_banner", "-nostdin", "-loglevel", "error", "-y"),
        *input_args(source, media.demuxer),
        "-map",
        "0:v:0",
        "-vf",
        f"select=not(mod(n\\,{every}))",
        "-fps_mode",
        "passthrough",
        "-frames:v",
        str(limit),
        str(folder / "%06d.png"),
    ]


_BATCH = 16  # sampled frames in memory at once


def check(source: Path, media: MediaInfo, frame_count: int, settings: Settings, scratch: Path) -> None:
    """Apply the content policy to the target ``source`` when the settings turn it on.

    Raises:
        ContentRefusedError: the analysers refuse the video.
        FfmpegError: the frames cannot be sampled.
        ModelError: an analyser cannot be loaded.
    """
    if not settings.content_policy:
        return
    analyser = ContentAnalyser.load(settings)
    every = max(1, round(media.fps_value))
    scratch.mkdir(parents=True, exist_ok=True)
    flagged = total = 0
    with tempfile.TemporaryDirectory(dir=scratch, prefix="content-") as folder:
        ffmpeg.run(sample_args(source, media, Path(folder), frame_count // every + 1), what="content sampling")
        paths = sorted(Path(folder).glob("*.png"))
        for start in range(0, len(paths), _BATCH):
            frames = [cv2.imread(str(path)) for path in paths[start : start + _BATCH]]
            batch = np.stack([np.asarray(frame, np.uint8) for frame in frames if frame is not None])
            flagged += int(analyser.flagged(batch).sum())
            total += len(batch)
    refused = total > 0 and flagged / total * 100 > REFUSED_ABOVE_PERCENT
    logger.info("content policy: %d of %d sampled frames flagged", flagged, total)
    if refused:
        raise ContentRefusedError("the target video is refused by this farm's content policy")
