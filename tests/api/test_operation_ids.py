"""Every operation in ``/openapi.json`` has a clean id, ``<tag>-<verb>`` (``api/openapi.py``; the tag of the
resource it acts on): what a client
generated from the schema names its calls. FastAPI's default ids (``create_job_v1_jobs_post``) fail here, and so
does a new route whose id was not thought about (no tag, digits, underscores, a duplicate)."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient

from api.app import create_app
from shared.settings import Settings

CLEAN = re.compile(r"^[a-z]+(-[a-z]+)+$")
METHODS = {"get", "post", "put", "patch", "delete"}


def test_every_operation_id_is_its_tag_then_a_verb_and_unique(settings: Settings) -> None:
    with TestClient(create_app(settings)) as client:
        schema = client.get("/openapi.json").json()
    tags = {tag["name"] for tag in schema["tags"]}
    seen: dict[str, str] = {}
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            if method not in METHODS:
                continue
            where = f"{method.upper()} {path}"
            op_id = operation.get("operationId", "")
            assert CLEAN.match(op_id), f"{where}: operation id {op_id!r} is not <tag>-<verb>"
            assert operation.get("tags", [None])[0] in tags, f"{where}: no declared tag"
            # the resource it acts on, a tag's name (a job's chunks and output are documented under their own tags)
            assert op_id.split("-")[0] in tags, f"{where}: {op_id!r} does not start with a tag's name"
            assert op_id not in seen, f"{where} and {seen.get(op_id)} share the id {op_id!r}"
            seen[op_id] = where
    assert {"jobs-create", "jobs-pause", "groups-create", "groups-retry", "farm-pause"} <= set(seen)
