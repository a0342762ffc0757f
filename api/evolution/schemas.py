"""Request and response bodies of the evolution endpoints: forced triggers and cycles, schedules,
the feed, tasks for external agents and their claims, and the context metrics agents read."""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from api.paging import NextCursor
from api.params import AGENT_ID_PATTERN, check_task_id
from evolution.schedules import MAX_INTERVAL_S
from genesis.dto import TaskSeverity

AnomalyType = Literal[
    "starvation",
    "overcrowding",
    "environmental",
    "overpopulation",
    "energy_crisis",
    "low_diversity",
    "stagnation",
]


class EvolutionTriggerRequest(BaseModel):
    """``POST /api/evolution/trigger``: an operator forces a Watcher trigger from the latest snapshot."""

    # Empty: whatever the Watcher's rules find worst in the latest snapshots.
    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"anomaly_type": "starvation", "severity": "high"}, {}]}
    )

    anomaly_type: AnomalyType | None = Field(
        default=None,
        description="Default: the worst anomaly the Watcher's rules find in the latest snapshots",
    )
    severity: Literal["low", "medium", "high", "critical"] | None = Field(
        default=None,
        description="Default: what the rules found for that type, else the seed's severity of the type",
    )


class EvolutionTriggerResponse(BaseModel):
    trigger_id: str
    task_id: str
    problem_type: str
    severity: str
    task_severity: str
    suggested_area: str
    tick: int
    report_key: str
    message: str
    cycle_workflow_id: str | None = None  # the EvolutionCycleWorkflow started for it


class CycleResponse(BaseModel):
    trigger_id: str
    workflow_id: str
    kind: str = Field(description="anomaly | periodic_improvement")
    problem_type: str | None
    severity: str | None
    stage: str = Field(
        description="loading_context, planning, planned, coding, validated, validation_failed, "
        "mutation_running, applying_params, observing, completed, llm_error, rolled_back, mutation_<status>"
    )
    status: str = Field(description="running | succeeded | failed")
    action_type: str | None = Field(description="new_trait | modify_trait | adjust_params")
    plan: dict[str, Any] | None
    code: str | None
    attempts: int = Field(description="Coder answers (2: the retry with the validator's feedback)")
    mutation_id: str | None
    mutation_status: str | None
    params_change: dict[str, Any] | None
    provider: str | None
    model: str | None
    llm_calls: int
    tokens_in: int
    tokens_out: int
    estimated_cost_usd: float
    error: str | None
    created_at: float
    updated_at: float


class CycleListResponse(BaseModel):
    cycles: list[CycleResponse]
    next_cursor: NextCursor = None


class ScheduleCreateRequest(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "schedule_id": "hourly-improvement",
                    "interval_sec": 3600,
                    "note": "look for a better trait every hour",
                }
            ]
        },
    )

    schedule_id: str | None = Field(default=None, max_length=64, description="Default: periodic-<8 hex>")
    interval_sec: float = Field(
        le=MAX_INTERVAL_S,
        description="Seconds between runs (at least GENESIS_SCHEDULE_MIN_INTERVAL_S, 60; at most 30 days)",
    )
    paused: bool = False
    note: str = Field(default="", max_length=500)

    @model_validator(mode="before")
    @classmethod
    def _read_older_name(cls, data: Any) -> Any:
        """``interval_s``, the older name of ``interval_sec``, is still read (not both at once)."""
        if isinstance(data, dict) and "interval_s" in data and "interval_sec" not in data:
            data = {("interval_sec" if key == "interval_s" else key): value for key, value in data.items()}
        return data


class ScheduleRun(BaseModel):
    scheduled_at: float | None
    started_at: float | None
    workflow_id: str | None
    trigger_id: str | None


class ScheduleResponse(BaseModel):
    schedule_id: str
    interval_sec: float | None = Field(description="Seconds between runs")
    interval_s: float | None = Field(description="The same as interval_sec (its older name, kept for clients of it)")
    paused: bool
    note: str
    next_run_times: list[float | None]
    recent_runs: list[ScheduleRun]
    runs_total: int = 0
    runs_skipped_overlap: int = 0


class ScheduleListResponse(BaseModel):
    schedules: list[ScheduleResponse]
    next_cursor: NextCursor = None


class FeedMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    id: str = Field(description="Stream id in feed:stream (pass it as ?after= to read on)")
    agent: str
    action: str
    message: str
    trigger_id: str | None = None
    mutation_id: str | None = None
    workflow_id: str | None = None
    timestamp: float


class FeedResponse(BaseModel):
    messages: list[FeedMessage]
    last_id: str | None = Field(description="The id of the last message, else the `after` given")
    next_cursor: NextCursor = None


