"""Data shared by the API, workflows and activities (serialised by Temporal's pydantic converter).

Plain pydantic models only: workflows import this module inside Temporal's sandbox."""

from __future__ import annotations

from enum import Enum
from typing import Any, Literal

from pydantic import BaseModel, Field

from genesis.verdicts import ExperimentSettings


class MutationStatus(str, Enum):
    queued = "queued"
    validating = "validating"
    sandbox_ok = "sandbox_ok"
    # The manifest's approval rules say an operator must approve it before it goes live.
    awaiting_approval = "awaiting_approval"
    rejected = "rejected"
    activated = "activated"
    kept = "kept"
    rolled_back = "rolled_back"
    # Kept, then out of the live set by selection: no Molbot carried it for the manifest's
    # extinction_ticks, or a full live set made room; its owner may revive it (back to kept).
    extinct = "extinct"
    # The workflow failed for an infrastructure reason (not a verdict on the code).
    failed = "failed"


def terminal_statuses(activate: bool = True) -> frozenset[MutationStatus]:
    """States in which a mutation's workflow has ended (it no longer counts as active).
    ``sandbox_ok`` is one only when activation is switched off."""
    ended = {
        MutationStatus.rejected,
        MutationStatus.kept,
        MutationStatus.rolled_back,
        MutationStatus.failed,
        MutationStatus.extinct,
    }
    return frozenset(ended if activate else ended | {MutationStatus.sandbox_ok})


class FailureCode(str, Enum):
    SYNTAX_ERROR = "SYNTAX_ERROR"
    AST_IMPORT_FORBIDDEN = "AST_IMPORT_FORBIDDEN"
    AST_BANNED_CALL = "AST_BANNED_CALL"
    AST_BANNED_ATTR = "AST_BANNED_ATTR"
    AST_NO_TRAIT_CLASS = "AST_NO_TRAIT_CLASS"
    AST_ENTITY_ATTR_FORBIDDEN = "AST_ENTITY_ATTR_FORBIDDEN"
    AST_INIT_REQUIRED_ARGS = "AST_INIT_REQUIRED_ARGS"
    AST_UNBOUND_VARIABLE = "AST_UNBOUND_VARIABLE"
    AST_AWAIT_ON_SYNC = "AST_AWAIT_ON_SYNC"
    DUPLICATE_CODE = "DUPLICATE_CODE"
    SANDBOX_TIMEOUT = "SANDBOX_TIMEOUT"
    SANDBOX_EXCEPTION = "SANDBOX_EXCEPTION"
    SANDBOX_FPS_DROP = "SANDBOX_FPS_DROP"
    # Beyond the seed: the trait's memory grew at a rate that would exhaust its process's limit.
    SANDBOX_MEMORY = "SANDBOX_MEMORY"
    # Beyond the seed: every intent the trait sent in its test was refused (a value of the wrong
    # type, an attribute it may not write): it would do nothing live either.
    SANDBOX_INTENTS_REFUSED = "SANDBOX_INTENTS_REFUSED"
    RATE_LIMIT_EXCEEDED = "RATE_LIMIT_EXCEEDED"
    # Step 2 failing inside the workflow (only when a workflow is started without the API).
    SCHEMA_INVALID = "SCHEMA_INVALID"
    # At activation the trait's live version was not the one the proposal was based on (its
    # ``replaces.version``, or "none live" for a new trait): another mutation went live meanwhile.
    VERSION_CONFLICT = "VERSION_CONFLICT"
    # At activation the trait's live version was made by another agent (it went live after the
    # proposal was checked) and no operator approved replacing it.
    NOT_TRAIT_OWNER = "NOT_TRAIT_OWNER"
    # The live set holds the manifest's max_live_traits and none of them could make room.
    LIVE_SET_FULL = "LIVE_SET_FULL"
    # It waited for an operator's approval (the manifest's approval rules) and was rejected, or
    # nobody decided before the manifest's approvals.ttl_sec.
    APPROVAL_REJECTED = "APPROVAL_REJECTED"
    APPROVAL_EXPIRED = "APPROVAL_EXPIRED"


class TraitRef(BaseModel):
    """The live trait version a proposal modifies (``replaces``). ``version`` None: whatever
    version is live when the mutation is activated; a number: an optimistic-concurrency check."""

    trait_name: str
    version: int | None = None


