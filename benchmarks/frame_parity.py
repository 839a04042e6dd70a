"""The integration clips' frames as this tree renders them, saved for comparison with another tree's: ``face_blur``
(the job's defaults), ``face_blur`` pixelating chained with ``face_debugger``, and ``face_swapper`` (a replica
inswapper on ONNX Runtime), on ``d18`` (6 frames) and ``crowd_1080p`` (3 frames), through ``swapfarm run`` with the
engine set to ONNX Runtime (the frames on the host) and to torch (the frames as 4:2:0 planes), lossless.

    .venv/bin/python -m benchmarks.frame_parity render OUT [--data ../shared/data]
    .venv/bin/python -m benchmarks.frame_parity compare BEFORE AFTER

Run ``render`` in each tree (another tree's sources first on ``PYTHONPATH``: e.g. ``git archive main`` unpacked),
then ``compare``: the PSNR of each output frame against the other tree's, the lowest per clip and job.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

JOBS: dict[str, dict[str, Any]] = {
    "face_blur": {"processors": ["face_blur"]},
    "face_blur pixelate+face_debugger": {
        "processors": ["face_blur", "face_debugger"],
        "face": {"blur_style": "pixelate"},
    },
    "face_swapper": {"processors": ["face_swapper"], "face": {"swapper": "inswapper_128"}},
}
CLIPS = {"d18.mp4": 6, "crowd_1080p.mp4": 3}


def render(out: Path, data: Path) -> None:
    from shared.options import JobOptions
    from tests.support.media import read_frames
    from tests.support.replicas import arcface_w600k_r50, install_replica, inswapper_128, replica_settings
    from workers.local import run_local

    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        models = work / "models"
        models.mkdir()
        shutil.copy(data / "models" / "yunet_2023mar.onnx", models / "yunet_2023_mar.onnx")
        install_replica(arcface_w600k_r50(), "arcface_w600k_r50", models)
        install_replica(inswapper_128(), "inswapper_128", models)
        for clip, frames in CLIPS.items():
            for job, options in JOBS.items():
                for engine in ("onnxruntime", "torch"):
                    settings = replica_settings(
                        models, work_dir=work / "work", engine=engine,
                        model_engines=dict.fromkeys(("inswapper_128", "arcface_w600k_r50"), "onnxruntime"),
                    )  # fmt: skip
                    output = work / "out.mp4"
                    state = work / f"state-{clip}-{job}-{engine}".replace(" ", "_")
                    result = run_local(
                        target=data / "media" / clip, sources=[data / "media" / "s0.jpg"], output=output,
                        options=JobOptions.model_validate(
                            {**options, "trim_end_frame": frames, "encoder": {"lossless": True}}
                        ),
                        workers=1, settings=settings, state_dir=state,
                    )  # fmt: skip
                    assert result.status == "succeeded", result
                    np.save(out / f"{clip}-{job}-{engine}.npy".replace(" ", "_"), read_frames(output))
                    print("rendered", clip, job, engine, flush=True)


def compare(before: Path, after: Path) -> None:
    from tests.support.media import psnr

    for name in sorted(p.name for p in before.glob("*.npy")):
        old, new = np.load(before / name), np.load(after / name)
        assert old.shape == new.shape, name
        lowest = min(psnr(a, b) for a, b in zip(old, new, strict=True))
        print(f"  {name[:-4]:58s} lowest {lowest:6.1f} dB over {len(old)} frames")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    first = sub.add_parser("render")
    first.add_argument("out", type=Path)
    first.add_argument("--data", type=Path, default=Path("../shared/data"))
    second = sub.add_parser("compare")
    second.add_argument("before", type=Path)
    second.add_argument("after", type=Path)
    args = parser.parse_args()
    if args.command == "render":
        render(args.out, args.data)
    else:
        compare(args.before, args.after)


if __name__ == "__main__":
    main()
