"""The API's documentation pages, Swagger UI at ``/docs`` and ReDoc at ``/redoc``, with every
asset served by the service itself.

FastAPI's own pages load Swagger UI and ReDoc from a CDN (and ReDoc's fonts from Google), so
they are blank on a machine without Internet access, which is where a federation's registry
often runs. The assets come from the ``fastapi-offline`` package, which ships the distribution
files of swagger-ui-dist 5 and redoc 2 as package data (installed with fedload, never fetched at
run time); fedload uses only those files, with FastAPI's own page templates.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

DOCS_URL = "/docs"
REDOC_URL = "/redoc"
ASSETS_URL = "/docs/assets"
SWAGGER_JS = "swagger-ui-bundle.js"
SWAGGER_CSS = "swagger-ui.css"
REDOC_JS = "redoc.standalone.js"
FAVICON = "favicon.png"

# The pages may load only from the service. ReDoc's bundle still links its maker's logo on a CDN
# (cdn.redoc.ly), which no option turns off: the policy stops the browser from fetching it.
# Both pages start from an inline script or inline styles; ReDoc compiles JSON Schemas with
# `new Function` and searches in a blob: worker.
CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self' 'unsafe-inline' 'unsafe-eval'",
        "style-src 'self' 'unsafe-inline'",
        "img-src 'self' data:",
        "font-src 'self' data:",
        "worker-src 'self' blob:",
        "connect-src 'self'",
    )
)

SWAGGER_UI_PARAMETERS = {
    # Swagger UI otherwise shows a badge image loaded from validator.swagger.io for any spec not
    # served from localhost: the one remaining request to another host.
    "validatorUrl": None,
}


def assets_dir() -> Path:
    directory = Path(str(files("fastapi_offline") / "static"))
    missing = [
        name
        for name in (SWAGGER_JS, SWAGGER_CSS, REDOC_JS, FAVICON)
        if not (directory / name).is_file()
    ]
    if missing:
        raise RuntimeError(f"{directory} lacks {', '.join(missing)}: reinstall fastapi-offline")
    return directory


def mount_docs(app: FastAPI) -> None:
    """Serve the assets and the two pages; create the app with ``docs_url=None, redoc_url=None``."""
    app.mount(ASSETS_URL, StaticFiles(directory=assets_dir()), name="docs-assets")

    @app.get(DOCS_URL, include_in_schema=False)
    def swagger_ui(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        page = get_swagger_ui_html(
            openapi_url=f"{root}{app.openapi_url}",
            title=f"{app.title} - Swagger UI",
            swagger_js_url=f"{root}{ASSETS_URL}/{SWAGGER_JS}",
            swagger_css_url=f"{root}{ASSETS_URL}/{SWAGGER_CSS}",
            swagger_favicon_url=f"{root}{ASSETS_URL}/{FAVICON}",
            swagger_ui_parameters=SWAGGER_UI_PARAMETERS,
        )
        page.headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
        return page

    @app.get(REDOC_URL, include_in_schema=False)
    def redoc(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        page = get_redoc_html(
            openapi_url=f"{root}{app.openapi_url}",
            title=f"{app.title} - ReDoc",
            redoc_js_url=f"{root}{ASSETS_URL}/{REDOC_JS}",
            redoc_favicon_url=f"{root}{ASSETS_URL}/{FAVICON}",
            with_google_fonts=False,
        )
        page.headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
        return page
