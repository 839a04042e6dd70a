"""Which face processors must run before which, and which exclude each other: decided once, at submission, for
every entry point (``shared/submission.py`` calls :func:`check_order`), each rule with the reason its refusal gives.

A face processor works on the frames as the processors before it left them (the faces are detected once, on the
frames as decoded). A processor that regenerates the whole face (a swap, an age edit) undoes the work on that face
of any processor before it, so the chains where that would happen are refused rather than rendered to no purpose.
The frame enhancer's place (last) is :func:`shared.output_frames.check_chain`'s; the lip syncer's need of a source audio
is :func:`shared.lip_sync.check_lip_sync`'s.
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.errors import InvalidOptionsError
from shared.options import JobOptions, ProcessorName

__all__ = ["EXCLUSIVE", "ORDER", "OrderRule", "check_order"]


@dataclass(frozen=True)
class OrderRule:
    """``first`` runs before ``then`` when a chain has both, because ``why``."""

    first: ProcessorName
    then: ProcessorName
    why: str


_AGES = "the age model ages the face the job shows; a swap after it would put the swapped face back unaged"
_RESTORES = "the restorer puts the decoded expression back on the swapped face"
_REDRAWS = "{} regenerates the whole face, so the enhancement would be lost"
ORDER: tuple[OrderRule, ...] = (
    OrderRule("face_swapper", "lip_syncer", "the lip syncer moves the swapped mouth"),
    OrderRule("deep_swapper", "lip_syncer", "the lip syncer moves the swapped mouth"),
    OrderRule("lip_syncer", "face_enhancer", "the enhancer restores the synced mouth"),
    OrderRule("face_swapper", "age_modifier", _AGES),
    OrderRule("deep_swapper", "age_modifier", _AGES),
    OrderRule(
        "age_modifier",
        "face_enhancer",
        "the enhancer restores the aged face; the age model would replace a restored one",
    ),
    OrderRule(
        "deep_swapper", "face_enhancer", "the enhancer restores the swapped face; the swap would replace a restored one"
    ),
    # LivePortrait's two: the restorer puts the decoded face's expression back, the generator redraws the whole crop
    OrderRule("face_swapper", "expression_restorer", _RESTORES),
    OrderRule("deep_swapper", "expression_restorer", _RESTORES),
    OrderRule("expression_restorer", "lip_syncer", "the restorer would put the decoded mouth back over the synced one"),
    OrderRule(
        "expression_restorer", "face_editor", "the restorer would put the decoded expression back over the edits"
    ),
    OrderRule("expression_restorer", "face_enhancer", _REDRAWS.format("expression_restorer")),
    OrderRule("face_editor", "face_enhancer", _REDRAWS.format("face_editor")),
)
"""The pairs whose order is fixed."""

EXCLUSIVE: tuple[tuple[ProcessorName, ProcessorName, str], ...] = (
    (
        "face_swapper",
        "deep_swapper",
        "both replace the face's identity, and the second would replace the first's face; choose one",
    ),
)
"""The pairs a chain may not hold together, and why."""


def check_order(options: JobOptions) -> None:
    """Raises:
    InvalidOptionsError: ``options_invalid``: two processors that exclude each other, or two in the wrong order,
        naming them, the chain and why.
    """
    chain = options.processors
    for one, other, why in EXCLUSIVE:
        if one in chain and other in chain:
            raise InvalidOptionsError(f"{one} and {other} cannot run in one job (got {chain}): {why}")
    for rule in ORDER:
        if rule.first in chain and rule.then in chain and chain.index(rule.first) > chain.index(rule.then):
            raise InvalidOptionsError(f"{rule.first} must come before {rule.then} (got {chain}): {rule.why}")
