"""Face embeddings (the 128-d MobileFaceNet stands in for ArcFace) and the identity of source images."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

from shared.errors import NoFaceInSourceError, SourceImageError
from tests.support.faces import MEDIA, MODELS, clip_frames, detector, engine, image
from tests.support.hostile import png_claiming
from workers.faces.recognition import FaceEmbedder, largest_face, normalise, read_image, source_identity
from workers.faces.selection import cosine_distance

pytestmark = pytest.mark.skipif(not MODELS.exists(), reason="the reference data folder is not beside the checkout")


def _embedder(batch_size: int = 8) -> FaceEmbedder:
    mobilefacenet = engine(MODELS / "mobilefacenet_128.onnx")
    fixed = mobilefacenet.fixed_batch(mobilefacenet.input_names[0])
    return FaceEmbedder(mobilefacenet, batch_size=batch_size, fixed_batch=fixed)


def _embedding(frame: np.ndarray) -> np.ndarray:
    face = largest_face(detector().detect_frame(frame))
    embedding = _embedder().embed_faces(frame, [face])[0].embedding
    assert embedding is not None
    return embedding


def test_the_recogniser_crop_is_arcface_112_v2_at_112() -> None:
    embedder = _embedder()
    assert (embedder.template, embedder.size) == ("arcface_112_v2", 112)


def test_the_same_person_is_close_and_different_people_are_far() -> None:
    d18 = [_embedding(frame) for frame in clip_frames("d18.mp4", [0, 120])]
    d20 = _embedding(clip_frames("d20.mp4", [60])[0])
    assert cosine_distance(d18[1], d18[0])[0] < 0.4
    assert cosine_distance(d20, d18[0])[0] > 0.6


def test_embedding_a_batch_of_frames_equals_embedding_frame_by_frame() -> None:
    frames = np.concatenate([clip_frames("d18.mp4", [10, 50]), image("group6.jpg")[None, :480, :480]])
    found = detector().detect(list(frames))
    together = _embedder(batch_size=3).embed_frames(list(frames), found)
    assert [len(faces) for faces in together] == [len(faces) for faces in found]
    for frame, faces, embedded in zip(frames, found, together, strict=True):
        alone = _embedder(batch_size=1).embed_faces(frame, faces)
        for one, other in zip(alone, embedded, strict=True):
            assert one.embedding is not None and other.embedding is not None
            np.testing.assert_allclose(one.embedding, other.embedding, atol=1e-5)
            assert one.box is other.box  # the same face, now carrying an embedding


def test_no_crops_give_no_embeddings() -> None:
    assert _embedder().embed_crops(np.zeros((0, 112, 112, 3), np.uint8)).shape[0] == 0
    assert _embedder().embed_frames([image("group6.jpg")], [[]]) == [[]]


def test_source_identity_is_the_normalised_mean_of_normalised_embeddings(tmp_path: Path) -> None:
    frame = clip_frames("d18.mp4", [30])[0]
    second = tmp_path / "d18-frame.png"
    cv2.imwrite(str(second), frame)
    identity = source_identity([MEDIA / "s0.jpg", second], detector(), _embedder())
    expected = normalise(normalise(np.stack([_embedding(image("s0.jpg")), _embedding(frame)])).mean(axis=0))
    np.testing.assert_allclose(identity, expected, atol=1e-5)
    assert np.linalg.norm(identity) == pytest.approx(1.0, abs=1e-5)


def test_a_source_image_with_several_faces_contributes_its_largest() -> None:
    identity = source_identity([MEDIA / "group6.jpg"], detector(), _embedder())
    frame = image("group6.jpg")
    largest = _embedder().embed_faces(frame, [largest_face(detector().detect_frame(frame))])[0]
    assert largest.embedding is not None
    np.testing.assert_allclose(identity, normalise(largest.embedding), atol=1e-5)


def test_a_source_image_without_a_face_is_named_in_the_error(tmp_path: Path) -> None:
    blank = tmp_path / "blank-wall.png"
    cv2.imwrite(str(blank), np.full((200, 200, 3), 128, np.uint8))
    with pytest.raises(NoFaceInSourceError, match="blank-wall.png") as raised:
        source_identity([MEDIA / "s0.jpg", blank], detector(), _embedder())
    assert raised.value.code == "source_no_face"


@pytest.mark.parametrize("content", [b"", b"not an image at all"])
def test_an_unreadable_source_image_is_a_source_error(tmp_path: Path, content: bytes) -> None:
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(content)
    with pytest.raises(SourceImageError, match="broken.jpg") as raised:
        source_identity([broken], detector(), _embedder())
    assert raised.value.code == "source_invalid"


def test_a_missing_source_image_is_a_source_error(tmp_path: Path) -> None:
    with pytest.raises(SourceImageError, match="gone.png"):
        read_image(tmp_path / "gone.png")


def test_source_identity_needs_an_image() -> None:
    with pytest.raises(ValueError):
        source_identity([], detector(), _embedder())


def test_a_worker_caps_the_images_opencv_decodes_at_the_source_pixel_limit(tmp_path: Path) -> None:
    # The cap is read once, when OpenCV loads: a fresh process, set up as `swapfarm worker` sets itself up.
    image = png_claiming(tmp_path / "face.png", 9000, 9000)  # 81 Mpx, above a 50 Mpx limit
    code = (
        "import sys; from pathlib import Path; from cli.main import _cap_images; _cap_images(50_000_000)\n"
        "from shared.errors import SourceImageError; from workers.faces.recognition import read_image\n"
        "try: read_image(Path(sys.argv[1]))\n"
        "except SourceImageError as exc: print(exc.code, exc.message)\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(image)], capture_output=True, text=True, timeout=120)
    assert done.stdout.startswith("source_invalid") and "too large" in done.stdout, done.stdout + done.stderr
