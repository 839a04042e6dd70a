"""``lip_syncer``: the selected faces' mouths follow the job's source audio (FaceFusion's lip_syncer).

A :class:`~workers.processors.crop_paste.CropPasteProcessor` on ffhq_512 crops: per batch of frames, select the
faces, align every one of them of the whole batch (the 68 points too: the model's crop is their box), run the
lip-sync model over all of them at once with each face's mel window (:mod:`workers.lip_sync.syncing`), and paste
the result back through the lower-face area mask and the feathered box — so only the mouth region changes. A frame
whose audio window is silent keeps its own mouth, as in FaceFusion: its faces are not touched at all.

Each frame's window comes from the job's planned spectrogram (:mod:`workers.lip_sync.artefact`), by the frame's
number in the target: a chunk reads the windows of its own frames, so where chunks are cut changes no pixel.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from shared.errors import InvalidOptionsError
from shared.options import MaskType
from workers.faces.cropping import FaceCrops
from workers.faces.detection import Face
from workers.faces.targeting import FaceTargeter
from workers.faces.tensors import Crops
from workers.lip_sync.artefact import ChunkAudio
from workers.lip_sync.syncing import CROP, LipSyncModel
from workers.processors.base import ProcessorContext, Work, register
from workers.processors.crop_paste import Aligned, CropPasteProcessor, common_arguments

FloatArray = npt.NDArray[np.float32]
# A window whose loudest mel value stays under this is silence (1e-4 of the peak's magnitude, -3.2 on the models'
# scale; digital silence is -4).
SILENCE = -3.2
_WINDOW = 80 * 16


class LipSyncerProcessor(CropPasteProcessor):
    """Syncs the targeted faces' mouths of each batch of frames to ``audio``.

    Args:
        model: the lip-sync model.
        targeter: picks the faces.
        audio: the mel windows of the chunk's frames; a batch's windows are those of its frames' numbers
            (:attr:`~workers.processors.base.Work.first`), whatever order its batches come in.
        weight: the lip_syncer weight (0–1).
        **arguments: the crop-and-paste arguments (:func:`~workers.processors.crop_paste.common_arguments`).
    """

    verb = "lip-synced"

    def __init__(
        self,
        model: LipSyncModel,
        targeter: FaceTargeter,
        *,
        audio: ChunkAudio,
        weight: float = 0.5,
        **arguments: object,
    ) -> None:
        super().__init__(model, targeter, **arguments)  # type: ignore[arg-type]
        self.model, self.audio, self.weight = model, audio, weight
        self._windows: FloatArray | None = None

    @classmethod
    def from_context(cls, context: ProcessorContext) -> LipSyncerProcessor:
        """Raises:
        InvalidOptionsError: the chunk has no planned audio (a job submitted without a source audio).
        ModelError: a model cannot be found or downloaded.
        """
        audio = context.audio
        if not isinstance(audio, ChunkAudio):
            raise InvalidOptionsError("lip_syncer needs the job's source audio, planned with the job")
        options = context.options
        model = LipSyncModel.load(options.lip_syncer.model, context.settings)
        types: tuple[MaskType, ...] = ("box", "area") if "wav2lip" in model.name else ("box",)
        face = options.face.model_copy(update={"mask_areas": ["lower-face"]})
        context = ProcessorContext(
            options=options.model_copy(update={"face": face}), sources=context.sources, settings=context.settings,
            report=context.report,
        )  # fmt: skip
        arguments = common_arguments(context, model, crop_size=CROP, mask_types=types)
        if arguments["landmarker"] is None:  # the model's crop is the 68-point box
            from workers.faces.landmarks import FaceLandmarker

            arguments["landmarker"] = FaceLandmarker.load(context.settings, min_score=face.landmarker_score)
        targeter = FaceTargeter.load(options.face, context.sources, context.settings)
        return cls(model, targeter, audio=audio, weight=options.lip_syncer.weight, **arguments)

    def refine(self, work: Work) -> tuple[Sequence[Sequence[Face]], list[npt.NDArray[np.float32]] | None]:
        """The batch's targets, but none on a frame whose audio window is silent (its mouth stays)."""
        assert work.targets is not None and work.first is not None, "the chain's feed numbers its batches"
        windows = self.audio.of(self.audio.first + work.first, len(work.frames))
        voiced = windows.reshape(len(windows), -1).max(axis=1) >= SILENCE
        work.targets = [faces if speaks else [] for faces, speaks in zip(work.targets, voiced, strict=True)]
        self._windows = windows
        return super().refine(work)

    def aligned(
        self,
        work: Work,
        faces: FaceCrops,
        targets: Sequence[Sequence[Face]],
        points: Sequence[npt.NDArray[np.float32]] | None,
    ) -> Aligned:
        """Each face's state: its frame's mel window, then its 68-point box in crop pixels."""
        done = super().aligned(work, faces, targets, points)
        if not len(faces) or self._windows is None:
            return done
        windows = self._windows[faces.frame_indices].reshape(len(faces), -1)
        if done.landmarks is not None:
            boxes = np.concatenate([done.landmarks.min(axis=1), done.landmarks.max(axis=1)], axis=1)
        else:  # no 68 points: the template's face box
            boxes = np.tile(np.array([[CROP * 0.2, CROP * 0.25, CROP * 0.8, CROP * 0.95]], np.float32), (len(faces), 1))
        state = np.concatenate([windows, np.clip(boxes, 0, CROP)], axis=1).astype(np.float32)
        return Aligned(done.faces, done.landmarks, state)

    def transform(self, crops: Crops, state: FloatArray | None = None) -> Crops:
        """The crops with their mouths synced to their rows of ``state``."""
        assert state is not None
        windows = state[:, :_WINDOW].reshape(-1, 80, 16)
        return self.model.sync(crops, windows, state[:, _WINDOW:], self.weight)


@register("lip_syncer")
def _build(context: ProcessorContext) -> LipSyncerProcessor:
    return LipSyncerProcessor.from_context(context)
