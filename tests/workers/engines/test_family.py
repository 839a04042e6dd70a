"""Accelerator families on a worker: detection without touching CUDA, the engine each family gets, and
``swapfarm doctor``'s report."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.support.faces import cpu_settings
from tests.support.replicas import arcface_w600k_r50, install_replica, replica_settings
from workers.doctor import diagnose, hardware_codecs
from workers.engines.capability import probe_cpu
from workers.engines.choosing import choose_engine
from workers.engines.family import _family_from_torch, detect_family, refused_render_queues, torch_build
from workers.engines.onnx import OnnxEngine
from workers.faces.recognition import FaceEmbedder

ROOT = Path(__file__).resolve().parents[3]


def test_the_worker_parent_never_imports_torch() -> None:
    """The prefork parent builds the Celery app, detects the family and imports every task module: no torch, so
    no CUDA context for its children to inherit."""
    script = textwrap.dedent(
        """
        import sys
        from shared.settings import Settings
        from workers.celery_app import create_app
        from workers.engines.family import detect_family
        import workers.processors, workers.engines.loading, workers.engines.memory, workers.doctor
        create_app(Settings(environment="test"))
        detect_family(Settings(environment="test"))
        assert "torch" not in sys.modules, sorted(m for m in sys.modules if m.startswith("torch"))
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, cwd=ROOT, timeout=120)


def test_torch_build_is_read_without_importing_torch() -> None:
    build = torch_build()
    assert build["__version__"] and build["__version__"].startswith("2.")
    assert (build["cuda"], build["hip"]) == (_imported_build()["cuda"], _imported_build()["hip"])


def _imported_build() -> dict[str, str | None]:
    """What torch says of its own build once imported (in a child, so this process's modules are left alone)."""
    script = "import json, torch; print(json.dumps({'cuda': torch.version.cuda, 'hip': torch.version.hip}))"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120)
    found: dict[str, str | None] = json.loads(out.stdout)
    return found


def _gpu_family() -> str | None:
    """The family torch's devices make this machine: cuda, rocm, or None without a GPU."""
    script = "import torch; print(('rocm' if torch.version.hip else 'cuda') if torch.cuda.is_available() else 'none')"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120)
    family = out.stdout.strip()
    return None if family == "none" else family


def test_a_cpu_torch_build_implies_no_family_whatever_devices_exist(tmp_path: Path) -> None:
    (tmp_path / "nvidia0").touch()
    (tmp_path / "kfd").touch()
    assert _family_from_torch(tmp_path) is None


def test_a_forced_family_wins_over_detection() -> None:
    assert detect_family(cpu_settings(family="cuda")) == "cuda"
    assert detect_family(cpu_settings(family="auto")) == (_gpu_family() or "cpu")


def test_hardware_codecs_are_picked_from_ffmpegs_listing() -> None:
    listing = """Encoders:
 V..... = Video
 ------
 V....D libx264              libx264 H.264 / AVC / MPEG-4 AVC (codec h264)
 V....D h264_nvenc           NVIDIA NVENC H.264 encoder (codec h264)
 V....D hevc_vaapi           H.265/HEVC (VAAPI) (codec hevc)
 A....D aac                  AAC (Advanced Audio Coding)
 V..... h264_cuvid           Nvidia CUVID H264 decoder (codec h264)
"""
    assert hardware_codecs(listing) == ["h264_nvenc", "hevc_vaapi", "h264_cuvid"]


def test_doctor_reports_this_cpu_machine_and_warns_about_a_cuda_family_it_cannot_serve(tmp_path: Path) -> None:
    cpu = diagnose(cpu_settings(tmp_path, torch_compile_cache_dir=tmp_path / "cache"))
    assert cpu.errors == [] and cpu.warnings == []
    assert dict(cpu.sections["family"])["in use"] == "cpu"
    assert "CPUExecutionProvider" in dict(cpu.sections["ONNX Runtime"])["providers for cpu"]
    assert "version" in dict(cpu.sections["ffmpeg"]) and "hardware encoders" in dict(cpu.sections["ffmpeg"])
    assert "not created yet" in dict(cpu.sections["compile cache"])[str(tmp_path / "cache")]

    if _gpu_family() is not None:
        return  # the rest is about a CPU machine told it is a CUDA one
    cuda = diagnose(cpu_settings(tmp_path, family="cuda", execution_providers=None))
    assert any("no GPU provider" in w for w in cuda.warnings)
    assert any("torch sees no GPU" in w for w in cuda.warnings)
    assert any("torch engine on cuda" in e for e in cuda.errors)  # auto picks torch for cuda: not usable here


