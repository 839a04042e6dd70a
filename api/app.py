"""The FastAPI application: thin — validate, store, insert, enqueue by task name. Built by :func:`create_app`."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from api import jobs
from api.schemas import Health
from shared.broker import make_celery
from shared.db import engine_for
from shared.dispatch import CeleryDispatcher
from shared.errors import ServiceUnavailableError, SwapfarmError
from shared.settings import Settings, get_settings
from shared.storage import Storage

logger = logging.getLogger(__name__)


def _error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse(status_code=status, content={"error": {"code": code, "message": message}})


def create_app(settings: Settings | None = None) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        resolved = settings or get_settings()
        celery = make_celery(resolved)
        app.state.settings = resolved
        app.state.storage = Storage(resolved.storage_url)
        app.state.celery = celery
        app.state.dispatcher = CeleryDispatcher(celery)
        yield
        celery.close()

    app = FastAPI(
        title="swapfarm",
        version="0.1.0",
        summary="Submit face-swap video jobs to the farm and follow them.",
        lifespan=lifespan,
    )
    app.include_router(jobs.router)

    @app.exception_handler(SwapfarmError)
    async def swapfarm_error(_: Request, exc: SwapfarmError) -> JSONResponse:
        return _error(exc.http_status, exc.code, exc.message)

    @app.exception_handler(OperationalError)
    async def database_down(_: Request, exc: OperationalError) -> JSONResponse:
        logger.warning("database unavailable: %s", exc.__class__.__name__)
        error = ServiceUnavailableError("the database is unavailable; try again shortly")
        return _error(error.http_status, error.code, error.message)

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
