"""``face_editor``: the targeted faces' eyebrows, gaze, eyes, lips, mouth and head pose edited by the job's controls,
through LivePortrait (:mod:`workers.live_portrait`; FaceFusion's face_editor).

A :class:`~workers.processors.crop_paste.CropPasteProcessor` on ffhq_512 crops at 512², cut 1.5 times wider than the
face (its five points drawn towards the nose tip, :func:`widened`), with the 68 points for the eyes' and lips' open
ratios (:func:`open_ratios`). Per batch of faces, each model once over all of them:

* the feature and motion extractors: volume, pose, scale s, translation t, expression e, keypoints c;
* K0 = K(e), the face's own keypoints;
* e' = clip(e + the controls' moves, :data:`EDITS`), the pose clipped to the head's limits (:func:`edited_angles`);
* K = s·(c·R'ᵀ + e') + t, plus the eye retargeter's move times |eye_open_ratio| and the lip retargeter's times
  |lip_open_ratio| (both fed K0 and the ratios; a control at 0 skips its model);
* the stitcher fits K to K0, and the generator redraws the face from K0 to K; pasted back through the box alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import numpy.typing as npt

from shared.options import MaskType
from shared.portrait_options import FaceEditorOptions
from workers.faces.cropping import FaceCrops
from workers.faces.detection import Face
from workers.faces.targeting import FaceTargeter
from workers.faces.tensors import Crops
from workers.live_portrait import CROP, EDITOR_PARTS, LivePortrait, Retargeter, clip_angles, clip_expression
from workers.processors.base import ProcessorContext, Work, register
from workers.processors.crop_paste import Aligned, CropPasteProcessor, common_arguments

FloatArray = npt.NDArray[np.float32]
Move = tuple[int, int, float]  # keypoint, axis (0 x, 1 y, 2 z), expression change per unit of the control

_GAZE_VERTICAL: tuple[Move, ...] = (
    (1, 1, 0.0025), (2, 1, -0.0025), (11, 1, -0.010), (13, 1, -0.005), (15, 1, -0.010), (16, 1, -0.005)
)  # fmt: skip
# Each expression control's moves when it is above 0 and when it is at or below 0 (FaceFusion's): keypoint k's
# axis a changes by (the amount) times the control's value.
EDITS: dict[str, tuple[tuple[Move, ...], tuple[Move, ...]]] = {
    "eyebrow_direction": (
        ((1, 1, 0.015), (2, 1, -0.020)),
        ((1, 0, -0.015), (2, 0, 0.020), (1, 1, 0.005), (2, 1, -0.005)),
    ),
    "eye_gaze_horizontal": (((11, 0, 0.015), (15, 0, 0.020)), ((11, 0, 0.020), (15, 0, 0.015))),
    "eye_gaze_vertical": (_GAZE_VERTICAL, _GAZE_VERTICAL),
    "mouth_grim": (
        ((17, 2, -0.005), (19, 2, 0.01), (20, 1, -0.06), (20, 2, -0.03)),
        ((19, 1, -0.05), (19, 2, -0.02), (20, 2, -0.03)),
    ),
    "mouth_position_horizontal": (((19, 0, 0.05), (20, 0, 0.04)), ((19, 0, 0.05), (20, 0, 0.04))),
    "mouth_position_vertical": (((19, 1, -0.04), (20, 1, -0.02)), ((19, 1, -0.05), (20, 1, -0.04))),
    "mouth_pout": (
        ((19, 1, -0.022), (19, 2, 0.025), (20, 2, -0.002)),
        ((19, 1, 0.022), (19, 2, 0.025), (20, 2, -0.002)),
    ),
    "mouth_purse": (
        ((19, 1, -0.04), (19, 2, -0.02)),
        ((14, 1, -0.02), (17, 2, 0.01), (19, 2, -0.015), (20, 2, -0.002)),
    ),
    "mouth_smile": (
        ((20, 1, -0.015), (14, 1, -0.025), (17, 1, 0.01), (17, 2, 0.004), (3, 1, -0.0045), (7, 1, -0.0045)),
        ((14, 1, -0.02), (17, 1, 0.003), (19, 1, 0.02), (19, 2, -0.005), (20, 2, 0.01), (3, 1, 0.0045), (7, 1, 0.0045)),
    ),
}
# Degrees the head turns per unit of head_pitch, head_yaw, head_roll.
HEAD_DEGREES: FloatArray = np.array([-20.0, -60.0, 15.0], np.float32)
WIDENING = 1.5  # the crop's five points spread this much from the nose tip: a wider crop, the face smaller in it
BOX: tuple[MaskType, ...] = ("box",)  # FaceFusion pastes the edited face through the box alone
EYE_GOAL, LIP_GOAL = 0.6, 1.0  # the retargeters' goal when opening (closing: 0)


def expression_moves(options: FaceEditorOptions) -> FloatArray:
    """The controls' change to every expression: [21, 3] (the sum of :data:`EDITS`' moves at their values)."""
    moves = np.zeros((21, 3), np.float64)
    for name, (above, at_or_below) in EDITS.items():
        value = float(getattr(options, name))
        for keypoint, axis, amount in above if value > 0 else at_or_below:
            moves[keypoint, axis] += amount * value
    return moves.astype(np.float32)


def edited_angles(angles: FloatArray, options: FaceEditorOptions) -> FloatArray:
    """The head poses [N, 3] (pitch, yaw, roll) turned by the controls, within the head's limits."""
    turn = HEAD_DEGREES * np.array([options.head_pitch, options.head_yaw, options.head_roll], np.float32)
    return clip_angles(angles + turn, angles)


