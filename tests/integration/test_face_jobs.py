"""Face jobs end to end through the farm (distributed and ``swapfarm run``): real YuNet, replica swapper/ArcFace."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from shared.options import JobOptions
from shared.settings import Settings
from tests.integration.conftest import download, submit, wait_finished
from tests.support.farm import Farm
from tests.support.media import psnr, read_frames, stream_info
from tests.support.replicas import arcface_w600k_r50, constant_colour_swapper, install_replica
from workers.faces.detection import FaceDetector
from workers.local import run_local
from workers.processors.face_blur import face_region
from workers.video.ffmpeg import PROVENANCE_TAG

pytestmark = pytest.mark.integration

SWAP = {"processors": ["face_swapper"], "preset": "fast", "encoder": {"quality": 95}}


@pytest.fixture
def face_settings(settings: Settings, data_dir: Path, tmp_path: Path) -> Settings:
    models = tmp_path / "models"
    models.mkdir()
    shutil.copy(data_dir / "models" / "yunet_2023mar.onnx", models / "yunet_2023_mar.onnx")
    install_replica(arcface_w600k_r50(), "arcface_w600k_r50", models)
    install_replica(constant_colour_swapper((0, 255, 0)), "inswapper_128_fp16", models)  # the `fast` swapper
    return settings.model_copy(
        update={
            "models_dir": models,
            "model_cache_dir": tmp_path / "model-cache",
            "allow_model_hash_mismatch": True,
            "model_base_urls": [],
            "family": "cpu",
            "lease_seconds": 30,
        }
    )


@pytest.fixture(scope="module")
def d18_72(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``d18.mp4``'s first 72 frames with its audio (re-encoded near-losslessly): two chunks of 36 prove a job's
    chunks are swapped and stitched; the whole clip's 216 frames would only render more of the same."""
    path = tmp_path_factory.mktemp("d18") / "d18-72.mp4"
    subprocess.run(
        ["ffmpeg", "-v", "error", "-y", "-i", str(data_dir / "media" / "d18.mp4"), "-frames:v", "72",
         "-c:v", "libx264", "-crf", "12", "-c:a", "aac", "-t", "2.4", str(path)],
        check=True,
    )  # fmt: skip
    return path


@pytest.fixture
def face_farm(face_settings: Settings, tmp_path: Path) -> Iterator[Farm]:
    logs = tmp_path / "face-logs"
    logs.mkdir()
    farm = Farm(face_settings, logs)
    yield farm
    farm.stop()


def _greener_faces(output: Path, source: Path, settings: Settings) -> None:
    """Same frame count and audio; every frame's detected faces are replaced (by the green swapper)."""
    out, src = read_frames(output), read_frames(source)
    assert out.shape == src.shape
    assert "audio" in stream_info(output)
    assert stream_info(output)["format"].get(PROVENANCE_TAG) == "face-swapped"
    detector = FaceDetector.load(JobOptions().face, settings)
    for i in range(0, len(src), 12):
        faces = detector.detect_frame(np.ascontiguousarray(src[i, :, :, ::-1]))
        assert faces, f"no face found in input frame {i}"
        x1, y1, x2, y2 = face_region(faces[0], src[i].shape)
        cx, cy = (x1 + x2) // 2, (y1 + y2) // 2
        centre_out = out[i, cy - 4 : cy + 4, cx - 4 : cx + 4].astype(int).mean(axis=(0, 1))
        centre_in = src[i, cy - 4 : cy + 4, cx - 4 : cx + 4].astype(int).mean(axis=(0, 1))
        assert centre_out[1] > 200 and centre_out[1] - centre_out[0] > 100, f"frame {i}: face not swapped"
        assert np.abs(centre_out - centre_in).max() > 50


def test_a_face_swap_job_through_the_farm(
    face_farm: Farm, api: TestClient, face_settings: Settings, data_dir: Path, d18_72: Path, tmp_path: Path
) -> None:
    face_farm.worker("w1")
    clip, source = d18_72, data_dir / "media" / "s0.jpg"
    job_id = submit(api, clip, {**SWAP, "chunk_frames": 36}, [source])
    body = wait_finished(api, job_id, face_farm)
    assert body["status"] == "succeeded", body
    _greener_faces(download(api, job_id, tmp_path / "out.mp4"), clip, face_settings)


