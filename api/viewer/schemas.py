"""The world viewer's configuration: what ``GET /api/viewer/config`` answers."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class ViewerConfig(BaseModel):
    temporal_ui_url: str = Field(description="Base URL of the Temporal Web UI")
    temporal_namespace: str
    workflow_url_template: str = Field(
        description="Link of one workflow in the Temporal UI: replace {workflow_id} (URL-encoded)"
    )
    auth: Literal["required", "open"] = Field(description="required: proposals need an X-API-Key")
    world_width: float
    world_height: float
