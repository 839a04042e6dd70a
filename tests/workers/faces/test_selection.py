"""Face selection by mode: all, largest/one, and reference (cosine distance to a reference embedding)."""

from __future__ import annotations

import numpy as np
import pytest

from workers.faces.detection import Face
from workers.faces.selection import cosine_distance, select_faces


def _face(x: float, size: float, embedding: list[float] | None = None) -> Face:
    box = np.array([x, 0, x + size, size], np.float32)
    landmarks = np.tile(box[:2] + size / 2, (5, 1)).astype(np.float32)
    vector = None if embedding is None else np.array(embedding, np.float32)
    return Face(box=box, landmarks=landmarks, score=0.9, embedding=vector)


def test_all_keeps_every_face_in_order() -> None:
    faces = [_face(0, 10), _face(50, 30), _face(100, 20)]
    assert select_faces(faces, "all") == faces


@pytest.mark.parametrize("mode", ["largest", "one"])
def test_largest_and_one_keep_the_largest_box(mode: str) -> None:
    faces = [_face(0, 10), _face(50, 30), _face(100, 20)]
    assert select_faces(faces, mode) == [faces[1]]  # type: ignore[arg-type]


def test_no_faces_select_nothing() -> None:
    for mode in ("all", "largest", "one", "reference"):
        assert select_faces([], mode, reference=np.ones(3, np.float32)) == []


def test_reference_keeps_faces_within_the_distance() -> None:
    faces = [_face(0, 10, [1, 0, 0]), _face(50, 10, [0.9, 0.3, 0]), _face(100, 10, [0, 1, 0])]
    reference = np.array([2, 0, 0], np.float32)  # scale does not matter
    assert select_faces(faces, "reference", reference=reference, max_distance=0.1) == faces[:2]
    assert select_faces(faces, "reference", reference=reference, max_distance=0.01) == faces[:1]
    assert select_faces(faces, "reference", reference=reference, max_distance=1.0) == faces


def test_reference_without_a_reference_or_embeddings_is_refused() -> None:
    with pytest.raises(ValueError, match="reference embedding"):
        select_faces([_face(0, 10, [1, 0])], "reference")
    with pytest.raises(ValueError, match="embedding"):
        select_faces([_face(0, 10)], "reference", reference=np.ones(2, np.float32))


def test_cosine_distance_spans_zero_to_two() -> None:
    reference = np.array([1, 0], np.float32)
    rows = np.array([[3, 0], [0, 1], [-1, 0]], np.float32)
    np.testing.assert_allclose(cosine_distance(rows, reference), [0, 1, 2], atol=1e-6)
    np.testing.assert_allclose(cosine_distance(np.array([0, 2], np.float32), reference), [1], atol=1e-6)


def test_face_area_and_embedding_copy() -> None:
    face = _face(0, 10)
    assert face.area == 100
    carried = face.with_embedding(np.ones(4, np.float32))
    assert carried.embedding is not None and face.embedding is None
    assert carried.box is face.box
