"""Job options: every set of choices is defined here once and derived everywhere else.

The API validates a submitted ``options`` JSON against :class:`JobOptions`, the CLI builds its ``--choice`` lists
from the same ``Literal`` types (``choices(Detector)``), and workers re-validate the stored JSON before use.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator, model_validator

from shared.age_options import AgeModifierOptions
from shared.background_options import BackgroundRemoverModel as BackgroundRemoverModel  # the choices, re-exported
from shared.background_options import BackgroundRemoverOptions
from shared.colour_options import FrameColorizerModel as FrameColorizerModel  # the choices, re-exported
from shared.colour_options import FrameColorizerOptions
from shared.colour_options import FrameColorizerSize as FrameColorizerSize
from shared.deep_swap_options import DeepSwapperOptions
from shared.families import AcceleratorFamily as AcceleratorFamily  # the choices, re-exported
from shared.frame_enhancer_options import FRAME_ENHANCER_SCALES as FRAME_ENHANCER_SCALES  # re-exported
from shared.frame_enhancer_options import FrameEnhancerModel as FrameEnhancerModel  # the choices, re-exported
from shared.frame_enhancer_options import FrameEnhancerOptions
from shared.lip_sync_options import LipSyncerModel as LipSyncerModel  # the choices, re-exported
from shared.lip_sync_options import LipSyncerOptions
from shared.portrait_options import ExpressionArea as ExpressionArea  # the choices, re-exported
from shared.portrait_options import ExpressionRestorerOptions, FaceEditorOptions
from shared.strict_blur import MIN_FACE, SCAN_PERIOD, STRICT_MARGIN

ProcessorName = Literal[
    "passthrough", "face_swapper", "face_enhancer", "face_blur", "face_debugger", "frame_enhancer", "lip_syncer",
    "frame_colorizer", "expression_restorer", "face_editor", "background_remover", "age_modifier", "deep_swapper",
]  # fmt: skip
Detector = Literal["yunet", "scrfd", "retinaface", "yolo_face"]
Swapper = Literal[
    "inswapper_128",
    "inswapper_128_fp16",
    "hyperswap_1a_256",
    "simswap_256",
    "ghost_1_256",
    "ghost_2_256",
    "ghost_3_256",
    "blendswap_256",
    "uniface_256",
    "hififace_unofficial_256",
    "hyperswap_1b_256",
    "hyperswap_1c_256",
    "simswap_unofficial_512",
]
Enhancer = Literal[
    "gfpgan_1.4",
    "gpen_bfr_512",
    "codeformer",
    "gfpgan_1.2",
    "gfpgan_1.3",
    "gpen_bfr_256",
    "gpen_bfr_1024",
    "gpen_bfr_2048",
    "restoreformer_plus_plus",
]
# Whole-frame upscalers (FaceFusion's frame_enhancer_model, the Real-ESRGAN family).
SelectorMode = Literal["all", "largest", "one", "reference"]
BlurStyle = Literal["blur", "pixelate", "fill"]
BlurUncertain = Literal["faces", "frame"]
QualityPreset = Literal["fast", "quality"]
VideoEncoder = Literal["libx264", "libx265", "libvpx-vp9", "libsvtav1", "h264_nvenc", "hevc_nvenc", "prores_ks"]
EncoderPreset = Literal["ultrafast", "superfast", "veryfast", "faster", "fast", "medium", "slow", "slower", "veryslow"]
# Paste-back masks, combined by their minimum as FaceFusion combines them.
MaskType = Literal["box", "occlusion", "area", "region"]
# The face parser's classes a region mask keeps (FaceFusion's face_mask_regions).
MaskRegion = Literal[
    "skin",
    "left-eyebrow",
    "right-eyebrow",
    "left-eye",
    "right-eye",
    "glasses",
    "nose",
    "mouth",
    "upper-lip",
    "lower-lip",
]
# Parts of the 68-point landmark hull an area mask keeps (FaceFusion's face_mask_areas).
MaskArea = Literal["upper-face", "lower-face", "mouth"]
Occluder = Literal["xseg_1", "xseg_2", "xseg_3"]
FaceParser = Literal["bisenet_resnet_18", "bisenet_resnet_34"]
# The order faces are taken in; ``one`` takes the first (FaceFusion's face_selector_order).
SelectorOrder = Literal[
    "left-right", "right-left", "top-bottom", "bottom-top", "small-large", "large-small", "best-worst", "worst-best"
]
Gender = Literal["female", "male"]
# The side of the crop a swapper works on, split into tiles of the model's own size (FaceFusion's pixel boost).
PixelBoost = Literal[128, 256, 384, 512, 768, 1024]

# Processors whose output shows faces that are not the ones filmed: their outputs carry a provenance tag.
FACE_CHANGING: frozenset[ProcessorName] = frozenset(
    {"face_swapper", "face_enhancer", "expression_restorer", "face_editor", "age_modifier", "deep_swapper"}
)
# Processors that need at least one source image.
NEEDS_SOURCE: frozenset[ProcessorName] = frozenset({"face_swapper"})


def choices(literal: Any) -> tuple[str, ...]:
    """The allowed values of a ``Literal`` type, for CLI help and error messages."""
    return tuple(get_args(literal))


class EncoderOptions(BaseModel):
    """How each chunk is encoded; every chunk of a job uses the same settings so the stitch is a stream copy."""

    model_config = ConfigDict(extra="forbid")

    encoder: VideoEncoder = Field(
        "libx264",
        description="The video encoder; h264_nvenc and hevc_nvenc need a GPU with NVENC (not H100/H200); prores_ks "
        "writes ProRes 4444 in a MOV file (the one that carries background_remover.transparent's alpha), the "
        "others MP4",
    )
    preset: EncoderPreset = Field("veryfast", description="The encoder's speed/size trade-off (x264's preset names)")
    quality: int = Field(80, ge=0, le=100, description="0 worst … 100 best; mapped to the encoder's CRF/CQ")
    lossless: bool = Field(False, description="Bit-exact colour planes where the encoder supports it (tests)")

    def crf(self) -> int:
        """The CRF (or CQ) value for ``quality``: 100 → 0, 0 → 51, as FaceFusion maps it for x264/x265."""
        return round(51 - self.quality * 0.51)


# Every number a job can set is bounded: a hostile value must not cost the farm more than a sensible one.
Percent = Annotated[int, Field(ge=0, le=100)]
MAX_PROCESSORS = len(get_args(ProcessorName))  # each at most once
MAX_FRAME_NUMBER = 100_000_000  # far past any video's frames: the probe's count is the real bound


class FaceOptions(BaseModel):
    """Options of the face processors; ``preset`` fills what the caller leaves unset."""

    model_config = ConfigDict(extra="forbid")

    detector: Detector = Field("yunet", description="The face detector, run once per frame for the whole chain")
    detector_size: int = Field(
        640,
        ge=160,
        le=1280,
        multiple_of=32,
        description="The size frames are detected at; the fixed-size models letterbox a smaller size and detect a "
        "larger one in one run where the network takes any size (yunet), else in overlapping tiles",
    )
    detector_score: float = Field(0.5, gt=0.0, lt=1.0, description="Least score a detection needs to count")
    selector_mode: SelectorMode = Field(
        "all",
        description="Which faces the processors work on: all, the largest, the first in selector_order, or those "
        "within reference_distance of the reference face (the last source image; chosen per track)",
    )
    reference_distance: float = Field(0.6, gt=0.0, le=2.0, description="Max cosine distance to the reference")
    swapper: Swapper | None = Field(None, description="face_swapper's model")
    enhancer: Enhancer | None = Field(None, description="face_enhancer's model")
    enhancer_blend: int = Field(
        80, ge=0, le=100, description="Percent of the enhanced face that shows (FaceFusion's face_enhancer_blend)"
    )
    codeformer_weight: float = Field(
        0.5, ge=0.0, le=1.0, description="CodeFormer's fidelity: 0 most restoration, 1 most faithful"
    )
    mask_blur: float = Field(0.3, ge=0.0, le=1.0, description="Feathering of the paste-back box mask, 0…1")
    mask_padding: tuple[Percent, Percent, Percent, Percent] = Field(
        (0, 0, 0, 0), description="Top, right, bottom, left of the crop cut from the mask, in percent"
    )
    blur_strength: float = Field(0.5, gt=0.0, le=1.0, description="face_blur kernel, relative to face size")
    blur_style: BlurStyle = Field("blur", description="face_blur: Gaussian blur, pixelation or a solid fill")
    blur_strict: bool = Field(
        True,
        description="face_blur: hide every face any track or doubtful detection shows (low thresholds, a margin, a "
        "soft edge); off: only the faces detected at detector_score, inside their boxes",
    )
    blur_margin: float = Field(
        STRICT_MARGIN, ge=0.0, le=1.0, description="face_blur strict: margin around each box, relative to its size"
    )
    blur_min_face: int = Field(
        MIN_FACE,
        ge=8,
        le=256,
        description="face_blur strict: the smallest face (box height, px at the source resolution) detection is scaled "
        "for; smaller costs more detector calls per frame (the faces event counts them)",
    )
    blur_scan_period: int = Field(
        SCAN_PERIOD,
        ge=1,
        le=8,
        description="face_blur strict: the frames its extra detection passes (tiles, turned frames, edges) are "
        "shared out over; each frame still runs the whole-frame pass and looks closely where its tracks expect their "
        "faces. Higher is faster; a face only those passes find waits up to this many frames to be found. At 1, "
        "yunet sees each enlarged frame in one run, not in tiles",
    )
    blur_uncertain: BlurUncertain = Field(
        "faces",
        description="face_blur strict: `frame` hides the whole frame wherever a track is lost (its face carried on "
        "past its last detection), failing closed; `faces` hides the faces alone. The faces event counts such frames",
    )
    strict_second_detector: Detector | None = Field(
        None,
        description="face_blur strict, with tracking: a second detector run on every frame's tiles besides "
        "`detector`; the faces it finds where `detector` found none are hidden too (another model misses other "
        "faces). Costs its detection time per frame",
    )
    tracking: bool = Field(True, description="Follow faces across frames (and chunk edges) as tracks")
    track_gap: int = Field(4, ge=0, le=12, description="Frames a track may miss its face and have it filled in")
    track_score: float = Field(
        0.3, gt=0.0, lt=1.0, description="Least score that continues a track (a track starts at detector_score)"
    )
    landmark_smoothing: float = Field(0.5, ge=0.0, le=1.0, description="Landmark smoothing along a track, 0…1")
    mask_types: list[MaskType] = Field(
        default_factory=lambda: list[MaskType](["box"]),
        min_length=1,
        max_length=len(get_args(MaskType)),
        json_schema_extra={"uniqueItems": True},  # the schema says what _distinct checks
        description="Paste-back masks, combined by their minimum (FaceFusion's face_mask_types): box, the feathered "
        "crop; occlusion, by the XSeg occluder; region, the face parser's mask_regions; area, the 68-point hull's "
        "mask_areas. Each model runs over every face of a batch at once",
    )
    mask_regions: list[MaskRegion] = Field(
        default_factory=lambda: list[MaskRegion](get_args(MaskRegion)),
        min_length=1,
        max_length=len(get_args(MaskRegion)),
        json_schema_extra={"uniqueItems": True},  # the schema says what _distinct checks
        description="The face parser's classes the region mask keeps",
    )
    mask_areas: list[MaskArea] = Field(
        default_factory=lambda: list[MaskArea](get_args(MaskArea)),
        min_length=1,
        max_length=len(get_args(MaskArea)),
        json_schema_extra={"uniqueItems": True},  # the schema says what _distinct checks
        description="Parts of the 68-point landmark hull the area mask keeps",
    )
    occluder: Occluder = Field("xseg_1", description="The XSeg model of the occlusion mask")
    parser: FaceParser = Field("bisenet_resnet_34", description="The BiSeNet face parser of the region mask")
    landmarker_score: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="Above 0, the 2dfan4 landmarker finds 68 points per face, and faces whose landmark score "
        "passes this value are aligned by them, and face_debugger draws them (FaceFusion's face_landmarker_score; 0 "
        "turns it off)",
    )
    pixel_boost: PixelBoost | None = Field(
        None,
        description="Swap at this crop side (a multiple of the swapper's own size), as phase-interleaved tiles of "
        "the swapper's size swapped in one batch (FaceFusion's pixel boost); default: the swapper's size",
    )

    selector_order: SelectorOrder = Field(
        "large-small", description="The order faces are taken in; selector_mode 'one' takes the first"
    )
    selector_gender: Gender | None = Field(
        None, description="Only faces the FairFace classifier sees as this gender (default: any)"
    )
    selector_age_start: int = Field(0, ge=0, le=100, description="Only faces whose FairFace age range reaches this")
    selector_age_end: int = Field(100, ge=0, le=100, description="Only faces whose FairFace age range starts by this")

    swapper_weight: float = Field(
        0.5,
        ge=0.0,
        le=1.0,
        description="Identity strength of the embedding swappers (inswapper, hyperswap, simswap): 0.5 is the "
        "source as is; towards 0 more of the source, towards 1 more of the target (FaceFusion's face_swapper_weight)",
    )

    @field_validator("mask_types", "mask_regions", "mask_areas")
    @classmethod
    def _distinct(cls, values: list[str]) -> list[str]:
        repeated = sorted({value for value in values if values.count(value) > 1})
        if repeated:
            raise ValueError(f"each value at most once; repeated: {', '.join(repeated)}")
        return values

    @property
    def filters_by_attribute(self) -> bool:
        """Whether faces are filtered by the FairFace classifier's gender or age."""
        return self.selector_gender is not None or (self.selector_age_start, self.selector_age_end) != (0, 100)