def test_a_face_swap_job_with_swapfarm_run(
    face_settings: Settings, data_dir: Path, d18_72: Path, tmp_path: Path
) -> None:
    clip, source = d18_72, data_dir / "media" / "s0.jpg"
    result = run_local(
        target=clip,
        sources=[source],
        output=tmp_path / "out.mp4",
        options=JobOptions.model_validate({**SWAP, "chunk_frames": 36}),
        workers=2,
        settings=face_settings,
    )
    assert result.status == "succeeded", result
    _greener_faces(tmp_path / "out.mp4", clip, face_settings)


def test_a_source_without_a_face_fails_the_job_with_a_stable_code(
    face_settings: Settings, data_dir: Path, tmp_path: Path
) -> None:
    blank = tmp_path / "wall.png"
    import cv2

    cv2.imwrite(str(blank), np.full((256, 256, 3), 128, np.uint8))
    result = run_local(
        target=data_dir / "media" / "d18.mp4",
        sources=[blank],
        output=tmp_path / "out.mp4",
        options=JobOptions.model_validate({**SWAP, "chunk_frames": 108}),
        workers=1,
        settings=face_settings,
    )
    assert (result.status, result.error_code) == ("failed", "source_no_face")
    assert "wall.png" in (result.error_message or "") or "source" in (result.error_message or "")
    assert not (tmp_path / "out.mp4").exists()


def test_face_blur_changes_faces_and_nothing_else(face_settings: Settings, data_dir: Path, tmp_path: Path) -> None:
    # the crowd's first 30 frames at full size: each frame holds many faces to check
    clip = tmp_path / "crowd-30.mp4"
    subprocess.run(
        ["ffmpeg", "-v", "error", "-y", "-i", str(data_dir / "media" / "crowd_1080p.mp4"), "-frames:v", "30",
         "-c:v", "libx264", "-preset", "veryfast", "-crf", "12", "-c:a", "copy", str(clip)],
        check=True,
    )  # fmt: skip
    result = run_local(
        target=clip,
        sources=[],
        output=tmp_path / "blurred.mp4",
        # plain mode: only the faces detected at detector_score, inside their boxes (strict mode, the default, is
        # tests/integration/test_face_tracks.py's)
        options=JobOptions.model_validate(
            {
                "processors": ["face_blur"],
                "encoder": {"lossless": True},
                "face": {"blur_strict": False, "tracking": False},
            }
        ),
        workers=2,
        settings=face_settings,
    )
    assert result.status == "succeeded", result
    out, src = read_frames(tmp_path / "blurred.mp4"), read_frames(clip)
    assert out.shape == src.shape
    assert PROVENANCE_TAG not in stream_info(tmp_path / "blurred.mp4")["format"]  # blurring is not synthesis
    # a lower threshold than the job's: every face the job blurred is among these (frames decode slightly apart)
    loose = JobOptions.model_validate({"face": {"detector_score": 0.25}}).face
    detector = FaceDetector.load(loose, face_settings)
    blurred_faces = 0
    for i in range(0, len(src), 5):
        faces = detector.detect_frame(np.ascontiguousarray(src[i, :, :, ::-1]))
        near = np.zeros(src.shape[1:3], bool)  # each box and a few pixels around it (chroma subsampling)
        for face in faces:
            x1, y1, x2, y2 = face_region(face, src[i].shape)
            near[max(y1 - 8, 0) : y2 + 8, max(x1 - 8, 0) : x2 + 8] = True
            before, after = src[i, y1:y2, x1:x2].astype(float), out[i, y1:y2, x1:x2].astype(float)
            # blurring removes detail: the face's high frequencies drop
            if np.abs(np.diff(after, axis=1)).mean() < 0.6 * np.abs(np.diff(before, axis=1)).mean():
                blurred_faces += 1
        outside = psnr(out[i][~near], src[i][~near])
        assert outside >= 45, f"frame {i}: pixels outside the faces changed ({outside:.1f} dB)"
    assert blurred_faces >= 5
