"""``/docs`` and ``/redoc`` served without a CDN: the Swagger UI and ReDoc assets ship with the
``fastapi-offline`` package and are served by the app itself, so the pages work offline and
behind a firewall (FastAPI's own pages load them from a CDN: blank without one).

Only the package's static files are used; the pages are FastAPI's own HTML pointed at them.
"""

from __future__ import annotations

from importlib import resources

from fastapi import FastAPI, HTTPException, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import FileResponse, HTMLResponse

ASSETS = "/docs/assets"
FILES = {
    "swagger-ui-bundle.js": "text/javascript",
    "swagger-ui.css": "text/css",
    "redoc.standalone.js": "text/javascript",
    "favicon.png": "image/png",
}


def _asset_dir():  # noqa: ANN202
    return resources.files("fastapi_offline") / "static"


def install_docs(app: FastAPI) -> None:
    """Add ``/docs``, its OAuth2 redirect, ``/redoc`` and ``/docs/assets/<file>`` (create the
    app with ``docs_url=None, redoc_url=None``)."""
    redirect = "/docs/oauth2-redirect"

    @app.get("/docs", include_in_schema=False)
    def swagger(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_swagger_ui_html(
            openapi_url=f"{root}{app.openapi_url}",
            title=f"{app.title} - Swagger UI",
            oauth2_redirect_url=f"{root}{redirect}",
            swagger_js_url=f"{root}{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{root}{ASSETS}/favicon.png",
        )

    @app.get(redirect, include_in_schema=False)
    def swagger_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get("/redoc", include_in_schema=False)
    def redoc(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_redoc_html(
            openapi_url=f"{root}{app.openapi_url}",
            title=f"{app.title} - ReDoc",
            redoc_js_url=f"{root}{ASSETS}/redoc.standalone.js",
            redoc_favicon_url=f"{root}{ASSETS}/favicon.png",
            with_google_fonts=False,
        )

    @app.get(ASSETS + "/{name}", include_in_schema=False)
    def asset(name: str) -> FileResponse:
        if name not in FILES:
            raise HTTPException(404, "no such file")
        with resources.as_file(_asset_dir() / name) as path:
            return FileResponse(path, media_type=FILES[name], headers={"Cache-Control": "public, max-age=86400"})