class MutationInput(BaseModel):
    """What a MutationWorkflow is started with."""

    mutation_id: str
    agent_id: str
    trait_name: str
    code: str
    goal: str = ""
    task_id: str | None = None
    # Life after the sandbox (set by the API from Settings; workflows read no configuration).
    activate: bool = True
    observation_window_ticks: int = 300
    observation_timeout_s: float = 900.0
    rollback_threshold: float = -0.10
    # A trait's verdict needs this many carriers during the window, and this share of the
    # population (genesis.effects.trait_verdict); with fewer it is inconclusive.
    min_carriers: int = 5
    min_carrier_share: float = 0.02
    # The verdict as an experiment beside the live world (genesis/verdicts.py); None: the
    # world's change over the window decides, as above.
    experiment: ExperimentSettings | None = None
    # False: selection is off (GENESIS_VERDICT_MODE=off): an activated trait is kept at once,
    # unjudged (the evolution bench's arm that measures what selection adds).
    selection: bool = True
    # Webhooks: each status change is POSTed (signed) to notify_url, retried with backoff for up
    # to webhook_retry_window_s after the change (pipeline/webhooks.py).
    notify_url: str | None = None
    webhook_retry_window_s: float = 3600.0
    webhook_max_retry_interval_s: float = 60.0
    # Modifying a live trait: the version it replaces (checked again at activation). Without it,
    # ``require_new`` (GENESIS_TRAIT_EXISTS_POLICY=reject) makes activation refuse to overwrite a
    # version that went live meanwhile; both default to the old, unchecked behaviour.
    replaces: TraitRef | None = None
    require_new: bool = False
    # Who allowed replacing a version another agent made (mutations.replacement_approved_by);
    # without it activation replaces only a live version the proposer made itself.
    replacement_approved_by: str | None = None
    # A re-run after an infrastructure failure (POST /api/mutations/{id}/retry): its webhook ids
    # carry the run, so receivers that deduplicate on webhook-id do not drop the new run's changes.
    retried: bool = False


class ValidationOutcome(BaseModel):
    """Result of steps 2-11 (gatekeeper + dedupe)."""

    ok: bool
    failure_code: str | None = None
    validation_log: list[str] = Field(default_factory=list)
    class_name: str | None = None
    code_hash: str | None = None


class SandboxRequest(BaseModel):
    mutation_id: str  # whose test it is (a check's id for a check): names its containers
    trait_name: str
    class_name: str
    code: str


class SandboxReport(BaseModel):
    """What the sandbox test observed. ``verdict`` is "ok" or a SANDBOX_* failure code."""

    verdict: str
    summary: str
    ticks_run: int
    calls: int = 0
    call_us_mean: float = 0.0
    call_us_max: float = 0.0
    timeouts: int = 0
    exceptions: int = 0
    first_error: str | None = None
    baseline_tick_ms: float = 0.0
    trait_tick_ms: float = 0.0
    roundtrip_ms: float = 0.0
    projected_fps: float = 0.0
    intents_applied: int = 0
    intents_rejected: dict[str, int] = Field(default_factory=dict)
    state_hash: str | None = None
    # Memory blocks the trait's process gained per tick between the test's 10th and last tick.
    memory_blocks_per_tick: float = 0.0
    # What a passing test still says a client must not miss: intents refused, or none sent at all.
    warnings: list[str] = Field(default_factory=list)
    image: str | None = None
    container_id: str | None = None

    @property
    def passed(self) -> bool:
        return self.verdict == "ok"

    def log_line(self) -> str:
        """The validation log's line for this verdict (a mutation's and a check's alike)."""
        if self.passed:
            warned = "".join(f"; WARNING: {w}" for w in self.warnings)
            return f"Sandbox: OK — {self.summary}{warned}"
        return f"Sandbox: FAILED — {self.verdict}: {self.summary}"


class SandboxProfile(BaseModel):
    """How a trait behaved in its sandbox test, per call: the live engine compares its live
    behaviour with it (a trait that departs from it sharply becomes a suspect)."""

    call_us_mean: float
    errors_per_call: float
    intents_per_call: float

    @classmethod
    def of(cls, report: dict[str, Any] | None) -> SandboxProfile | None:
        """From a mutation's recorded sandbox report (None: no test ran, nothing to compare)."""
        if not report or not report.get("calls"):
            return None
        calls = float(report["calls"])
        intents = report.get("intents_applied", 0) + sum((report.get("intents_rejected") or {}).values())
        return cls(
            call_us_mean=float(report.get("call_us_mean", 0.0)),
            errors_per_call=(report.get("exceptions", 0) + report.get("timeouts", 0)) / calls,
            intents_per_call=intents / calls,
        )


