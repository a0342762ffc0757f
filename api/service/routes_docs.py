"""The API's reference pages: Swagger UI at ``/docs`` and ReDoc at ``/redoc``, with their scripts,
styles and icon served by this API itself under ``/docs-assets/``, so both work on a machine
without internet (FastAPI's own pages load them from a CDN).

The assets are the builds that the fastapi-offline package ships; its app class is not used: the
pages are FastAPI's ``get_swagger_ui_html`` and ``get_redoc_html`` pointed at the local URLs.
Each page is built once and sent with a Content-Security-Policy that lets it load and call
nothing but this origin and run no script but the bundle and its own inline set-up (by hash)."""

from __future__ import annotations

import base64
import hashlib
import re
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import Response
from fastapi.staticfiles import StaticFiles

DOCS_PATH = "/docs"
REDOC_PATH = "/redoc"
ASSETS_PATH = "/docs-assets"
ASSETS_DIR = Path(str(files("fastapi_offline").joinpath("static")))

# Swagger UI's settings besides FastAPI's defaults: no online validator (its badge is an image
# from a third-party host that would be sent this API's schema URL).
SWAGGER_UI_PARAMETERS = {"validatorUrl": None}

INLINE_SCRIPT = re.compile(rb"<script>(.*?)</script>", re.S)


def content_security_policy(html: bytes, blob_workers: bool = False) -> str:
    """Nothing from elsewhere: scripts from this origin plus the page's inline ones by their
    SHA-256; inline styles (ReDoc and Swagger UI set them at run time); images from this origin
    and data: URIs (Swagger UI's icons); requests to this origin (the schema, "Try it out");
    workers from blob: URLs only where asked (ReDoc's search index). No frames, forms, plugins or
    <base>. ReDoc's footer logo, an image from Redocly's own host, is blocked by it and left out."""
    hashes = "".join(
        f" 'sha256-{base64.b64encode(hashlib.sha256(script).digest()).decode()}'"
        for script in INLINE_SCRIPT.findall(html)
    )
    return (
        "default-src 'none'; "
        f"script-src 'self'{hashes}; "
        "style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; "
        "connect-src 'self'; "
        + ("worker-src blob:; " if blob_workers else "")
        + "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )


@dataclass(frozen=True)
class DocsPage:
    html: bytes
    policy: str

    @classmethod
    def of(cls, page: Response, blob_workers: bool = False) -> DocsPage:
        html = bytes(page.body)
        return cls(html, content_security_policy(html, blob_workers))

    async def respond(self) -> Response:
        return Response(
            self.html,
            media_type="text/html",
            headers={"Content-Security-Policy": self.policy, "X-Content-Type-Options": "nosniff"},
        )


def install(app: FastAPI) -> None:
    """``/docs``, ``/redoc`` and their assets; the app must be made with ``docs_url=None`` and
    ``redoc_url=None`` (FastAPI's pages would load the same files from a CDN)."""
    if app.docs_url is not None or app.redoc_url is not None or app.openapi_url is None:
        raise ValueError("create the app with docs_url=None and redoc_url=None, and an openapi_url")
    swagger = DocsPage.of(
        get_swagger_ui_html(
            openapi_url=app.openapi_url,
            title=f"{app.title} API — Swagger UI",
            swagger_js_url=f"{ASSETS_PATH}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS_PATH}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS_PATH}/favicon.png",
            swagger_ui_parameters=SWAGGER_UI_PARAMETERS,
        )
    )
    redoc = DocsPage.of(
        get_redoc_html(
            openapi_url=app.openapi_url,
            title=f"{app.title} API — ReDoc",
            redoc_js_url=f"{ASSETS_PATH}/redoc.standalone.js",
            redoc_favicon_url=f"{ASSETS_PATH}/favicon.png",
            with_google_fonts=False,
        ),
        blob_workers=True,
    )
    app.add_api_route(DOCS_PATH, swagger.respond, methods=["GET"], include_in_schema=False)
    app.add_api_route(REDOC_PATH, redoc.respond, methods=["GET"], include_in_schema=False)
    app.mount(ASSETS_PATH, StaticFiles(directory=ASSETS_DIR), name="docs-assets")
