"""The order of a chain's face processors (shared/processor_order.py): each refused chain says which processors, the
chain and why; the chains in the right order, and every chain of one processor, are taken."""

from __future__ import annotations

import pytest

from shared.errors import InvalidOptionsError
from shared.options import JobOptions, ProcessorName, choices
from shared.processor_order import EXCLUSIVE, ORDER, check_order


def _chain(*processors: str) -> JobOptions:
    return JobOptions.model_validate({"processors": list(processors)})


@pytest.mark.parametrize(
    ("chain", "says"),
    [
        (["lip_syncer", "face_swapper"], "face_swapper must come before lip_syncer"),
        (["face_enhancer", "lip_syncer"], "lip_syncer must come before face_enhancer"),
        (["age_modifier", "face_swapper"], "face_swapper must come before age_modifier"),
        (["age_modifier", "deep_swapper"], "deep_swapper must come before age_modifier"),
        (["face_enhancer", "age_modifier"], "age_modifier must come before face_enhancer"),
        (["face_enhancer", "deep_swapper"], "deep_swapper must come before face_enhancer"),
        (["lip_syncer", "deep_swapper"], "deep_swapper must come before lip_syncer"),
        (["deep_swapper", "face_swapper"], "face_swapper and deep_swapper cannot run in one job"),
    ],
)
def test_a_chain_out_of_order_is_refused_saying_which_and_why(chain: list[str], says: str) -> None:
    with pytest.raises(InvalidOptionsError) as refused:
        check_order(_chain(*chain))
    assert refused.value.code == "options_invalid"
    message = refused.value.message
    assert says in message and str(chain) in message, message
    assert message.split("): ", 1)[1], "the reason follows the chain"


def test_the_face_chains_in_their_order_are_taken() -> None:
    for chain in (
        ["face_swapper", "age_modifier", "lip_syncer", "face_enhancer"],
        ["deep_swapper", "age_modifier", "face_enhancer", "frame_colorizer", "frame_enhancer"],
        ["deep_swapper", "lip_syncer", "face_enhancer"],
        ["face_blur", "age_modifier"],
    ):
        check_order(_chain(*chain))


def test_every_processor_alone_is_taken_and_every_rule_names_processors_a_job_can_choose() -> None:
    names = set(choices(ProcessorName))
    for name in names:
        check_order(_chain(name))
    assert all({rule.first, rule.then} <= names and rule.why for rule in ORDER)
    assert all({one, other} <= names and why for one, other, why in EXCLUSIVE)
