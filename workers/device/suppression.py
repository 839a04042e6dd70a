"""Non-maximum suppression on the device, batched across frames, without torchvision: greedy by descending score
at an IoU threshold, as ``cv2.dnn.NMSBoxes`` does on the host. The loop runs over candidate ranks (tens after the
score threshold), each step one tensor operation for every frame of the batch, with no host synchronisation."""

from __future__ import annotations

import torch

__all__ = ["box_iou", "suppress"]


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
