"""The query parameters a route takes, and nothing else: a parameter the route does not declare is refused with
``422 query_parameter_unknown``, not ignored. Ignored, a misspelt filter (``GET /v1/jobs?stauts=failed``) answers as
if no filter had been asked for, and a client cannot tell its request was not understood."""

from __future__ import annotations

from fastapi import Request
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute

from shared.errors import UnknownQueryParameterError


def _query_names(dependant: Dependant) -> set[str]:
    names = {field.alias for field in dependant.query_params}
    for dependency in dependant.dependencies:
        names |= _query_names(dependency)
    return names


def _declared(route: APIRoute) -> set[str]:
    """The names (aliases) of the query parameters ``route`` and its dependencies declare."""
    return _query_names(route.dependant)


def refuse_unknown_query(request: Request) -> None:
    """A dependency of every ``/v1`` route: raises :class:`UnknownQueryParameterError` naming each query parameter
    the matched route does not declare."""
    route = request.scope.get("route")
    if not isinstance(route, APIRoute):
        return
    unknown = sorted(set(request.query_params) - _declared(route))
    if unknown:
        names = ", ".join(repr(name[:40]) for name in unknown[:5])
        raise UnknownQueryParameterError(f"{request.method} {route.path} takes no query parameter {names}")
