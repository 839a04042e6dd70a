"""Every error code the farm stores comes from the one error tree (``shared.errors``)."""

from __future__ import annotations

import ast

from shared import errors
from tests.support.source import source_files

CODE_KEYWORDS = {"code", "error_code"}


def _literal_codes() -> list[tuple[str, int, str]]:
    """Every string literal given as ``code=`` or ``error_code=`` in api/, shared/, workers/: (file, line, code)."""
    found = []
    for source in source_files():
        for node in ast.walk(source.tree):
            if not isinstance(node, ast.Call):
                continue
            for keyword in node.keywords:
                value = keyword.value
                if keyword.arg in CODE_KEYWORDS and isinstance(value, ast.Constant) and isinstance(value.value, str):
                    found.append((source.name, node.lineno, value.value))
    return found


def test_every_code_written_in_the_code_is_a_class_of_the_tree() -> None:
    literals = _literal_codes()
    assert len(literals) > 20, "the walk finds the codes the farm raises"
    stray = [f"{name}:{line} {code}" for name, line, code in literals if code not in errors.codes()]
    assert not stray, f"error codes outside shared/errors.py's tree: {stray}"


def test_the_codes_of_failed_steps_are_classes() -> None:
    # the codes a job or chunk stores when a step fails for a reason of its own, not the input's
    for code in ("worker_lost", "stitch_mismatch", "media_no_frames", "chunk_stalled", "media_truncated"):
        assert code in errors.codes()
    assert errors.WorkerLostError("x").code == "worker_lost"
    assert errors.StitchMismatchError("x").code == "stitch_mismatch"


def test_codes_are_unique_to_one_class() -> None:
    seen: dict[str, str] = {}
    pending: list[type[errors.SwapfarmError]] = [errors.SwapfarmError]
    while pending:
        cls = pending.pop()
        assert seen.setdefault(cls.code, cls.__name__) == cls.__name__, f"{cls.code} is the code of two classes"
        pending += cls.__subclasses__()
    assert set(seen) == errors.codes()


def test_a_webhook_answer_code_is_in_the_webhook_family() -> None:
    assert errors.WebhookHttpError.code_for(502) == "webhook_http_502"
