"""Response models of POST /api/mutations/{id}/retry and /revive (api/routes_mutation_ops.py)."""

from __future__ import annotations

from pydantic import BaseModel, Field


class RetryResponse(BaseModel):
    mutation_id: str
    status: str = Field(description="queued: the fresh run has started")
    workflow_id: str
    run_id: str | None = Field(description="the new run of the workflow")
    previous_status: str = Field(description="the mutation's status before the retry")
    previous_workflow_status: str | None = Field(
        description="how the earlier run ended (FAILED, TIMED_OUT, TERMINATED, CANCELED, COMPLETED), "
        "or null if it never started"
    )
    message: str


class ReviveResponse(BaseModel):
    mutation_id: str
    status: str = Field(description="kept: the trait is live again")
    registry_version: int | None = Field(description="the trait registry's version with it back in")
    message: str