def test_a_gpu_worker_without_its_gpu_provider_refuses_render_work_unless_providers_are_chosen() -> None:
    cpu_only = ["CPUExecutionProvider"]
    refused, reason = refused_render_queues("cuda", cpu_only)
    assert refused == {"render.cuda", "render.any"} and reason and "CUDAExecutionProvider" in reason
    refused, reason = refused_render_queues("rocm", ["AzureExecutionProvider", *cpu_only])
    assert refused == {"render.rocm", "render.any"} and reason and "MIGraphXExecutionProvider" in reason
    assert refused_render_queues("cuda", ["TensorrtExecutionProvider", *cpu_only]) == (frozenset(), None)
    assert refused_render_queues("cuda", cpu_only, chosen=cpu_only) == (frozenset(), None), "a decision"
    assert refused_render_queues("cpu", cpu_only) == (frozenset(), None)
    assert refused_render_queues("mps", cpu_only) == (frozenset(), None), "MPS falls back in torch, reported there"


def test_doctor_prints_the_engine_each_processors_models_get_or_why_not(tmp_path: Path) -> None:
    """Every processor's models, each with the engine and precision it would run on here and why, one row per
    processor and verdict; a model of a disabled licence says so instead, and the recogniser that it runs on ONNX
    Runtime whatever the engine."""
    settings = cpu_settings(tmp_path, torch_compile_cache_dir=tmp_path / "cache", model_engines={"ddcolor": "torch"},
                            disabled_licences=["s-lab-1.0"])  # fmt: skip
    report = diagnose(settings)
    rows = report.sections["engines"]
    assert dict(rows)["cpu"] == probe_cpu().describe()

    def verdict(processor: str, model: str) -> str:
        named = {label: label.removeprefix(f"{processor}: ").split(" and ")[0].split(", ") for label, _ in rows}
        found = [value for label, value in rows if label.startswith(f"{processor}: ") and model in named[label]]
        assert len(found) == 1, (processor, model, rows)
        return found[0]

    def chosen(model: str) -> str:
        choice = choose_engine(settings, "cpu", model)
        return f"{choice.engine} {choice.precision} — {choice.reason}"

    assert verdict("face_swapper", "inswapper_128") == chosen("inswapper_128")
    assert verdict("frame_colorizer", "ddcolor") == chosen("ddcolor") and chosen("ddcolor").startswith("torch ")
    assert verdict("frame_colorizer", "deoldify") == chosen("deoldify") != chosen("ddcolor")
    assert verdict("age_modifier", "fran") == chosen("fran")
    disabled = "not here: its licence (s-lab-1.0) is disabled (SWAPFARM_DISABLED_LICENCES)"
    assert verdict("age_modifier", "styleganex_age") == verdict("face_enhancer", "codeformer") == disabled
    for processor, model in (
        ("expression_restorer", "live_portrait_generator"),
        ("face_editor", "live_portrait_stitcher"),
        ("background_remover", "modnet"),
        ("deep_swapper", "druuzil/adam_levine_320"),
        ("lip_syncer", "wav2lip_gan_96"),
    ):
        assert verdict(processor, model) == chosen(model)
    assert verdict("face_swapper", "arcface_w600k_r50").startswith("onnxruntime fp32 — always ONNX Runtime")
    assert [label for label, _ in rows if label.startswith("deep_swapper: druuzil/")][0].endswith(" more")
    assert "torch compile" in dict(rows) and report.errors == []  # ddcolor is set to the torch engine


def test_the_recogniser_the_doctor_calls_always_onnx_runtime_loads_there_with_the_torch_engine_set(
    tmp_path: Path,
) -> None:
    install_replica(arcface_w600k_r50(), "arcface_w600k_r50", tmp_path)
    assert isinstance(FaceEmbedder.load(replica_settings(tmp_path, engine="torch")).engine, OnnxEngine)
