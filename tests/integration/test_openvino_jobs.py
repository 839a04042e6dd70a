"""The ``openvino`` family for real: a face-swap job through a Celery worker whose venv has ONNX Runtime's OpenVINO
build instead of ``onnxruntime`` (``.venv-openvino``, built once by ``scripts/setup``: tests/support/openvino.py),
its models on the OpenVINO execution provider, and its output held to the CPU provider's on the same job.

OpenVINO runs in fp32 here (the default ``openvino_precision``): its bf16 hint is a choice with its own figures
(docs/engines.md), and which hint a CPU gets is tests/workers/engines/test_onnx.py's business. Skipped only when the
venv has to be built and PyPI cannot be reached."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from shared.options import JobOptions
from shared.settings import Settings
from tests.conftest import DATA
from tests.integration.conftest import download, events_of, submit, wait_finished
from tests.support.farm import Farm, settings_env
from tests.support.media import psnr, read_frames
from tests.support.openvino import Unreachable, openvino_venv
from tests.support.replicas import arcface_w600k_r50, install_replica, inswapper_128
from workers.faces.detection import FaceDetector
from workers.local import run_local
from workers.processors.face_blur import face_region

pytestmark = pytest.mark.integration

MIN_PSNR = 40.0
"""The OpenVINO job's frames against the CPU provider's, inside each face and over the whole frame."""

SWAP: dict[str, Any] = {
    "processors": ["face_swapper"],
    "face": {"swapper": "inswapper_128"},
    "encoder": {"lossless": True},
}
FRAMES = 8


@pytest.fixture(scope="module")
def openvino_python() -> Path:
    try:
        python, built = openvino_venv()
    except Unreachable as error:
        pytest.skip(f"onnxruntime-openvino cannot be installed: {error}")
    if built is not None:
        print(f"built .venv-openvino in {built:.0f} s")  # noqa: T201 (reported with -s: the one-time cost)
    return python


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Path:
    path = tmp_path_factory.mktemp("openvino-clip") / f"d18-{FRAMES}.mp4"
    subprocess.run(
        ["ffmpeg", "-v", "error", "-y", "-i", str(data_dir / "media" / "d18.mp4"), "-frames:v", str(FRAMES),
         "-an", "-c:v", "libx264", "-crf", "12", str(path)],
        check=True,
    )  # fmt: skip
    return path


@pytest.fixture
def swap_settings(settings: Settings, data_dir: Path, tmp_path: Path) -> Settings:
    """The real YuNet, reduced ArcFace and inswapper replicas; ONNX Runtime for every model."""
    models = tmp_path / "models"
    models.mkdir()
    shutil.copy(data_dir / "models" / "yunet_2023mar.onnx", models / "yunet_2023_mar.onnx")
    install_replica(arcface_w600k_r50(), "arcface_w600k_r50", models)
    install_replica(inswapper_128(), "inswapper_128", models)
    return settings.model_copy(
        update={
            "models_dir": models,
            "model_cache_dir": tmp_path / "model-cache",
            "allow_model_hash_mismatch": True,
            "model_base_urls": [],
            "engine": "onnxruntime",
            "lease_seconds": 30,
        }
    )


@pytest.fixture
def openvino_farm(swap_settings: Settings, openvino_python: Path, tmp_path: Path) -> Iterator[Farm]:
    logs = tmp_path / "openvino-logs"
    logs.mkdir()
    farm = Farm(swap_settings.model_copy(update={"family": "openvino"}), logs, python=openvino_python)
    yield farm
    farm.stop()


def _messages(log: str) -> list[str]:
    """The messages of a worker's log (JSON lines, or plain lines where a record is not JSON)."""
    messages = []
    for line in log.splitlines():
        try:
            messages.append(str(json.loads(line)["message"]))
        except (ValueError, KeyError, TypeError):
            messages.append(line)
    return messages


def _face_boxes(frames: np.ndarray, settings: Settings) -> list[tuple[int, int, int, int]]:
    detector = FaceDetector.load(JobOptions().face, settings.model_copy(update={"family": "cpu"}))
    boxes = []
    for frame in frames:
        faces = detector.detect_frame(np.ascontiguousarray(frame[:, :, ::-1]))
        assert faces, "no face in an input frame"
        boxes.append(face_region(faces[0], frame.shape))
    return boxes


def test_a_face_swap_job_on_the_openvino_family_runs_on_openvinos_provider_within_40_db_of_the_cpu_providers(
    openvino_farm: Farm, openvino_python: Path, api: TestClient, swap_settings: Settings, clip: Path, tmp_path: Path
) -> None:
    worker = openvino_farm.worker("openvino")
    job_id = submit(api, clip, {**SWAP, "family": "openvino"}, [DATA / "media" / "s0.jpg"])
    body = wait_finished(api, job_id, openvino_farm)
    assert body["status"] == "succeeded", (body, openvino_farm.log("openvino")[-3000:])
    assert {event["worker"] for event in events_of(api, job_id, "chunk_started")} == {worker}
    output = read_frames(download(api, job_id, tmp_path / "openvino.mp4"))

    log = "\n".join(_messages(openvino_farm.log("openvino")))
    for model in ("yunet_2023_mar.onnx", "arcface_w600k_r50.onnx", "inswapper_128.onnx"):
        line = re.search(rf"^model {re.escape(model)} on (.*) \(family openvino\)$", log, re.MULTILINE)
        assert line, f"{model} was not loaded by the openvino worker:\n{log[-3000:]}"
        assert line.group(1).startswith("OpenVINOExecutionProvider (device_type=CPU, load_config="), line.group(1)
        assert json.dumps({"CPU": {"INFERENCE_PRECISION_HINT": "f32"}}) in line.group(1)

    doctor = subprocess.run(
        [str(openvino_python), "-m", "cli", "doctor", "--json"],
        env=settings_env(openvino_farm.settings), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    onnxruntime = json.loads(doctor.stdout)["sections"]["ONNX Runtime"]
    assert onnxruntime["providers for openvino"] == "OpenVINOExecutionProvider, CPUExecutionProvider", onnxruntime
    assert onnxruntime["OpenVINOExecutionProvider options"].startswith("device_type=CPU, load_config=")

    reference_path = tmp_path / "cpu.mp4"
    result = run_local(
        target=clip,
        sources=[DATA / "media" / "s0.jpg"],
        output=reference_path,
        options=JobOptions.model_validate(SWAP),
        workers=1,
        settings=swap_settings.model_copy(update={"family": "cpu"}),
    )
    assert result.status == "succeeded", result
    reference, original = read_frames(reference_path), read_frames(clip)
    assert output.shape == reference.shape == original.shape and len(output) == FRAMES

    for index, (x1, y1, x2, y2) in enumerate(_face_boxes(original, swap_settings)):
        face, cpu_face = output[index, y1:y2, x1:x2], reference[index, y1:y2, x1:x2]
        assert psnr(face, cpu_face) >= MIN_PSNR, (index, psnr(face, cpu_face))
        assert psnr(output[index], reference[index]) >= MIN_PSNR
        assert psnr(cpu_face, original[index, y1:y2, x1:x2]) < 30, "the CPU job left the face alone"
