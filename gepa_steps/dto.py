"""Data of GEPA steps shared by the API, the GepaStep/GepaConnect workflows and their activities
(plain pydantic models: workflows import this module inside Temporal's sandbox)."""

from __future__ import annotations

from enum import Enum
from typing import Any, Literal

from pydantic import BaseModel, Field


class ProgramStatus(str, Enum):
    pending = "pending"
    in_progress = "in_progress"
    completed = "completed"
    failed = "failed"


class ConnectRequest(BaseModel):
    client_id: str
    repo_url: str
    installation_id: int | None = None
    egress_allow: list[str] = Field(default_factory=list)  # host:port this client's programs may reach


class ConnectResult(BaseModel):
    client_id: str
    default_branch: str | None = None
    head_commit: str | None = None
    error: str | None = None  # why the clone failed
    error_code: str | None = None  # a refusal with a code of its own (a GitHub App one), else None


class StepRequest(BaseModel):
    """One execute_step (codeevolver-gepa.md), validated by the API."""

    client_id: str
    program_id: str
    parent_program_id: str | None = None
    second_parent_program_id: str | None = None  # a crossover's other parent
    mutation_type: Literal["prompt", "code", "merge"]
    program_json_path: str
    entry_point: str
    candidate: dict[str, str] = Field(default_factory=dict)
    change_request: str | None = None
    change_location: str | None = None
    test_examples: list[dict[str, Any]] = Field(default_factory=list)
    capture_traces: bool = False


class MutationOutcome(BaseModel):
    """What the mutation activity did in the program's worktree."""

    branch_name: str
    worktree: str  # path on the worker host
    commit: str
    program_json: dict[str, Any]
    changed_files: list[str] = Field(default_factory=list)
    merge: dict[str, Any] | None = None  # a crossover's report (gepa_steps/crossover.py)


class ProgramRun(BaseModel):
    """The sandboxed run of the program on the test examples."""

    ok: bool
    pipeline_outputs: list[dict[str, Any]] = Field(default_factory=list)
    traces: list[dict[str, Any]] | None = None
    error: str | None = None
    duration_ms: float = 0.0


class StepResult(BaseModel):
    """The response of execute_step (codeevolver-gepa.md)."""

    program_id: str
    status: Literal["success", "failed"]
    pipeline_outputs: list[dict[str, Any]] = Field(default_factory=list)
    traces: list[dict[str, Any]] | None = None
    branch_name: str | None = None
    program_json: dict[str, Any] | None = None
    commit: str | None = None
    error: str | None = None
    merge: dict[str, Any] | None = None  # a crossover: where each changed component came from


class ProgramStatusUpdate(BaseModel):
    program_id: str
    status: ProgramStatus
    branch_name: str | None = None
    program_json: dict[str, Any] | None = None
    result: StepResult | None = None


GEPA_STEP_WORKFLOW = "GepaStepWorkflow"
GEPA_CONNECT_WORKFLOW = "GepaConnectWorkflow"
GEPA_STEP_PROGRESS_QUERY = "progress"
STEP_FAILED = "GEPA_STEP_FAILED"  # ApplicationError type of every verdict on a step's input
