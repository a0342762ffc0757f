"""The world viewer: a static page at ``/`` (plain HTML/JS/CSS in ``api/viewer/static/``, no build
step) and ``GET /api/viewer/config``, the few settings the page needs (Temporal UI links, auth
mode, world size before the engine has reported)."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

from api.deps import SettingsDep
from api.viewer.schemas import ViewerConfig

STATIC_DIR = Path(__file__).parent / "static"
STATIC_PATH = "/viewer"

router = APIRouter(tags=["viewer"])


@router.get("/", include_in_schema=False)
async def index() -> FileResponse:
    return FileResponse(STATIC_DIR / "index.html", headers={"Cache-Control": "no-cache"})


@router.get("/api/viewer/config", response_model=ViewerConfig)
async def viewer_config(settings: SettingsDep) -> ViewerConfig:
    """What the world viewer at ``/`` needs to know about this deployment."""
    ui = settings.temporal.ui_url.rstrip("/")
    return ViewerConfig(
        temporal_ui_url=ui,
        temporal_namespace=settings.temporal.namespace,
        workflow_url_template=f"{ui}/namespaces/{settings.temporal.namespace}/workflows/{{workflow_id}}",
        auth=settings.auth,
        world_width=settings.engine.world_width,
        world_height=settings.engine.world_height,
    )


class RevalidatedStaticFiles(StaticFiles):
    """Static files the browser revalidates (ETag) on every load, so a new version of the page's
    scripts is never mixed with cached old ones."""

    def file_response(self, *args, **kwargs):
        response = super().file_response(*args, **kwargs)
        response.headers["Cache-Control"] = "no-cache"
        return response


def install(app: FastAPI) -> None:
    """The page, its config endpoint and its static files (``/viewer/*``)."""
    app.include_router(router)
    app.mount(STATIC_PATH, RevalidatedStaticFiles(directory=STATIC_DIR), name="viewer")
