"""Request and response models of the evolution endpoints: cycles, schedules, the feed."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from api.paging import NextCursor
from evolution.schedules import MAX_INTERVAL_S


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
