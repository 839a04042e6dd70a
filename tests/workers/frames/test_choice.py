"""The frame back-end is chosen in one place (workers/frames/choice.py), and ``swapfarm doctor`` says which."""

from __future__ import annotations

from pathlib import Path

from tests.support.faces import cpu_settings
from workers.doctor import diagnose
from workers.frames.choice import backend_for, frame_backend, make_backend


def test_the_host_back_end_serves_the_cpu_and_torch_an_accelerator() -> None:
    assert (backend_for(None).name, backend_for(None).device) == ("host", "cpu")  # ONNX Runtime: host frames
    assert (backend_for("cpu").name, backend_for("cpu").device) == ("host", "cpu")  # torch on the CPU: the same memory
    assert (backend_for("cuda").name, backend_for("cuda").device) == ("torch", "cuda")
    assert make_backend(backend_for("cpu")).name == "host"


def test_doctor_names_the_frame_back_end_the_settings_give(tmp_path: Path) -> None:
    for engine in ("onnxruntime", "torch"):
        settings = cpu_settings(tmp_path, engine=engine, torch_compile_cache_dir=tmp_path / "cache")
        engines = dict(diagnose(settings).sections["engines"])
        assert engines["frame back-end"] == str(frame_backend(settings, "cpu"))
        assert engines["frame back-end"].startswith("the host back-end on cpu"), engine
