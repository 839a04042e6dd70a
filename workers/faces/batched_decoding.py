"""The detector families' decoders in torch, batched across frames: the torch twin of
:mod:`workers.faces.decoding` (same anchors, same arithmetic, same NMS rule), without a host round trip until the
survivors are known.

Each decoder turns the converted detector's outputs for ``B`` frames into every anchor's candidate (boxes, scores,
landmarks, in the detector input's coordinates); :func:`survivors` keeps those at or above the score threshold and
runs NMS on them (:func:`suppress`: greedy by descending score at an IoU threshold, as ``cv2.dnn.NMSBoxes`` does on
the host, without torchvision; the loop runs over candidate ranks, each step one tensor operation for every frame of
the batch, with no host synchronisation) for every frame at once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

import torch

from shared.errors import ModelError
from shared.options import Detector
from workers.faces.decoding import NMS_THRESHOLD, STRIDES, named_by_stride, place_output

__all__ = ["DECODERS", "Candidates", "box_iou", "suppress", "survivors"]


class Candidates(NamedTuple):
    """Every anchor's decoded candidate for ``B`` frames, in the detector input's coordinates."""

    boxes: torch.Tensor  # [B, A, 4] x1, y1, x2, y2
    scores: torch.Tensor  # [B, A]
    landmarks: torch.Tensor  # [B, A, 5, 2]
    strict: bool = False  # the family keeps scores strictly above the threshold (yolo_face), not at or above it


def _grid(
    outputs: Mapping[str, torch.Tensor], batch: int, size: int, anchors: int, kinds: Sequence[str]
) -> dict[tuple[str, int], torch.Tensor]:
    """Per-stride outputs keyed by ``(kind, stride)`` as ``[B, N, k]``, by name where names say it, else by shape.

    The converted graphs fold the batch into the rows (``[1, B·N, k]``, frame-major), as their reshapes were
    exported for batch 1; both that and ``[B, N, k]`` are taken.

    Raises:
        ModelError: an expected output is missing, or two outputs cannot be told apart.
    """
    arranged: dict[tuple[str, int], torch.Tensor] = {}
    by_name = named_by_stride(outputs)
    for name, tensor in outputs.items():
        if tensor.ndim not in (2, 3):
            raise ModelError(f"detector output {name!r} has shape {tuple(tensor.shape)}; expected [N, k]")
        rows = tensor.reshape(batch, -1, tensor.shape[-1])
        kind, stride = place_output(
            name, rows.shape[1], rows.shape[2], by_name=by_name, size=size, anchors=anchors, kinds=kinds
        )
        if (kind, stride) in arranged:
            raise ModelError(f"two detector outputs map to {kind} at stride {stride}; name them")
        arranged[(kind, stride)] = rows
    for stride in STRIDES:
        for kind in kinds:
            found = arranged.get((kind, stride))
            if found is None or found.shape[1] != (size // stride) ** 2 * anchors:
                raise ModelError(f"detector outputs lack {kind} at stride {stride} for input size {size}")
    return arranged


def _cells(size: int, stride: int, anchors: int, device: torch.device) -> torch.Tensor:
    """Cell origins ``(x, y)·stride``, row-major with x fastest, each repeated ``anchors`` times: ``[N, 2]``."""
    side = size // stride
    ys, xs = torch.meshgrid(torch.arange(side, device=device), torch.arange(side, device=device), indexing="ij")
    centres = torch.stack((xs, ys), dim=-1).reshape(-1, 2).float() * stride
    return centres.repeat_interleave(anchors, dim=0)


def decode_yunet(outputs: Mapping[str, torch.Tensor], batch: int, size: int) -> Candidates:
    """YuNet: score = cls·obj; centre = d[:2]·s + cell; size = exp(d[2:4])·s; landmarks = d·s + cell."""
    grid = _grid(outputs, batch, size, 1, ("cls", "obj", "bbox", "kps"))
    boxes, scores, landmarks = [], [], []
    for stride in STRIDES:
        cells = _cells(size, stride, 1, grid[("bbox", stride)].device)
        bbox = grid[("bbox", stride)]
        centre = bbox[..., :2] * stride + cells
        half = torch.exp(bbox[..., 2:4]) * stride / 2
        boxes.append(torch.cat([centre - half, centre + half], dim=-1))
        scores.append((grid[("cls", stride)] * grid[("obj", stride)])[..., 0])
        kps = grid[("kps", stride)].reshape(batch, -1, 5, 2)
        landmarks.append(kps * stride + cells[:, None, :])
    return Candidates(torch.cat(boxes, 1), torch.cat(scores, 1), torch.cat(landmarks, 1))


def decode_scrfd(outputs: Mapping[str, torch.Tensor], batch: int, size: int) -> Candidates:
    """SCRFD / RetinaFace (insightface layout): two anchors per cell; box = cell ∓/± d·s; landmarks = cell + d·s."""
    grid = _grid(outputs, batch, size, 2, ("score", "bbox", "kps"))
    boxes, scores, landmarks = [], [], []
    for stride in STRIDES:
        cells = _cells(size, stride, 2, grid[("bbox", stride)].device)
        distance = grid[("bbox", stride)] * stride
        boxes.append(torch.cat([cells - distance[..., :2], cells + distance[..., 2:]], dim=-1))
        scores.append(grid[("score", stride)][..., 0])
        kps = grid[("kps", stride)].reshape(batch, -1, 5, 2)
        landmarks.append(kps * stride + cells[:, None, :])
    return Candidates(torch.cat(boxes, 1), torch.cat(scores, 1), torch.cat(landmarks, 1))


def decode_yolo_face(outputs: Mapping[str, torch.Tensor], batch: int, size: int) -> Candidates:
    """YOLOv8-face: one output ``[B, 20, N]`` of ``cx, cy, w, h, score`` and 5 × ``(x, y, visibility)``."""
    if len(outputs) != 1:
        raise ModelError(f"yolo_face has one output, got {sorted(outputs)}")
    (name, tensor), *_ = outputs.items()
    if tensor.ndim != 3 or tensor.shape[1] != 20 or tensor.shape[0] != batch:
        raise ModelError(f"yolo_face output {name!r} has shape {tuple(tensor.shape)}; expected [B, 20, N]")
    rows = tensor.transpose(1, 2)
    centre, half = rows[..., :2], rows[..., 2:4] / 2
    landmarks = rows[..., 5:20].reshape(batch, -1, 5, 3)[..., :2]
    return Candidates(torch.cat([centre - half, centre + half], dim=-1), rows[..., 4], landmarks, strict=True)


DECODERS: Mapping[Detector, Callable[[Mapping[str, torch.Tensor], int, int], Candidates]] = {
    "yunet": decode_yunet,
    "scrfd": decode_scrfd,
    "retinaface": decode_scrfd,
    "yolo_face": decode_yolo_face,
}
"""The torch decoder of each detector family (retinaface shares SCRFD's layout, as on the host)."""


def survivors(candidates: Candidates, threshold: float) -> list[Candidates]:
    """Per frame: the candidates at or above ``threshold`` (above it, for a ``strict`` family) after NMS at IoU
    :data:`~workers.faces.decoding.NMS_THRESHOLD`, highest score first, still on the device.

    Only the frames' largest candidate count crosses to the host (to size the NMS); the threshold, the NMS of
    every frame and the ordering run batched.
    """
    boxes, scores, landmarks, strict = candidates
    passing = scores > threshold if strict else scores >= threshold
    count = int(passing.sum(dim=1).max()) if scores.numel() else 0
    if count == 0:
        return [Candidates(boxes[i, :0], scores[i, :0], landmarks[i, :0]) for i in range(scores.shape[0])]
    masked = torch.where(passing, scores, torch.full_like(scores, -1.0))
    top, index = masked.topk(count, dim=1, sorted=True)
    ranked_boxes = boxes.gather(1, index[..., None].expand(-1, -1, 4))
    ranked_landmarks = landmarks.gather(1, index[..., None, None].expand(-1, -1, 5, 2))
    keep = suppress(ranked_boxes, top, 0.0, NMS_THRESHOLD)  # the -1 padding fails the 0 score
    found = []
    for frame in range(scores.shape[0]):
        kept = keep[frame].nonzero()[:, 0]  # ranked already: survivors stay in descending score order
        found.append(Candidates(ranked_boxes[frame, kept], top[frame, kept], ranked_landmarks[frame, kept]))
    return found


def box_iou(boxes: torch.Tensor) -> torch.Tensor:
    """Pairwise IoU of ``[..., K, 4]`` boxes ``x1, y1, x2, y2``: ``[..., K, K]``."""
    x1, y1, x2, y2 = boxes.unbind(-1)
    area = (x2 - x1).clamp_min(0) * (y2 - y1).clamp_min(0)
    width = torch.minimum(x2[..., :, None], x2[..., None, :]) - torch.maximum(x1[..., :, None], x1[..., None, :])
    height = torch.minimum(y2[..., :, None], y2[..., None, :]) - torch.maximum(y1[..., :, None], y1[..., None, :])
    inter = width.clamp_min(0) * height.clamp_min(0)
    union = area[..., :, None] + area[..., None, :] - inter
    return torch.where(union > 0, inter / union.clamp_min(1e-12), 0.0)


def suppress(boxes: torch.Tensor, scores: torch.Tensor, score: float, iou: float) -> torch.Tensor:
    """Which candidates survive, per frame.

    Args:
        boxes: ``[B, K, 4]`` candidates of each frame (padding rows score below ``score``).
        scores: ``[B, K]``.
        score: candidates scoring below it are dropped first.
        iou: a candidate overlapping a better survivor by more than this is suppressed.

    Returns:
        bool ``[B, K]``.
    """
    order = scores.argsort(dim=1, descending=True, stable=True)
    ranked = boxes.gather(1, order[..., None].expand_as(boxes))
    keep = scores.gather(1, order) >= score
    overlaps = box_iou(ranked) > iou
    later = torch.ones_like(overlaps[0]).triu(1)  # [K, K]: j ranked after i
    for rank in range(boxes.shape[1]):
        suppressed = overlaps[:, rank] & later[rank] & keep[:, rank : rank + 1]
        keep &= ~suppressed
    return torch.zeros_like(keep).scatter(1, order, keep)
