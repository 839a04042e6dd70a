"""The API's OpenAPI description, served at ``/openapi.json``: FastAPI's, with what clients need on top.

* A parameter that is left out is absent, never ``null``: FastAPI describes an optional parameter as
  ``anyOf: [X, null]``, which tells client generators (and fuzzers) that the text ``null`` is a valid value. The
  description here says ``X``, and the parameter is simply not required.
* The overview: how to authenticate, what an error looks like, how jobs move.
* Every operation has a short id, ``<tag>-<verb>`` (:func:`operation_id`): what generated clients name their calls.
"""

from __future__ import annotations

import re
from functools import cached_property
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from api.group_refs import GroupRequest
from api.schemas import BODY_MODELS

DESCRIPTION = """
Submit face-swap video jobs to the render farm, follow them, and download the results.

**Authentication.** Every `/v1` route needs an API key (`swapfarm keys create`), sent as
`Authorization: Bearer sfk_…`. A key belongs to a tenant; a tenant sees only its own jobs (another tenant's
job answers 404, exactly like a job that does not exist). Admin keys may list every tenant's jobs.

**Errors.** Every error answers `{"error": {"code", "message"}}`; `code` is stable (see each route's responses).

**Submitting.** `POST /v1/jobs` takes the files as `multipart/form-data` (`options` is a JSON part typed by the
`JobOptions` schema), or a JSON body (`JobRequest`) whose inputs are URLs under prefixes the operator allows
(`s3://…` for media already in a bucket). A `callback_url` gets the job's end as a signed webhook.

**A job's life.** `waiting` (for the tenant's limit of jobs running at once) → `queued` → `planning` →
`rendering` → `stitching` → `succeeded`; or `failed` (retry it: only its unfinished chunks render again) or
`cancelled`. A job can be paused (`paused`) and resumed; a job submitted with `preview: N` renders N frames
first and waits in `awaiting_approval` until it is approved (the rest renders) or rejected. Follow it with
`GET /v1/jobs/{id}`, its event log, or the event stream (server-sent events).
"""

TAGS = [
    {"name": "jobs", "description": "Submit, list, read, cancel and retry jobs."},
    {"name": "progress", "description": "A job's chunks and event log, and the log as server-sent events."},
    {"name": "output", "description": "The finished video, whole or by byte range."},
    {"name": "webhooks", "description": "The secret that signs the webhooks announcing a job's end."},
    {
        "name": "groups",
        "description": "Batches: many targets, one option set; progress, jobs, events, cancel, retry, a ZIP of all.",
    },
    {"name": "workers", "description": "Admin keys: release a quarantined worker."},
    {"name": "farm", "description": "Pause and resume the whole farm (admin keys)."},
    {"name": "health", "description": "Liveness and readiness; no key needed."},
]

# Each route's operation id, by its function's name: what a generated client calls the operation.
OPERATION_IDS = {
    "create_job": "jobs-create",
    "list_jobs": "jobs-list",
    "get_job": "jobs-get",
    "cancel_job": "jobs-cancel",
    "retry_job": "jobs-retry",
    "pause_job": "jobs-pause",
    "resume_job": "jobs-resume",
    "approve_job": "jobs-approve",
    "reject_job": "jobs-reject",
    "list_chunks": "jobs-chunks",
    "list_events": "jobs-events",
    "stream_events": "jobs-events-stream",
    "get_output": "jobs-output",
    "list_stills": "jobs-stills",
    "get_still": "jobs-still",
    "webhook_secret": "webhooks-secret",
    "get_farm": "farm-get",
    "pause_farm": "farm-pause",
    "resume_farm": "farm-resume",
    "healthz": "health-live",
    "readyz": "health-ready",
}


def operation_id(route: APIRoute) -> str:
    """The route's operation id: :data:`OPERATION_IDS`, else ``<tag>-<function name>`` in kebab case."""
    if route.name in OPERATION_IDS:
        return OPERATION_IDS[route.name]
    tag = str(route.tags[0]) if route.tags else "api"
    return f"{tag}-{route.name.replace('_', '-')}"


def _without_null(schema: dict[str, Any]) -> dict[str, Any]:
    branches = schema.get("anyOf")
    if not isinstance(branches, list) or {"type": "null"} not in branches:
        return schema
    rest = [b for b in branches if b != {"type": "null"}]
    base = {k: v for k, v in schema.items() if k != "anyOf" and not (k == "default" and v is None)}
    return {**rest[0], **base} if len(rest) == 1 else {**base, "anyOf": rest}


_BODY_MODELS: tuple[type[BaseModel], ...] = (*BODY_MODELS, GroupRequest)


class SwapfarmAPI(FastAPI):
    def openapi(self) -> dict[str, Any]:
        if self.openapi_schema:
            return self.openapi_schema
        schema = get_openapi(
            title=self.title,
            version=self.version,
            summary=self.summary,
            description=DESCRIPTION,
            routes=self.routes,
            tags=TAGS,
        )
        for operations in schema.get("paths", {}).values():
            for operation in operations.values():
                for parameter in operation.get("parameters", []):
                    parameter["schema"] = _without_null(parameter.get("schema", {}))
        _, found = models_json_schema(
            [(model, "validation") for model in _BODY_MODELS],
            ref_template="#/components/schemas/{model}",
        )
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        for name, definition in found.get("$defs", {}).items():
            components.setdefault(name, definition)
        self.openapi_schema = schema
        return schema

    @cached_property
    def _path_methods(self) -> list[tuple[re.Pattern[str], list[str]]]:
        found = []
        for path, operations in self.openapi().get("paths", {}).items():
            pattern = re.compile("[^/]+".join(re.escape(part) for part in re.split(r"{[^}]+}", path)))
            found.append((pattern, sorted(method.upper() for method in operations)))
        return found

    def allowed_methods(self, path: str) -> list[str]:
        """The documented methods of the route at ``path`` (for a 405's ``Allow`` header)."""
        return next((methods for pattern, methods in self._path_methods if pattern.fullmatch(path)), [])
