"""One way to make, cancel or retry a job: the API's source is walked (not imported) and fails this test where a
route would build a job, cancel or retry one, or decide one of their rules, other than through
``shared.submission.submit`` (behind ``api.uploads.accept_job``) and ``shared.control.cancel`` / ``retry``.

A second path is how a check gets forgotten (the console once let a tenant key take the admin band, and re-queued
jobs past their retention time): the rules live in those functions, and the entry points only read their wire
format. ``tests/api/test_entry_point_rules.py`` holds each rule to the same answer through every entry point."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.source import SourceFile, source_files

# Modules whose functions insert jobs or change their state, or decide a submission's rules: no API module
# imports them; the functions below do it for the API.
LOW_LEVEL = {"shared.jobs", "shared.lifecycle", "shared.admission", "shared.quotas", "shared.limits", "shared.fairness"}
# What the API may take from the modules that own the decisions, and from the ones beside them.
ALLOWED = {
    "shared.submission": {"Submission", "Upload", "screen", "submit"},
    "shared.control": {
        "cancel",
        "retry",
        "pause",
        "resume",
        "approve",
        "reject",
        "farm_paused",
        "pause_farm",
        "resume_farm",
    },  # fmt: skip
    "shared.dispatch": {"CeleryDispatcher", "Dispatcher"},
    "shared.webhooks": {"MAX_URL_LENGTH", "signing_secret"},
    "shared.reaper": {"overdue_leases", "missing"},  # read-only, for the metrics
}
SUBMITTER = "api.uploads"  # the only module that calls submit (accept_job)
ROWS = {"Job", "Chunk"}  # models an API module must never construct or write itself
BAND = {"MAX_PRIORITY", "ADMIN_PRIORITY"}  # comparing a priority with these is the admin band's decision


def _imported(source: SourceFile) -> dict[str, str]:
    """Local names bound to modules of ``shared`` (``from shared import control`` → ``control``)."""
    bound: dict[str, str] = {}
    for node in ast.walk(source.tree):
        if isinstance(node, ast.ImportFrom) and node.module == "shared":
            for alias in node.names:
                bound[alias.asname or alias.name] = f"shared.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("shared."):
                    bound[alias.asname or alias.name] = alias.name
    return bound


def _offences(source: SourceFile) -> list[str]:
    found: list[str] = []
    modules = _imported(source)

    def uses(module: str, name: str, line: int) -> None:
        if module in LOW_LEVEL:
            found.append(f"{source.name}:{line}: uses {module}.{name}")
        elif module in ALLOWED and name not in ALLOWED[module]:
            found.append(f"{source.name}:{line}: uses {module}.{name}")
        elif module == "shared.submission" and name == "submit" and source.module != SUBMITTER:
            found.append(f"{source.name}:{line}: calls submit outside {SUBMITTER}.accept_job")

    for node in ast.walk(source.tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module != "shared":
            for alias in node.names:
                uses(node.module, alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module == "shared":
            for alias in node.names:
                if f"shared.{alias.name}" in LOW_LEVEL:
                    found.append(f"{source.name}:{node.lineno}: imports shared.{alias.name}")
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules:
            uses(modules[node.value.id], node.attr, node.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id in ROWS:
                found.append(f"{source.name}:{node.lineno}: builds a {node.func.id} row")
            if node.func.id in {"insert", "update", "delete"} and any(
                isinstance(arg, ast.Name) and arg.id in ROWS for arg in node.args
            ):
                found.append(f"{source.name}:{node.lineno}: {node.func.id}() of a job or chunk row")
        elif isinstance(node, ast.Compare):
            names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
            if names & BAND:
                found.append(f"{source.name}:{node.lineno}: decides the priority band itself")
    return found


def test_no_route_makes_cancels_or_retries_a_job_but_through_the_one_function() -> None:
    offences = [offence for source in source_files(("api",)) for offence in _offences(source)]
    assert offences == []


def test_the_routes_call_the_one_functions() -> None:
    """The walk above would pass an API that made no job at all: the entry points do call them."""
    calls: dict[str, set[str]] = {}
    for source in source_files(("api",)):
        for node in ast.walk(source.tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "control":
                calls.setdefault(source.module, set()).add(f"control.{node.attr}")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "accept_job":
                calls.setdefault(source.module, set()).add("accept_job")
    assert {"control.cancel", "control.retry", "accept_job"} <= calls["api.jobs"]
    assert {"control.cancel", "control.retry", "control.pause", "control.resume"} <= calls["api.ui.job"]
    assert {"control.approve", "control.reject"} <= calls["api.ui.job"]
    assert {"control.pause", "control.resume", "control.approve", "control.reject"} <= calls["api.controls"]
    assert "accept_job" in calls["api.ui.submitting"] and "accept_job" in calls["api.references"]


def test_the_walk_finds_what_it_forbids() -> None:
    """The check fails on code that does what the console once did (its own submit, its own retry)."""
    bad = ast.parse(
        "from shared import control, jobs\n"
        "from shared.submission import submit\n"
        "from shared.lifecycle import admit\n"
        "def route(session, caller, priority):\n"
        "    if priority > MAX_PRIORITY and not caller.admin:\n"
        "        raise ForbiddenError('band')\n"
        "    control.retry_job(session, 'j', 4)\n"
        "    jobs.create_job(session)\n"
        "    session.execute(update(Job).values(status='queued'))\n"
        "    submit(None, caller, None)\n"
    )
    offences = _offences(SourceFile(path=Path("api/ui/bad.py"), module="api.ui.bad", tree=bad))
    assert len(offences) == 7, offences
