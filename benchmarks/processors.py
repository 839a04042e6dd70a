"""Processor costs, side by side in one run: on this machine's CPU (ratios; wall times here are contended), or with
``--device cuda`` their models on a GPU (the last step of ``benchmarks/device_run.sh``).

lip_syncer: ms per frame on d18 with its faces batched across frames (``--batch`` faces a model call) and one frame
at a time, through the processor as a worker runs it (real YuNet; lip-sync and landmark replicas: the replica's
body is tiny, so this measures the crop, align, mask and paste work around the model, not the model). Planning: the
cost per minute of audio of MDX-Net voice extraction (its STFT windows at the real T = 256; the replica's body is a
mask) and of the mel spectrogram.

frame_colorizer: ms per frame on d18 (480²) at its default size (256), whole frames batched (``--batch`` frames a
model call) and one frame at a time, through the processor (DDColor and DeOldify replicas: their body is tiny, so
this measures the grey input, the resizes and the Lab merge around the model, not the model).

expression_restorer and face_editor: ms per frame and per face on d18 (one face a frame) and crowd_1080p (seven),
the faces of ``--batch`` frames a call and ``--batch`` faces a model call, against one frame and one face at a time,
through the processor as a worker runs it (real YuNet; LivePortrait and landmark replicas, whose bodies are small:
this measures the crops, the extractors' input, the keypoint maths and the paste around the models, and the
replicas' calls); each the fastest of ``--repeats`` passes, batched and one at a time interleaved.

age_modifier (fran, styleganex_age) and deep_swapper (a 224 px DeepFaceLive model): ms per frame on d18 (one face a
frame) and per face on group6.jpg (six faces, taken as a frame), the faces of ``--batch`` frames a call and
``--batch`` faces a model call, against one at a time, the best of ``--repeats`` runs of each made alternately,
through the processor (replicas with tiny bodies: this measures the 1024 px crops, FairFace's ages, the colour
match, the model's masks and the paste-back around the model, not the model).

background_remover (modnet, isnet_general): ms per frame on d18, whole frames batched against one at a time, the
background filled (replicas with a reduced encoder-decoder). alpha_pipe: the frame pipe's BGR -> yuv420p and BGRA ->
yuva420p conversions, and ProRes 4444 at quality 80, 90 and 100 against the same frames encoded lossless.

``--device cuda`` runs the models on the GPU (:class:`Bench`: uncompiled torch); the work around them stays on the
CPU, as on a worker's host back-end. Without a CUDA device it refuses (exit 2).

    .venv/bin/python -m benchmarks.processors [--frames 32] [--batch 16] [--audio-seconds 60] [--only NAME ...]
        [--crop-frames 8] [--repeats 3] [--device cpu|cuda]
"""

from __future__ import annotations

import argparse
import logging
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from shared.lip_sync import MEL_BANDS, WINDOW_COLUMNS
from shared.options import EncoderOptions, JobOptions, ProcessorName
from shared.settings import Settings
from tests.support import mask_replicas
from tests.support.age_replicas import fran, styleganex_age
from tests.support.background_replicas import matting
from tests.support.colorizer_replicas import ddcolor, deoldify
from tests.support.deep_swap_replicas import dfm
from tests.support.faces import MODELS, clip_frames, detector, image
from tests.support.lip_sync_replicas import mdx_voice, wav2lip
from tests.support.portrait_replicas import portrait_models
from tests.support.replicas import install_replica, replica_settings
from workers.engines.loading import loaded_models
from workers.lip_sync import mel
from workers.lip_sync.artefact import ChunkAudio
from workers.lip_sync.voice import VoiceExtractor
from workers.processors import ProcessorContext, build
from workers.processors.crop_paste import CropPasteProcessor
from workers.video import pipes


