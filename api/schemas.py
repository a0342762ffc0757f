"""Request and response bodies of the REST API (shapes from open-mutation-api.md)."""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictInt, ValidationInfo, field_validator
from pydantic.config import JsonDict

import gatekeeper
from api.paging import NextCursor
from genesis import rules
from genesis.dto import Lineage, TaskSeverity
from pipeline import webhooks

AGENT_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,127}$")
TASK_ID_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def check_task_id(value: str | None) -> str | None:
    """The task_id rule shared by proposals and task publication."""
    if value is not None and not TASK_ID_PATTERN.match(value):
        raise ValueError("task_id must be 1-64 characters: letters, digits, _ and -")
    return value


def _is_unicode(text: str) -> bool:
    """Whether ``text`` can be encoded as UTF-8 (JSON's \\ud800 escapes decode to lone surrogates)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


MAX_TRAIT_VERSION = 2**31 - 1

# The traits of the request examples in /openapi.json (and so in /docs and /redoc). They pass the
# gatekeeper: tests/unit/test_openapi_examples.py validates every example of every request body.
EXAMPLE_TRAIT_CODE = """class BaseTrait:
    pass


class HungryForagerTrait(BaseTrait):
    async def execute(self, entity) -> None:
        food = entity.nearest_resource()
        if food is not None and entity.energy < 0.6 * entity.max_energy:
            entity.move(food[0], food[1])
            entity.eat()
"""
EXAMPLE_PROPOSAL: JsonDict = {
    "trait_name": "hungry_forager",
    "goal": "Walk to the nearest food when energy runs low",
    "code": EXAMPLE_TRAIT_CODE,
}
EXAMPLE_SECOND_TRAIT_CODE = """class BaseTrait:
    pass


class RestWhenLowTrait(BaseTrait):
    async def execute(self, entity) -> None:
        if entity.energy < 0.3 * entity.max_energy:
            entity.energy_consumption_rate = 0.6
            entity.speed = 0.5