class TraitShadowRequest(BaseModel):
    """A held mutation's shadow: its trait beside the live ones in a world forked from the live one."""

    mutation_id: str
    agent_id: str
    trait_name: str
    class_name: str
    code: str
    code_hash: str = ""


class TraitShadowOutcome(BaseModel):
    """The shadow's report and its hash, or why no shadow could be run (``not_run``)."""

    report: dict[str, Any] | None = None
    report_hash: str | None = None
    not_run: str | None = None


class TraitCheck(BaseModel):
    """What a CheckWorkflow is started with: code to judge as a proposal would be, recording
    nothing. ``timeout_s``: the sandbox test's time limit (set by the API from Settings)."""

    check_id: str
    agent_id: str
    trait_name: str
    code: str
    timeout_s: float = 60.0


class CheckResult(BaseModel):
    """A check's verdict, with the fields a proposal's status would show for the same code."""

    verdict: Literal["passed", "rejected"]
    failure_reason_code: str | None = None
    validation_log: list[str] = Field(default_factory=list)
    sandbox_report: dict[str, Any] | None = None
    code_hash: str | None = None


class StatusUpdate(BaseModel):
    """One persisted transition of the mutation record."""

    mutation_id: str
    status: MutationStatus
    failure_reason_code: str | None = None
    validation_log: list[str] | None = None
    class_name: str | None = None
    code_hash: str | None = None
    sandbox_report: dict[str, Any] | None = None
    shadow_report: dict[str, Any] | None = None
    trait_version: int | None = None
    effects: dict[str, Any] | None = None
    fitness_verdict: str | None = None
    verdict_report: dict[str, Any] | None = None
    rollback_reason: str | None = None
    # The workflow's last transition: the mutation stops counting as active (rate limits).
    final: bool = False
    # Selection after the verdict: why it went extinct, or who revived it (kept again). Its
    # receipt's reason; the record keeps it in its validation log.
    fate_reason: str | None = None


class ValidationRequest(BaseModel):
    """validate_and_record_mutation: record ``accepted``, validate ``mutation``, and if it passes
    record status validating with the validation log followed by ``next_line``."""

    mutation: MutationInput
    accepted: StatusUpdate
    next_line: str


class ActivationRequest(BaseModel):
    mutation_id: str
    trait_name: str
    class_name: str
    code: str
    code_hash: str
    # Optimistic concurrency, checked inside the activation's transaction: when
    # ``check_live_version`` the live version must be ``expected_live_version`` (None: no version
    # may be live), else nothing is activated and the result carries the conflict.
    check_live_version: bool = False
    expected_live_version: int | None = None
    # Ownership, checked in the same transaction: a live version made by another agent than
    # ``proposer_agent_id`` is replaced only with ``replacement_approved_by``. None (requests
    # recorded before the check existed): not checked.
    proposer_agent_id: str | None = None
    replacement_approved_by: str | None = None


class ActivationResult(BaseModel):
    trait_version: int | None  # None only with a conflict
    previous_version: int | None
    registry_version: int | None
    file_path: str | None
    conflict: str | None = None  # why nothing was activated (the validation_log line)
    conflict_code: str = FailureCode.VERSION_CONFLICT.value  # or NOT_TRAIT_OWNER, LIVE_SET_FULL
    live_version: int | None = None  # the live version found, with a conflict


class RollbackRequest(BaseModel):
    mutation_id: str
    trait_name: str
    reason: str
    fitness_delta: float | None = None
    # A RollbackWorkflow (of a kept mutation) tells the proposal's notify_url, if any.
    agent_id: str | None = None
    notify_url: str | None = None
    webhook_retry_window_s: float = 3600.0
    webhook_max_retry_interval_s: float = 60.0


class FateRequest(BaseModel):
    """A kept trait leaves the live set by selection (ExtinctionWorkflow), or an extinct one comes
    back (RevivalWorkflow)."""

    mutation_id: str
    trait_name: str
    reason: str  # in plain words: the validation log's line and the receipt's


class FateResult(BaseModel):
    changed: bool  # False: it already was (idempotent), or ``conflict`` says why not
    log: list[str] = Field(default_factory=list)  # the mutation's validation log before this change
    conflict: str | None = None
    conflict_code: str | None = None
    registry_version: int | None = None


class RollbackResult(BaseModel):
    rolled_back: bool  # False when it already was (idempotent)
    restored_version: int | None
    registry_version: int | None


