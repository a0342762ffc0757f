"""Request and response shapes of agents' rounds: the deadline, action submissions, a round."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

EXAMPLE_ACTION = (
    "def agent_action(engine, member_id):\n"
    "    me = engine.member\n"
    "    if engine.resources:\n"
    "        food = engine.resources[0]\n"
    "        engine.move_towards(member_id, food.x, food.y)\n"
    "        engine.eat(member_id)\n"
    "    for other in engine.neighbours:\n"
    "        if other.energy < 20 and me.energy > 60:\n"
    "            engine.share(member_id, other.id, 10)\n"
)


class DeadlineResponse(BaseModel):
    round_id: int
    state: Literal["accepting", "executing", "settled"]
    deadline_utc: str = Field(
        description="When the round stops accepting (ISO 8601, UTC; estimated from the tick rate)"
    )
    seconds_remaining: float = Field(description="Until deadline_utc (0 once passed)")
    closes_tick: int = Field(description="The world tick at which it stops accepting")


class ActionRequest(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"code": EXAMPLE_ACTION, "idempotency_key": "round-5-attempt-1"}]},
    )

    code: str = Field(min_length=1, max_length=32 * 1024, description="Python defining agent_action(engine, member_id)")
    idempotency_key: str = Field(
        min_length=1,
        max_length=128,
        pattern=r"^[\x21-\x7e]+$",
        description="Yours alone: a retry with it is answered the same",
    )


class ActionAccepted(BaseModel):
    status: Literal["accepted"]
    round_id: int
    submission_id: str
    round_url: str
    submission_status: Literal["accepted", "applied", "rejected"] = Field(
        default="accepted",
        description="Where the submission stands: `accepted` until its round settles, then `applied` or "
        "`rejected` (a key used again after that is answered with the same submission and its fate)",
    )


class SubmissionItem(BaseModel):
    id: str
    agent_id: str
    member_id: int
    hash: str = Field(description="sha256 of the submission's body (what its idempotency key binds)")
    status: Literal["accepted", "applied", "rejected"]
    error: str | None = Field(
        description="Why it was rejected: timeout, memory, syntax_error, no_entry_point, error, ..."
    )
    reason: str | None
    actions: list[dict[str, Any]] | None = Field(
        description="Each recorded action: applied, or refused with its reason"
    )
    submitted_at: float


class RoundResponse(BaseModel):
    round_id: int
    state: Literal["accepting", "executing", "settled"]
    epoch: int
    opens_tick: int
    closes_tick: int
    deadline_utc: str
    settled_tick: int | None
    receipt_id: str | None = Field(description="The signed receipt of the settled round (GET /v1/receipts/{id})")
    summary: dict[str, Any] | None
    submissions: list[SubmissionItem] = Field(description="Every submission, by agent id then submission order")