"""


def trait_name_problem(value: str) -> str | None:
    """Why ``value`` is not a valid trait name (snake_case, as the gatekeeper's schema step says)."""
    problems = [p for p in gatekeeper.schema_problems(value, "pass") if "trait_name" in p]
    return problems[0] if problems else None


def _valid_trait_name(value: str) -> str:
    problem = trait_name_problem(value)
    if problem:
        raise ValueError(problem)
    return value


# A trait_name field: snake_case, checked by the gatekeeper's own rule.
TraitName = Annotated[str, AfterValidator(_valid_trait_name)]


class ReplacesRef(BaseModel):
    """``replaces`` of a proposal: the live trait it modifies."""

    model_config = ConfigDict(extra="forbid")

    trait_name: TraitName = Field(
        description="The live trait this proposal modifies; must equal the proposal's trait_name"
    )
    version: StrictInt | None = Field(
        default=None,
        ge=1,
        le=MAX_TRAIT_VERSION,
        description="Optional optimistic-concurrency check: the version you read as live (GET /api/traits/{name}). "
        "If another version is live at propose time the answer is 409 VERSION_CONFLICT; if it changes before "
        "activation the mutation ends rejected with VERSION_CONFLICT. Left out: replace whatever is live then, "
        "if your agent made it (or an operator approved the proposal): else rejected with NOT_TRAIT_OWNER",
    )


class TraitSubmission(BaseModel):
    """The fields that say which trait and code a request is about: a proposal's, and a check's
    (which judges the code as a proposal would, recording nothing)."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=False)

    agent_id: str | None = Field(
        default=None,
        description="Who proposes (logs, limits); 1-128 of letters, digits, _ . : @ -. With an X-API-Key it "
        "may be left out (it is the key's agent) and must equal the key's agent if given; without a key "
        "(GENESIS_AUTH=open only) it is required",
        json_schema_extra={"pattern": AGENT_ID_PATTERN.pattern},
    )
    trait_name: TraitName = Field(
        description="snake_case; becomes part of mutations/trait_{name}_v{N}.py",
        json_schema_extra={"pattern": rules.TRAIT_NAME_PATTERN},
    )
    code: str = Field(
        description="Python source of the trait (UTF-8, at most 32 KB)", json_schema_extra={"minLength": 1}
    )
    replaces: ReplacesRef | None = Field(
        default=None,
        description='Modify a live trait: {"trait_name": <this proposal\'s trait_name>, "version": N (optional)}. '
        "Required when trait_name is already live (else 409 TRAIT_EXISTS); 409 TRAIT_NOT_LIVE if it is not live",
    )

    @field_validator("replaces")
    @classmethod
    def _replaces_same_trait(cls, value: ReplacesRef | None, info: ValidationInfo) -> ReplacesRef | None:
        trait_name = info.data.get("trait_name")  # absent when trait_name itself is invalid
        if value is not None and trait_name is not None and value.trait_name != trait_name:
            raise ValueError(
                f"replaces.trait_name ('{value.trait_name}') must equal trait_name ('{trait_name}'): "
                "a modification is a new version of the same trait (renaming a trait is not supported)"
            )
        return value

    @field_validator("agent_id")
    @classmethod
    def _agent_id(cls, value: str | None) -> str | None:
        if value is not None and not AGENT_ID_PATTERN.match(value):
            raise ValueError(
                "agent_id must be 1-128 characters: letters, digits and _ . : @ -, starting with a letter or digit"
            )
        return value

    @field_validator("code")
    @classmethod
    def _code(cls, value: str) -> str:
        problems = [p for p in gatekeeper.schema_problems("trait", value) if "trait_name" not in p]
        if problems:
            raise ValueError(problems[0])
        return value


class ProposeRequest(TraitSubmission):
    model_config = ConfigDict(json_schema_extra={"examples": [EXAMPLE_PROPOSAL]})

    task_id: str | None = Field(
        default=None,
        description="Optional task from /api/agents/context/tasks",
        json_schema_extra={"pattern": TASK_ID_PATTERN.pattern},
    )
    goal: str = Field(default="", max_length=2000, description="What the trait is for (shown in the Evolution Feed)")
    notify_url: str | None = Field(
        default=None,
        max_length=webhooks.MAX_URL_LENGTH,
        description="Optional http(s) URL that gets a signed POST (Standard Webhooks, HMAC-SHA256) on each "
        "status change of this mutation; its host must resolve to global addresses (loopback, private, link-local, "
        "reserved and non-canonical forms of them are refused) unless the operator allows it",
    )

    @field_validator("notify_url")
    @classmethod
    def _notify_url(cls, value: str | None) -> str | None:
        problem = webhooks.url_problem(value) if value is not None else None
        if problem:  # where the URL leads (resolved, private hosts) is the route's check
            raise ValueError(problem)
        return value

    @field_validator("task_id")
    @classmethod
    def _task_id(cls, value: str | None) -> str | None:
        return check_task_id(value)

    @field_validator("goal")
    @classmethod
    def _goal(cls, value: str) -> str:
        if "\0" in value:  # Postgres text cannot hold NUL: refuse it here, not with a 500 on insert
            raise ValueError("goal must not contain NUL characters")
        return value


class ProposeResponse(BaseModel):
    mutation_id: str
    status: str
    message: str
    status_url: str
    workflow_id: str


class CheckRequest(TraitSubmission):
    """``POST /api/mutations/check``: the code and trait of a proposal you may make. ``goal``,
    ``task_id`` and ``notify_url`` are a proposal's only: a check records, claims and notifies
    nothing, so they are refused as unknown fields."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"trait_name": "hungry_forager", "code": EXAMPLE_TRAIT_CODE}]}
    )


class CheckResponse(BaseModel):
    """A check's verdict, in the fields a proposal's status shows for the same code."""

    verdict: Literal["passed", "rejected"] = Field(
        description="passed: a proposal of this code would pass validation and its sandbox test now (it would "
        "reach sandbox_ok); rejected: it would end rejected with failure_reason_code"
    )
    trait_name: str
    failure_reason_code: str | None = Field(description="As a rejected proposal's (AST_*, DUPLICATE_CODE, SANDBOX_*)")
    validation_log: list[str] = Field(description="The lines a proposal's validation_log would end with")
    sandbox_report: dict[str, Any] | None = Field(
        description="The sandbox test's report, as in a proposal's status; null when validation rejected the code"
    )
    code_hash: str | None = Field(
        description="SHA-256 of the code's syntax tree (what dedupe compares); null when the code does not parse"
    )
    workflow_id: str = Field(description="The check's own Temporal workflow (check-chk_…); no mutation's")