class MutationResult(BaseModel):
    """What a MutationWorkflow returns (and its ``status`` query answers)."""

    mutation_id: str
    status: MutationStatus
    failure_reason_code: str | None = None
    validation_log: list[str] = Field(default_factory=list)
    sandbox_report: dict[str, Any] | None = None
    trait_version: int | None = None
    effects: dict[str, Any] | None = None
    fitness_verdict: str | None = None
    shadow_report: dict[str, Any] | None = None
    verdict_report: dict[str, Any] | None = None  # the experiment that decided the verdict


class WebhookDelivery(BaseModel):
    """One status change to POST to a notify_url. ``delivery_id`` is the same on every retry
    (the ``webhook-id`` header); ``event`` is the JSON body."""

    delivery_id: str
    mutation_id: str
    agent_id: str
    notify_url: str
    event: dict[str, Any]
    deadline: float  # unix seconds after which the delivery is given up (not retried further)


class WebhookResult(BaseModel):
    status_code: int
    attempt: int


class TaskSeverity(str, Enum):
    """Severity of a task for external agents; it sets the task's time to live
    (open-mutation-api.md: critical 15 min, high 10, low / periodic_improvement 5)."""

    critical = "critical"
    high = "high"
    low = "low"
    periodic_improvement = "periodic_improvement"


class AgentTask(BaseModel):
    """A task for external agents: the body stored at ``agent:task:{task_id}`` (seed shape) and
    the input of its TaskWorkflow. ``expires_at`` is unix seconds; the workflow's timer ends the
    task then."""

    task_id: str
    expires_at: float
    source: str = "watcher"
    problem_type: str
    severity: TaskSeverity
    description: str
    suggested_area: str = "traits"
    world_context: dict[str, Any] = Field(default_factory=dict)
    constraints: list[str] = Field(default_factory=list)


class TaskEndReason(str, Enum):
    expired = "expired"  # its TTL ran out (TaskExpired)
    mutation_activated = "mutation_activated"  # a mutation proposed for it went live
    resolved = "resolved"  # the Watcher (or an operator) saw the problem go away


class TaskClose(BaseModel):
    """How a task ended; the close activity removes it from Redis and announces it."""

    task_id: str
    reason: TaskEndReason
    mutation_id: str | None = None
    detail: str | None = None


class TaskResult(BaseModel):
    """What a TaskWorkflow returns."""

    task_id: str
    reason: TaskEndReason
    published: bool
    mutation_id: str | None = None
    detail: str | None = None


# -- Evolution cycles: EvolutionCycleWorkflow and its activities ---------------------


class CycleKind(str, Enum):
    anomaly = "anomaly"  # the Watcher (or POST /api/evolution/trigger) found one
    periodic_improvement = "periodic_improvement"  # a Temporal Schedule's run


class EvolutionCycleInput(BaseModel):
    """What an EvolutionCycleWorkflow is started with. ``trigger_id`` None: taken from the
    workflow id (``evolution-<trigger_id>``; a Schedule appends its run time to the id)."""

    trigger_id: str | None = None
    kind: CycleKind = CycleKind.anomaly
    schedule_id: str | None = None


class CycleContext(BaseModel):
    """Step A (seed 3.3): what the Architect is told, plus the settings the workflow needs."""

    trigger_id: str
    workflow_id: str
    kind: CycleKind
    problem_type: str
    severity: str
    suggested_area: str = "traits"
    task_id: str | None = None
    report: dict[str, Any] = Field(default_factory=dict)  # world numbers of the latest snapshot
    active_traits: list[str] = Field(default_factory=list)
    world_params: dict[str, float] = Field(default_factory=dict)  # adjustable ones, values in force
    observation_window_ticks: int = 300
    observation_timeout_s: float = 900.0
    rollback_threshold: float = -0.10
    llm_attempts: int = 3  # tries per LLM step while the LLM is unreachable
    llm_task_queue: str | None = None  # where the LLM activities run (None: the workflow's own queue)


class EvolutionPlan(BaseModel):
    """The Architect's answer, checked (evolution/prompts.py)."""

    action_type: str  # new_trait | modify_trait | adjust_params
    description: str
    trait_name: str | None = None
    target_behavior: str = ""
    params: dict[str, float] | None = None  # adjust_params: new values


class CoderRequest(BaseModel):
    trigger_id: str
    plan: EvolutionPlan
    attempt: int = 1  # 2: the retry, with the validator's feedback
    rejected_code: str | None = None
    feedback: str | None = None


class ParentVersion(BaseModel):
    """A trait version a new one descends from: the version that was live when it was proposed."""

    trait_name: str
    version: int
    mutation_id: str


