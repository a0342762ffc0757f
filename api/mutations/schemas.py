"""Request and response bodies of the mutation endpoints (shapes from open-mutation-api.md):
propose (one and a batch), check, status, effects, rollback, retry, revive, an operator's approval
and the mutation list; and the example traits of their documented requests."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictInt, ValidationInfo, field_validator
from pydantic.config import JsonDict

import gatekeeper
from api.paging import NextCursor
from api.params import AGENT_ID_PATTERN, TASK_ID_PATTERN, check_task_id
from genesis import rules
from genesis.dto import Lineage
from pipeline import webhooks

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


REPORT_HASH = re.compile(r"^[0-9a-f]{64}$")


def _sha256_hex(value: str | None) -> str | None:
    if value is not None and not REPORT_HASH.match(value):
        raise ValueError(
            "must be the shadow report's report_hash: 64 lowercase hex digits (GET /api/mutations/{id}/status, "
            "shadow_report.report_hash)"
        )
    return value


class ApprovalRequest(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"decision": "approve"},
                {"decision": "approve", "report_hash": "9f2c" + "0" * 60},
                {"decision": "reject", "reason": "it starves its neighbours"},
            ]
        },
    )

    decision: Literal["approve", "reject"]
    reason: str = Field(default="", max_length=2000)
    report_hash: Annotated[str | None, AfterValidator(_sha256_hex)] = Field(
        default=None,
        description="The shadow report you read (its shadow_report.report_hash): required to approve a mutation "
        "that has one (422 without it); an approval of another report is refused with 409 REPORT_MISMATCH, and "
        "the workflow takes an approval only of the report it holds",
    )


class ApprovalAccepted(BaseModel):
    mutation_id: str
    decision: Literal["approve", "reject"]
    status: str = Field(description="Its status when the decision was sent; its workflow moves it on")


class MutationListResponse(BaseModel):
    mutations: list[MutationStatusResponse]
    next_cursor: NextCursor = None