def _lip_sync_ms(bench: Bench, frames: np.ndarray, batch: int) -> float:
    settings = bench.settings(batch)
    windows = np.full((len(frames), MEL_BANDS, WINDOW_COLUMNS), 2.0, np.float16)
    options = JobOptions(processors=["lip_syncer"])
    context = ProcessorContext(options=options, sources=[], settings=settings, audio=ChunkAudio(0, windows))
    processor = build("lip_syncer", context)
    processor.process(frames[:batch])  # warm: sessions built, first call done
    processor = build("lip_syncer", context)
    began = time.perf_counter()
    for start in range(0, len(frames), batch):
        processor.process(frames[start : start + batch])
    return (time.perf_counter() - began) * 1000 / len(frames)


def _colour_ms(bench: Bench, frames: np.ndarray, batch: int, model: str) -> float:
    settings = bench.settings(batch)
    options = JobOptions(processors=["frame_colorizer"], frame_colorizer={"model": model})
    context = ProcessorContext(options=options, sources=[], settings=settings)
    processor = build("frame_colorizer", context)
    processor.process(frames[:batch])  # warm: session built, first call done
    began = time.perf_counter()
    for start in range(0, len(frames), batch):
        processor.process(frames[start : start + batch])
    return (time.perf_counter() - began) * 1000 / len(frames)


def _portrait_processor(bench: Bench, frames: np.ndarray, batch: int, name: str) -> CropPasteProcessor:
    settings = bench.settings(batch)
    edits = {"mouth_smile": 0.5, "eye_open_ratio": 0.5, "lip_open_ratio": 0.5, "head_yaw": 0.2}
    options = JobOptions.model_validate({"processors": [name], "face_editor": edits})
    processor = build(name, ProcessorContext(options=options, sources=[], settings=settings))
    assert isinstance(processor, CropPasteProcessor)
    processor.process(frames[:batch])  # warm: sessions built, first call done
    return processor


def _pass_ms(processor: CropPasteProcessor, frames: np.ndarray, batch: int) -> float:
    began = time.perf_counter()
    for start in range(0, len(frames), batch):
        processor.process(frames[start : start + batch])
    return (time.perf_counter() - began) * 1000


