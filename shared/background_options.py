"""Options of the ``background_remover`` processor (part of :class:`shared.options.JobOptions`, re-exported there).

Colours are FaceFusion's: one to four integers 0–255, read as R G B A (:func:`rgba`). The fill colour paints the
background in its colour, by its alpha; the despill colour takes that colour's spill out of the foreground's edges,
by its alpha (an alpha of 0 turns either off). With ``transparent`` the matte also becomes the output's alpha
channel: the output is then written by an encoder that carries alpha (``shared.containers``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from shared.errors import InvalidOptionsError

if TYPE_CHECKING:
    from shared.options import JobOptions

# The matting models of ``background_remover`` (FaceFusion's background_remover_model).
BackgroundRemoverModel = Literal[
    "modnet", "ben_2", "birefnet_general", "birefnet_portrait", "corridor_key_1024", "corridor_key_2048",
    "isnet_general", "ormbg", "rmbg_1.4", "rmbg_2.0", "silueta", "u2net_cloth", "u2net_general", "u2net_human",
    "u2netp",
]  # fmt: skip

Channel = Annotated[int, Field(ge=0, le=255)]
Colour = Annotated[list[Channel], Field(min_length=1, max_length=4)]
RGBA = tuple[int, int, int, int]


def rgba(colour: list[int] | tuple[int, ...]) -> RGBA:
    """One to four channels as R, G, B, A, as FaceFusion reads them: one value is a grey, two are R and G with
    B = R, and the alpha is 255 unless given.

    >>> rgba([7]), rgba([1, 2]), rgba([1, 2, 3]), rgba([1, 2, 3, 4])
    ((7, 7, 7, 255), (1, 2, 1, 255), (1, 2, 3, 255), (1, 2, 3, 4))
    """
    values = list(colour)
    if not 1 <= len(values) <= 4:
        raise ValueError(f"a colour is 1 to 4 values, got {len(values)}")
    if len(values) == 1:
        values = values * 3
    elif len(values) == 2:
        values = [values[0], values[1], values[0]]
    red, green, blue, *alpha = values
    return red, green, blue, alpha[0] if alpha else 255


class BackgroundRemoverOptions(BaseModel):
    """Options of the ``background_remover`` processor: each whole frame's background found by a matting model,
    then filled with a colour, or made transparent, or both."""

    model_config = ConfigDict(extra="forbid")

    model: BackgroundRemoverModel = Field(
        "modnet", description="The matting model (FaceFusion's background_remover_model)"
    )
    fill_colour: Colour = Field(
        default_factory=lambda: [0, 0, 0, 255],
        description="R G B A (1 to 4 values 0-255; one is a grey, alpha 255 unless given) the background is filled "
        "with, by its alpha: 0 keeps the background's own colour (FaceFusion's background_remover_color; its "
        "default there is 0 0 0 0, which a video without transparency would leave as it is)",
    )
    despill_colour: Colour = Field(
        default_factory=lambda: [0, 0, 0, 0],
        description="R G B A of a screen's colour taken out of the foreground's edges, by its alpha (e.g. "
        "0 255 0 255 for a green screen); alpha 0, the default, turns it off",
    )
    transparent: bool = Field(
        False,
        description="Keep the matte as the output's alpha channel (the background transparent): needs an encoder "
        "that carries alpha (encoder.encoder prores_ks, ProRes 4444 in a MOV file); the fill still paints the "
        "colour under it",
    )


def check_background_remover(options: JobOptions) -> None:
    """Check what the schema cannot state about ``background_remover``: it comes before ``frame_enhancer``, and
    it changes something.

    It may sit anywhere else in the chain: faces are detected once, on the frames as decoded, wherever it sits,
    and its matte (with ``transparent``) travels beside the frames to the encoder untouched by the processors
    after it.

    Raises:
        InvalidOptionsError: ``options_invalid``, saying which and why.
    """
    chain = options.processors
    if "background_remover" not in chain:
        return
    if "frame_enhancer" in chain and chain.index("frame_enhancer") < chain.index("background_remover"):
        raise InvalidOptionsError(
            f"background_remover must come before frame_enhancer (got {chain}): the matte is found at the size the "
            "frames are decoded at (the model sees them at its own size anyway, 320 to 2048 px), and the enhancer "
            "then upscales the filled frames, their alpha resized with them"
        )
    remover = options.background_remover
    if not remover.transparent and rgba(remover.fill_colour)[3] == 0:
        raise InvalidOptionsError(
            "background_remover: the fill colour's alpha is 0 and transparent is off, so every frame would come "
            "out as it came; give a fill colour (e.g. 0 255 0) or ask for transparent"
        )
