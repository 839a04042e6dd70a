"""The FastAPI application: thin — validate, store, insert, enqueue by task name. Built by :func:`create_app`."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from redis import Redis
from sqlalchemy import text
from sqlalchemy.exc import OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from api import controls, docs, group_events, groups, jobs, metrics, output, progress, ui, webhook_secret, workers
from api.openapi import SwapfarmAPI, operation_id
from api.query import refuse_unknown_query
from api.schemas import Health
from api.slots import KeySlots, fallback_counter
from shared.broker import make_celery
from shared.db import engine_for
from shared.dispatch import CeleryDispatcher
from shared.errors import (
    RangeNotSatisfiableError,
    RequestTimeoutError,
    ServiceUnavailableError,
    SwapfarmError,
    TooLargeError,
    UnauthorizedError,
    public_message,
)
from shared.farm import Farm
from shared.settings import Settings, get_settings
from shared.storage import Storage

logger = logging.getLogger(__name__)


def _error(status: int, code: str, message: str, headers: Mapping[str, str] | None = None) -> JSONResponse:
    body = {"error": {"code": code, "message": public_message(message)}}
    return JSONResponse(status_code=status, content=body, headers=headers)


def _error_headers(exc: SwapfarmError) -> dict[str, str] | None:
    if isinstance(exc, UnauthorizedError):
        return {"WWW-Authenticate": 'Bearer realm="swapfarm"'}
    if isinstance(exc, RangeNotSatisfiableError):
        return {"Content-Range": f"bytes */{exc.size}"}
    if isinstance(exc, RequestTimeoutError | TooLargeError):
        return {"Connection": "close"}  # the rest of the body was never read: the connection cannot carry another
    return None


def create_app(settings: Settings | None = None) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        resolved = settings or get_settings()
        celery = make_celery(resolved)
        app.state.settings = resolved
        app.state.storage = Storage.from_settings(resolved)
        app.state.celery = celery
        app.state.dispatcher = CeleryDispatcher(celery)
        app.state.farm = Farm(resolved, app.state.storage, app.state.dispatcher)  # what submissions act through
        app.state.metrics = metrics.registry_for(resolved.database_url, celery, lease_seconds=resolved.lease_seconds)
        counts = Redis.from_url(resolved.broker_url)  # the caps are counted for every API process at once
        ttl = resolved.slot_ttl_seconds
        fallbacks = fallback_counter(app.state.metrics)
        app.state.upload_slots = KeySlots(
            counts, resolved.max_uploads_per_key, code="too_many_uploads", what="uploads", ttl=ttl, fallbacks=fallbacks
        )
        app.state.stream_slots = KeySlots(
            counts, resolved.max_streams_per_key, code="too_many_streams", what="event streams", ttl=ttl,
            fallbacks=fallbacks,
        )  # fmt: skip
        yield
        counts.close()
        celery.close()

    app = SwapfarmAPI(
        title="swapfarm",
        version="0.1.0",
        summary="Submit face-swap video jobs to the farm and follow them.",
        lifespan=lifespan,
        docs_url=None,  # FastAPI's pages load from a CDN; api.docs serves Swagger UI itself
        redoc_url=None,
        generate_unique_id_function=operation_id,
    )
    v1 = [jobs.router, controls.router, controls.farm_router, progress.router, output.router, webhook_secret.router]
    v1 += [workers.router, groups.router, group_events.router]
    for router in v1:  # the API's own routes take only the query parameters they declare
        app.include_router(router, dependencies=[Depends(refuse_unknown_query)])
    app.include_router(metrics.router)
    app.include_router(docs.router)
    ui.mount(app)  # the jobs console at /ui (not in the OpenAPI description)

    @app.exception_handler(SwapfarmError)
    async def swapfarm_error(_: Request, exc: SwapfarmError) -> JSONResponse:
        return _error(exc.http_status, exc.code, exc.message, _error_headers(exc))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 405:
            allowed = app.allowed_methods(request.url.path)
            headers = {"Allow": ", ".join(allowed)} if allowed else exc.headers
            return _error(405, "method_not_allowed", f"{request.method} is not allowed here", headers)
        code = "not_found" if exc.status_code == 404 else "http_error"
        return _error(exc.status_code, code, str(exc.detail), exc.headers)

    @app.exception_handler(OperationalError)
    async def database_down(_: Request, exc: OperationalError) -> JSONResponse:
        logger.warning("database unavailable: %s", exc.__class__.__name__)
        error = ServiceUnavailableError("the database is unavailable; try again shortly")
        return _error(error.http_status, error.code, error.message)

    @app.exception_handler(ClientDisconnect)
    async def client_gone(request: Request, _: ClientDisconnect) -> JSONResponse:
        # Nobody is left to read the answer; not a server error, so no traceback.
        logger.info("client went away during %s %s", request.method, request.url.path)
        return _error(400, "client_disconnected", "the client closed the connection before the request was read")

    @app.exception_handler(Exception)
    async def unexpected(_: Request, exc: Exception) -> JSONResponse:
        # Logged with its traceback by the server; the client learns only that it was ours, not what it was.
        logger.error("unexpected error: %s", exc.__class__.__name__, exc_info=exc)
        return _error(500, "internal_error", "an unexpected error on the server; it has been logged")

    @app.exception_handler(RequestValidationError)
    async def invalid_request(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()))
        return _error(422, "request_invalid", f"{where}: {first.get('msg', 'invalid request')}")

    @app.get("/healthz", response_model=Health, tags=["health"])
    def healthz() -> Health:
        """The process is up."""
        return Health(status="ok")

    @app.get("/readyz", response_model=Health, tags=["health"], responses={503: {"model": Health}})
    def readyz(request: Request) -> JSONResponse:
        """The database and the broker answer."""
        resolved: Settings = request.app.state.settings
        checks: dict[str, str] = {}
        try:
            with engine_for(resolved.database_url).connect() as conn:
                conn.execute(text("SELECT 1"))
            checks["database"] = "ok"
        except Exception as exc:
            checks["database"] = f"error: {exc.__class__.__name__}"
        try:
            with request.app.state.celery.connection_for_write() as conn:
                conn.ensure_connection(max_retries=1, timeout=2)
            checks["broker"] = "ok"
        except Exception as exc:
            checks["broker"] = f"error: {exc.__class__.__name__}"
        ok = all(v == "ok" for v in checks.values())
        body = Health(status="ok" if ok else "unavailable", checks=checks)
        return JSONResponse(status_code=200 if ok else 503, content=body.model_dump())

    return app
