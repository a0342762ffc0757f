"""Request and response bodies of the GEPA endpoints (codeevolver-gepa.md)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gepa_steps import programs

MAX_INSTRUCTION_CHARS = 100_000


def storable(value: Any, field: str) -> Any:
    """Postgres JSON/text holds neither NUL nor lone surrogates (JSON's \\u0000, \\ud800): refuse
    them here, with the field's name, rather than fail the step's record later."""
    text = json.dumps(value, ensure_ascii=False)
    if "\\u0000" in text:
        raise ValueError(f"{field} must not contain NUL characters")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{field} must be valid Unicode (it contains a lone surrogate)") from None
    return value


class ConnectGitRequest(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"repo_url": "https://github.com/you/qa-program"},
                {"repo_url": "https://github.com/you/web-researcher", "egress_allow": ["api.firecrawl.dev:443"]},
            ]
        },
    )

    repo_url: str = Field(
        description="https://host/owner/repo, or a local path / file:// URL under GENESIS_GEPA_LOCAL_REPO_ROOTS"
    )
    installation_id: int | None = Field(
        default=None,
        ge=1,
        le=2**63 - 1,
        description="GitHub App installation id (a private repository on the App's "
        "host, of the installation's account; the operator grants "
        "installations to agents)",
    )
    egress_allow: list[str] = Field(
        default_factory=list,
        max_length=programs.MAX_EGRESS_ENTRIES,
        description="host:port this client's programs may reach through the egress proxy "
        "(besides the LM and the server's GENESIS_GEPA_EGRESS_ALLOW)",
    )

    @field_validator("egress_allow")
    @classmethod
    def _egress(cls, value: list[str]) -> list[str]:
        return programs.check_egress_allow(value)


class ConnectGitResponse(BaseModel):
    client_id: str
    status: Literal["connected"]
    default_branch: str
    egress_allow: list[str] = Field(default_factory=list)


class ExecuteStepRequest(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {  # a prompt mutation: new instructions for a predictor of the saved program
                    "client_id": "client_3f9c0a1b2c3d4e5f",
                    "program_id": "p001",
                    "parent_program_id": None,
                    "mutation_type": "prompt",
                    "program_json_path": "program.json",
                    "entry_point": "qa.QA",
                    "candidate": {"answer": "Answer in one word."},
                    "test_examples": [{"question": "capital of France?", "answer": "Paris"}],
                    "capture_traces": True,
                },
                {  # a crossover of p002 and p003: p003's changed components join p002
                    "client_id": "client_3f9c0a1b2c3d4e5f",
                    "program_id": "p004",
                    "parent_program_id": "p002",
                    "second_parent_program_id": "p003",
                    "mutation_type": "merge",
                    "program_json_path": "program.json",
                    "entry_point": "qa.QA",
                    "test_examples": [{"question": "capital of France?"}],
                },
                {  # a code mutation of p001's branch
                    "client_id": "client_3f9c0a1b2c3d4e5f",
                    "program_id": "p002",
                    "parent_program_id": "p001",
                    "mutation_type": "code",
                    "program_json_path": "program.json",
                    "entry_point": "qa.QA",
                    "change_request": "Strip whitespace from every answer",
                    "change_location": "qa.QA.forward",
                    "test_examples": [{"question": "capital of France?"}],
                },
            ]
        },
    )

    client_id: str = Field(max_length=40)
    program_id: str = Field(max_length=64, description="the new program version's id (letters, digits, _ and -)")
    parent_program_id: str | None = Field(
        default=None,
        max_length=64,
        description="a completed program of this client; absent: the repository's default branch",
    )
    second_parent_program_id: str | None = Field(
        default=None,
        max_length=64,
        description="merge: the other parent, a completed program of this client (parent_program_id "
        "is the first, whose components win where both changed one)",
    )
    mutation_type: Literal["prompt", "code", "merge"] = Field(
        description="prompt: new instructions (candidate); code: a change the coding agent makes "
        "(change_request); merge: crossover of parent_program_id and second_parent_program_id"
    )
    program_json_path: str = Field(max_length=512)
    entry_point: str = Field(
        max_length=256, pattern=programs.ENTRY_POINT_PATTERN, description="module.ClassName of the DSPy module"
    )
    candidate: dict[str, str] = Field(
        default_factory=dict, max_length=256, description="prompt mutations: component name -> new instruction text"
    )
    change_request: str | None = Field(default=None, max_length=20_000, description="code mutations: what to change")
    change_location: str | None = Field(default=None, max_length=512)
    test_examples: list[dict[str, Any]] = Field(default_factory=list)
    capture_traces: bool = False

    @field_validator("client_id")
    @classmethod
    def _client_id(cls, value: str) -> str:
        return programs.check_client_id(value)

    @field_validator("change_request", "change_location", "test_examples", "entry_point")
    @classmethod
    def _storable(cls, value: Any, info) -> Any:
        return storable(value, info.field_name)

    @field_validator("program_id", "parent_program_id", "second_parent_program_id")
    @classmethod
    def _program_id(cls, value: str | None) -> str | None:
        return None if value is None else programs.check_program_id(value)

    @field_validator("program_json_path")
    @classmethod
    def _path(cls, value: str) -> str:
        return programs.check_relative_path(value)

    @field_validator("candidate")
    @classmethod
    def _candidate(cls, value: dict[str, str]) -> dict[str, str]:
        for name, text in value.items():
            if not name or len(name) > 256:
                raise ValueError("component names must be 1-256 characters")
            if len(text) > MAX_INSTRUCTION_CHARS:
                raise ValueError(f"the instructions of {name!r} are longer than {MAX_INSTRUCTION_CHARS:,} characters")
        return storable(value, "candidate")


class ExecuteStepAccepted(BaseModel):
    program_id: str
    status: Literal["pending", "in_progress", "completed", "failed"]
    status_url: str
    workflow_id: str


class ProgramResponse(BaseModel):
    program_id: str
    client_id: str
    parent_program_id: str | None
    second_parent_program_id: str | None = Field(default=None, description="a merge's other parent")
    mutation_type: str
    status: Literal["pending", "in_progress", "completed", "failed"]
    branch_name: str
    program_json: dict[str, Any] | None
    result: dict[str, Any] | None = Field(description="the execute_step response, once the step has ended")
    error: str | None
    progress: str | None = Field(default=None, description="the running step's stage")
    created_at: datetime
    updated_at: datetime
