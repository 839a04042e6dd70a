"""The farm's own overhead: a 1-worker ``passthrough`` job vs a plain ffmpeg transcode of the same 720p file.

Both use the same encoder settings (libx264, preset veryfast, the same CRF) and run side by side in one process
run, alternating, so machine noise hits both. Prints wall times and the farm's throughput as a ratio of ffmpeg's.

    .venv/bin/python -m benchmarks.farm_overhead [--seconds 30] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from shared.options import EncoderOptions, JobOptions
from shared.settings import Settings
from workers.local import run_local


def make_input(path: Path, seconds: int) -> None:
    subprocess.run(
        ["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", f"testsrc2=size=1280x720:rate=30:duration={seconds}",
         "-f", "lavfi", "-i", f"sine=frequency=440:duration={seconds}", "-c:v", "libx264", "-preset", "veryfast",
         "-pix_fmt", "yuv420p", "-c:a", "aac", "-shortest", str(path)],
        check=True,
    )  # fmt: skip


def plain_ffmpeg(source: Path, output: Path, encoder: EncoderOptions) -> float:
    started = time.perf_counter()
    subprocess.run(
        ["ffmpeg", "-v", "error", "-y", "-i", str(source), "-c:v", encoder.encoder, "-preset", encoder.preset,
         "-crf", str(encoder.crf()), "-pix_fmt", "yuv420p", "-c:a", "copy", str(output)],
        check=True,
    )  # fmt: skip
    return time.perf_counter() - started


def farm(source: Path, output: Path, options: JobOptions, settings: Settings) -> float:
    started = time.perf_counter()
    result = run_local(target=source, sources=[], output=output, options=options, workers=1, settings=settings)
    assert result.status == "succeeded", result
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--chunk-seconds", type=float, default=None, help="chunk length (default: the farm's own)")
    args = parser.parse_args()
    encoder = EncoderOptions(preset="veryfast", quality=80)
    options = JobOptions(processors=["passthrough"], encoder=encoder)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        source = tmp / "input-720p.mp4"
        make_input(source, args.seconds)
        settings = Settings(work_dir=tmp / "work", batch_size=16)
        if args.chunk_seconds is not None:
            settings = settings.model_copy(update={"pixel_free_chunk_seconds": args.chunk_seconds})
        ffmpeg_times, farm_times = [], []
        for _ in range(args.rounds):
            ffmpeg_times.append(plain_ffmpeg(source, tmp / "ffmpeg.mp4", encoder))
            farm_times.append(farm(source, tmp / "farm.mp4", options, settings))
    frames = args.seconds * 30
    f, s = statistics.median(ffmpeg_times), statistics.median(farm_times)
    print(
        f"720p, {frames} frames, libx264 {encoder.preset} crf {encoder.crf()}, "
        f"{settings.pixel_free_chunk_seconds:g} s chunks, "
        f"{args.rounds} rounds (median)"
    )
    print(f"plain ffmpeg      : {f:6.2f} s  {frames / f:6.1f} fps")
    print(f"farm, 1 worker    : {s:6.2f} s  {frames / s:6.1f} fps   (passthrough: plan + chunks + stitch)")
    print(f"farm throughput   : {f / s:.2f}x plain ffmpeg")


if __name__ == "__main__":
    main()
