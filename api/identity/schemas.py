"""Request and response bodies of the agents' identity: registration, invitations, the calling
agent (its reputation and rate limits), its member and its webhook secret."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator


class RegisterRequest(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [{"name": "my-first-agent", "description": "Proposes foraging traits from my laptop"}]
        },
    )

    name: str = Field(min_length=1, max_length=64, description="Display name of the agent")
    description: str = Field(default="", max_length=2000, description="What the agent is, who runs it")
    invitation: str | None = Field(
        default=None,
        pattern=r"^inv_[0-9a-f]{32}$",
        description="An operator's single-use invitation (`genesis agents invite`): required when the server "
        "registers by invitation (GENESIS_REGISTRATION=invitation); checked, and used up, whenever given",
    )

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not value.strip() or not value.isprintable():
            raise ValueError("name must be printable text, not only whitespace")
        return value

    @field_validator("description")
    @classmethod
    def _description(cls, value: str) -> str:
        if "\0" in value:
            raise ValueError("description must not contain NUL characters")
        return value


class RegisterResponse(BaseModel):
    agent_id: str
    api_key: str = Field(description="Send it as X-API-Key. Shown once: only a hash of it is stored")
    key_prefix: str = Field(description="The public part of the key (to tell keys apart in logs)")
    name: str
    description: str
    registered_at: str = Field(description="ISO 8601, UTC")
    member_id: int | None = Field(
        default=None,
        description="The member (a Molbot of the world) the agent acts through in rounds: null until its first "
        "action, which takes one from the pool",
    )
    message: str


class InvitationRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"note": "for Ann's lab"}]})

    note: str = Field(default="", max_length=200, description="Who it is for (kept with it, not shown to the invitee)")
    ttl_sec: int = Field(default=7 * 86_400, ge=60, le=30 * 86_400, description="It expires unused after this")


class InvitationResponse(BaseModel):
    invitation: str = Field(description="The code to register with (shown once; only its hash is kept)")
    expires_at: str = Field(description="ISO 8601, UTC")


class MemberReleased(BaseModel):
    agent_id: str
    released: int | None = Field(description="The member given back (null: the agent had none)")
    member_id: None = Field(default=None, description="The agent gets a member again at its next action")


class Reputation(BaseModel):
    """Counted from the agent's mutations."""

    proposed: int = Field(description="every accepted proposal")
    active: int = Field(description="not yet in a terminal state (queued … activated)")
    activated: int = Field(description="went live in the world at some point")
    kept: int = Field(description="judged and kept")
    rolled_back: int = Field(description="taken out of the world again")
    rejected: int = Field(description="refused by the gatekeeper, dedupe or the sandbox")
    failed: int = Field(description="could not be processed for an infrastructure reason")


class RateLimitUsage(BaseModel):
    active_mutations: int
    active_limit: int
    proposals_this_hour: int
    hourly_limit: int
    hour_resets_in_sec: int
    per_ip_minute_limit: int


class AgentResponse(BaseModel):
    agent_id: str
    name: str
    description: str
    key_prefix: str
    registered_at: str
    member_id: int | None = Field(
        description="The member the agent acts through (null: it gets one at its first action)"
    )
    reputation: Reputation
    rate_limits: RateLimitUsage


class WebhookSecretResponse(BaseModel):
    agent_id: str
    webhook_secret: str = Field(description="whsec_<base64 key>: verify webhook-signature with it")
    scheme: str
    signed_content: str
    headers: list[str]