def _portrait(bench: Bench, batch: int, d18: np.ndarray, repeats: int) -> None:
    """Each clip's batched and one-at-a-time passes interleaved ``repeats`` times, the fastest of each kept (on a
    shared machine the other work only ever adds time)."""
    portrait_models(bench.models)
    clips = {"d18 480x480": d18, "crowd_1080p": clip_frames("crowd_1080p.mp4", list(range(max(2, len(d18) // 4))))}
    for name in ("expression_restorer", "face_editor"):
        for clip, frames in clips.items():
            runs = {size: _portrait_processor(bench, frames, size, name) for size in (batch, 1)}
            faces = sum(len(found) for found in runs[1].detector.detect(frames))
            best = dict.fromkeys(runs, float("inf"))
            for _ in range(repeats):
                for size, processor in runs.items():
                    best[size] = min(best[size], _pass_ms(processor, frames, size))
            fast, slow = best[batch], best[1]
            print(f"{name}, {len(frames)} frames of {clip}, {faces} faces, fastest of {repeats}")
            print(f"  batched ({batch} a call): {fast / len(frames):.1f} ms/frame, {fast / faces:.1f} ms/face")
            print(f"  one at a time:        {slow / len(frames):.1f} ms/frame, {slow / faces:.1f} ms/face"
                  f"  ({slow / fast:.2f}x)")  # fmt: skip


def _face_ms(bench: Bench, frames: np.ndarray, batch: int, name: ProcessorName, options: dict[str, object]) -> float:
    """ms per frame of ``name`` over ``frames``, ``batch`` frames a call (and as many faces a model call)."""
    settings = bench.settings(batch)
    context = ProcessorContext(options=JobOptions.model_validate({"processors": [name], **options}), sources=[],
                               settings=settings)  # fmt: skip
    processor = build(name, context)
    processor.process(frames[:batch])  # warm: sessions built, first call done
    began = time.perf_counter()
    for start in range(0, len(frames), batch):
        processor.process(frames[start : start + batch])
    return (time.perf_counter() - began) * 1000 / len(frames)


def _background_ms(bench: Bench, frames: np.ndarray, batch: int, model: str) -> float:
    settings = bench.settings(batch)
    options = JobOptions.model_validate(
        {"processors": ["background_remover"], "background_remover": {"model": model, "fill_colour": [0, 255, 0]}}
    )
    processor = build("background_remover", ProcessorContext(options=options, sources=[], settings=settings))
    processor.process(frames[:batch])  # warm: session built, first call done
    began = time.perf_counter()
    for start in range(0, len(frames), batch):
        processor.process(frames[start : start + batch])
    return (time.perf_counter() - began) * 1000 / len(frames)


def _pipe_ms(frames: np.ndarray) -> tuple[float, float]:
    """ms per frame of the writer's conversion: BGR → yuv420p, and BGRA → yuva420p."""
    bgra = np.concatenate([frames, np.full((*frames.shape[:3], 1), 255, np.uint8)], axis=3)
    timings = []
    for convert, batch in ((pipes._to_yuv420p, frames), (pipes._to_yuva420p, bgra)):
        convert(batch[:2])
        began = time.perf_counter()
        convert(batch)
        timings.append((time.perf_counter() - began) * 1000 / len(frames))
    return timings[0], timings[1]


def _prores(frames: np.ndarray, folder: Path) -> list[tuple[int, float, int]]:
    """ProRes 4444 at quality 80, 90, 100: each the worst frame's luma PSNR against the same frames encoded
    lossless by x264 (the pipe's own frames), and the file's bytes."""

    def luma(path: Path) -> np.ndarray:
        raw = subprocess.run(
            ["ffmpeg", "-v", "error", "-i", str(path), "-f", "rawvideo", "-pix_fmt", "gray", "-"],
            check=True, capture_output=True,
        ).stdout  # fmt: skip
        return np.frombuffer(raw, np.uint8).reshape(len(frames), *frames.shape[1:3]).astype(np.float64)

    def write(path: Path, options: EncoderOptions) -> Path:
        writer = pipes.FrameWriter(path, width=frames.shape[2], height=frames.shape[1], fps="30/1", options=options)
        writer.write(frames)
        writer.close()
        return path

    reference = luma(write(folder / "lossless.mp4", EncoderOptions(lossless=True, preset="ultrafast")))
    found = []
    for quality in (80, 90, 100):
        path = write(folder / f"prores-{quality}.mov", EncoderOptions(encoder="prores_ks", quality=quality))
        errors = ((luma(path) - reference) ** 2).mean(axis=(1, 2))
        found.append((quality, float(10 * np.log10(255**2 / errors.max())), path.stat().st_size))
    return found


SECTIONS = (
    "lip_syncer",
    "frame_colorizer",
    "portrait",
    "age_modifier",
    "deep_swapper",
    "background_remover",
    "alpha_pipe",
    "planning",
)
FACE_PROCESSORS: dict[str, tuple[ProcessorName, dict[str, object]]] = {
    "age_modifier fran": ("age_modifier", {"age_modifier": {"model": "fran", "direction": 30}}),
    "age_modifier styleganex_age": ("age_modifier", {"age_modifier": {"model": "styleganex_age", "direction": 30}}),
    "deep_swapper iperov/elon_musk_224": ("deep_swapper", {}),
}


@dataclass(frozen=True)
class Bench:
    """Where the replicas lie, and the device their models run on: ``cpu``, ONNX Runtime (as every figure in
    docs/performance.md was measured), or ``cuda``, uncompiled torch in fp32 on the GPU with the model calls held to
    the batch measured (the detector stays on ONNX Runtime's CPU provider, the lent machine's build; compiling
    every replica's every batch would not fit benchmarks/device_run.sh's step)."""

    models: Path
    device: Literal["cpu", "cuda"] = "cpu"

    def settings(self, batch: int = 1) -> Settings:
        if self.device == "cpu":
            return replica_settings(self.models, batch_size=batch)
        return replica_settings(self.models, batch_size=batch, torch_max_batch=batch, family="cuda", engine="torch",
                                torch_compile_mode="eager", torch_precision="fp32",
                                execution_providers=["CPUExecutionProvider"])  # fmt: skip


def _face_processors(bench: Bench, args: argparse.Namespace) -> None:
    install_replica(mask_replicas.fairface(answer=(0, 1, 3)), "fairface", bench.models)
    install_replica(fran(residual=1.0), "fran", bench.models)
    install_replica(styleganex_age(residual=1.0), "styleganex_age", bench.models)
    install_replica(dfm(residual=1.0), "iperov/elon_musk_224", bench.models)
    one_face = clip_frames("d18.mp4", list(range(args.crop_frames)))
    group = np.repeat(image("group6.jpg")[None], max(2, args.crop_frames // 2), axis=0)
    faces = sum(len(found) for found in detector().detect(group[:1]))
    for label, (name, options) in FACE_PROCESSORS.items():
        if name not in args.only:
            continue
        for frames, what in ((one_face, "d18 480x480, one face a frame"), (group, f"group6.jpg, {faces} faces")):
            runs: dict[int, list[float]] = {args.batch: [], 1: []}
            for _ in range(args.repeats):  # side by side, alternating; the best of each (a shared CPU is noisy)
                for size, found in runs.items():
                    found.append(_face_ms(bench, frames, size, name, options))
            batched, single = min(runs[args.batch]), min(runs[1])
            count = 1 if frames is one_face else faces
            print(f"{label}, {len(frames)} frames of {what}")
            print(f"  batched ({args.batch} frames a call): {batched:.1f} ms/frame, {batched / count:.1f} ms/face")
            print(f"  one at a time:         {single:.1f} ms/frame, {single / count:.1f} ms/face  "
                  f"({single / batched:.2f}x the batched)")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frames", type=int, default=32)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--audio-seconds", type=float, default=60.0)
    parser.add_argument("--crop-frames", type=int, default=8, help="frames for the age and deep swap processors")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each, alternating (face processors)")
    parser.add_argument("--only", nargs="+", choices=SECTIONS, default=list(SECTIONS), help="what to measure")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where the models run (Bench)")
    args = parser.parse_args()
    logging.getLogger("workers.models.download").setLevel(logging.ERROR)  # "no sha256 known": replicas, their own
    if args.device == "cuda":
        import torch  # only here: the CPU figures are ONNX Runtime's and need no torch

        if not torch.cuda.is_available():
            parser.exit(2, "processors: --device cuda, but torch sees no CUDA device\n")
        print(f"{torch.cuda.get_device_name(0)}: uncompiled torch fp32 (replicas; the detector on ONNX Runtime CPU)")
    with tempfile.TemporaryDirectory() as tmp:
        bench = Bench(Path(tmp) / "models", args.device)
        bench.models.mkdir()
        shutil.copy(MODELS / "yunet_2023mar.onnx", bench.models / "yunet_2023_mar.onnx")
        install_replica(mask_replicas.fan_68_5(exact=True), "fan_68_5", bench.models)
        install_replica(wav2lip(), "wav2lip_gan_96", bench.models)
        install_replica(mdx_voice(frames=256), "kim_vocal_2", bench.models)
        frames = clip_frames("d18.mp4", list(range(args.frames)))
        if "lip_syncer" in args.only:
            batched, single = _lip_sync_ms(bench, frames, args.batch), _lip_sync_ms(bench, frames, 1)
            print(f"lip_syncer, {args.frames} frames of d18 480x480, one face each")
            print(f"  batched ({args.batch} a call): {batched:.1f} ms/frame")
            print(f"  one at a time:        {single:.1f} ms/frame  ({single / batched:.2f}x the batched)")
        install_replica(ddcolor(residual=1.0), "ddcolor", bench.models)
        install_replica(deoldify(residual=1.0), "deoldify", bench.models)
        for model in ("ddcolor", "deoldify") if "frame_colorizer" in args.only else ():
            batched, single = _colour_ms(bench, frames, args.batch, model), _colour_ms(bench, frames, 1, model)
            print(f"frame_colorizer {model}, {args.frames} frames of d18 480x480 at 256")
            print(f"  batched ({args.batch} a call): {batched:.1f} ms/frame")
            print(f"  one at a time:        {single:.1f} ms/frame  ({single / batched:.2f}x the batched)")
        if "portrait" in args.only:
            _portrait(bench, args.batch, frames, args.repeats)
        _face_processors(bench, args)
        if "background_remover" in args.only:
            _background(bench, frames, args.batch)
        if "alpha_pipe" in args.only:
            _alpha_pipe(frames, Path(tmp))
        if "planning" in args.only:
            _planning(bench, args.audio_seconds, Path(tmp))
    if args.device == "cuda":  # a figure of a model that fell back to ONNX Runtime is no GPU figure: say which
        fallen = {model.name: model.fallback for model in loaded_models() if model.fallback}
        print(f"models on the GPU: all but {len(fallen)}" + "".join(f"\n  {why}" for why in fallen.values()))


def _background(bench: Bench, frames: np.ndarray, batch: int) -> None:
    for model in ("modnet", "isnet_general"):
        install_replica(matting(model, residual=1.0), model, bench.models)
        batched, single = _background_ms(bench, frames, batch, model), _background_ms(bench, frames, 1, model)
        print(f"background_remover {model}, {len(frames)} frames of d18 480x480, filled")
        print(f"  batched ({batch} a call): {batched:.1f} ms/frame")
        print(f"  one at a time:        {single:.1f} ms/frame  ({single / batched:.2f}x the batched)")


def _alpha_pipe(frames: np.ndarray, tmp: Path) -> None:
    plain, alpha = _pipe_ms(frames)
    print(f"frame pipe to the encoder, {len(frames)} frames of 480x480")
    print(f"  BGR -> yuv420p:   {plain:.2f} ms/frame")
    print(f"  BGRA -> yuva420p: {alpha:.2f} ms/frame  ({alpha / plain:.2f}x)")
    print("ProRes 4444, the first 12 of those frames: luma against the pipe's own (worst frame), bytes")
    for quality, decibels, size in _prores(frames[:12], tmp):
        print(f"  quality {quality}: {decibels:.1f} dB, {size / 1000:.0f} kB")


def _planning(bench: Bench, seconds: float, tmp: Path) -> None:
    rng = np.random.default_rng(0)
    stereo = (rng.standard_normal((int(seconds * 48_000), 2)) * 0.1).astype(np.float32)
    extractor = VoiceExtractor.load(bench.settings())
    began = time.perf_counter()
    voice = extractor.extract(stereo, tmp / "voice.npy")
    extract = time.perf_counter() - began
    mono = np.asarray(voice[::3, :1])  # 16 kHz mono stand-in (the resample is ffmpeg's)
    began = time.perf_counter()
    columns = sum(block.shape[1] for block in mel.spectrogram(mono, int(seconds * 80)))
    spectrum = time.perf_counter() - began
    began = time.perf_counter()  # a dub's pauses: digital silence, side by side with the same length of voice
    sum(block.shape[1] for block in mel.spectrogram(np.zeros_like(mono), int(seconds * 80)))
    silence = time.perf_counter() - began
    per_minute = 60.0 / seconds
    print(f"planning, {seconds:.0f} s of 48 kHz stereo audio")
    print(f"  voice extraction: {extract * per_minute:.2f} s per minute of audio (replica body; STFT at T=256)")
    print(f"  mel spectrogram:  {spectrum * per_minute:.3f} s per minute of audio ({columns} columns)")
    print(f"  mel spectrogram of digital silence: {silence * per_minute:.3f} s per minute of audio")


if __name__ == "__main__":
    main()
