"""Who is asking: the API key of a request (``Authorization: Bearer sfk_…``), checked on every request.

The key's row is read each time, so a revoked key stops at its next request. A tenant only ever sees its own jobs:
another tenant's job answers 404 exactly like a job that does not exist (never 403, which would say it exists).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from shared.db import session_scope
from shared.errors import UnauthorizedError
from shared.settings import Settings
from shared.tenants import Principal, authenticate

bearer = HTTPBearer(
    auto_error=False,
    scheme_name="ApiKey",
    description="An API key made by `swapfarm keys create`, sent as `Authorization: Bearer sfk_…`.",
)


def principal(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]
) -> Principal:
    """The principal of the request's key.

    Raises:
        UnauthorizedError: no key, or an unknown or revoked one.
    """
    if credentials is None or not credentials.credentials:
        raise UnauthorizedError("an API key is needed: send 'Authorization: Bearer <key>'")
    settings: Settings = request.app.state.settings
    with session_scope(settings.database_url) as session:
        found = authenticate(session, credentials.credentials)
    if found is None:
        raise UnauthorizedError("the API key is unknown or revoked")
    return found


Caller = Annotated[Principal, Depends(principal)]
