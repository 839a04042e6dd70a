"""Face alignment: the 5-point templates, the similarity transform onto them, batch warping, and paste-back.

The transform is the least-squares similarity (Umeyama, as ``skimage.transform.SimilarityTransform`` computes
it for insightface's ``face_align.estimate_norm``), solved in float64. FaceFusion's
``cv2.estimateAffinePartial2D(..., RANSAC, 100)`` lands up to about 1e-3 away from it (measured); the closed
form is exact and deterministic, so it is the one used here.

A transform maps frame coordinates to crop coordinates: ``crop_xy = M @ (x, y, 1)``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache

import cv2
import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float32]
Matrix = npt.NDArray[np.float64]
Frame = npt.NDArray[np.uint8]

# Normalised (x, y) of left eye, right eye, nose tip, left and right mouth corner; multiply by the crop size.
# Values from FaceFusion's WARP_TEMPLATE_SET (docs/MODELS.md §1).
TEMPLATES: Mapping[str, FloatArray] = {
    "arcface_112_v1": np.array(
        [
            [0.35473214, 0.45658929],
            [0.64526786, 0.45658929],
            [0.50000000, 0.61154464],
            [0.37913393, 0.77687500],
            [0.62086607, 0.77687500],
        ],
        dtype=np.float32,
    ),
    # × 112 = insightface's arcface_dst
    "arcface_112_v2": np.array(
        [
            [0.34191607, 0.46157411],
            [0.65653393, 0.45983393],
            [0.50022500, 0.64050536],
            [0.37097589, 0.82469196],
            [0.63151696, 0.82325089],
        ],
        dtype=np.float32,
    ),
    # = (arcface_dst + (8, 0)) / 128: insightface's norm_crop2(…, 128), inswapper's crop
    "arcface_128": np.array(
        [
            [0.36167656, 0.40387734],
            [0.63696719, 0.40235469],
            [0.50019687, 0.56044219],
            [0.38710391, 0.72160547],
            [0.61507734, 0.72034453],
        ],
        dtype=np.float32,
    ),
    # GFPGAN / FaceRestoreHelper
    "ffhq_512": np.array(
        [
            [0.37691676, 0.46864664],
            [0.62285697, 0.46912813],
            [0.50123859, 0.61331904],
            [0.39308822, 0.72541100],
            [0.61150205, 0.72490465],
        ],
        dtype=np.float32,
    ),
    # MTCNN's reference points at 512 (FaceFusion's WARP_TEMPLATE_SET; hififace)
    "mtcnn_512": np.array(
        [
            [0.36562865, 0.46733799],
            [0.63305391, 0.46585885],
            [0.50019127, 0.61942959],
            [0.39032951, 0.77598822],
            [0.61178945, 0.77476328],
        ],
        dtype=np.float32,
    ),
    # DeepFaceLab's whole face (the deep swapper's crops; docs/MODELS.md 10.0)
    "dfl_whole_face": np.array(
        [
            [0.35342266, 0.39285716],
            [0.62797622, 0.39285716],
            [0.48660713, 0.54017860],
            [0.38839287, 0.68750011],
            [0.59821427, 0.68750011],
        ],
        dtype=np.float32,
    ),
    # ffhq_512 scaled by 0.625 about its nose: StyleGANEX's face with its background (styleganex_age)
    "styleganex_384": np.array(
        [
            [0.42353745, 0.52289879],
            [0.57725008, 0.52319972],
            [0.50123859, 0.61331904],
            [0.43364461, 0.68337652],
            [0.57015325, 0.68306005],
        ],
        dtype=np.float32,
    ),
}


def template_points(template: str, size: int) -> Matrix:
    """The template's five points in pixels of a ``size``×``size`` crop (float64 [5, 2]).

    Raises:
        KeyError: no template of that name.
    """
    if template not in TEMPLATES:
        raise KeyError(f"unknown alignment template {template!r}; known: {sorted(TEMPLATES)}")
    return TEMPLATES[template].astype(np.float64) * size


def similarity_transform(source: npt.ArrayLike, target: npt.ArrayLike) -> Matrix:
    """The least-squares similarity (rotation, uniform scale, translation) taking ``source`` onto ``target``.

    Umeyama's closed form, the estimator of ``skimage.transform.SimilarityTransform``; points are [K, 2].

    Returns:
        float64 [2, 3].
    """
    src = np.asarray(source, dtype=np.float64)
    dst = np.asarray(target, dtype=np.float64)
    src_mean, dst_mean = src.mean(axis=0), dst.mean(axis=0)
    src_centred, dst_centred = src - src_mean, dst - dst_mean
    covariance = dst_centred.T @ src_centred / len(src)
    u, singular, vt = np.linalg.svd(covariance)
    signs = np.ones(2)
    if np.linalg.det(covariance) < 0:
        signs[1] = -1.0
    rotation = u @ np.diag(signs) @ vt
    variance = (src_centred**2).sum() / len(src)
    scale = float((singular * signs).sum() / variance) if variance > 0 else 1.0
    translation = dst_mean - scale * rotation @ src_mean
    return np.concatenate([scale * rotation, translation[:, None]], axis=1)


def estimate_transform(landmarks: npt.ArrayLike, template: str, size: int) -> Matrix:
    """The transform that puts a face's five landmarks onto ``template`` in a ``size`` crop.

    Matches insightface's ``face_align.estimate_norm(landmarks, size)`` for ``arcface_112_v2`` (sizes that are
    multiples of 112) and ``arcface_128`` (multiples of 128).

    Returns:
        float64 [2, 3], frame → crop.
    """
    return similarity_transform(landmarks, template_points(template, size))


def warp_faces(frame: Frame, transforms: Sequence[Matrix] | Matrix, size: int) -> Frame:
    """Cut one aligned ``size``×``size`` crop per transform out of ``frame`` (bilinear, border replicated).

    Returns:
        uint8 [K, size, size, 3], in the order of ``transforms``.
    """
    crops = np.empty((len(transforms), size, size, 3), dtype=np.uint8)
    for index, matrix in enumerate(transforms):
        cv2.warpAffine(
            frame,
            np.asarray(matrix, dtype=np.float64),
            (size, size),
            dst=crops[index],
            flags=cv2.INTER_LINEAR,
            borderMode=cv2.BORDER_REPLICATE,
        )
    return crops


@lru_cache(maxsize=64)
def _box_mask(size: int, blur: float, padding: tuple[int, int, int, int]) -> FloatArray:
    blur_amount = int(size * 0.5 * blur)
    blur_area = max(blur_amount // 2, 1)
    top, right, bottom, left = (max(blur_area, int(size * pad / 100)) for pad in padding)
    mask = np.ones((size, size), dtype=np.float32)
    mask[:top, :] = 0
    mask[-bottom:, :] = 0
    mask[:, :left] = 0
    mask[:, -right:] = 0
    if blur_amount > 0:
        mask = np.asarray(cv2.GaussianBlur(mask, (0, 0), blur_amount * 0.25), dtype=np.float32)
    mask.setflags(write=False)
    return mask


def box_mask(size: int, blur: float, padding: Sequence[int] = (0, 0, 0, 0)) -> FloatArray:
    """A feathered rectangle over the crop: FaceFusion's ``create_static_box_mask``.

    Args:
        size: the crop side in pixels.
        blur: feathering, as a fraction of half the crop (FaceFusion's ``face_mask_blur``, 0…1).
        padding: top, right, bottom, left, in percent of the crop, cut away before feathering.

    Returns:
        float32 [size, size] in 0…1, read-only (cached).
    """
    top, right, bottom, left = (int(value) for value in padding)
    return _box_mask(size, float(blur), (top, right, bottom, left))


def paste_region(frame_shape: Sequence[int], size: int, transform: Matrix) -> tuple[int, int, int, int]:
    """The part of the frame a ``size`` crop covers once warped back: ``x1, y1, x2, y2``, clipped to it."""
    inverse = cv2.invertAffineTransform(np.asarray(transform, dtype=np.float64))
    corners = np.array([[0, 0, 1], [size, 0, 1], [size, size, 1], [0, size, 1]], dtype=np.float64)
    points = corners @ inverse.T
    height, width = int(frame_shape[0]), int(frame_shape[1])
    x1, y1 = np.floor(points.min(axis=0)).astype(int)
    x2, y2 = np.ceil(points.max(axis=0)).astype(int)
    return (
        int(np.clip(x1, 0, width)),
        int(np.clip(y1, 0, height)),
        int(np.clip(x2, 0, width)),
        int(np.clip(y2, 0, height)),
    )


def paste_back(frame: Frame, crop: Frame, transform: Matrix, mask: FloatArray, *, out: Frame | None = None) -> Frame:
    """Warp ``crop`` back into ``frame`` through the inverse of ``transform`` and blend it in by ``mask``.

    Only the face's region of interest (the bounding box of the inverse-warped crop, clipped to the frame) is
    warped and blended, so the cost does not grow with the frame size.

    Args:
        frame: uint8 [H, W, 3], the frame the crop was cut from.
        crop: uint8 [S, S, 3], the processed crop.
        transform: the frame → crop transform the crop was cut with.
        mask: float32 [S, S] in 0…1, how much of the crop to take, e.g. :func:`box_mask`.
        out: where to write the result; may be ``frame`` itself. A new array by default.

    Returns:
        The blended frame (``out`` when given).
    """
    if out is None:
        result = frame.copy()
    else:
        result = out
        if result is not frame:
            result[...] = frame
    size = crop.shape[0]
    x1, y1, x2, y2 = paste_region(frame.shape, size, transform)
    if x2 <= x1 or y2 <= y1:
        return result
    inverse = cv2.invertAffineTransform(np.asarray(transform, dtype=np.float64))
    inverse[:, 2] -= (x1, y1)
    region = (x2 - x1, y2 - y1)
    weight = cv2.warpAffine(mask, inverse, region, flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT)
    # Bicubic on the way back: +0.6 dB over bilinear for a 128 px crop of a 220 px face (d18.mp4), measured.
    face = cv2.warpAffine(crop, inverse, region, flags=cv2.INTER_CUBIC, borderMode=cv2.BORDER_REPLICATE)
    weight = np.clip(weight, 0.0, 1.0)[:, :, None]
    background = frame[y1:y2, x1:x2].astype(np.float32)
    blended = background + (face.astype(np.float32) - background) * weight
    result[y1:y2, x1:x2] = np.clip(np.rint(blended), 0, 255).astype(np.uint8)
    return result
