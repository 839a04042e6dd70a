"""Routing once: every task of the farm is in one table (``shared.tasks.TASKS``), every message is built from it,
and the Celery worker and ``swapfarm run`` run the same step for each."""

from __future__ import annotations

import ast

import pytest
from pydantic import ValidationError

from shared.broker import make_celery, queue_names
from shared.errors import LeaseLostError, RetryableError
from shared.families import CPU_PROVIDER
from shared.options import AcceleratorFamily, choices
from shared.settings import Settings
from shared.tasks import (
    PLAN,
    REAP,
    RENDER_CHUNK,
    STITCH,
    TASKS,
    ChunkPayload,
    JobPayload,
    message,
    render_queues,
    worker_queues,
)  # fmt: skip
from tests.support.source import source_files
from workers.celery_app import create_app
from workers.engines.family import refused_render_queues
from workers.steps import STEPS, run_step

# Where a queue name or a message may be made: the table itself, and the queue declarations of the broker and of
# what a worker consumes.
ROUTING_MODULES = {"shared.tasks"}
QUEUE_MODULES = {"shared.tasks", "shared.broker", "workers.celery_app"}


def test_every_task_of_the_table_has_a_step_and_every_step_a_task() -> None:
    assert set(STEPS) == set(TASKS)


def test_the_celery_worker_registers_the_table_with_its_retry_policy() -> None:
    app = create_app(Settings(environment="test", broker_url="memory://"))
    for name, spec in TASKS.items():
        task = app.tasks[name]
        retried = tuple(getattr(task, "autoretry_for", ()))
        if spec.retried:
            assert RetryableError in retried, name
            # a lost lease means another worker owns the work: no retry (record_plan raises it, for one)
            assert LeaseLostError in tuple(task.dont_autoretry_for), name
        else:
            assert not retried, f"{name} is periodic: its next tick is its retry"


def test_messages_are_routed_by_the_table() -> None:
    assert message(PLAN, "j", family="cuda").queue == "control"
    assert message(STITCH, "j", family="cuda", priority=8).queue == "stitch"
    render = message(RENDER_CHUNK, "j", family="cuda", chunk_id="c")
    assert (render.queue, render.payload) == ("render.cuda", ChunkPayload(job_id="j", chunk_id="c"))
    assert message(PLAN, "j", family="cpu").payload == JobPayload(job_id="j")
    with pytest.raises(ValidationError):
        message(RENDER_CHUNK, "j", family="cpu")  # a render names its chunk
    with pytest.raises(ValidationError):
        message(PLAN, "j", family="cpu", chunk_id="c")
    with pytest.raises(KeyError):
        message(REAP, "j", family="cpu")  # periodic: no job's step


def test_a_step_refuses_a_payload_that_is_not_its_tasks() -> None:
    with pytest.raises(KeyError):
        run_step(None, "swapfarm.unknown", {})  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        run_step(None, RENDER_CHUNK, {"job_id": "j"})  # type: ignore[arg-type]


def _routing_outside_the_table() -> list[str]:
    found = []
    for source in source_files():
        for node in ast.walk(source.tree):
            if not isinstance(node, ast.Call):
                continue
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
            where = f"{source.name}:{node.lineno}"
            if name in {"Message", "JobPayload", "ChunkPayload"} and source.module not in ROUTING_MODULES:
                found.append(f"{where} {name}(…) built by hand")
            elif name == "render_queue" and source.module not in QUEUE_MODULES:
                found.append(f"{where} render_queue(…) outside the table")
        for node in ast.walk(source.tree):
            if isinstance(node, ast.Name) and node.id in {"CONTROL_QUEUE", "STITCH_QUEUE"}:
                if source.module not in QUEUE_MODULES:
                    found.append(f"{source.name}:{node.lineno} {node.id} outside the table")
    return found


def test_every_message_is_routed_from_the_one_table() -> None:
    stray = _routing_outside_the_table()
    assert not stray, f"tasks routed outside shared.tasks.TASKS: {stray}"


@pytest.mark.parametrize("family", choices(AcceleratorFamily))
def test_a_worker_consumes_every_queue_the_table_routes_its_work_to_and_the_broker_declares_them(family: str) -> None:
    declared = queue_names(make_celery(Settings(environment="test", broker_url="memory://")))
    consumed = worker_queues(family)
    assert {spec.queue_for(family) for spec in TASKS.values()} | set(render_queues(family)) == set(consumed)
    assert set(consumed) <= set(declared), f"undeclared: {set(consumed) - set(declared)}"
    refused, _ = refused_render_queues(family, [CPU_PROVIDER])
    assert refused in (frozenset(), frozenset(render_queues(family))), "a worker refuses exactly its render queues"
