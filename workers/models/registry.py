"""The models swapfarm can use: one :class:`ModelSpec` per file, as data.

Facts come from ``docs/MODELS.md`` (FaceFusion 3.x model set). Values that are not confirmed are kept here as
data and listed in ``ModelSpec.unverified`` so they are easy to find and correct; a ``sha256`` of ``None``
means no trustworthy hash is known, and verification then reports the file as *unverified* instead of
passing it.

Pixel normalisation is written for 0–255 pixel values in the model's colour order: the model sees
``(pixel - mean) / std`` per channel. ``x / 255`` is ``mean 0, std 255``; ``x / 127.5 - 1`` is ``mean 127.5,
std 127.5``.
"""

from __future__ import annotations

# data table: one ModelSpec per model file (the facts of docs/MODELS.md as data), and small lookups over them; long
# because each model is a declaration (``tests/test_modules.py`` lets a data table pass the size limit).
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal, get_args

from shared.deep_swap_options import DeepSwapperCatalogue
from shared.licences import LicenceId, licence_of

ModelKind = Literal[
    "detector",
    "recognizer",
    "swapper",
    "enhancer",
    "embedding_converter",
    "landmarker",
    "occluder",
    "face_parser",
    "classifier",
    "content_analyser",
    "frame_enhancer",
    "lip_syncer",
    "voice_extractor",
    "frame_colorizer",
    "age_modifier",
    "deep_swapper",
    "live_portrait",
    "background_remover",
]
ColourOrder = Literal["rgb", "bgr"]
TemplateName = Literal[
    "arcface_112_v1", "arcface_112_v2", "arcface_128", "ffhq_512", "mtcnn_512", "dfl_whole_face", "styleganex_384"
]
# Fields of a spec that may be flagged as not confirmed by a primary source.
SpecField = Literal["sha256", "size_bytes", "input_names", "output_names", "normalisation", "licence"]

INSIGHTFACE_LICENCE = "insightface pretrained weights: non-commercial research use only"


@dataclass(frozen=True)
class Normalisation:
    """Per-channel ``(pixel - mean) / std`` on 0–255 values, channels in the model's colour order."""

    mean: tuple[float, float, float]
    std: tuple[float, float, float]


UNIT = Normalisation(mean=(0.0, 0.0, 0.0), std=(255.0, 255.0, 255.0))  # [0, 1]
SYMMETRIC = Normalisation(mean=(127.5, 127.5, 127.5), std=(127.5, 127.5, 127.5))  # [-1, 1]
RAW = Normalisation(mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0))  # 0–255 as is
INSIGHTFACE_DETECTOR = Normalisation(mean=(127.5, 127.5, 127.5), std=(128.0, 128.0, 128.0))
IMAGENET = Normalisation(mean=(123.675, 116.28, 103.53), std=(58.395, 57.12, 57.375))  # RGB order
CENTRED = Normalisation(mean=(127.5, 127.5, 127.5), std=(255.0, 255.0, 255.0))  # [-0.5, 0.5]


@dataclass(frozen=True)
class ModelSpec:
    """One downloadable model file and the facts needed to feed it.

    ``input_size`` is the square side of the image input (``None`` for a non-image model); ``template`` the
    alignment template of its face crops (``None`` for detectors, which see whole frames); ``hugging_face_only``:
    only FaceFusion's Hugging Face repositories serve it (the DeepFaceLive models), not its GitHub releases.
    """

    name: str
    file_name: str
    base: str
    kind: ModelKind
    sha256: str | None
    size_bytes: int | None
    input_size: int | None
    template: TemplateName | None
    normalisation: Normalisation | None
    colour_order: ColourOrder | None
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    licence: str
    unverified: frozenset[SpecField] = field(default_factory=frozenset)
    hugging_face_only: bool = False

    @property
    def remote_name(self) -> str:
        """The file's name where it is downloaded from: ``file_name``'s last part (``file_name`` is where it lies
        in a model folder, under a subfolder of its own where two models share a name: ``iperov/elon_musk_224.dfm``).
        """
        return self.file_name.rsplit("/", 1)[-1]

    @property
    def licence_id(self) -> LicenceId:
        """The licence the farm files the model under (``shared.licences``): what ``disabled_licences`` names;
        ``licence`` says it in words."""
        return licence_of(self.name)


_GFPGAN_LICENCE = "GFPGAN: Apache-2.0, with StyleGAN2 parts under NVIDIA's licence"
_GPEN_LICENCE = "GPEN (yangxy/GPEN): see upstream terms"
# Enhancers that differ only in size and template: name, input side, template, licence.
_MORE_ENHANCERS: tuple[tuple[str, int, TemplateName, str], ...] = (
    ("gfpgan_1.2", 512, "ffhq_512", _GFPGAN_LICENCE),
    ("gfpgan_1.3", 512, "ffhq_512", _GFPGAN_LICENCE),
    ("gpen_bfr_256", 256, "arcface_128", _GPEN_LICENCE),
    ("gpen_bfr_1024", 1024, "ffhq_512", _GPEN_LICENCE),
    ("gpen_bfr_2048", 2048, "ffhq_512", _GPEN_LICENCE),
    (
        "restoreformer_plus_plus",
        512,
        "ffhq_512",
        "RestoreFormer++ (wzhouxiff/RestoreFormerPlusPlus): Apache-2.0",
    ),
)