PRESETS: dict[QualityPreset, dict[str, Any]] = {
    "fast": {"swapper": "inswapper_128_fp16", "enhancer": None},
    "quality": {"swapper": "hyperswap_1a_256", "enhancer": "gfpgan_1.4"},
}


_DEFAULT_PROCESSORS: list[ProcessorName] = ["face_swapper"]


# A worker's tag (``swapfarm worker --tag studio-a``) and a job's required ones: lower-case names, never a path
MAX_TAGS = 8
TAG_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,31}$"
WorkerTag = Annotated[str, StringConstraints(pattern=TAG_PATTERN)]

MAX_PREVIEW_FRAMES = 50


class JobOptions(BaseModel):
    """Everything a job can ask for. Stored as JSON on the job row."""

    model_config = ConfigDict(extra="forbid")

    processors: list[ProcessorName] = Field(
        default_factory=lambda: _DEFAULT_PROCESSORS.copy(),
        min_length=1,
        max_length=MAX_PROCESSORS,
        json_schema_extra={"uniqueItems": True},  # the schema says what _once_each checks
        description="The processors, run in this order; frame_enhancer must be last",
    )
    preset: QualityPreset = Field("fast", description="Fills the face options a job leaves unset (see Presets)")
    chunk_frames: int | None = Field(
        None, ge=1, le=100_000, description="Frames per chunk; default: about ten seconds of video"
    )
    family: AcceleratorFamily | Literal["any"] = Field(
        "any", description="The accelerator family whose workers render the job; any: whichever worker is free"
    )
    trim_start_frame: int | None = Field(
        None, ge=0, le=MAX_FRAME_NUMBER, description="First frame rendered (from 0, included); default: the first"
    )
    trim_end_frame: int | None = Field(
        None,
        ge=1,
        le=MAX_FRAME_NUMBER,
        description="Frame the render stops before (excluded: frames 50-149 are start 50, end 150); default: the end",
    )
    output_height: int | None = Field(
        None,
        ge=16,
        le=4320,
        multiple_of=2,
        description="Output height in pixels, the width keeping the aspect; with frame_enhancer, a multiple of its "
        "scale (the frames are decoded at output_height / scale and upscaled to it)",
    )
    output_fps: float | None = Field(
        None, ge=1, le=240, description="Output frame rate (frames resampled, same duration); default: the input's"
    )
    required_tags: list[WorkerTag] = Field(
        default_factory=list,
        max_length=MAX_TAGS,
        description="Only workers started with every one of these tags (swapfarm worker --tag) render the job; "
        "the family still routes it",
    )
    max_failed_chunks: int | None = Field(
        None, ge=1, le=10_000, description="The job fails once this many chunk attempts have failed (not the input's)"
    )
    encoder: EncoderOptions = Field(default_factory=EncoderOptions)
    face: FaceOptions = Field(default_factory=FaceOptions)
    frame_enhancer: FrameEnhancerOptions = Field(default_factory=FrameEnhancerOptions)
    lip_syncer: LipSyncerOptions = Field(default_factory=LipSyncerOptions)
    frame_colorizer: FrameColorizerOptions = Field(default_factory=FrameColorizerOptions)
    expression_restorer: ExpressionRestorerOptions = Field(default_factory=ExpressionRestorerOptions)
    face_editor: FaceEditorOptions = Field(default_factory=FaceEditorOptions)
    background_remover: BackgroundRemoverOptions = Field(default_factory=BackgroundRemoverOptions)
    age_modifier: AgeModifierOptions = Field(default_factory=AgeModifierOptions)
    deep_swapper: DeepSwapperOptions = Field(default_factory=DeepSwapperOptions)
    start_paused: bool = Field(False, description="Submit the job paused: nothing runs until it is resumed")
    preview: int = Field(
        0,
        ge=0,
        le=MAX_PREVIEW_FRAMES,
        description="Render this many frames spread over the video first (and before/after stills of them), then "
        "wait in awaiting_approval: approve renders the rest (the preview's frames are kept), reject cancels",
    )

    @field_validator("processors")
    @classmethod
    def _once_each(cls, processors: list[ProcessorName]) -> list[ProcessorName]:
        repeated = sorted({name for name in processors if processors.count(name) > 1})
        if repeated:
            raise ValueError(f"each processor at most once; repeated: {', '.join(repeated)}")
        return processors

    @model_validator(mode="after")
    def _apply_preset(self) -> JobOptions:
        bundle = PRESETS[self.preset]
        for key, value in bundle.items():
            if key not in self.face.model_fields_set:
                setattr(self.face, key, value)
        return self

    @property
    def needs_source(self) -> bool:
        return any(name in NEEDS_SOURCE for name in self.processors)

    @property
    def scale(self) -> int:
        """How many times the processors multiply the frame's width and height (the frame enhancer's scale)."""
        return FRAME_ENHANCER_SCALES[self.frame_enhancer.model] if "frame_enhancer" in self.processors else 1

    @property
    def changes_faces(self) -> bool:
        return any(name in FACE_CHANGING for name in self.processors)
