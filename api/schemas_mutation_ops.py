"""Request/response models of the mutation list and retry endpoints (api/routes_mutation_ops.py)."""

from __future__ import annotations

from pydantic import BaseModel, Field


class MutationSummary(BaseModel):
    mutation_id: str
    trait_name: str
    agent_id: str
    status: str
    failure_reason_code: str | None
    trait_version: int | None
    fitness_verdict: str | None
    workflow_id: str
    created_at: float = Field(description="unix seconds")
    updated_at: float = Field(description="unix seconds")


class MutationListResponse(BaseModel):
    mutations: list[MutationSummary] = Field(description="newest first")


class RetryResponse(BaseModel):
    mutation_id: str
    status: str = Field(description="queued: the fresh run has started")
    workflow_id: str
    run_id: str | None = Field(description="the new run of the workflow")
    previous_status: str = Field(description="the mutation's status before the retry")
    previous_workflow_status: str | None = Field(
        description="how the earlier run ended (FAILED, TIMED_OUT, TERMINATED, CANCELED, COMPLETED), or null if it never started"
    )
    message: str