_SPECS = (
    ModelSpec(
        # The OpenCV Zoo / libfacedetection file; FaceFusion hosts the same bytes as yunet_2023_mar.onnx.
        name="yunet",
        file_name="yunet_2023_mar.onnx",
        base="models-3.4.0",
        kind="detector",
        sha256="8f2383e4dd3cfbb4553ea8718107fc0423210dc964f9f4280604804ed2552fa4",
        size_bytes=232_589,
        input_size=640,
        template=None,
        normalisation=RAW,
        colour_order="bgr",
        input_names=("input",),
        output_names=(
            *("cls_8", "cls_16", "cls_32", "obj_8", "obj_16", "obj_32"),
            *("bbox_8", "bbox_16", "bbox_32", "kps_8", "kps_16", "kps_32"),
        ),
        licence="Apache-2.0 (libfacedetection.train); MIT (OpenCV Zoo)",
    ),
    ModelSpec(
        name="scrfd_2.5g",
        file_name="scrfd_2.5g.onnx",
        base="models-3.0.0",
        kind="detector",
        sha256=None,
        size_bytes=3_295_067,
        input_size=640,
        template=None,
        normalisation=INSIGHTFACE_DETECTOR,
        colour_order="bgr",
        input_names=("input",),
        output_names=(
            *("score_8", "score_16", "score_32", "bbox_8", "bbox_16", "bbox_32"),
            *("kps_8", "kps_16", "kps_32"),
        ),
        licence=INSIGHTFACE_LICENCE,
        unverified=frozenset({"output_names"}),
    ),
    ModelSpec(
        name="retinaface_10g",
        file_name="retinaface_10g.onnx",
        base="models-3.0.0",
        kind="detector",
        sha256="808399c3d0b40ed340634ed590ae564a7caa09e5659916923a95d4470b54ff5a",
        size_bytes=16_926_877,
        input_size=640,
        template=None,
        normalisation=INSIGHTFACE_DETECTOR,
        colour_order="bgr",
        input_names=("input",),
        output_names=(
            *("score_8", "score_16", "score_32", "bbox_8", "bbox_16", "bbox_32"),
            *("kps_8", "kps_16", "kps_32"),
        ),
        licence=INSIGHTFACE_LICENCE,
        unverified=frozenset({"sha256", "output_names"}),
    ),
    ModelSpec(
        name="yoloface_8n",
        file_name="yoloface_8n.onnx",
        base="models-3.0.0",
        kind="detector",
        sha256="821cdbb1e65fbbabdde7dd0933f754797a343e56fd962729c61ffcefcd135929",
        size_bytes=12_659_761,
        input_size=640,
        template=None,
        normalisation=UNIT,
        colour_order="bgr",
        input_names=("input",),
        output_names=("output0",),
        licence="AGPL-3.0 (Ultralytics YOLOv8); face weights by a third party",
        unverified=frozenset({"output_names", "licence"}),
    ),
    ModelSpec(
        name="arcface_w600k_r50",
        file_name="arcface_w600k_r50.onnx",
        base="models-3.0.0",
        kind="recognizer",
        sha256="f1f79dc3b0b79a69f94799af1fffebff09fbd78fd96a275fd8f0cbbea23270d1",
        size_bytes=174_388_474,
        input_size=112,
        template="arcface_112_v2",
        normalisation=SYMMETRIC,
        colour_order="rgb",
        input_names=("input",),
        output_names=("output",),
        licence=INSIGHTFACE_LICENCE,
        unverified=frozenset({"output_names"}),
    ),
    ModelSpec(
        name="inswapper_128",
        file_name="inswapper_128.onnx",
        base="models-3.0.0",
        kind="swapper",
        # FaceFusion's re-export differs from insightface's original (554,253,681 B, sha256 e4a3f08c…16af).
        sha256=None,
        size_bytes=555_303_150,
        input_size=128,
        template="arcface_128",
        normalisation=UNIT,
        colour_order="rgb",
        input_names=("target", "source"),
        output_names=("output",),
        licence=INSIGHTFACE_LICENCE,
        unverified=frozenset({"output_names"}),
    ),
    ModelSpec(
        name="inswapper_128_fp16",
        file_name="inswapper_128_fp16.onnx",
        base="models-3.0.0",
        kind="swapper",
        # Two third-party sources agree on this hash; a third gives another (98fae144…bf21).
        sha256="c4eccca86ad177586c85c28bf1a64a9d9ed237e283a15818d831f7facfd3f420",
        size_bytes=277_680_829,
        input_size=128,
        template="arcface_128",
        normalisation=UNIT,
        colour_order="rgb",
        input_names=("target", "source"),
        output_names=("output",),
        licence=INSIGHTFACE_LICENCE,
        unverified=frozenset({"sha256", "output_names"}),
    ),
    ModelSpec(
        name="hyperswap_1a_256",
        file_name="hyperswap_1a_256.onnx",
        base="models-3.3.0",
        kind="swapper",
        sha256="c0e98a8a03a238f461ed3d2570e426b49f46745ee400854a60dceeb70c246add",
        size_bytes=402_742_682,
        input_size=256,
        template="arcface_128",
        normalisation=SYMMETRIC,
        colour_order="rgb",
        input_names=("source", "target"),
        output_names=("output", "mask"),
        licence="FaceFusion labs release; terms not recorded here",
        unverified=frozenset({"licence"}),
    ),
    ModelSpec(
        name="simswap_256",
        file_name="simswap_256.onnx",
        base="models-3.0.0",
        kind="swapper",
        sha256=None,
        size_bytes=None,
        input_size=256,
        template="arcface_112_v1",
        normalisation=IMAGENET,
        colour_order="rgb",
        input_names=("target", "source"),
        output_names=("output",),
        licence="SimSwap: non-commercial (CC BY-NC 4.0); identity from insightface ArcFace",
        unverified=frozenset({"output_names", "licence"}),
    ),
    ModelSpec(
        name="crossface_simswap",
        file_name="crossface_simswap.onnx",
        base="models-3.4.0",
        kind="embedding_converter",
        sha256=None,
        size_bytes=None,
        input_size=None,
        template=None,
        normalisation=None,
        colour_order=None,
        input_names=("input",),
        output_names=("output",),
        licence="FaceFusion labs release; terms not recorded here",
        unverified=frozenset({"licence"}),
    ),
    ModelSpec(
        name="gfpgan_1.4",
        file_name="gfpgan_1.4.onnx",
        base="models-3.0.0",
        kind="enhancer",
        sha256="accc4757b26bdb89b32b4d3500d4f79c9dff97c1dd7c7104bf9dcb95e3311385",
        size_bytes=340_299_087,
        input_size=512,
        template="ffhq_512",
        normalisation=SYMMETRIC,
        colour_order="rgb",
        input_names=("input",),
        output_names=("output",),
        licence="GFPGAN: Apache-2.0, with StyleGAN2 parts under NVIDIA's licence",
        unverified=frozenset({"output_names"}),
    ),
    ModelSpec(
        name="gpen_bfr_512",
        file_name="gpen_bfr_512.onnx",
        base="models-3.0.0",
        kind="enhancer",
        sha256=None,
        size_bytes=None,
        input_size=512,
        template="ffhq_512",
        normalisation=SYMMETRIC,
        colour_order="rgb",
        input_names=("input",),
        output_names=("output",),
        licence="GPEN (yangxy/GPEN): see upstream terms",
        unverified=frozenset({"input_names", "output_names", "licence"}),
    ),
    ModelSpec(
        name="codeformer",
        file_name="codeformer.onnx",
        base="models-3.0.0",
        kind="enhancer",
        sha256="21710e7ab61c82683576c428e9c1b6fe1ed419586b7b39e394c3449c294b550f",
        size_bytes=376_951_650,
        input_size=512,
        template="ffhq_512",
        normalisation=SYMMETRIC,
        colour_order="rgb",
        input_names=("input", "weight"),
        output_names=("output",),
        licence="CodeFormer: S-Lab License 1.0, non-commercial",
        unverified=frozenset({"sha256", "output_names"}),
    ),
    # 68-point landmarks, occlusion and region masks (FaceFusion's face_landmarker and face_masker). FaceFusion
    # feeds each of them ``{"input": ...}`` and reads its outputs by position, so the output names are unverified.
    ModelSpec(
        # A 256² crop around the detector's box (scale 195 / longest side), BGR in [0, 1]; outputs the 68 points
        # [N, 68, 3] in 64² heatmap units and the heatmaps [N, 68, 64, 64] whose peaks make the landmark score.
        name="2dfan4",
        file_name="2dfan4.onnx",
        base="models-3.0.0",
        kind="landmarker",
        sha256=None,
        size_bytes=None,
        input_size=256,
        template=None,
        normalisation=UNIT,
        colour_order="bgr",
        input_names=("input",),
        output_names=("landmarks", "heatmaps"),
        licence="face-alignment (1adrianb/face-alignment): BSD-3-Clause",
        unverified=frozenset({"output_names", "licence"}),
    ),
    ModelSpec(
        # Lifts the 5 detector points (in ffhq_512 unit coordinates) to 68: [N, 5, 2] -> [N, 68, 2].
        name="fan_68_5",
        file_name="fan_68_5.onnx",
        base="models-3.0.0",
        kind="landmarker",
        sha256=None,
        size_bytes=None,
        input_size=None,
        template=None,
        normalisation=None,
        colour_order=None,
        input_names=("input",),
        output_names=("output",),
        licence="FaceFusion release; terms not recorded here",
        unverified=frozenset({"output_names", "licence"}),
    ),
    *(
        ModelSpec(
            # DeepFaceLab's XSeg occluder: NHWC [N, 256, 256, 3] BGR in [0, 1] -> [N, 256, 256, 1] in [0, 1].
            name=name,
            file_name=f"{name}.onnx",
            base=base,
            kind="occluder",
            sha256=None,
            size_bytes=None,
            input_size=256,
            template=None,
            normalisation=UNIT,
            colour_order="bgr",
            input_names=("input",),
            output_names=("output",),
            licence="DeepFaceLab XSeg: GPL-3.0",
            unverified=frozenset({"output_names", "licence"}),
        )
        for name, base in (("xseg_1", "models-3.1.0"), ("xseg_2", "models-3.1.0"), ("xseg_3", "models-3.2.0"))
    ),
    *(
        ModelSpec(
            # BiSeNet face parser (CelebAMask-HQ's 19 classes): [N, 3, 512, 512] RGB, ImageNet mean/std ->
            # [N, 19, 512, 512] class scores.
            name=name,
            file_name=f"{name}.onnx",
            base="models-3.1.0",
            kind="face_parser",
            sha256=None,
            size_bytes=None,
            input_size=512,
            template=None,
            normalisation=IMAGENET,
            colour_order="rgb",
            input_names=("input",),
            output_names=("output",),
            licence="face-parsing.PyTorch (zllrunning): MIT",
            unverified=frozenset({"output_names", "licence"}),
        )
        for name in ("bisenet_resnet_18", "bisenet_resnet_34")
    ),
    # The rest of FaceFusion's swappers. Every one is fed ``{"source": ..., "target": ...}``; sizes, templates and
    # normalisation as FaceFusion's face_swapper model set gives them; files not measured here.
    *(
        ModelSpec(
            name=name,
            file_name=f"{name}.onnx",
            base="models-3.0.0",
            kind="swapper",
            sha256=None,
            size_bytes=None,
            input_size=256,
            template="arcface_112_v1",
            normalisation=SYMMETRIC,
            colour_order="rgb",
            input_names=("target", "source"),
            output_names=("output",),
            licence="GHOST (sberbank-ai/sber-swap): Apache-2.0",
            unverified=frozenset({"output_names", "licence"}),
        )
        for name in ("ghost_1_256", "ghost_2_256", "ghost_3_256")
    ),
    *(
        ModelSpec(
            # Embedding converters: raw ArcFace w600k_r50 [N, 512] -> the swapper's own identity space.
            name=name,
            file_name=f"{name}.onnx",
            base="models-3.4.0",
            kind="embedding_converter",
            sha256=None,
            size_bytes=None,
            input_size=None,
            template=None,
            normalisation=None,
            colour_order=None,
            input_names=("input",),
            output_names=("output",),
            licence="FaceFusion labs release; terms not recorded here",
            unverified=frozenset({"licence"}),
        )
        for name in ("crossface_ghost", "crossface_hififace")
    ),
    ModelSpec(
        # The source is an image: the source face aligned to arcface_112_v2 at 112, RGB in [0, 1].
        name="blendswap_256",
        file_name="blendswap_256.onnx",
        base="models-3.0.0",
        kind="swapper",
        sha256=None,
        size_bytes=None,
        input_size=256,
        template="ffhq_512",
        normalisation=UNIT,
        colour_order="rgb",
        input_names=("target", "source"),
        output_names=("output",),
        licence="BlendFace (mapooon/BlendFace): research use; terms not recorded here",
        unverified=frozenset({"output_names", "licence"}),
    ),
    ModelSpec(
        # The source is an image: the source face aligned to ffhq_512 at 256, RGB in [0, 1].
        name="uniface_256",
        file_name="uniface_256.onnx",
        base="models-3.0.0",
        kind="swapper",
        sha256=None,
        size_bytes=None,
        input_size=256,
        template="ffhq_512",
        normalisation=SYMMETRIC,
        colour_order="rgb",
        input_names=("target", "source"),
        output_names=("output",),
        licence="UniFace (xc-csc101/UniFace): terms not recorded here",
        unverified=frozenset({"output_names", "licence"}),
    ),
    ModelSpec(
        name="hififace_unofficial_256",
        file_name="hififace_unofficial_256.onnx",
        base="models-3.1.0",
        kind="swapper",
        sha256=None,
        size_bytes=None,
        input_size=256,
        template="mtcnn_512",
        normalisation=SYMMETRIC,
        colour_order="rgb",
        input_names=("target", "source"),
        output_names=("output",),
        licence="unofficial HifiFace re-implementation: terms not recorded here",
        unverified=frozenset({"output_names", "licence"}),
    ),
    ModelSpec(
        name="hyperswap_1b_256",
        file_name="hyperswap_1b_256.onnx",
        base="models-3.3.0",
        kind="swapper",
        sha256=None,  # third-party lists give only a shortened hash (5124031789c4…a73e)
        size_bytes=402_742_682,
        input_size=256,
        template="arcface_128",
        normalisation=SYMMETRIC,
        colour_order="rgb",
        input_names=("source", "target"),
        output_names=("output", "mask"),
        licence="FaceFusion labs release; terms not recorded here",
        unverified=frozenset({"licence", "size_bytes"}),
    ),
    ModelSpec(
        name="hyperswap_1c_256",
        file_name="hyperswap_1c_256.onnx",
        base="models-3.3.0",
        kind="swapper",
        sha256=None,  # third-party lists give only a shortened hash (5528c2d76fe9…06a5)
        size_bytes=402_742_682,
        input_size=256,
        template="arcface_128",
        normalisation=SYMMETRIC,
        colour_order="rgb",
        input_names=("source", "target"),
        output_names=("output", "mask"),
        licence="FaceFusion labs release; terms not recorded here",
        unverified=frozenset({"licence", "size_bytes"}),
    ),
    ModelSpec(
        # SimSwap's deep generator at 512 (59.8 M parameters, 239.1 MB by the layer count).
        name="simswap_unofficial_512",
        file_name="simswap_unofficial_512.onnx",
        base="models-3.0.0",
        kind="swapper",
        sha256=None,
        size_bytes=None,
        input_size=512,
        template="arcface_112_v1",
        normalisation=UNIT,
        colour_order="rgb",
        input_names=("target", "source"),
        output_names=("output",),
        licence="SimSwap: non-commercial (CC BY-NC 4.0); identity from insightface ArcFace",
        unverified=frozenset({"output_names", "licence"}),
    ),
    # More face enhancers: FaceFusion feeds each ``{"input": ...}`` RGB in [-1, 1] and clips the output to it.
    *(
        ModelSpec(
            name=name,
            file_name=f"{name}.onnx",
            base="models-3.0.0",
            kind="enhancer",
            sha256=None,
            size_bytes=None,
            input_size=size,
            template=template,
            normalisation=SYMMETRIC,
            colour_order="rgb",
            input_names=("input",),
            output_names=("output",),
            licence=licence,
            unverified=frozenset({"output_names", "licence"}),
        )
        for name, size, template, licence in _MORE_ENHANCERS
    ),
    ModelSpec(
        # FairFace: the face aligned to arcface_112_v2 at 224, RGB with ImageNet mean/std -> three int64 [N]
        # class ids (race, gender 0 male / 1 female, age bracket 0-8), read by position.
        name="fairface",
        file_name="fairface.onnx",
        base="models-3.0.0",
        kind="classifier",
        sha256=None,
        size_bytes=None,
        input_size=224,
        template="arcface_112_v2",
        normalisation=IMAGENET,
        colour_order="rgb",
        input_names=("input",),
        output_names=("race_id", "gender_id", "age_id"),
        licence="FairFace (joojs/fairface): CC BY 4.0",
        unverified=frozenset({"output_names", "licence"}),
    ),
    # The content policy's three NSFW analysers (FaceFusion's content_analyser). Each sees the whole frame
    # resized to its input; how each output becomes a score is in workers/content.py, unverified like these.
    ModelSpec(
        # A YOLO detector: [N, 4 + classes, anchors]; a frame's score is its best class score.
        name="nsfw_1",
        file_name="nsfw_1.onnx",
        base="models-3.3.0",
        kind="content_analyser",
        sha256=None,
        size_bytes=None,
        input_size=640,
        template=None,
        normalisation=UNIT,
        colour_order="rgb",
        input_names=("input",),
        output_names=("output",),
        licence="EraX NSFW detector: terms not recorded here",
        unverified=frozenset({"output_names", "normalisation", "licence"}),
    ),
    ModelSpec(
        # A classifier: [N, 2] probabilities (safe, nsfw).
        name="nsfw_2",
        file_name="nsfw_2.onnx",
        base="models-3.3.0",
        kind="content_analyser",
        sha256=None,
        size_bytes=None,
        input_size=384,
        template=None,
        normalisation=SYMMETRIC,
        colour_order="rgb",
        input_names=("input",),
        output_names=("output",),
        licence="Marqo NSFW image detection: terms not recorded here",
        unverified=frozenset({"output_names", "normalisation", "licence"}),
    ),
    *(
        ModelSpec(
            # Real-ESRGAN frame upscalers, as FaceFusion's frame_enhancer runs them: tiles of 256 px (8 px of each
            # side overlap, cropped after the model) as [N, 3, 256, 256] RGB in [0, 1] -> [N, 3, 256 s, 256 s] in
            # [0, 1]; the scale s is shared/options.py's FRAME_ENHANCER_SCALES.
            name=name,
            file_name=f"{name}.onnx",
            base="models-3.0.0",
            kind="frame_enhancer",
            sha256=None,
            size_bytes=None,
            input_size=256,
            template=None,
            normalisation=UNIT,
            colour_order="rgb",
            input_names=("input",),
            output_names=("output",),
            licence="Real-ESRGAN (xinntao/Real-ESRGAN): BSD-3-Clause",
            unverified=frozenset({"input_names", "output_names", "licence"}),
        )
        for name in ("real_esrgan_x2", "real_esrgan_x2_fp16", "real_esrgan_x4", "real_esrgan_x4_fp16")
    ),
    ModelSpec(
        # A CLIP-based classifier: [N, 2] logits; the score is nsfw minus safe.
        name="nsfw_3",
        file_name="nsfw_3.onnx",
        base="models-3.3.0",
        kind="content_analyser",
        sha256=None,
        size_bytes=None,
        input_size=448,
        template=None,
        normalisation=Normalisation(mean=(122.77, 116.75, 104.09), std=(68.50, 66.63, 70.32)),
        colour_order="rgb",
        input_names=("input",),
        output_names=("output",),
        licence="NSFW classifier on CLIP: terms not recorded here",
        unverified=frozenset({"output_names", "normalisation", "licence"}),
    ),
)

