"""Every integer a route reads from the query string or a header is bounded to what its column holds: one past
the bound answers 422 ``request_invalid``, the bound itself answers without a server error (``?after=2147483648``
on the chunks once overflowed Postgres' int32 and answered 500)."""

from __future__ import annotations

import json
import types
import typing
from collections.abc import Iterator, Sequence
from pathlib import Path

import annotated_types
import pytest
from fastapi import FastAPI
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from starlette.routing import BaseRoute

from api.app import create_app
from shared.settings import Settings
from tests.support.tenants import bearer, make_key

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
# Parameters compared with a BIGINT column (event ids); every other integer meets an int32 column or none.
BIGINT = {
    ("/v1/jobs/{job_id}/events", "after"),
    ("/v1/jobs/{job_id}/events/stream", "Last-Event-ID"),
    ("/v1/groups/{group_id}/events", "after"),
    ("/v1/groups/{group_id}/events/stream", "Last-Event-ID"),
}


def _is_int(annotation: object) -> bool:
    if annotation is int:
        return True
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return int in typing.get_args(annotation) and bool not in typing.get_args(annotation)
    return False


def _bounds(metadata: list[object]) -> tuple[int | None, int | None]:
    low = high = None
    for item in metadata:
        if isinstance(item, annotated_types.Ge):
            low = int(item.ge)  # type: ignore[call-overload]
        elif isinstance(item, annotated_types.Gt):
            low = int(item.gt) + 1  # type: ignore[call-overload]
        elif isinstance(item, annotated_types.Le):
            high = int(item.le)  # type: ignore[call-overload]
        elif isinstance(item, annotated_types.Lt):
            high = int(item.lt) - 1  # type: ignore[call-overload]
    return low, high


def _walk(dependant: Dependant) -> Iterator[Dependant]:
    yield dependant
    for sub in dependant.dependencies:
        yield from _walk(sub)


def _routes(routes: Sequence[BaseRoute]) -> Iterator[APIRoute]:
    """Every API route, those of included routers too (FastAPI keeps an included router as one entry)."""
    for route in routes:
        if isinstance(route, APIRoute):
            yield route
        included = getattr(route, "original_router", None)
        if included is not None:
            yield from _routes(included.routes)


def integer_parameters(app: FastAPI) -> list[tuple[str, str, str, str, int | None, int | None]]:
    """(method, path, where, name, low, high) of every integer query or header parameter, console included."""
    found = []
    for route in _routes(app.routes):
        for dependant in _walk(route.dependant):
            for where, param in [("query", p) for p in dependant.query_params] + [
                ("header", p) for p in dependant.header_params
            ]:
                if _is_int(param.field_info.annotation):
                    low, high = _bounds(param.field_info.metadata)
                    for method in sorted(route.methods):
                        found.append((method, route.path, where, param.alias, low, high))
    return found


@pytest.fixture
def app(settings: Settings) -> Iterator[FastAPI]:
    app = create_app(settings)
    with TestClient(app):
        yield app


def test_every_integer_parameter_is_bounded_to_its_column(app: FastAPI) -> None:
    params = integer_parameters(app)
    assert ("GET", "/v1/jobs/{job_id}/chunks", "query", "after", -1, INT32_MAX) in params
    for method, path, _, name, low, high in params:
        assert low is not None and high is not None, f"{method} {path} {name}: no bounds"
        assert high <= (INT64_MAX if (path, name) in BIGINT else INT32_MAX), (method, path, name, high)
        assert low >= -INT32_MAX - 1, (method, path, name, low)


def test_one_past_each_bound_is_422_and_the_bound_itself_is_no_server_error(
    app: FastAPI, settings: Settings, clip_short: Path
) -> None:
    client = TestClient(app, headers=bearer(make_key(settings)))
    made = client.post(
        "/v1/jobs",
        files={"target": ("clip.mp4", clip_short.read_bytes(), "video/mp4")},
        data={"options": json.dumps({"processors": ["passthrough"]})},
    )
    job_id = made.json()["id"]
    assert client.post(f"/v1/jobs/{job_id}/cancel").status_code == 200  # ended: its event stream ends at once
    for method, path, where, name, low, high in integer_parameters(app):
        assert low is not None and high is not None
        url = path.replace("{job_id}", job_id).replace("{name}", "00-before.jpg")
        for value, refused in ((high + 1, True), (low - 1, True), (high, False), (low, False)):
            kwargs: dict[str, object] = (
                {"params": {name: str(value)}} if where == "query" else {"headers": {name: str(value)}}
            )
            response = client.request(method, url, **kwargs)  # type: ignore[arg-type]
            if refused:
                assert response.status_code == 422, (method, path, name, value, response.text)
                assert response.json()["error"]["code"] == "request_invalid"
            else:
                assert response.status_code < 500, (method, path, name, value, response.text)
    chunks = client.get(f"/v1/jobs/{job_id}/chunks", params={"after": 2**31})
    assert chunks.status_code == 422 and chunks.json()["error"]["code"] == "request_invalid", chunks.text