class TraitVersionRef(BaseModel):
    trait_name: str
    version: int | None


FITNESS_VERDICT = (
    "positive | neutral | negative | inconclusive (the experiment's budget ran out before its interval was "
    "decisive, or too few Molbots carried the trait during its window to judge it: kept); null: not observed "
    "(yet), or kept without a verdict"
)
VERDICT_REASON = "Why the fitness verdict is what it is (null: no verdict yet)"


class QuarantineInfo(BaseModel):
    """The engine quarantined this version: it kept failing in the live trait host and is no longer
    run. Its mutation is then rolled back with ``rollback_reason`` ``quarantined: <reason>``."""

    reason: str = Field(description="Why the engine stopped running it")
    quarantined_at: float = Field(description="When (unix seconds)")


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
    shadow_report: dict[str, Any] | None = Field(
        default=None,
        description="A mutation held for approval: its trait run beside the live traits in a world forked from the "
        "latest snapshot, against the same world without it (population, energy, births, deaths, each trait's "
        "calls, errors and quarantine, the trait's carriers; see docs/governance.md). Null when none was run",
    )
    trait_version: int | None
    verdict_report: dict[str, Any] | None = Field(
        default=None,
        description="The experiment that decided the fitness verdict: the trait's effects (carriers' fitness, "
        "survival, energy, offspring; the world's population and starvation) with 95 % intervals, the replicates "
        "and ticks it took, its plan (snapshot, trait versions) and report_hash (see docs/evolution.md). Null "
        "before a verdict, or when the window decided it",
    )
    fitness_verdict: str | None = Field(default=None, description=FITNESS_VERDICT)
    verdict_reason: str | None = Field(default=None, description=VERDICT_REASON)
    rollback_reason: str | None
    notify_url: str | None = Field(
        default=None,
        description="Where its status changes are POSTed: shown only with its agent's X-API-Key or an operator's "
        "X-Operator-Key (webhook URLs often carry a token); null for anyone else",
    )
    replaces: TraitVersionRef | None = Field(
        default=None, description="The live trait this proposal modifies (version null: whatever was live)"
    )
    replaced_version: int | None = Field(
        default=None, description="After activation: the version it actually replaced (null: none was live)"
    )
    restored_version: int | None = Field(
        default=None, description="After a rollback: the version of the trait that was live again (null: none)"
    )
    replacement_approved_by: str | None = Field(
        default=None,
        description="Who allowed it to replace a version another agent made: an operator whose "
        "X-Operator-Key came with the proposal, or the built-in evolution (null: it "
        "replaces only its own agent's versions, checked again at activation)",
    )
    quarantine: QuarantineInfo | None = Field(
        default=None,
        description="Set once the engine quarantined its trait (status becomes rolled_back, "
        "rollback_reason 'quarantined: ...', within seconds); null otherwise",
    )
    lineage: Lineage | None = Field(
        default=None,
        description="Where its code came from: the versions live when it was proposed that it was made "
        "from, the operators applied, the seed, the origin (null: recorded before lineage existed)",
    )


class EffectsResponse(BaseModel):
    mutation_id: str
    trait_name: str
    status: str
    observation_window_ticks: int
    observed: bool
    effects: dict[str, Any] | None
    verdict_report: dict[str, Any] | None = Field(
        default=None, description="The experiment that decided the fitness verdict (see MutationStatus)"
    )
    fitness_verdict: str | None = Field(default=None, description=FITNESS_VERDICT)
    verdict_reason: str | None = Field(default=None, description=VERDICT_REASON)
    replaces: TraitVersionRef | None = None
    trait_version: int | None = Field(default=None, description="The version it became on activation")
    replaced_version: int | None = None
    restored_version: int | None = None