_WAV2LIP_LICENCE = "Wav2Lip (Rudrabha/Wav2Lip): non-commercial research use only"
_KIM_LICENCE = "Kim Vocal (KimberleyJensen): non-commercial use only"
# The lip-sync and voice-extraction models (docs/MODELS.md 10.6-10.7).
_SOUND_SPECS = (
    *(
        ModelSpec(
            # source [1, 1, 80, 16] mel (clipped log, times 2 weight); target [1, 6, 96, 96] = the crop with its lower
            # half (rows 48-95) zeroed, then the crop, both BGR / 255; output [1, 3, 96, 96] BGR in [0, 1]. The crop
            # is the 68-point box of an ffhq_512 crop, warped to 96.
            name=name,
            file_name=f"{name}.onnx",
            base="models-3.0.0",
            kind="lip_syncer",
            sha256=None,
            size_bytes=None,
            input_size=96,
            template="ffhq_512",
            normalisation=UNIT,
            colour_order="bgr",
            input_names=("source", "target"),
            output_names=("output",),
            licence=_WAV2LIP_LICENCE,
            unverified=frozenset({"output_names", "licence"}),
        )
        for name in ("wav2lip_96", "wav2lip_gan_96")
    ),
    ModelSpec(
        # source [1, 1, 80, 16] mel (unweighted); target [1, 3, 256, 256] RGB / 255; weight f32 [1];
        # output [1, 3, 256, 256] RGB.
        name="edtalk_256",
        file_name="edtalk_256.onnx",
        base="models-3.3.0",
        kind="lip_syncer",
        sha256=None,
        size_bytes=None,
        input_size=256,
        template="ffhq_512",
        normalisation=UNIT,
        colour_order="rgb",
        input_names=("source", "target", "weight"),
        output_names=("output",),
        licence="EDTalk (tanshuai0219/EDTalk): Apache-2.0",
        unverified=frozenset({"output_names"}),
    ),
    *(
        ModelSpec(
            # MDX-Net: input [W, 4, 3072, T] (L.re, L.im, R.re, R.im of a 7680-point STFT, hop 1024), output the
            # same layout (the voice); T = 256 for kim_vocal_2, not confirmed for the other two.
            name=name,
            file_name=f"{name}.onnx",
            base=base,
            kind="voice_extractor",
            sha256=None,
            size_bytes=None,
            input_size=None,
            template=None,
            normalisation=None,
            colour_order=None,
            input_names=("input",),
            output_names=("output",),
            licence=licence,
            unverified=frozenset({"output_names", "licence"}),
        )
        for name, base, licence in (
            ("kim_vocal_1", "models-3.4.0", _KIM_LICENCE),
            ("kim_vocal_2", "models-3.0.0", _KIM_LICENCE),
            ("uvr_mdxnet", "models-3.4.0", "UVR MDX-Net (Anjok07/ultimatevocalremovergui): MIT"),
        )
    ),
)
_DDCOLOR_LICENCE = "DDColor (piddnad/DDColor): Apache-2.0"
_DEOLDIFY_LICENCE = "DeOldify (jantic/DeOldify): MIT"
# The whole-frame colourisers (docs/MODELS.md 10.5). ``input`` [N, 3, S, S] with S the job's frame_colorizer.size
# (192-512: the files take any H x W, not confirmed); input_size is the default S. DDColor: the frame's grey as RGB
# in [0, 1] -> ``output`` [N, 2, S, S], Lab a, b (OpenCV float Lab). DeOldify: the grey as raw 0-255 RGB -> [N, 3,
# S, S] RGB 0-255. FaceFusion's licence strings; only ddcolor's CRC32 (cab3b659) is known, no sha256 or size.
_COLOUR_SPECS = tuple(
    ModelSpec(
        name=name,
        file_name=f"{name}.onnx",
        base="models-3.0.0",
        kind="frame_colorizer",
        sha256=None,
        size_bytes=None,
        input_size=256,
        template=None,
        normalisation=UNIT if name.startswith("ddcolor") else RAW,
        colour_order="rgb",
        input_names=("input",),
        output_names=("output",),
        licence=_DDCOLOR_LICENCE if name.startswith("ddcolor") else _DEOLDIFY_LICENCE,
        unverified=frozenset({"input_names", "output_names"}),
    )
    for name in ("ddcolor", "ddcolor_artistic", "deoldify", "deoldify_artistic", "deoldify_stable")
)
# The age models (docs/MODELS.md 10.1). fran: ``target`` [1, 3, 1024, 1024] (an ffhq_512 crop at 1024, RGB in [0, 1])
# and ``direction`` f32 [2] = (the face's age, the age wanted) / 100 -> [1, 3, 1024, 1024] RGB in [0, 1].
# styleganex_age: ``target`` [1, 3, 256, 256] (ffhq_512 at 256) and ``target_with_background`` [1, 3, 384, 384]
# (styleganex_384 at 384, from the five points scaled x0.875 about the nose), both RGB in [-1, 1], and ``direction``
# f32 0-d -> [1, 3, S, S] in [-1, 1] (S not confirmed). The input names are the ones FaceFusion feeds by name; it
# reads output 0, whose name is not known. input_size and template are those of the crop pasted back.
_AGE_SPECS = (
    ModelSpec(
        name="fran",
        file_name="fran.onnx",
        base="models-3.6.0",
        kind="age_modifier",
        sha256="725bb979bda169e0469de31d35ded1f6fcca3413440564d375c92c863570933b",  # one third party's
        size_bytes=None,
        input_size=1024,
        template="ffhq_512",
        normalisation=UNIT,
        colour_order="rgb",
        input_names=("target", "direction"),
        output_names=("output",),
        licence="FRAN (ry-lu): MIT",
        unverified=frozenset({"sha256", "output_names"}),
    ),
    ModelSpec(
        name="styleganex_age",
        file_name="styleganex_age.onnx",
        base="models-3.1.0",
        kind="age_modifier",
        sha256=None,
        size_bytes=None,
        input_size=384,
        template="styleganex_384",
        normalisation=SYMMETRIC,
        colour_order="rgb",
        input_names=("target", "target_with_background", "direction"),
        output_names=("output",),
        licence="StyleGANEX (williamyang1991): S-Lab License 1.0, non-commercial",
        unverified=frozenset({"output_names"}),
    ),
)
# The DeepFaceLive models of the deep swapper (docs/MODELS.md 10.3): ``scope/name_RES`` is FaceFusion's id, the file
# ``name_RES.dfm`` in its Hugging Face repository ``deepfacelive-models-<scope>`` (kept here under ``<scope>/``, two
# scopes have files of one name). ``in_face:0`` [N, RES, RES, 3] BGR in [0, 1] (after an unsharp mask); some take
# ``morph_value:0`` f32 [1] too (read from the file). Outputs, in this order: the face's mask [N, RES, RES, 1], the
# model's face [N, RES, RES, 3] BGR in [0, 1], its mask [N, RES, RES, 1]; their names are DeepFaceLab's export's
# (out_face_mask, out_celeb_face, out_celeb_face_mask) with the ``:0`` of tf2onnx, not confirmed on a file. RES is
# the id's; the loader takes the file's own. FaceFusion states no licence for them.
_DEEP_SWAPPER_LICENCE = "DeepFaceLive community model: no licence stated"  # and a real person's likeness
_DEEP_SWAP_SPECS = tuple(
    ModelSpec(
        name=model_id,
        file_name=f"{model_id}.dfm",
        base=f"deepfacelive-models-{model_id.split('/')[0]}",
        kind="deep_swapper",
        sha256=None,
        size_bytes=None,
        input_size=int(model_id.rsplit("_", 1)[1]),
        template="dfl_whole_face",
        normalisation=UNIT,
        colour_order="bgr",
        input_names=("in_face:0",),
        output_names=("out_face_mask:0", "out_celeb_face:0", "out_celeb_face_mask:0"),
        licence=_DEEP_SWAPPER_LICENCE,
        unverified=frozenset({"output_names", "licence"}),
        hugging_face_only=True,
    )
    for model_id in get_args(DeepSwapperCatalogue)
)
_LIVE_PORTRAIT_LICENCE = "LivePortrait (KwaiVGI/LivePortrait): MIT"
# LivePortrait's six files (docs/MODELS.md, LivePortrait), all of kind live_portrait: expression_restorer uses the
# extractors and the generator, face_editor all six (workers/live_portrait.py). FaceFusion reads every output by
# position, so the output names are ours (in FaceFusion's variable names); a third party quotes CRC32s (feature
# b6ca08de, motion 1278bb27, generator ea09ef95, eye ec641c99, lip 8dc8828b, stitcher c0a89576), sha256 prefixes
# and sizes only roughly (4 MB, 108 MB, 213 MB, about 1 MB each for the last three): no sha256, no size here.
_PORTRAIT_SPECS = (
    *(
        ModelSpec(
            # input [N, 3, 256, 256]: the 512 crop resized (INTER_AREA), RGB / 255
            name=f"live_portrait_{part}",
            file_name=f"live_portrait_{part}.onnx",
            base="models-3.0.0",
            kind="live_portrait",
            sha256=None,
            size_bytes=None,
            input_size=256,
            template=None,  # the processor's: arcface_128 (expression_restorer) or ffhq_512 (face_editor), at 512
            normalisation=UNIT,
            colour_order="rgb",
            input_names=("input",),
            output_names=outputs,
            licence=_LIVE_PORTRAIT_LICENCE,
            unverified=frozenset({"output_names"}),
        )
        for part, outputs in (
            ("feature_extractor", ("feature_volume",)),  # [N, 32, 16, 64, 64]
            # pitch, yaw, roll in degrees; scale [N, 1]; translation [N, 3]; expression, keypoints [N, 21, 3]
            ("motion_extractor", ("pitch", "yaw", "roll", "scale", "translation", "expression", "motion_points")),
        )
    ),
    *(
        ModelSpec(
            name=f"live_portrait_{part}",
            file_name=f"live_portrait_{part}.onnx",
            base="models-3.0.0",
            kind="live_portrait",
            sha256=None,
            size_bytes=None,
            input_size=None,
            template=None,
            normalisation=None,
            colour_order=None,
            input_names=inputs,
            output_names=("output",),
            licence=_LIVE_PORTRAIT_LICENCE,
            unverified=frozenset({"output_names"}),
        )
        for part, inputs in (
            # feature_volume; source: the keypoints to drive to, target: the volume's own, [N, 21, 3] each ->
            # [N, 3, 512, 512] RGB in [0, 1]
            ("generator", ("feature_volume", "source", "target")),
            ("eye_retargeter", ("input",)),  # [N, 66]: 63 keypoints, both eyes' open ratios, the goal -> [N, 63]
            ("lip_retargeter", ("input",)),  # [N, 65]: 63 keypoints, the lips' open ratio, the goal -> [N, 63]
            ("stitcher", ("source", "target")),  # the edited and the original keypoints -> [N, 21, 3]
        )
    ),
)
# The background removers (docs/MODELS.md 10.2): the whole frame resized to the model's square side, RGB, as
# ``input`` [N, 3, S, S] -> the matte ``[0]`` [N, 1, S, S] in [0, 1] (u2net_cloth: [N, C, S, S] class scores, the
# matte where the argmax is not 0). corridor_key takes a fourth channel (a green-screen hint, 1 - clip(2 (G -
# max(R, B)), 0, 1), unnormalised) and gives two outputs, the matte and the foreground's RGB in [0, 1]. FaceFusion
# reads outputs by position: their names are not confirmed. Only modnet's hashes are published, by one third party
# (CRC32 03a022de, sha256 a9edce4b47653992aacd1bee48126e65a415ed54e2ecbe51bdca25a8cab0c0d3, about 25 MB): kept out
# of the spec until a second source agrees, so that a wrong value cannot refuse the real file.
_BACKGROUND_MODELS: tuple[tuple[str, str, int, Normalisation, str], ...] = (
    ("modnet", "models-3.5.0", 512, SYMMETRIC, "MODNet (ZHKKKe/MODNet): Apache-2.0"),
    ("ben_2", "models-3.5.0", 1024, UNIT, "BEN2 (PramaLLC): MIT"),
    ("birefnet_general", "models-3.5.0", 1024, UNIT, "BiRefNet (ZhengPeng7/BiRefNet): MIT"),
    ("birefnet_portrait", "models-3.5.0", 1024, UNIT, "BiRefNet (ZhengPeng7/BiRefNet): MIT"),
    ("corridor_key_1024", "models-3.6.0", 1024, IMAGENET, "CorridorKey (nikopueringer): non-commercial"),
    ("corridor_key_2048", "models-3.6.0", 2048, IMAGENET, "CorridorKey (nikopueringer): non-commercial"),
    ("isnet_general", "models-3.5.0", 1024, CENTRED, "IS-Net (xuebinqin/DIS): Apache-2.0"),
    ("ormbg", "models-3.5.0", 1024, UNIT, "ormbg (schirrmacher): Apache-2.0"),
    ("rmbg_1.4", "models-3.5.0", 1024, CENTRED, "RMBG-1.4 (Bria): non-commercial"),
    ("rmbg_2.0", "models-3.5.0", 1024, IMAGENET, "RMBG-2.0 (Bria): non-commercial"),
    ("silueta", "models-3.5.0", 320, IMAGENET, "silueta (Kikedao): Apache-2.0"),
    ("u2net_cloth", "models-3.5.0", 768, IMAGENET, "U2Net cloth segmentation (levindabhi): MIT"),
    ("u2net_general", "models-3.5.0", 320, IMAGENET, "U2-Net (xuebinqin/U-2-Net): Apache-2.0"),
    ("u2net_human", "models-3.5.0", 320, IMAGENET, "U2-Net (xuebinqin/U-2-Net): Apache-2.0"),
    ("u2netp", "models-3.5.0", 320, IMAGENET, "U2-Net (xuebinqin/U-2-Net): Apache-2.0"),
)
_BACKGROUND_SPECS = tuple(
    ModelSpec(
        name=name,
        file_name=f"{name}.onnx",
        base=base,
        kind="background_remover",
        sha256=None,
        size_bytes=None,
        input_size=size,
        template=None,
        normalisation=normalisation,
        colour_order="rgb",
        input_names=("input",),
        output_names=("alpha", "foreground") if name.startswith("corridor_key") else ("output",),
        licence=licence,
        unverified=frozenset({"output_names"}),
    )
    for name, base, size, normalisation, licence in _BACKGROUND_MODELS
)
_SPECS = (*_SPECS, *_SOUND_SPECS, *_COLOUR_SPECS, *_PORTRAIT_SPECS, *_BACKGROUND_SPECS, *_AGE_SPECS, *_DEEP_SWAP_SPECS)

REGISTRY: Mapping[str, ModelSpec] = MappingProxyType({spec.name: spec for spec in _SPECS})
"""Every known model, by name."""
