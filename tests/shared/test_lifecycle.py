"""The lifecycle as data: every status change of a job or a chunk goes through ``shared.lifecycle.transition``,
which only makes the changes the transition table (``shared.states``) allows."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from shared import lifecycle
from shared.models import Chunk, Job
from shared.states import CHUNK_TRANSITIONS, JOB_TRANSITIONS, ChunkStatus, JobStatus
from tests.support.source import SourceFile, source_files

TRANSITION_MODULE = "shared.lifecycle"
# ``status`` assignments that are not a job's or a chunk's (checked by hand): a webhook delivery's state, the HTTP
# status of an API answer the client raises.
OTHER_STATUSES = {("shared.webhooks", "row"), ("api.client", "self")}
RAW_SQL = re.compile(r"\bupdate\s+(jobs|chunks)\b.*\bset\b[^;]*\bstatus\b", re.IGNORECASE | re.DOTALL)


def status_writes(source: SourceFile) -> list[str]:
    """Where ``source`` writes a ``status`` column: ``.values(status=…)`` (or a dict with a ``"status"`` key),
    ``<row>.status = …``, ``setattr(<row>, "status", …)``, or raw SQL that sets it. Inserting a row with its
    first state (``Job(status=…)``) is no change of state and is not reported."""
    found = []
    for node in ast.walk(source.tree):
        where = f"{source.name}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "values":
            keys = [k.arg for k in node.keywords]
            for k in node.keywords:
                if k.arg is None and isinstance(k.value, ast.Dict):
                    keys += [key.value for key in k.value.keys if isinstance(key, ast.Constant)]
            keys += [
                key.value for arg in node.args if isinstance(arg, ast.Dict)
                for key in arg.keys if isinstance(key, ast.Constant)
            ]  # fmt: skip
            if "status" in keys:
                found.append(f"{where} .values(status=…)")
        elif isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for t in ast.walk(target):
                    if isinstance(t, ast.Attribute) and t.attr == "status":
                        owner = t.value.id if isinstance(t.value, ast.Name) else ""
                        if (source.module, owner) not in OTHER_STATUSES:
                            found.append(f"{where} {ast.unparse(t)} = …")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr":
            if len(node.args) > 1 and isinstance(node.args[1], ast.Constant) and node.args[1].value == "status":
                found.append(f"{where} setattr(…, 'status', …)")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and RAW_SQL.search(node.value):
            found.append(f"{where} raw SQL sets a status")
    return found


def test_no_status_changes_outside_the_transition_function() -> None:
    sources = list(source_files())
    assert any(s.module == TRANSITION_MODULE for s in sources)
    stray = [w for s in sources if s.module != TRANSITION_MODULE for w in status_writes(s)]
    assert not stray, f"status written outside shared.lifecycle.transition: {stray}"
    own = next(s for s in sources if s.module == TRANSITION_MODULE)
    assert status_writes(own), "the walk sees the transition function's own UPDATE"


@pytest.mark.parametrize(
    "code",
    [
        "session.execute(update(Job).where(Job.id == j).values(status=JobStatus.FAILED))",
        "session.execute(update(Chunk).values(**{'status': 'done'}))",
        "chunk.status = ChunkStatus.QUEUED",
        "job.status, job.attempts = 'queued', 0",
        "setattr(job, 'status', 'failed')",
        "session.execute(text('UPDATE jobs SET attempts = 0, status = :s'))",
    ],
)
def test_the_walk_finds_each_way_of_writing_a_status(code: str) -> None:
    source = SourceFile(path=Path("x.py"), module="shared.x", tree=ast.parse(code))
    assert len(status_writes(source)) == 1


@pytest.mark.parametrize(("model", "table"), [(Job, JOB_TRANSITIONS), (Chunk, CHUNK_TRANSITIONS)])
def test_the_legal_sources_are_the_tables(
    model: type[Job] | type[Chunk], table: dict[object, frozenset[object]]
) -> None:
    for to in table:
        sources = lifecycle.legal_sources(model, to)  # type: ignore[arg-type]
        assert sources == {s for s, nxt in table.items() if to in nxt} | {to}


def test_a_transition_the_table_does_not_allow_is_refused_before_any_sql() -> None:
    with pytest.raises(ValueError, match="no transition to succeeded"):
        lifecycle.transition(None, Job, JobStatus.SUCCEEDED, where=[], expected=(JobStatus.QUEUED,))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no transition to running"):
        lifecycle.transition(None, Chunk, ChunkStatus.RUNNING, where=[], expected=(ChunkStatus.DONE,))  # type: ignore[arg-type]