def _is_unicode(text: str) -> bool:
    """Whether ``text`` can be encoded as UTF-8 (JSON's \\ud800 escapes decode to lone surrogates)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class TaskCreateRequest(BaseModel):
    """``POST /api/agents/tasks``: an operator publishes a task (until the Watcher does)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "problem_type": "starvation",
                    "severity": "high",
                    "description": "Average energy fell to 20%. A trait that gathers resources better is needed.",
                    "world_context": {"entity_count": 412, "avg_energy": 20.4},
                }
            ]
        },
    )

    task_id: str | None = Field(
        default=None, description="Optional; 1-64 of letters, digits, _ and -. Default: task_ + 12 hex"
    )
    source: str = Field(
        default="operator", pattern=r"^[a-z][a-z0-9_]{0,31}$", description="Who raised it (watcher, operator, ...)"
    )
    problem_type: str = Field(
        pattern=r"^[a-z][a-z0-9_]{0,63}$", description="snake_case, e.g. starvation, overpopulation, energy_crisis"
    )
    severity: TaskSeverity = Field(description="Sets the TTL: critical 15 min, high 10, low / periodic_improvement 5")
    description: str = Field(
        min_length=1, max_length=2000, description="What is wrong and what kind of trait would help"
    )
    suggested_area: Literal["traits", "physics", "environment"] = "traits"
    world_context: dict[str, Any] | None = Field(
        default=None,
        max_length=32,
        description="Numbers that explain the task; default: entity_count and avg_energy of the latest snapshot",
    )
    constraints: list[Annotated[str, Field(min_length=1, max_length=300)]] | None = Field(
        default=None,
        max_length=20,
        description="Default: the sandbox constraints every task carries",
    )

    @field_validator("task_id")
    @classmethod
    def _task_id(cls, value: str | None) -> str | None:
        return check_task_id(value)

    @field_validator("description")
    @classmethod
    def _description(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("description must not be blank")
        return value

    @field_validator("world_context")
    @classmethod
    def _world_context(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        for name, item in (value or {}).items():
            if not 1 <= len(name) <= 64:
                raise ValueError("world_context keys must be 1-64 characters")
            if item is not None and type(item) not in (int, float, str, bool):
                raise ValueError(f"world_context values must be numbers, strings, booleans or null ({name!r} is not)")
            if type(item) is float and not math.isfinite(item):
                raise ValueError(f"world_context numbers must be finite ({name!r} is not)")
            if type(item) is str and len(item) > 500:
                raise ValueError(f"world_context strings must be at most 500 characters ({name!r} is longer)")
            if not all(_is_unicode(text) for text in (name, item) if type(text) is str):
                raise ValueError(
                    f"world_context keys and strings must be valid Unicode (no lone surrogates) ({name!r} is not)"
                )
        return value


class TaskResponse(BaseModel):
    """One task of ``GET /api/agents/context/tasks`` (seed shape, then the claim)."""

    task_id: str
    expires_at: float
    ttl_remaining_sec: int
    source: str
    problem_type: str
    severity: str
    description: str
    suggested_area: str
    world_context: dict[str, Any]
    constraints: list[str]
    claimed_by: str | None = Field(default=None, description="agent_id holding the claim, if any")
    claim_lease_remaining_sec: float | None = None


class TasksResponse(BaseModel):
    tasks: list[TaskResponse]
    next_cursor: NextCursor = None


class TaskCreatedResponse(TaskResponse):
    workflow_id: str
    message: str


class ClaimRequest(BaseModel):
    # With an X-API-Key the body may be left out, or empty: the key says who claims.
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{}, {"agent_id": "agt_3f9c0a1b2c3d"}]})

    agent_id: str | None = Field(
        default=None,
        description="Who claims the task (with X-API-Key: the key's agent, may be left out); "
        "the same agent must then propose the mutation",
    )

    @field_validator("agent_id")
    @classmethod
    def _agent_id(cls, value: str | None) -> str | None:
        if value is not None and not AGENT_ID_PATTERN.match(value):
            raise ValueError(
                "agent_id must be 1-128 characters: letters, digits and _ . : @ -, starting with a letter or digit"
            )
        return value


class ClaimResponse(BaseModel):
    task_id: str
    agent_id: str
    status: Literal["claimed"] = "claimed"
    lease_sec: float = Field(description="Seconds left on the lease: propose a mutation for the task before it lapses")
    lease_expires_at: float
    task_expires_at: float | None
    message: str


class ResolveRequest(BaseModel):
    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"reason": "average energy is back above 50%"}]}
    )

    reason: str = Field(
        default="resolved", min_length=1, max_length=200, description="Why the task is no longer needed"
    )


class ResolveResponse(BaseModel):
    task_id: str
    status: Literal["resolving"] = "resolving"
    message: str


class MetricsResponse(BaseModel):
    """``GET /api/agents/context/metrics`` (seed shape)."""

    tick: int
    entity_count: int
    avg_energy: float
    resource_count: int
    death_stats: dict[str, int]
    trait_usage: dict[str, int]
    anomalies: list[str]