def _ratio(points: FloatArray, top: int, bottom: int, left: int, right: int) -> FloatArray:
    across = np.linalg.norm(points[:, left] - points[:, right], axis=-1)
    return np.asarray(np.linalg.norm(points[:, top] - points[:, bottom], axis=-1) / (across + 1e-6), np.float32)


def open_ratios(points: FloatArray) -> FloatArray:
    """Each face's left eye, right eye and lips open ratios from its 68 points [N, 68, 2]: [N, 3], each the
    distance of two points over the distance of two others (37–40 / 39–36, 43–46 / 45–42, 62–66 / 54–48)."""
    return np.stack(
        [_ratio(points, 37, 40, 39, 36), _ratio(points, 43, 46, 45, 42), _ratio(points, 62, 66, 54, 48)], axis=1
    )


def widened(face: Face, scale: float = WIDENING) -> Face:
    """``face`` with its five points spread ``scale`` times from its nose tip, so its crop takes more around it."""
    nose = face.landmarks[2]
    return replace(face, landmarks=((face.landmarks - nose) * np.float32(scale) + nose).astype(np.float32))


class FaceEditorProcessor(CropPasteProcessor):
    """Edits the targeted faces of each batch of frames by the job's controls.

    Args:
        portrait: LivePortrait's six models, on ffhq_512 crops.
        targeter: picks the faces.
        options: the controls.
        **arguments: the crop-and-paste arguments (:func:`~workers.processors.crop_paste.common_arguments`), with
            a landmarker: the open ratios need the 68 points.
    """

    verb = "edited"

    def __init__(
        self, portrait: LivePortrait, targeter: FaceTargeter, *, options: FaceEditorOptions, **arguments: object
    ) -> None:
        super().__init__(portrait, targeter, **arguments)  # type: ignore[arg-type]
        if self.landmarker is None:
            raise ValueError("face_editor needs a landmarker: the eyes' and lips' open ratios come from 68 points")
        self.portrait, self.options = portrait, options
        self.moves = expression_moves(options)

    @classmethod
    def from_context(cls, context: ProcessorContext) -> FaceEditorProcessor:
        """Build from a job's context, loading the models through the model registry.

        Raises:
            ModelError: a model cannot be found or downloaded.
        """
        options, settings = context.options, context.settings
        portrait = LivePortrait.load("ffhq_512", EDITOR_PARTS, settings)
        arguments = common_arguments(context, portrait, crop_size=CROP, mask_types=BOX, landmarks="always")
        arguments["mask_padding"] = (0, 0, 0, 0)  # FaceFusion's box here has none, whatever face.mask_padding says
        targeter = FaceTargeter.load(options.face, context.sources, settings)
        return cls(portrait, targeter, options=options.face_editor, **arguments)

    def refine(self, work: Work) -> tuple[Sequence[Sequence[Face]], list[FloatArray] | None]:
        """The targets aligned by their 68 points where trusted (as every processor's), then widened."""
        targets, points = super().refine(work)
        return [[widened(face) for face in faces] for faces in targets], points

    def aligned(
        self,
        work: Work,
        faces: FaceCrops,
        targets: Sequence[Sequence[Face]],
        points: Sequence[FloatArray] | None,
    ) -> Aligned:
        """Each face's state: its eyes' and lips' open ratios."""
        if not len(faces) or points is None:
            return Aligned(faces)
        return Aligned(faces, state=open_ratios(np.stack(points).astype(np.float32)))

    def transform(self, crops: Crops, state: FloatArray | None = None) -> Crops:
        """The crops edited (``state``: their open ratios)."""
        assert state is not None
        tensor = self.portrait.prepare(crops)
        volume, motion = self.portrait.features(tensor), self.portrait.motion(tensor)
        original = motion.keypoints()
        expression = clip_expression(motion.expression + self.moves)
        edited = motion.keypoints(expression, edited_angles(motion.angles, self.options))
        flat = original.reshape(len(crops), -1)
        retargets: tuple[tuple[Retargeter, float, float, FloatArray], ...] = (
            ("eye_retargeter", self.options.eye_open_ratio, EYE_GOAL, state[:, :2]),
            ("lip_retargeter", self.options.lip_open_ratio, LIP_GOAL, state[:, 2:]),
        )
        for part, value, goal, ratios in retargets:
            if value != 0:  # its move is scaled by |value|: at 0 the model's answer is not needed
                goals = np.full((len(crops), 1), goal if value >= 0 else 0.0, np.float32)
                move = self.portrait.retarget(part, np.concatenate([flat, ratios, goals], axis=1))
                edited = edited + move * np.float32(abs(value))
        return self.portrait.generate(volume, self.portrait.stitch(edited, original), original)


@register("face_editor")
def _build(context: ProcessorContext) -> FaceEditorProcessor:
    return FaceEditorProcessor.from_context(context)
