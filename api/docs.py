"""``/docs``: Swagger UI, served by the API itself (``swagger-ui-bundle-v2``, a pinned dependency), never from a CDN.

The page, its script and its stylesheet all come from this origin, and its Content-Security-Policy says so: a
compromised CDN cannot run script on the origin of the console (``/ui``), whose cookies it would otherwise ride.
FastAPI's own ``/docs`` and ``/redoc`` (both from a CDN) are turned off (``docs_url=None, redoc_url=None``).
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, HTTPException
from fastapi.responses import FileResponse, HTMLResponse
from swagger_ui_bundle import swagger_ui_path

router = APIRouter(include_in_schema=False)

ASSETS = "/docs/assets"
# The files the page loads, by the names it uses: nothing else under the bundle's folder is served.
_FILES: dict[str, tuple[Path, str]] = {
    "swagger-ui.css": (Path(str(swagger_ui_path)) / "swagger-ui.css", "text/css; charset=utf-8"),
    "swagger-ui-bundle.js": (Path(str(swagger_ui_path)) / "swagger-ui-bundle.js", "text/javascript; charset=utf-8"),
    "favicon-32x32.png": (Path(str(swagger_ui_path)) / "favicon-32x32.png", "image/png"),
    "init.js": (Path(__file__).parent / "docs_static" / "init.js", "text/javascript; charset=utf-8"),
}
# Swagger UI sets style attributes as it renders, hence 'unsafe-inline' for styles (never for scripts).
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
        "connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}
PAGE = f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>swapfarm API</title>
<link rel="icon" type="image/png" href="{ASSETS}/favicon-32x32.png">
<link rel="stylesheet" href="{ASSETS}/swagger-ui.css">
</head>
<body>
<div id="swagger-ui"></div>
<script src="{ASSETS}/swagger-ui-bundle.js"></script>
<script src="{ASSETS}/init.js"></script>
</body>
</html>
"""


@router.get("/docs", response_class=HTMLResponse)
def docs() -> HTMLResponse:
    return HTMLResponse(PAGE, headers=HEADERS)


@router.get(ASSETS + "/{name}")
def asset(name: str) -> FileResponse:
    if name not in _FILES:
        raise HTTPException(404, "no such file")
    path, media_type = _FILES[name]
    return FileResponse(path, media_type=media_type, headers=HEADERS | {"Cache-Control": "public, max-age=3600"})
