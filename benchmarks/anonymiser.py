"""The anonymiser's recall on HD clips with exact ground truth: ``face_blur`` at its defaults (strict) beside plain
tracked ``face_blur`` (``blur_strict`` off), on the same generated frames.

Clips come from :mod:`tests.support.anonymiser_clips` (real faces from the reference data, 20–200 px, turned up to
±40°, motion blur, darkness, half-covered faces, edge wraps, jumps, a scene cut every 30 frames), one per size and
seed, plus face-free clips (a textured pattern and a real background plate). Each clip is run through the job's own
tracked detection (:class:`workers.faces.track_feed.TrackFeed`, as a chunk with no look-behind) and
:class:`workers.processors.face_blur.FaceBlurProcessor`, in this process, without encoding; the frames are judged
as they come out. Printed per clip and mode: face-frames hidden by size bucket, all faces ≥ 24 px, the longest run
of frames a face ≥ 24 px stayed visible, the share of background pixels changed, detector calls per frame and the
time per frame, the judging left out (and strict's time as a ratio of plain's, measured side by side).

    .venv/bin/python -m benchmarks.anonymiser [--sizes 720 1080] [--seeds 11 12] [--frames 60] [--modes strict plain]
        [--face-free-frames 30] [--face '{"strict_second_detector": "scrfd"}']

With ``--write DIR`` it runs nothing: it writes each clip with faces as ``DIR/<height>p-seed<seed>.mp4`` (x264 CRF
18, 30 fps), for timing whole jobs on them (``swapfarm run --target … --processor face_blur``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

from tests.support.anonymiser_clips import SIZE_BUCKETS, ClipSpec, Outcome, blur_clip, generate


def _line(name: str, mode: str, result: Outcome) -> str:
    score = result.score
    parts = []
    for lo, hi in SIZE_BUCKETS:
        hid, total = score.recall(lo, hi)
        label = f"<{hi:.0f}" if lo == 0 else (f"≥{lo:.0f}" if hi > 1e8 else f"{lo:.0f}-{hi:.0f}")
        parts.append(f"{label}: {hid / total:6.1%} ({total:4d})" if total else f"{label}:      -       ")
    hid, total = score.recall(24.0)
    recall = f"{hid / total:6.1%} of {total:4d}" if total else "   -          "
    return (
        f"{name:18s} {mode:7s} ≥24px {recall} | " + " | ".join(parts) + f" | run {score.longest_shown():3d}"
        f" | bg {score.background_share:6.2%} | calls/frame {result.calls / result.frames:5.1f}"
        f" | {result.seconds / result.frames * 1000:7.0f} ms/frame"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[720, 1080])
    parser.add_argument("--seeds", type=int, nargs="+", default=[11, 12])
    parser.add_argument("--frames", type=int, default=60)
    parser.add_argument("--modes", nargs="+", default=["strict", "plain"], choices=["strict", "plain"])
    parser.add_argument("--face-free-frames", type=int, default=30, help="frames of each face-free clip (0: none)")
    parser.add_argument("--face", default="{}", help="extra face options for both modes, as JSON")
    parser.add_argument("--write", type=Path, help="write the clips with faces as mp4 files here, and run nothing")
    args = parser.parse_args()
    if args.write is not None:
        args.write.mkdir(parents=True, exist_ok=True)
        for height in args.sizes:
            for seed in args.seeds:
                _write(ClipSpec(height * 16 // 9, height, args.frames, seed), args.write / f"{height}p-seed{seed}.mp4")
        return

    extra_face = json.loads(args.face)
    modes = {"strict": {**extra_face}, "plain": {**extra_face, "blur_strict": False}}
    clips: list[tuple[str, ClipSpec]] = []
    for height in args.sizes:
        width = height * 16 // 9
        for seed in args.seeds:
            clips.append((f"{height}p seed {seed}", ClipSpec(width, height, args.frames, seed)))
        if args.face_free_frames:
            for background in ("texture", "plate"):
                spec = ClipSpec(width, height, args.face_free_frames, args.seeds[0], faces=0, background=background)
                clips.append((f"{height}p no-face {background}", spec))
    totals: dict[str, dict[str, list[float]]] = {m: {"hid": [], "all": [], "run": [], "s": []} for m in args.modes}
    for name, spec in clips:
        generated = list(generate(spec))
        frames = [frame for frame, _ in generated]
        truths = [truth for _, truth in generated]
        times: dict[str, float] = {}
        for mode in args.modes:
            result = blur_clip(frames, truths, modes[mode])
            times[mode] = result.seconds
            print(_line(name, mode, result), flush=True)
            if spec.faces:
                hid, total = result.score.recall(24.0)
                totals[mode]["hid"].append(hid)
                totals[mode]["all"].append(total)
                totals[mode]["run"].append(result.score.longest_shown())
        if "strict" in times and "plain" in times:
            print(f"{name:18s} strict/plain time per frame: {times['strict'] / times['plain']:.2f}×", flush=True)
    for mode, figures in totals.items():
        if figures["all"]:
            hid, total = sum(figures["hid"]), sum(figures["all"])
            print(f"all clips {mode}: {hid / total:.2%} of {total:.0f} face-frames ≥ 24 px hidden; longest run "
                  f"visible {max(figures['run']):.0f}")  # fmt: skip


def _write(spec: ClipSpec, path: Path) -> None:
    size = f"{spec.width}x{spec.height}"
    command = ["ffmpeg", "-y", "-loglevel", "error", "-f", "rawvideo", "-pix_fmt", "bgr24", "-s", size, "-r", "30"]
    command += ["-i", "-", "-c:v", "libx264", "-crf", "18", "-pix_fmt", "yuv420p", str(path)]
    encoder = subprocess.Popen(command, stdin=subprocess.PIPE)
    assert encoder.stdin is not None
    for frame, _ in generate(spec):
        encoder.stdin.write(frame.tobytes())
    encoder.stdin.close()
    if encoder.wait() != 0:
        raise SystemExit(f"ffmpeg could not write {path}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