class RollbackBody(BaseModel):
    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"reason": "more starvation deaths since it went live"}]}
    )

    reason: str = Field(default="manual", min_length=1, max_length=200, description="Why (shown in the feed and log)")

    @field_validator("reason")
    @classmethod
    def _reason(cls, value: str) -> str:
        if "\0" in value:  # it is stored in Postgres (rollback_reason, validation_log), which cannot hold NUL
            raise ValueError("reason must not contain NUL characters")
        return value


class RollbackResponse(BaseModel):
    mutation_id: str
    status: Literal["rollback_requested", "rolled_back"] = Field(
        description="rollback_requested (202: follow status_url until the mutation is rolled_back), or "
        "rolled_back (200: it was already)"
    )
    previous_status: str = Field(description="The mutation's status when the rollback was asked for")
    message: str
    status_url: str


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


class ErrorResponse(BaseModel):
    error: str
    detail: str
    errors: list[dict[str, Any]] | None = None


class RateLimitResponse(BaseModel):
    """429 of open-mutation-api.md; the Retry-After header carries the same number."""

    error: str = Field(examples=["RATE_LIMIT_EXCEEDED"])
    detail: str = Field(examples=["Too many active mutations for agent_id 'claude-external-1' (limit: 5)"])
    retry_after_sec: int


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


class BatchProposeItem(ProposeRequest):
    """One proposal of a batch: the fields of POST /api/mutations/propose, and its own
    Idempotency-Key (the header of a single proposal)."""

    idempotency_key: str | None = Field(
        default=None, min_length=1, max_length=128, description="Retry-safe: same agent and key, same mutation"
    )


class BatchProposeRequest(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "proposals": [
                        {**EXAMPLE_PROPOSAL, "idempotency_key": "hungry-forager-1"},
                        {
                            "trait_name": "rest_when_low",
                            "goal": "Burn less energy when running low",
                            "code": EXAMPLE_SECOND_TRAIT_CODE,
                            "idempotency_key": "rest-when-low-1",
                        },
                    ]
                }
            ]
        },
    )

    proposals: list[Any] = Field(
        min_length=1,
        description="1..GENESIS_BATCH_MAX_ITEMS (default 10) proposals, each with the fields of POST "
        "/api/mutations/propose plus an optional idempotency_key. Each is validated, authorised and rate "
        "limited on its own, in order: an invalid item does not spoil the others.",
    )


class BatchItemResult(BaseModel):
    """What POST /api/mutations/propose would have answered for this item alone."""

    index: int
    status_code: int = Field(
        description="202 accepted, or the error status of a single proposal (403, 409, 422, 429, 503)"
    )
    mutation_id: str | None = None
    status: str | None = None
    message: str | None = None
    status_url: str | None = None
    workflow_id: str | None = None
    error: str | None = None
    detail: str | None = None
    errors: list[dict[str, Any]] | None = None
    retry_after_sec: int | None = None
    live_version: int | None = Field(default=None, description="With 409 TRAIT_EXISTS / VERSION_CONFLICT")


class BatchProposeResponse(BaseModel):
    accepted: int
    refused: int
    results: list[BatchItemResult]


class WebhookSecretResponse(BaseModel):
    agent_id: str
    webhook_secret: str = Field(description="whsec_<base64 key>: verify webhook-signature with it")
    scheme: str
    signed_content: str
    headers: list[str]


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
    cycle_workflow_id: str | None = None  # the EvolutionCycleWorkflow started for it (issue 5)


class HistoryPoint(BaseModel):
    """One WorldSnapshot of ``GET /api/world/history``."""

    tick: int
    timestamp: float = Field(description="The engine's wall clock at the snapshot (unix seconds)")
    entity_count: int
    avg_energy: float
    trait_usage: dict[str, int] = Field(
        description="Molbots carrying each trait (a Molbot counts for each of its traits)"
    )


class HistoryResponse(BaseModel):
    run_id: str = Field(description="The engine run the points belong to (ticks start again at each run)")
    points: list[HistoryPoint] = Field(description="Oldest first")
    truncated: bool = Field(
        description="More snapshots lie in the range than `limit`: the oldest were left out "
        "(ask again with `to_tick` below the first point for them)"
    )
