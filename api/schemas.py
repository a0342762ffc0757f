"""Request and response bodies of the REST API (shapes from open-mutation-api.md)."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from genesis import gatekeeper

AGENT_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,127}$")
TASK_ID_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class ProposeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=False)

    agent_id: str = Field(description="Who proposes (logs, limits); 1-128 of letters, digits, _ . : @ -")
    task_id: str | None = Field(default=None, description="Optional task from /api/agents/context/tasks")
    trait_name: str = Field(description="snake_case; becomes part of mutations/trait_{name}_v{N}.py")
    goal: str = Field(default="", max_length=2000, description="What the trait is for (shown in the Evolution Feed)")
    code: str = Field(description="Python source of the trait (UTF-8, at most 32 KB)")

    @field_validator("agent_id")
    @classmethod
    def _agent_id(cls, value: str) -> str:
        if not AGENT_ID_PATTERN.match(value):
            raise ValueError("agent_id must be 1-128 characters: letters, digits and _ . : @ -, starting with a letter or digit")
        return value

    @field_validator("task_id")
    @classmethod
    def _task_id(cls, value: str | None) -> str | None:
        if value is not None and not TASK_ID_PATTERN.match(value):
            raise ValueError("task_id must be 1-64 characters: letters, digits, _ and -")
        return value

    @field_validator("trait_name")
    @classmethod
    def _trait_name(cls, value: str) -> str:
        problems = [p for p in gatekeeper.schema_problems(value, "pass") if "trait_name" in p]
        if problems:
            raise ValueError(problems[0])
        return value

    @field_validator("code")
    @classmethod
    def _code(cls, value: str) -> str:
        problems = [p for p in gatekeeper.schema_problems("trait", value) if "trait_name" not in p]
        if problems:
            raise ValueError(problems[0])
        return value


class ProposeResponse(BaseModel):
    mutation_id: str
    status: str
    message: str
    status_url: str
    workflow_id: str


class MutationStatusResponse(BaseModel):
    mutation_id: str
    trait_name: str
    agent_id: str
    status: str
    failure_reason_code: str | None
    created_at: float
    updated_at: float
    validation_log: list[str]
    goal: str
    task_id: str | None
    code_hash: str | None
    workflow_id: str
    sandbox_report: dict[str, Any] | None
    trait_version: int | None
    fitness_verdict: str | None
    rollback_reason: str | None


class EffectsResponse(BaseModel):
    mutation_id: str
    trait_name: str
    status: str
    observation_window_ticks: int
    observed: bool
    effects: dict[str, Any] | None
    fitness_verdict: str | None = None


class RollbackBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: str = Field(default="manual", min_length=1, max_length=200, description="Why (shown in the feed and log)")


class RollbackResponse(BaseModel):
    mutation_id: str
    status: str
    message: str


class ErrorResponse(BaseModel):
    error: str
    detail: str
    errors: list[dict[str, Any]] | None = None
