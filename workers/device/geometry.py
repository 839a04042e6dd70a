"""Alignment on the device: the similarity transforms of all faces of a batch solved at once (Umeyama's closed
form, the estimator of :func:`workers.faces.alignment.similarity_transform`, batched)."""

from __future__ import annotations

import torch

__all__ = ["similarity_transforms"]


def similarity_transforms(source: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The least-squares similarity taking each face's points onto ``target``.

    Args:
        source: ``[F, K, 2]``, e.g. five landmarks per face.
        target: ``[K, 2]`` (a template, the same for every face) or ``[F, K, 2]``.

    Returns:
        ``[F, 2, 3]`` in float64, frame → crop, as the host path's matrices.
    """
    src = source.to(torch.float64)
    dst = target.to(torch.float64).expand_as(src)
    src_mean, dst_mean = src.mean(dim=1, keepdim=True), dst.mean(dim=1, keepdim=True)
    src_centred, dst_centred = src - src_mean, dst - dst_mean
    covariance = dst_centred.transpose(1, 2) @ src_centred / src.shape[1]  # [F, 2, 2]
    u, singular, vt = torch.linalg.svd(covariance)
    signs = torch.ones_like(singular)
    signs[:, 1] = torch.where(torch.linalg.det(covariance) < 0, -1.0, 1.0)
    rotation = u @ torch.diag_embed(signs) @ vt
    variance = (src_centred**2).sum(dim=(1, 2)) / src.shape[1]
    scale = torch.where(variance > 0, (singular * signs).sum(dim=1) / variance.clamp_min(1e-12), 1.0)
    linear = scale[:, None, None] * rotation
    translation = dst_mean.transpose(1, 2) - linear @ src_mean.transpose(1, 2)
    return torch.cat([linear, translation], dim=2)