class Lineage(BaseModel):
    """Where a proposal's code came from (``mutations.lineage``): the live versions it was made
    from, the operators applied to them in order (the built-in operator's ``perturb``, ``insert``,
    ``recombine``, and ``seed`` for a start from a seed trait of the library, named in
    ``seed_trait``), the operator's random seed, and its origin: ``builtin``, the LLM provider's
    name, or ``agent``. No parents: a new trait."""

    origin: str
    parents: list[ParentVersion] = Field(default_factory=list)
    operators: list[str] = Field(default_factory=list)
    seed: int | None = None
    seed_trait: str | None = None


class CoderResult(BaseModel):
    """The Coder's code and the gatekeeper's pre-validation of it."""

    code: str
    ok: bool
    failure_code: str | None = None
    error: str | None = None  # the validator's verdict, fed back on the retry
    class_name: str | None = None
    live_version: int | None = None  # modify_trait: the version the code was based on
    lineage: Lineage | None = None  # None: a result recorded before lineage existed


class ProposalRequest(BaseModel):
    """The Coder's code becomes a mutation proposal of agent ``genesis-coder``."""

    trigger_id: str
    mutation_id: str
    plan: EvolutionPlan
    code: str
    task_id: str | None = None
    replaces_version: int | None = None
    lineage: Lineage | None = None  # recorded on the mutation (None: unknown)


class CycleUpdate(BaseModel):
    """One write of the ``evolution_cycles`` row (None fields are left as they are)."""

    trigger_id: str
    workflow_id: str | None = None
    kind: str | None = None
    stage: str
    status: str = "running"
    problem_type: str | None = None
    severity: str | None = None
    action_type: str | None = None
    plan: dict[str, Any] | None = None
    code: str | None = None
    attempts: int | None = None
    mutation_id: str | None = None
    mutation_status: str | None = None
    params_change: dict[str, Any] | None = None
    error: str | None = None


class FeedPost(BaseModel):
    """A message for the Evolution Feed (evolution/feed.py)."""

    agent: str
    action: str
    message: str
    trigger_id: str | None = None
    mutation_id: str | None = None
    workflow_id: str | None = None
    extra: dict[str, Any] = Field(default_factory=dict)


class ParamsApply(BaseModel):
    trigger_id: str
    workflow_id: str
    params: dict[str, float]


class ParamsRevert(BaseModel):
    trigger_id: str
    workflow_id: str
    previous_overrides: dict[str, float]
    reason: str


class ReplayVerifyRequest(BaseModel):
    """ReplayVerifyWorkflow: replay the world's journal over ticks ``from_tick``..``to_tick``."""

    from_tick: int = Field(ge=0)
    to_tick: int = Field(ge=0)


class ReplayVerifyReport(BaseModel):
    """What ``python -m engine.core.verify`` found (docs/journal.md#replay-and-verification)."""

    equal: bool
    from_tick: int
    to_tick: int
    epoch: int
    snapshot: str
    snapshot_tick: int
    head_seq: int
    head_tick: int
    records_replayed: int
    ticks_checked: int
    first_tick_checked: int | None = None
    last_tick_checked: int | None = None
    ignored_records: int = 0
    divergence: dict[str, Any] | None = None
    elapsed_sec: float
    replay_ticks_per_second: float


class AuditManifestRequest(BaseModel):
    """AuditManifestWorkflow: sign an audit export's manifest (the API holds no private key)."""

    manifest: dict[str, Any]


class GovernanceRequest(BaseModel):
    """GovernanceWorkflow: take proposal ``proposal_id`` through shadow, approval and apply."""

    proposal_id: str
    ttl_sec: int = Field(ge=1, description="How long it waits for an operator's decision before it expires")


class GovernanceDecision(BaseModel):
    """The ``decide`` signal: an operator's approval (bound to the shadow report's hash) or rejection."""

    decision: Literal["approve", "reject"]
    by: str
    report_hash: str | None = None
    reason: str = ""


class GovernanceOutcome(BaseModel):
    proposal_id: str
    status: str
    report_hash: str | None = None
    applied_version: int | None = None
    detail: str = ""


class ApprovalQuery(BaseModel):
    """Whether a mutation that passed its sandbox test must wait for an operator's approval."""

    mutation_id: str
    agent_id: str
    trait_name: str
    replaces_live: bool = False


class ApprovalNeed(BaseModel):
    required: bool
    reason: str = ""
    ttl_sec: int = 86_400


class MutationApproval(BaseModel):
    """The ``approval`` signal of a MutationWorkflow awaiting approval: an operator's decision,
    naming the shadow report an approval approves (None: it had none)."""

    decision: Literal["approve", "reject"]
    by: str
    reason: str = ""
    report_hash: str | None = None
