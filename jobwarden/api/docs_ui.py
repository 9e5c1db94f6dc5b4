"""/docs: Swagger UI served from the installed package's files, never from a CDN.

FastAPI's own /docs page loads Swagger UI's script and stylesheet from a CDN, so on a
closed network it is a blank page (issue 36, point 8). Here the page points at
/docs/assets/, served from the files of the ``swagger-ui-bundle-v2`` distribution
(Swagger UI 5.x, Apache-2.0, by Swagger UI's authors; packaged for Python by the
connexion maintainers), a dependency of the ``api`` extra. Swagger UI 5 is needed:
4.x cannot read an OpenAPI 3.1 document, which FastAPI writes.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from starlette.staticfiles import StaticFiles

DOCS_PATH = "/docs"
ASSETS_PATH = f"{DOCS_PATH}/assets"
# The files the page loads (the folder served holds only Swagger UI's own files).
ASSETS = ("swagger-ui-bundle.js", "swagger-ui.css", "favicon-32x32.png")


def assets_dir() -> Path:
    """The folder of the installed Swagger UI files (one version per install).

    Found by its files rather than by importing ``swagger_ui_bundle``, whose module names
    the version folder but ships no type hints.
    """
    try:
        vendor = Path(str(files("swagger_ui_bundle"))) / "vendor"
    except ModuleNotFoundError:
        raise RuntimeError(
            "/docs needs swagger-ui-bundle-v2 (module 'swagger_ui_bundle' is not "
            "installed): pip install '.[api]' in the jobwarden checkout"
        ) from None
    found = sorted(d for d in vendor.glob("swagger-ui-5.*") if (d / ASSETS[0]).is_file())
    if not found:
        raise RuntimeError(f"no Swagger UI 5 under {vendor}: reinstall jobwarden[api]")
    return found[-1]


def install(app: FastAPI, openapi_url: str) -> None:
    """Serve the docs page at /docs and its assets at /docs/assets/ (not in the schema)."""
    folder = assets_dir()
    page = get_swagger_ui_html(
        openapi_url=openapi_url,
        title=f"{app.title} - API",
        swagger_js_url=f"{ASSETS_PATH}/swagger-ui-bundle.js",
        swagger_css_url=f"{ASSETS_PATH}/swagger-ui.css",
        swagger_favicon_url=f"{ASSETS_PATH}/favicon-32x32.png",
    )

    def docs() -> HTMLResponse:
        return page

    app.add_api_route(DOCS_PATH, docs, methods=["GET"], include_in_schema=False)
    app.mount(ASSETS_PATH, StaticFiles(directory=folder), name="docs-assets")
