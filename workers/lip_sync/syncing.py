"""The lip-sync models on aligned 512² crops (docs/MODELS.md §10.6): wav2lip_96 / wav2lip_gan_96 and edtalk_256.

wav2lip: the 68-point box of the face (crop pixels) is warped to 96² by a three-point affine (zero border); the
model sees ``target`` [N, 6, 96, 96] (the warped crop with its lower half zeroed, then the warped crop, BGR / 255)
and ``source`` [N, 1, 80, 16] (the mel window times 2·weight); its output [N, 3, 96, 96] BGR in [0, 1] is warped
back into the crop. edtalk: the crop at 256² RGB / 255, the window unweighted and ``weight`` [1]; its output RGB in
[0, 1] resized back to 512 (bicubic).

Pixel work is this module's alone (resize and warp): small, so it moves to another frame back-end as a unit.
"""

from __future__ import annotations

import cv2
import numpy as np
import numpy.typing as npt

from shared.options import LipSyncerModel
from shared.settings import Settings
from workers.faces.crop_model import CropModel, load_heavy
from workers.faces.tensors import Crops
from workers.models.registry import REGISTRY

FloatArray = npt.NDArray[np.float32]
CROP = 512  # the ffhq_512 crop the models' inputs are cut from


class LipSyncModel(CropModel):
    """A loaded lip-sync model; :meth:`sync` takes 512² ffhq crops, their mel windows and their 68-point boxes."""

    @classmethod
    def load(cls, name: LipSyncerModel, settings: Settings) -> LipSyncModel:
        """Raises:
        ModelError: the model cannot be found, downloaded or loaded.
        """
        spec = REGISTRY[name]
        _, loaded = load_heavy(spec, settings, batch_input="target")
        return cls(
            spec, loaded.engine, inputs=spec.input_names, fixed_batch=loaded.fixed_batch, batches=loaded.batches,
            loaded=loaded,
        )  # fmt: skip

    @property
    def wav2lip(self) -> bool:
        return self.name.startswith("wav2lip")

    def sync(self, crops: Crops, windows: FloatArray, boxes: FloatArray, weight: float) -> Crops:
        """The crops with their mouths following ``windows`` [N, 80, 16]; ``boxes`` [N, 4] (x0, y0, x1, y1) are
        the faces' 68-point boxes in crop pixels (wav2lip's crop)."""
        if len(crops) == 0:
            return crops.copy()
        source = windows[:, None].astype(np.float32)
        if self.wav2lip:
            return self._wav2lip(crops, source * np.float32(2.0 * weight), boxes)
        return self._edtalk(crops, source, weight)

    def _wav2lip(self, crops: Crops, source: FloatArray, boxes: FloatArray) -> Crops:
        side = self.size
        affines = [_box_affine(box, side) for box in boxes]
        small = np.stack(
            [cv2.warpAffine(c, m, (side, side), flags=cv2.INTER_AREA) for c, m in zip(crops, affines, strict=True)]
        )
        tensor = np.transpose(small.astype(np.float32) / 255.0, (0, 3, 1, 2))  # BGR, as the model takes it
        masked = tensor.copy()
        masked[:, :, side // 2 :] = 0.0
        target = np.concatenate([masked, tensor], axis=1)

        def inputs(items: npt.NDArray[np.int64]) -> dict[str, npt.NDArray[np.generic]]:
            return {"source": source[items], "target": target[items]}

        out = self._outputs(len(crops), inputs)[0]
        faces = (np.clip(np.transpose(np.asarray(out, np.float32), (0, 2, 3, 1)), 0, 1) * 255).round().astype(np.uint8)
        result = crops.copy()
        for i, (face, m) in enumerate(zip(faces, affines, strict=True)):
            back = cv2.invertAffineTransform(m)
            warped = cv2.warpAffine(face, back, (CROP, CROP), flags=cv2.INTER_LINEAR)
            inside = cv2.warpAffine(np.full((side, side), 255, np.uint8), back, (CROP, CROP)) > 0
            result[i][inside] = warped[inside]
        return result

    def _edtalk(self, crops: Crops, source: FloatArray, weight: float) -> Crops:
        side = self.size
        small = np.stack([cv2.resize(c, (side, side), interpolation=cv2.INTER_AREA) for c in crops])
        target = np.transpose(small[..., ::-1].astype(np.float32) / 255.0, (0, 3, 1, 2))  # RGB
        scale = np.array([weight], np.float32)

        def inputs(items: npt.NDArray[np.int64]) -> dict[str, npt.NDArray[np.generic]]:
            return {"source": source[items], "target": target[items], "weight": scale}

        out = self._outputs(len(crops), inputs)[0]
        faces = (np.clip(np.transpose(np.asarray(out, np.float32), (0, 2, 3, 1)), 0, 1) * 255).round().astype(np.uint8)
        return np.stack([cv2.resize(f[..., ::-1], (CROP, CROP), interpolation=cv2.INTER_CUBIC) for f in faces])


def _box_affine(box: FloatArray, side: int) -> npt.NDArray[np.float64]:
    """The affine that maps the box's three corners (top-left, top-right, bottom-left) onto a ``side``² square."""
    x0, y0, x1, y1 = (float(v) for v in box)
    x1, y1 = max(x1, x0 + 1.0), max(y1, y0 + 1.0)
    corners = np.array([[x0, y0], [x1, y0], [x0, y1]], np.float32)
    square = np.array([[0, 0], [side, 0], [0, side]], np.float32)
    return cv2.getAffineTransform(corners, square).astype(np.float64)
