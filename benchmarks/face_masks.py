"""The cost per face of each paste-back mask type and of pixel boost, batched against one face at a time.

For each mask type (box alone; box + occlusion, region or area) the masks of ``--faces`` aligned crops are
computed as the swapper's paste stage computes them: all faces in one call of the mask model
(:class:`workers.faces.masking.FaceMasker`), and again one face per call. Pixel boost 256 and 512 swap the same
faces through an inswapper replica as 4 and 16 tiles each, batched and face by face. Rounds alternate between the
two ways so a busy machine slows both alike; printed per case: ms per face (median of the rounds), and the ratio
one-at-a-time / batched measured side by side.

The mask models are replicas (tests/support/mask_replicas.py: XSeg and BiSeNet reduced to ``--width`` channels;
their real layer widths are not documented here), so the figures show the batching and the pre/post-processing,
not the real models' compute; the swapper is the inswapper replica at ``--swapper-width`` of its real widths.

    .venv/bin/python -m benchmarks.face_masks [--faces 16] [--rounds 3] [--width 16] [--swapper-width 0.125]
    .venv/bin/python -m benchmarks.face_masks --boost-only --faces 4 --rounds 2
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import numpy.typing as npt

from shared.options import FaceOptions, MaskType
from tests.support import mask_replicas
from tests.support.replicas import install_replica, inswapper_128, replica_settings
from workers.engines.batching import FittedBatches
from workers.engines.onnx import OnnxEngine
from workers.faces.alignment import box_mask
from workers.faces.boosting import explode, implode
from workers.faces.landmarks import FaceLandmarker
from workers.faces.masking import FaceMasker, FaceOccluder, FaceRegionParser
from workers.faces.swapping import SWAPPERS, EmapProjection, FaceSwapper
from workers.models.registry import REGISTRY

Crops = npt.NDArray[np.uint8]


def _time(step: Callable[[], object]) -> float:
    start = time.perf_counter()
    step()
    return time.perf_counter() - start


def _compare(name: str, faces: int, rounds: int, batched: Callable[[], object], single: Callable[[], object]) -> None:
    batched(), single()  # warm-up: sessions, allocators
    together, apart = [], []
    for _ in range(rounds):
        together.append(_time(batched))
        apart.append(_time(single))
    per_batched = statistics.median(together) / faces * 1000
    per_single = statistics.median(apart) / faces * 1000
    print(  # noqa: T201
        f"{name:<22} batched {per_batched:8.2f} ms/face   one at a time {per_single:8.2f} ms/face   "
        f"ratio {per_single / per_batched:5.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--faces", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--width", type=int, default=16)
    parser.add_argument("--swapper-width", type=float, default=0.125)
    parser.add_argument("--boost-only", action="store_true", help="Only the pixel boost cases")
    args = parser.parse_args()

    folder = Path(tempfile.mkdtemp(prefix="swapfarm-bench-masks-"))
    settings = replica_settings(folder)
    install_replica(mask_replicas.xseg(width=args.width), "xseg_1", folder)
    install_replica(mask_replicas.bisenet(width=args.width), "bisenet_resnet_34", folder)
    install_replica(mask_replicas.fan_68_5(), "fan_68_5", folder)
    install_replica(inswapper_128(width=args.swapper_width), "inswapper_128", folder)

    rng = np.random.default_rng(0)
    size, count = 128, args.faces
    crops = rng.integers(0, 256, (count, size, size, 3), dtype=np.uint8)
    fives = rng.uniform(40, 90, (count, 5, 2))
    fitted = FittedBatches(count)
    occluder = FaceOccluder(REGISTRY["xseg_1"], OnnxEngine.load(folder / "xseg_1.onnx", settings), batches=fitted)
    parser_model = FaceRegionParser(
        REGISTRY["bisenet_resnet_34"], OnnxEngine.load(folder / "bisenet_resnet_34.onnx", settings), batches=fitted
    )
    landmarker = FaceLandmarker(OnnxEngine.load(folder / "fan_68_5.onnx", settings))
    defaults = FaceOptions()
    box = box_mask(size, defaults.mask_blur, defaults.mask_padding)

    def masker(kind: MaskType) -> FaceMasker:
        return FaceMasker(
            ("box", kind) if kind != "box" else ("box",),
            box,
            occluder=occluder if kind == "occlusion" else None,
            parser=parser_model if kind == "region" else None,
            regions=tuple(defaults.mask_regions),
            areas=tuple(defaults.mask_areas),
        )

    print(f"{count} faces at {size}², {args.rounds} rounds, mask replicas at width {args.width}")  # noqa: T201
    for kind in () if args.boost_only else ("box", "occlusion", "region", "area"):
        chosen = masker(kind)

        def run(part: slice, chosen: FaceMasker = chosen) -> object:
            landmarks = landmarker.lift(fives[part]) if chosen.needs_landmarks else None
            return chosen.combine(crops[part], before=chosen.before(crops[part]), landmarks=landmarks)

        _compare(
            f"mask {kind}",
            count,
            args.rounds,
            lambda run=run: run(slice(None)),  # type: ignore[misc]
            lambda run=run: [run(slice(i, i + 1)) for i in range(count)],  # type: ignore[misc]
        )

    engine = OnnxEngine.load(folder / "inswapper_128.onnx", settings)
    emap = np.asarray(rng.normal(0, 0.17, (512, 512)), np.float32)
    swapper = FaceSwapper(SWAPPERS["inswapper_128"], engine, EmapProjection(emap))
    latent = swapper.source_latent(rng.normal(size=(1, 512)).astype(np.float32))
    print(f"pixel boost: inswapper replica at {args.swapper_width} of its real widths")  # noqa: T201
    for boost in (128, 256, 512):
        factor = boost // 128
        boosted = rng.integers(0, 256, (count, boost, boost, 3), dtype=np.uint8)

        def swap(batch: Crops, factor: int = factor) -> Crops:
            return explode(swapper.swap(implode(batch, factor), latent), factor)

        _compare(
            f"pixel boost {boost}",
            count,
            args.rounds,
            lambda swap=swap, boosted=boosted: swap(boosted),  # type: ignore[misc]
            lambda swap=swap, boosted=boosted: [swap(boosted[i : i + 1]) for i in range(count)],  # type: ignore[misc]
        )


if __name__ == "__main__":
    main()
