"""Which of a frame's faces a processor acts on, by :data:`shared.options.SelectorMode`.

* ``all``: every face.
* ``largest`` and ``one``: the face with the largest box (FaceFusion's ``one``, in its default large-first
  order).
* ``reference``: every face whose embedding lies within ``max_distance`` (cosine distance, 0 = same direction,
  2 = opposite) of a reference embedding; faces must carry embeddings.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from shared.options import SelectorMode
from workers.faces.detection import Face

FloatArray = npt.NDArray[np.float32]


def cosine_distance(embeddings: npt.ArrayLike, reference: npt.ArrayLike) -> FloatArray:
    """``1 − cos`` between each row of ``embeddings`` [K, D] (or one [D] vector) and ``reference`` [D]."""
    rows = np.atleast_2d(np.asarray(embeddings, dtype=np.float32))
    ref = np.asarray(reference, dtype=np.float32).reshape(-1)
    norms = np.linalg.norm(rows, axis=1) * np.linalg.norm(ref)
    cosine = rows @ ref / np.maximum(norms, np.float32(1e-12))
    return np.asarray(1.0 - cosine, dtype=np.float32)


def select_faces(
    faces: Sequence[Face],
    mode: SelectorMode,
    *,
    reference: FloatArray | None = None,
    max_distance: float = 0.6,
) -> list[Face]:
    """The faces ``mode`` picks out of one frame's ``faces``, in their original order.

    Args:
        faces: one frame's faces.
        mode: the selector mode.
        reference: the reference embedding [D]; required for ``reference``.
        max_distance: the largest cosine distance to ``reference`` still selected
            (``FaceOptions.reference_distance``).

    Raises:
        ValueError: ``reference`` mode without a reference embedding, or with a face that has no embedding.
    """
    if not faces:
        return []
    if mode == "all":
        return list(faces)
    if mode in ("largest", "one"):
        areas = [face.area for face in faces]
        return [faces[int(np.argmax(areas))]]
    if reference is None:
        raise ValueError("reference selection needs a reference embedding")
    embeddings = []
    for face in faces:
        if face.embedding is None:
            raise ValueError("reference selection needs every face's embedding")
        embeddings.append(face.embedding)
    distances = cosine_distance(np.stack(embeddings), reference)
    return [face for face, distance in zip(faces, distances, strict=True) if distance <= max_distance]
