"""Every branch of MutationWorkflow on Temporal's time-skipping server, with its activities replaced
by name: validation, sandbox, approval (shadow, decisions, expiry), activation, the observation
window and the experiment verdict, rollback, the task signal and webhooks. Signals are sent by the
fake activities at the moment the engine or an operator would, so the order is deterministic.
The real activities are tested on the stack (tests/stack/test_lifecycle.py, test_approvals.py)."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from typing import Any

import pytest
from temporalio import activity, workflow
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from activities import names
from genesis import verdicts
from genesis.dto import (
    ActivationRequest,
    ActivationResult,
    ApprovalNeed,
    ApprovalQuery,
    FailureCode,
    MutationApproval,
    MutationInput,
    MutationResult,
    MutationStatus,
    RollbackRequest,
    RollbackResult,
    SandboxReport,
    SandboxRequest,
    StatusUpdate,
    TraitRef,
    TraitShadowOutcome,
    TraitShadowRequest,
    ValidationOutcome,
    ValidationRequest,
    WebhookDelivery,
    WebhookResult,
)
from genesis.effects import WorldSample
from genesis.temporal_setup import ensure_search_attributes
from genesis.workflow_api import (
    MUTATION_APPROVAL_SIGNAL,
    MUTATION_WORKFLOW,
    SA_AGENT_ID,
    SA_FAILURE_CODE,
    SA_STATUS,
    SA_TRAIT_NAME,
    TASK_SIGNAL_MUTATION_ACTIVATED,
    task_workflow_id,
)
from tests.workflow_doubles import fail_scripted, unique_queue
from workflows.mutation import MutationWorkflow

TRAIT = "forager"
AGENT = "agt_ada"
CODE = "class Forager:\n    def on_tick(self, entity, world):\n        return None\n"
CODE_HASH = "c" * 64
SHADOW_HASH = "s" * 64
GATEKEEPER_LOG = ["Syntax: OK", "AST: OK", "Deduplication: OK"]
EXPERIMENT = verdicts.ExperimentSettings(min_replicates=3, batch=2, max_replicates=5)
SEARCH_KEYS = {"agent": SA_AGENT_ID, "trait": SA_TRAIT_NAME, "status": SA_STATUS, "failure": SA_FAILURE_CODE}


def mutation(**changes: Any) -> MutationInput:
    body: dict[str, Any] = {
        "mutation_id": f"mut{uuid.uuid4().hex[:10]}",
        "agent_id": AGENT,
        "trait_name": TRAIT,
        "code": CODE,
        "observation_window_ticks": 60,
        "observation_timeout_s": 600.0,
        **changes,
    }
    return MutationInput(**body)


def passing_sandbox() -> SandboxReport:
    return SandboxReport(verdict="ok", summary="300 ticks, 1200 calls", ticks_run=300, calls=1200)


def activated(previous_version: int | None = 1) -> ActivationResult:
    return ActivationResult(
        trait_version=2, previous_version=previous_version, registry_version=7, file_path=f"/m/trait_{TRAIT}_v2.py"
    )


def shadow_report(quarantined_at: int | None = None) -> dict[str, Any]:
    """The fields the workflow reads of activities/trait_shadow.py's report."""
    candidate_traits = {TRAIT: {"quarantined_at_tick": quarantined_at}} if quarantined_at is not None else {}
    return {
        "ticks": 240,
        "from_tick": 1000,
        "trait": {"name": TRAIT, "mutation_id": "m", "replaces_version": None},
        "baseline": {"population_end": 50},
        "candidate": {"population_end": 53, "carriers": {"start": 4, "max": 9}, "traits": candidate_traits},
        "differences": {"population_end": 3, "deaths": -2},
    }


def shadowed(quarantined_at: int | None = None) -> TraitShadowOutcome:
    return TraitShadowOutcome(report=shadow_report(quarantined_at), report_hash=SHADOW_HASH)


def sample(tick: int, population: int, energy: float = 50.0, carriers: int = 10, run_id: str = "run-a") -> WorldSample:
    return WorldSample(
        tick=tick,
        run_id=run_id,
        entity_count=population,
        avg_energy=energy,
        trait_stats={TRAIT: {"carriers": carriers}},
    )


def window(population_after: int, energy_after: float = 50.0, carriers: int = 10) -> list[tuple[str, Any]]:
    """The engine's reports over one 60-tick window (100 Molbots at its start), as signals."""
    return [
        ("world_snapshot", sample(0, 100, carriers=carriers)),
        ("world_snapshot", sample(60, population_after, energy_after, carriers=carriers)),
    ]


def approval(decision: str = "approve", by: str = "ops_eve", **changes: Any) -> MutationApproval:
    return MutationApproval(decision=decision, by=by, **changes)


def rejection(code: FailureCode, log: list[str]) -> ApplicationError:
    """How the gatekeeper refuses code (activities/mutations.py): the outcome in the details."""
    outcome = ValidationOutcome(ok=False, failure_code=code.value, validation_log=log)
    return ApplicationError(log[-1], outcome.model_dump(), type=code.value, non_retryable=True)


def replicate_outcome(index: int, fitness_change: float) -> verdicts.ReplicateOutcome:
    """A replicate whose units' fitness changed by ``fitness_change`` (the world's population not)."""
    copy = verdicts.CopyOutcome(population=20, population_mean=20.0, deaths={}, births=0)
    units = verdicts.GroupOutcome(
        count=10,
        control=verdicts.Tally(fitness=100.0, alive=10),
        treated=verdicts.Tally(fitness=100.0 * (1 + fitness_change), alive=10),
    )
    others = verdicts.GroupOutcome(count=0, control=verdicts.Tally(), treated=verdicts.Tally())
    return verdicts.ReplicateOutcome(
        index=index, seed=index, ticks=400, units=units, others=others, control=copy, treated=copy
    )


@dataclass
class Script:
    """What each replaced activity does, and what they got: calls (name, attempt), requests, records.

    ``failures``: moment -> errors raised by its first attempts, in order. ``signals``: moment ->
    signals sent to the workflow (once) while that activity runs. A moment is an activity's short
    name, or ``name:qualifier`` (record:<status>, replicate:<index>, webhook:<sequence>)."""

    validation: ValidationOutcome = field(
        default_factory=lambda: ValidationOutcome(
            ok=True, validation_log=list(GATEKEEPER_LOG), class_name="Forager", code_hash=CODE_HASH
        )
    )
    sandbox: SandboxReport = field(default_factory=passing_sandbox)
    approval: ApprovalNeed = field(default_factory=lambda: ApprovalNeed(required=False))
    shadow: TraitShadowOutcome = field(default_factory=shadowed)
    activation: ActivationResult = field(default_factory=activated)
    plan_not_run: str | None = None
    fitness_changes: list[float] = field(default_factory=list)  # the replicates' effects, by index
    rollback: RollbackResult = field(
        default_factory=lambda: RollbackResult(rolled_back=True, restored_version=1, registry_version=8)
    )
    failures: dict[str, list[Exception]] = field(default_factory=dict)
    signals: dict[str, list[tuple[str, Any]]] = field(default_factory=dict)

    calls: list[tuple[str, int]] = field(default_factory=list)
    qualified: list[tuple[str, int]] = field(default_factory=list)  # the same calls by moment
    requests: dict[str, list[Any]] = field(default_factory=dict)
    recorded: list[StatusUpdate] = field(default_factory=list)
    delivered: list[WebhookDelivery] = field(default_factory=list)
    client: Client | None = None

    def names(self, *leave_out: str) -> list[str]:
        return [name for name, _ in self.calls if name not in leave_out]

    def attempts(self, moment: str) -> list[int]:
        """The attempts made at ``moment`` (an activity's short name, or name:qualifier)."""
        return [attempt for called, attempt in [*self.calls, *self.qualified] if called == moment]

    async def step(self, name: str, request: Any, qualifier: object = None) -> None:
        """Record the call, send the signals due at this moment, raise this attempt's scripted failure."""
        attempt = activity.info().attempt
        self.calls.append((name, attempt))
        self.qualified.append((f"{name}:{qualifier}", attempt))
        self.requests.setdefault(name, []).append(request)
        for moment in (name, f"{name}:{qualifier}"):
            for signal, arg in self.signals.pop(moment, []):
                assert self.client is not None
                await self.client.get_workflow_handle(activity.info().workflow_id).signal(signal, arg)
            failures = self.failures.get(moment, [])
            fail_scripted(failures, attempt)

    def activities(self) -> dict[str, list]:
        """The fakes by where they run: the workflow's queue, its journal queue, its verdict queue."""

        @activity.defn(name=names.VALIDATE_AND_RECORD_MUTATION)
        async def validate(request: ValidationRequest) -> ValidationOutcome:
            await self.step("validate", request)
            return self.validation

        @activity.defn(name=names.RECORD_MUTATION_STATUS)
        async def record(change: StatusUpdate) -> None:
            await self.step("record", change, change.status.value)
            self.recorded.append(change)

        @activity.defn(name=names.RUN_SANDBOX_TEST)
        async def sandbox(request: SandboxRequest) -> SandboxReport:
            await self.step("sandbox", request)
            return self.sandbox

        @activity.defn(name=names.APPROVAL_NEEDED)
        async def approval_needed(query: ApprovalQuery) -> ApprovalNeed:
            await self.step("approval_needed", query)
            return self.approval

        @activity.defn(name=names.SHADOW_MUTATION)
        async def shadow(request: TraitShadowRequest) -> TraitShadowOutcome:
            await self.step("shadow", request)
            return self.shadow

        @activity.defn(name=names.ACTIVATE_TRAIT)
        async def activate(request: ActivationRequest) -> ActivationResult:
            await self.step("activate", request)
            return self.activation

        @activity.defn(name=names.ROLLBACK_TRAIT)
        async def rollback(request: RollbackRequest) -> RollbackResult:
            await self.step("rollback", request)
            return self.rollback

        @activity.defn(name=names.PLAN_VERDICT)
        async def plan(request: verdicts.PlanRequest) -> verdicts.PlanOutcome:
            await self.step("plan", request)
            if self.plan_not_run is not None:
                return verdicts.PlanOutcome(not_run=self.plan_not_run)
            pins = [verdicts.TraitPin(trait_name=TRAIT, version=request.trait_version, code_hash=CODE_HASH)]
            return verdicts.PlanOutcome(
                plan=verdicts.ExperimentPlan(
                    mutation_id=request.mutation_id,
                    trait_name=request.trait_name,
                    snapshot="snap-1",
                    epoch=1,
                    from_tick=1000,
                    control=[],
                    treated=pins,
                    settings=request.settings,
                )
            )

        @activity.defn(name=names.RUN_VERDICT_REPLICATE)
        async def replicate(request: verdicts.ReplicateRequest) -> verdicts.ReplicateOutcome:
            await self.step("replicate", request, request.index)
            return replicate_outcome(request.index, self.fitness_changes[request.index])

        @activity.defn(name=names.DELIVER_WEBHOOK)
        async def deliver(delivery: WebhookDelivery) -> WebhookResult:
            await self.step("webhook", delivery, delivery.event["sequence"])
            self.delivered.append(delivery)
            return WebhookResult(status_code=204, attempt=activity.info().attempt)

        return {
            "": [validate, record, sandbox, approval_needed, activate, rollback, deliver],
            "-journal": [shadow],
            "-verdicts": [plan, replicate],
        }


# Unsandboxed: the sandbox would re-import this test module, and what it imports.
@workflow.defn(name="TaskStandIn", sandboxed=False)
class TaskStandIn:
    """Stands in for the TaskWorkflow a mutation answers: returns the mutation that reported activation."""

    def __init__(self) -> None:
        self._activated: str | None = None

    @workflow.signal(name=TASK_SIGNAL_MUTATION_ACTIVATED)
    def mutation_activated(self, mutation_id: str) -> None:
        self._activated = mutation_id

    @workflow.run
    async def run(self) -> str:
        await workflow.wait_condition(lambda: self._activated is not None)
        assert self._activated is not None
        return self._activated


@dataclass
class Run:
    result: MutationResult | None  # None when the workflow failed
    error: WorkflowFailureError | None
    status: MutationResult | None  # the ``status`` query once it ended
    search: dict[str, str | None]  # the search attributes it set (by SEARCH_KEYS)
    task_answer: str | None = None  # what the stand-in TaskWorkflow was told, when one ran


@pytest.fixture(scope="module")
async def env(skipping_env):
    await ensure_search_attributes(skipping_env.client, "default")  # the workflow upserts them
    return skipping_env


async def run_mutation(
    env,
    script: Script,
    change: MutationInput,
    *,
    start_signal: tuple[str, Any] | None = None,
    task_running: bool = False,
) -> Run:
    """Run ``change`` on a worker of its own (three queues: the workflow's, journal, verdicts)."""
    script.client = env.client
    queue = unique_queue("mutation")
    fakes = script.activities()
    workers = [
        Worker(env.client, task_queue=queue, workflows=[MutationWorkflow, TaskStandIn], activities=fakes[""]),
        Worker(env.client, task_queue=f"{queue}-journal", activities=fakes["-journal"]),
        Worker(env.client, task_queue=f"{queue}-verdicts", activities=fakes["-verdicts"]),
    ]
    async with workers[0], workers[1], workers[2]:
        task: WorkflowHandle | None = None
        if task_running:
            assert change.task_id is not None
            task = await env.client.start_workflow(
                TaskStandIn.run, id=task_workflow_id(change.task_id), task_queue=queue
            )
        signal = {"start_signal": start_signal[0], "start_signal_args": [start_signal[1]]} if start_signal else {}
        handle = await env.client.start_workflow(
            MUTATION_WORKFLOW,
            change,
            id=f"mutation-{change.mutation_id}",
            task_queue=queue,
            result_type=MutationResult,
            **signal,
        )
        result = error = None
        try:
            result = await asyncio.wait_for(handle.result(), 30)
        except WorkflowFailureError as failed:
            error = failed
        status = await handle.query("status", result_type=MutationResult)
        attributes = (await handle.describe()).typed_search_attributes
        task_answer = await asyncio.wait_for(task.result(), 30) if task is not None else None
    search = {name: attributes.get(key) for name, key in SEARCH_KEYS.items()}
    if result is not None:
        assert status == result  # the query answers the final record
    return Run(result=result, error=error, status=status, search=search, task_answer=task_answer)


def statuses(script: Script) -> list[str]:
    return [change.status.value for change in script.recorded]


# --- validation ------------------------------------------------------------------------------


async def test_validation_passes_sandbox_passes_and_without_activation_it_ends_sandbox_ok(env):
    script = Script()
    change = mutation(activate=False)
    run = await run_mutation(env, script, change)
    assert script.names() == ["validate", "sandbox", "record"]  # no approval asked, nothing activated
    (validation,) = script.requests["validate"]
    assert validation.accepted.status == MutationStatus.validating
    assert validation.accepted.validation_log == ["Accepted: validation started"]
    assert validation.next_line.startswith(f"Sandbox: running {TRAIT}")
    (sandbox,) = script.requests["sandbox"]
    assert (sandbox.class_name, sandbox.code, sandbox.mutation_id) == ("Forager", CODE, change.mutation_id)
    result = run.result
    assert result is not None and result.status == MutationStatus.sandbox_ok and result.failure_reason_code is None
    assert result.validation_log == [*GATEKEEPER_LOG, "Sandbox: OK — 300 ticks, 1200 calls"]
    assert result.sandbox_report == passing_sandbox().model_dump()
    assert script.recorded[-1].final and script.recorded[-1].sandbox_report == result.sandbox_report
    assert run.search == {"agent": AGENT, "trait": TRAIT, "status": "sandbox_ok", "failure": None}


async def test_validation_rejection_ends_rejected_with_the_gatekeepers_code_and_log(env):
    log = ["Syntax: OK", "AST: FAILED — import of os is forbidden"]
    script = Script(failures={"validate": [rejection(FailureCode.AST_IMPORT_FORBIDDEN, log)]})
    run = await run_mutation(env, script, mutation())
    assert script.calls == [("validate", 1), ("record", 1)]  # not retried, no sandbox
    assert run.result is not None and run.result.status == MutationStatus.rejected
    assert run.result.failure_reason_code == "AST_IMPORT_FORBIDDEN" and run.result.validation_log == log
    assert script.recorded[0].final and script.recorded[0].failure_reason_code == "AST_IMPORT_FORBIDDEN"
    assert run.search["status"] == "rejected" and run.search["failure"] == "AST_IMPORT_FORBIDDEN"


@pytest.mark.parametrize(
    "error",
    [
        ApplicationError("the database is read-only", type="ReadOnlySqlTransaction", non_retryable=True),
        # a failure code without the outcome in its details is no verdict either
        ApplicationError("the database is read-only", type=FailureCode.SYNTAX_ERROR.value, non_retryable=True),
    ],
    ids=["infrastructure-error", "verdict-code-without-details"],
)
async def test_validation_that_cannot_run_records_failed_and_fails_the_workflow(env, error):
    script = Script(failures={"validate": [error]})
    run = await run_mutation(env, script, mutation())
    assert run.error is not None and run.result is None
    # a failed local activity surfaces bare (this SDK does not wrap it in an ActivityError); re-raised as is
    assert isinstance(run.error.cause, ApplicationError) and run.error.cause.type == error.type
    assert run.error.cause.message == "the database is read-only"
    assert script.names() == ["validate", "record"]
    (failed,) = script.recorded
    assert failed.status == MutationStatus.failed and failed.final and failed.failure_reason_code is None
    assert failed.validation_log == [f"Validation could not run: {error.type}: the database is read-only"]
    assert run.status is not None and run.status.status == MutationStatus.failed
    assert run.search["status"] == "failed"


async def test_validation_and_status_records_are_retried_through_a_database_outage(env):
    away = ConnectionError("the database is away")
    script = Script(failures={"validate": [away, away], "record:sandbox_ok": [away]})
    run = await run_mutation(env, script, mutation(activate=False))
    assert script.attempts("validate") == [1, 2, 3] and script.attempts("record") == [1, 2]  # LOCAL_RETRY
    assert run.result is not None and run.result.status == MutationStatus.sandbox_ok


# --- sandbox ---------------------------------------------------------------------------------


async def test_sandbox_verdict_other_than_ok_rejects_with_that_verdict_and_the_report(env):
    failing = SandboxReport(verdict="SANDBOX_EXCEPTION", summary="ZeroDivisionError in on_tick", ticks_run=12)
    script = Script(sandbox=failing)
    run = await run_mutation(env, script, mutation())
    assert script.names() == ["validate", "sandbox", "record"]  # never activated
    assert run.result is not None and run.result.status == MutationStatus.rejected
    assert run.result.failure_reason_code == "SANDBOX_EXCEPTION"
    assert run.result.validation_log[-1] == "Sandbox: FAILED — SANDBOX_EXCEPTION: ZeroDivisionError in on_tick"
    assert run.result.sandbox_report == failing.model_dump()
    assert run.search["failure"] == "SANDBOX_EXCEPTION"


async def test_sandbox_that_cannot_run_records_failed_and_fails_the_workflow_non_retryably(env):
    docker_gone = ApplicationError("docker daemon unreachable", type="DockerException", non_retryable=True)
    script = Script(failures={"sandbox": [docker_gone]})
    run = await run_mutation(env, script, mutation())
    assert run.error is not None and isinstance(run.error.cause, ApplicationError)
    assert run.error.cause.message == "sandbox test could not run: DockerException: docker daemon unreachable"
    assert run.error.cause.non_retryable
    assert script.names() == ["validate", "sandbox", "record"]
    (failed,) = script.recorded
    assert failed.status == MutationStatus.failed and failed.final
    assert (
        failed.validation_log[-1]
        == "Sandbox: could not run (infrastructure): DockerException: docker daemon unreachable"
    )


async def test_sandbox_infrastructure_hiccup_is_retried_then_the_verdict_counts(env):
    script = Script(failures={"sandbox": [RuntimeError("container died")]})
    run = await run_mutation(env, script, mutation(activate=False))
    assert script.attempts("sandbox") == [1, 2]  # SANDBOX_RETRY
    assert run.result is not None and run.result.status == MutationStatus.sandbox_ok


# --- approval --------------------------------------------------------------------------------


async def test_approval_not_required_goes_straight_to_activation_without_a_shadow(env):
    script = Script(signals={"activate": window(population_after=110)})
    run = await run_mutation(env, script, mutation())
    assert script.names() == ["validate", "sandbox", "record", "approval_needed", "activate", "record", "record"]
    assert statuses(script) == ["sandbox_ok", "activated", "kept"]
    assert run.result is not None and run.result.shadow_report is None
    assert not any(line.startswith(("Shadow", "Approval")) for line in run.result.validation_log)


async def test_approval_of_the_shown_shadow_report_lets_it_go_live(env):
    decision = approval(report_hash=SHADOW_HASH)
    script = Script(
        approval=ApprovalNeed(required=True, reason="one of the agent's first 1 traits", ttl_sec=3600),
        shadow=shadowed(quarantined_at=1100),
        signals={"record:awaiting_approval": [(MUTATION_APPROVAL_SIGNAL, decision)]},
    )
    change = mutation(activate=True)
    run = await run_mutation(env, script, change)
    assert script.names("record") == ["validate", "sandbox", "approval_needed", "shadow", "activate"]
    assert statuses(script)[:3] == ["sandbox_ok", "sandbox_ok", "awaiting_approval"]  # the shadow's line first
    (shadow_request,) = script.requests["shadow"]
    assert (shadow_request.code_hash, shadow_request.class_name) == (CODE_HASH, "Forager")
    shadow_line = (
        "Shadow: 240 ticks from tick 1000 — population 53 with it, 50 without (+3), deaths -2; "
        "4 Molbots carried it at the start, 9 at most; the engine would quarantine it at tick 1100"
    )
    assert script.recorded[1].validation_log[-1].startswith("Shadow: running forager beside the live traits")
    waiting = script.recorded[2]
    assert waiting.shadow_report == {**shadow_report(1100), "report_hash": SHADOW_HASH}
    assert waiting.validation_log[-2:] == [
        shadow_line,
        "Approval: waiting for an operator (one of the agent's first 1 traits); it expires in 3600 s",
    ]
    result = run.result
    assert result is not None and result.status == MutationStatus.kept
    assert "Approval: approved by ops_eve" in result.validation_log
    assert result.shadow_report == waiting.shadow_report  # carried to the final record


async def test_approval_of_another_report_is_ignored_until_one_of_the_shown_report_comes(env):
    script = Script(
        approval=ApprovalNeed(required=True, reason="it replaces a live trait", ttl_sec=3600),
        signals={
            "record:awaiting_approval": [
                (MUTATION_APPROVAL_SIGNAL, approval(by="ops_stale", report_hash="x" * 64)),
                (MUTATION_APPROVAL_SIGNAL, approval(by="ops_unnamed")),  # names no report: not this one
                (MUTATION_APPROVAL_SIGNAL, approval(by="ops_eve", report_hash=SHADOW_HASH)),
            ]
        },
    )
    run = await run_mutation(env, script, mutation())
    assert run.result is not None and run.result.status == MutationStatus.kept
    assert "Approval: approved by ops_eve" in run.result.validation_log


async def test_approval_rejection_counts_whatever_report_it_names_and_ends_rejected(env):
    script = Script(
        approval=ApprovalNeed(required=True, reason="r", ttl_sec=3600),
        signals={"record:awaiting_approval": [(MUTATION_APPROVAL_SIGNAL, approval("reject", report_hash="x" * 64))]},
    )
    run = await run_mutation(env, script, mutation())
    assert "activate" not in script.names()
    assert run.result is not None and run.result.status == MutationStatus.rejected
    assert run.result.failure_reason_code == FailureCode.APPROVAL_REJECTED.value
    assert run.result.validation_log[-1] == "Approval: rejected by ops_eve: no reason given"
    assert run.result.sandbox_report == passing_sandbox().model_dump()
    assert run.search["failure"] == "APPROVAL_REJECTED"


async def test_approval_rejection_with_a_reason_logs_it(env):
    decision = approval("reject", by="ops_bob", reason="too greedy")
    script = Script(
        approval=ApprovalNeed(required=True, reason="r", ttl_sec=3600),
        signals={"record:awaiting_approval": [(MUTATION_APPROVAL_SIGNAL, decision)]},
    )
    run = await run_mutation(env, script, mutation())
    assert run.result is not None and run.result.validation_log[-1] == "Approval: rejected by ops_bob: too greedy"


async def test_approval_nobody_decides_expires_on_its_durable_timer(env):
    script = Script(approval=ApprovalNeed(required=True, reason="r", ttl_sec=86_400))
    run = await run_mutation(env, script, mutation())  # a day of waiting, skipped
    assert "activate" not in script.names()
    assert statuses(script)[-2:] == ["awaiting_approval", "rejected"]
    assert run.result is not None and run.result.failure_reason_code == FailureCode.APPROVAL_EXPIRED.value
    assert run.result.validation_log[-1] == "Approval: expired, no operator decided within 86400 s"


async def test_approval_sent_before_the_approval_stage_is_not_counted(env):
    """One sent while the shadow still runs (the status not yet awaiting_approval), naming the report
    to come: the stage counts only decisions sent at it, so nobody decided."""
    early = approval(report_hash=SHADOW_HASH)
    script = Script(
        approval=ApprovalNeed(required=True, reason="r", ttl_sec=3600),
        signals={"shadow": [(MUTATION_APPROVAL_SIGNAL, early)]},
    )
    run = await run_mutation(env, script, mutation())
    assert "activate" not in script.names()
    assert run.result is not None and run.result.failure_reason_code == FailureCode.APPROVAL_EXPIRED.value


async def test_shadow_not_run_leaves_the_decision_to_the_sandbox_report_and_any_approval_counts(env):
    script = Script(
        approval=ApprovalNeed(required=True, reason="r", ttl_sec=3600),
        shadow=TraitShadowOutcome(not_run="no snapshot to fork from"),
        signals={"record:awaiting_approval": [(MUTATION_APPROVAL_SIGNAL, approval())]},  # names no report
    )
    run = await run_mutation(env, script, mutation())
    assert run.result is not None and run.result.status == MutationStatus.kept
    assert run.result.shadow_report is None
    assert "Shadow: not run (no snapshot to fork from); decide on the sandbox report" in run.result.validation_log


async def test_shadow_that_keeps_failing_is_given_up_after_three_attempts_and_approval_still_counts(env):
    host_died = RuntimeError("the trait host died")
    script = Script(
        approval=ApprovalNeed(required=True, reason="r", ttl_sec=3600),
        failures={"shadow": [host_died] * 3},
        signals={"record:awaiting_approval": [(MUTATION_APPROVAL_SIGNAL, approval())]},
    )
    run = await run_mutation(env, script, mutation())
    assert script.attempts("shadow") == [1, 2, 3]  # SHADOW_RETRY
    assert run.result is not None and run.result.status == MutationStatus.kept and run.result.shadow_report is None
    assert "Shadow: could not run (RuntimeError: the trait host died); decide on the sandbox report" in (
        run.result.validation_log
    )


# --- activation and the observation window ----------------------------------------------------


@pytest.mark.parametrize(
    ("replaces", "require_new", "expected"),
    [
        (TraitRef(trait_name=TRAIT, version=3), False, (True, 3)),  # must find v3 live
        (TraitRef(trait_name=TRAIT), False, (False, None)),  # replaces whatever is live
        (None, True, (True, None)),  # none may be live
        (None, False, (False, None)),  # the permissive policy
    ],
    ids=["replaces-version", "replaces-any", "require-new", "permissive"],
)
async def test_activation_is_asked_for_the_live_version_the_proposal_expects(env, replaces, require_new, expected):
    script = Script(signals={"activate": window(population_after=110)})
    change = mutation(replaces=replaces, require_new=require_new, replacement_approved_by="ops_eve")
    run = await run_mutation(env, script, change)
    (query,) = script.requests["approval_needed"]
    assert query.replaces_live is (replaces is not None)
    (request,) = script.requests["activate"]
    assert (request.check_live_version, request.expected_live_version) == expected
    assert (request.code_hash, request.proposer_agent_id, request.replacement_approved_by) == (
        CODE_HASH,
        AGENT,
        "ops_eve",
    )
    assert run.result is not None and run.result.status == MutationStatus.kept


async def test_activation_conflict_rejects_with_its_code_and_never_observes(env):
    conflict = ActivationResult(
        trait_version=None,
        previous_version=None,
        registry_version=None,
        file_path=None,
        conflict="Activation: v4 of forager is live now, by agt_bob",
        conflict_code=FailureCode.NOT_TRAIT_OWNER.value,
        live_version=4,
    )
    script = Script(activation=conflict)
    run = await run_mutation(env, script, mutation())
    assert script.names() == ["validate", "sandbox", "record", "approval_needed", "activate", "record"]
    assert run.result is not None and run.result.status == MutationStatus.rejected
    assert run.result.failure_reason_code == "NOT_TRAIT_OWNER"
    assert run.result.validation_log[-1] == conflict.conflict and run.result.trait_version is None


async def test_window_with_positive_fitness_keeps_the_trait_with_its_effects(env):
    script = Script(signals={"activate": window(population_after=110)})
    run = await run_mutation(env, script, mutation())
    activated_record = script.recorded[1]
    assert activated_record.status == MutationStatus.activated and activated_record.trait_version == 2
    assert activated_record.validation_log[-2:] == [
        "Activation: trait_forager_v2.py is live (registry v7, replacing v1)",
        "Observation: watching 60 world ticks",
    ]
    result = run.result
    assert result is not None and result.status == MutationStatus.kept and result.fitness_verdict == "positive"
    assert result.trait_version == 2
    assert result.effects is not None and result.effects["entity_count_delta"] == 10
    assert result.effects["carriers_needed"] == 5 and "is at or above" in result.effects["verdict_reason"]
    assert result.validation_log[-1] == (
        "Observation: 60 ticks — population +10, avg energy +0.0, starvation deaths +0, "
        "fitness +0.050 → positive (10 carriers)"
    )
    assert "rollback" not in script.names()


async def test_window_with_too_few_carriers_keeps_it_inconclusive(env):
    script = Script(
        activation=activated(previous_version=None),
        signals={"activate": window(population_after=60, carriers=1)},  # a decline, but not its doing
    )
    run = await run_mutation(env, script, mutation())
    result = run.result
    assert result is not None and result.status == MutationStatus.kept and result.fitness_verdict == "inconclusive"
    assert result.validation_log[-1].endswith(": only 1 Molbot(s) carried it, a verdict needs 5; kept")
    assert "Activation: trait_forager_v2.py is live (registry v7)" in result.validation_log  # nothing replaced
    assert "rollback" not in script.names()


@pytest.mark.parametrize(
    ("population_after", "energy_after", "reason"),
    [(70, 50.0, "population_decline"), (100, 10.0, "negative_fitness")],
)
async def test_window_with_negative_fitness_rolls_back_with_its_reason(env, population_after, energy_after, reason):
    script = Script(signals={"activate": window(population_after, energy_after)})
    run = await run_mutation(env, script, mutation())
    assert script.names("record")[-1] == "rollback"
    assert statuses(script)[-3:] == ["activated", "activated", "rolled_back"]  # the verdict recorded first
    assert script.recorded[-2].fitness_verdict == "negative" and script.recorded[-2].effects is not None
    (request,) = script.requests["rollback"]
    assert request.reason == reason and request.fitness_delta == script.recorded[-2].effects["fitness_delta"]
    result = run.result
    assert result is not None and result.status == MutationStatus.rolled_back and result.fitness_verdict == "negative"
    assert result.validation_log[-1] == f"Rollback: {reason}; v1 restored"
    assert script.recorded[-1].rollback_reason == reason


async def test_window_restarts_when_the_engine_restarts(env):
    """Ticks restart from 0 with a new engine run: the window is measured from the new run's first report."""
    reports = [
        ("world_snapshot", sample(500, 400, run_id="run-a")),
        ("world_snapshot", sample(0, 100, run_id="run-b")),
        ("world_snapshot", sample(60, 110, run_id="run-b")),
    ]
    script = Script(signals={"activate": reports})
    run = await run_mutation(env, script, mutation())
    assert run.result is not None and run.result.status == MutationStatus.kept
    assert run.result.effects is not None and run.result.effects["entity_count_delta"] == 10  # not 110 - 400
    assert run.result.effects["window_ticks"] == 60


async def test_window_never_completed_keeps_it_without_a_verdict_after_the_timeout(env):
    script = Script(signals={"activate": [("world_snapshot", sample(0, 100))]})  # one report, then silence
    run = await run_mutation(env, script, mutation(observation_timeout_s=900.0))
    result = run.result
    assert result is not None and result.status == MutationStatus.kept
    assert result.fitness_verdict is None and result.effects is None
    assert result.validation_log[-1] == (
        "Observation: the engine reported no complete 60-tick window within 900s "
        "(is `python -m engine` running?); kept without a verdict"
    )


async def test_rollback_signal_during_the_window_rolls_back_without_effects(env):
    script = Script(
        rollback=RollbackResult(rolled_back=True, restored_version=None, registry_version=8),
        signals={"activate": [("rollback", "")]},  # no reason given: "requested"
    )
    run = await run_mutation(env, script, mutation())
    (request,) = script.requests["rollback"]
    assert request.reason == "requested" and request.fitness_delta is None
    result = run.result
    assert result is not None and result.status == MutationStatus.rolled_back and result.effects is None
    assert result.validation_log[-1] == "Rollback: requested"  # no version to restore
    assert run.search["status"] == "rolled_back"


async def test_rollback_requested_before_activation_never_activates_and_keeps_the_first_reason(env):
    script = Script(signals={"sandbox": [("rollback", "a second thought")]})
    run = await run_mutation(env, script, mutation(), start_signal=("rollback", "operator withdrew it"))
    assert "activate" not in script.names() and "rollback" not in script.names()
    result = run.result
    assert result is not None and result.status == MutationStatus.rolled_back
    assert result.validation_log[-1] == "Rollback: requested before activation (operator withdrew it); never activated"
    assert script.recorded[-1].rollback_reason == "operator withdrew it"


async def test_task_the_mutation_answers_is_told_it_went_live(env):
    change = mutation(task_id=f"tsk{uuid.uuid4().hex[:8]}")
    script = Script(signals={"activate": window(population_after=110)})
    run = await run_mutation(env, script, change, task_running=True)
    assert run.task_answer == change.mutation_id
    assert run.result is not None and run.result.status == MutationStatus.kept


async def test_task_that_has_ended_is_not_signalled_and_the_mutation_goes_on(env):
    script = Script(signals={"activate": window(population_after=110)})
    run = await run_mutation(env, script, mutation(task_id="tsk_gone"))  # no such TaskWorkflow
    assert run.result is not None and run.result.status == MutationStatus.kept


# --- the experiment verdict --------------------------------------------------------------------


async def test_experiment_positive_after_the_first_batch_keeps_it_with_the_report(env):
    script = Script(fitness_changes=[0.2, 0.21, 0.19])
    run = await run_mutation(env, script, mutation(experiment=EXPERIMENT))
    assert script.names("record") == ["validate", "sandbox", "approval_needed", "activate", "plan"] + ["replicate"] * 3
    (plan,) = script.requests["plan"]
    assert (plan.trait_version, plan.previous_version, plan.settings) == (2, 1, EXPERIMENT)
    assert sorted(request.index for request in script.requests["replicate"]) == [0, 1, 2]
    activated = next(u for u in script.recorded if u.status == MutationStatus.activated)
    assert activated.validation_log[-1].startswith("Verdict: an experiment in forks of the live world")
    result = run.result
    assert result is not None and result.status == MutationStatus.kept and result.fitness_verdict == "positive"
    report = result.verdict_report
    assert report is not None and report["verdict"] == "positive" and report["replicates"] == 3
    assert result.validation_log[-1].startswith("Verdict: positive — its carriers' fitness changed by +20.0%")
    assert result.validation_log[-1].endswith("(3 replicates, 2,400 ticks)")
    assert result.effects is None  # the engine reported no window by then


async def test_experiment_undecided_runs_further_batches_until_the_budget_and_keeps_it_inconclusive(env):
    script = Script(fitness_changes=[0.3, -0.3, 0.3, -0.3, 0.3])
    run = await run_mutation(env, script, mutation(experiment=EXPERIMENT))
    assert sorted(request.index for request in script.requests["replicate"]) == [0, 1, 2, 3, 4]  # 3, then 2
    assert statuses(script) == ["sandbox_ok", "activated", "activated", "activated", "kept"]  # a line per batch
    assert script.recorded[2].validation_log[-1].startswith("Verdict: 3 replicates — ")
    result = run.result
    assert result is not None and result.fitness_verdict == "inconclusive" and result.status == MutationStatus.kept
    assert result.verdict_report is not None and result.verdict_report["replicates"] == 5


async def test_experiment_decided_by_a_second_batch_stops_there(env):
    script = Script(fitness_changes=[0.2, 0.2, 0.5, 0.2, 0.2])
    run = await run_mutation(env, script, mutation(experiment=EXPERIMENT.model_copy(update={"max_replicates": 9})))
    assert len(script.requests["replicate"]) == 5
    assert run.result is not None and run.result.fitness_verdict == "positive"


async def test_experiment_negative_rolls_back_with_the_verdict_as_reason(env):
    script = Script(fitness_changes=[-0.2, -0.21, -0.19])
    run = await run_mutation(env, script, mutation(experiment=EXPERIMENT))
    (request,) = script.requests["rollback"]
    assert request.reason.startswith("negative verdict: its carriers' fitness changed by -20.0%")
    assert request.fitness_delta is None
    assert script.recorded[-2].fitness_verdict == "negative" and script.recorded[-2].verdict_report is not None
    result = run.result
    assert result is not None and result.status == MutationStatus.rolled_back
    assert result.fitness_verdict == "negative" and result.verdict_report == script.recorded[-2].verdict_report


async def test_experiment_with_selection_off_records_the_verdict_without_acting_on_it(env):
    script = Script(fitness_changes=[-0.2, -0.21, -0.19])
    run = await run_mutation(env, script, mutation(experiment=EXPERIMENT, selection=False))
    assert "rollback" not in script.names()
    result = run.result
    assert result is not None and result.status == MutationStatus.kept and result.fitness_verdict is None
    assert result.verdict_report is not None and result.verdict_report["verdict"] == "negative"
    assert result.validation_log[-1].startswith("Verdict, not acted on (selection is off): negative — ")


async def test_experiment_that_cannot_be_planned_keeps_it_inconclusive_without_replicates(env):
    script = Script(plan_not_run="no journal to fork from")
    run = await run_mutation(env, script, mutation(experiment=EXPERIMENT))
    assert "replicate" not in script.names()
    result = run.result
    assert result is not None and result.status == MutationStatus.kept and result.fitness_verdict == "inconclusive"
    assert result.verdict_report is None
    assert result.validation_log[-1] == (
        "Verdict: inconclusive — no experiment could run: no journal to fork from (0 replicates, 0 ticks)"
    )


async def test_experiment_replicate_that_keeps_failing_in_the_first_batch_keeps_it_inconclusive(env):
    host_died = RuntimeError("the trait host died")
    script = Script(fitness_changes=[0.2, 0.21, 0.19], failures={"replicate:1": [host_died] * 3})
    run = await run_mutation(env, script, mutation(experiment=EXPERIMENT))
    assert script.attempts("replicate:1") == [1, 2, 3]  # REPLICATE_RETRY
    assert script.attempts("replicate:0") == script.attempts("replicate:2") == [1]
    result = run.result
    assert result is not None and result.status == MutationStatus.kept and result.fitness_verdict == "inconclusive"
    assert result.verdict_report is None  # no batch completed
    assert result.validation_log[-1] == (
        "Verdict: inconclusive — the experiment could not run: RuntimeError: the trait host died "
        "(0 replicates, 0 ticks)"
    )


async def test_experiment_failing_part_way_reports_the_completed_replicates_as_inconclusive(env):
    refused = ApplicationError("snapshot vanished", type="ReplayError", non_retryable=True)
    script = Script(fitness_changes=[0.3, -0.3, 0.3, 0.2, 0.2], failures={"replicate:3": [refused]})
    run = await run_mutation(env, script, mutation(experiment=EXPERIMENT))
    result = run.result
    assert result is not None and result.fitness_verdict == "inconclusive" and result.status == MutationStatus.kept
    line = result.validation_log[-1]
    assert line.startswith("Verdict: inconclusive — the experiment could not run: ReplayError: snapshot vanished")
    assert line.endswith("(3 replicates, 2,400 ticks)")
    report = result.verdict_report
    assert report is not None and report["replicates"] == 3  # the first batch's: the failed batch is lost
    # The report of the replicates that ran says why the experiment stopped, and is hashed with it.
    assert report["verdict"] == "inconclusive" and report["reason"].startswith("the experiment could not run")
    assert report["report_hash"] == verdicts.report_hash(report)


async def test_experiment_reports_the_world_window_when_the_engine_reported_it(env):
    script = Script(fitness_changes=[0.2, 0.21, 0.19], signals={"activate": window(population_after=70)})
    run = await run_mutation(env, script, mutation(experiment=EXPERIMENT))
    result = run.result
    assert result is not None and result.status == MutationStatus.kept  # the window's decline does not decide
    assert result.effects is not None and result.effects["entity_count_delta"] == -30
    assert result.effects["verdict_reason"].startswith("its carriers' fitness changed by +20.0%")


async def test_experiment_stopped_by_a_rollback_signal_rolls_back_without_a_verdict(env):
    script = Script(
        fitness_changes=[0.3, -0.3, 0.3, -0.3, 0.3],  # undecided: another batch would follow
        signals={"replicate:0": [("rollback", "operator pulled it")]},
    )
    run = await run_mutation(env, script, mutation(experiment=EXPERIMENT))
    assert len(script.requests["replicate"]) == 3  # no batch after the signal
    (request,) = script.requests["rollback"]
    assert request.reason == "operator pulled it" and request.fitness_delta is None
    result = run.result
    assert result is not None and result.status == MutationStatus.rolled_back and result.fitness_verdict is None
    assert result.verdict_report is None


# --- webhooks -----------------------------------------------------------------------------------


async def test_webhooks_report_each_status_change_once_in_order(env):
    script = Script(signals={"activate": window(population_after=110)})
    change = mutation(notify_url="https://hooks.example/genesis", task_id="tsk_gone")
    run = await run_mutation(env, script, change)
    assert run.result is not None and run.result.status == MutationStatus.kept
    events = [delivery.event for delivery in script.delivered]
    assert [(e["previous_status"], e["status"]) for e in events] == [
        ("queued", "validating"),
        ("validating", "sandbox_ok"),
        ("sandbox_ok", "activated"),
        ("activated", "kept"),
    ]
    assert [e["sequence"] for e in events] == [1, 2, 3, 4]
    assert [d.delivery_id for d in script.delivered] == [f"{change.mutation_id}.{n}" for n in (1, 2, 3, 4)]
    assert events[0]["message"] == "Accepted: validation started" and events[0]["task_id"] == "tsk_gone"
    assert events[2]["trait_version"] == 2 and "fitness_verdict" not in events[2]
    assert events[3]["fitness_verdict"] == "positive" and "is at or above" in events[3]["verdict_reason"]
    assert all(d.notify_url == change.notify_url and d.agent_id == AGENT for d in script.delivered)


async def test_webhooks_of_a_retried_mutation_carry_the_run_in_their_delivery_id(env):
    script = Script(failures={"validate": [rejection(FailureCode.SYNTAX_ERROR, ["Syntax: FAILED — line 1"])]})
    change = mutation(notify_url="https://hooks.example/genesis", retried=True)
    run = await run_mutation(env, script, change)
    assert run.result is not None and run.result.status == MutationStatus.rejected
    assert [d.event["status"] for d in script.delivered] == ["validating", "rejected"]
    assert script.delivered[1].event["failure_reason_code"] == "SYNTAX_ERROR"
    prefix, run_part, sequence = script.delivered[0].delivery_id.split(".")
    assert (prefix, len(run_part), sequence) == (change.mutation_id, 8, "1")


async def test_webhook_refused_is_dropped_and_the_next_ones_are_still_delivered(env):
    refused = ApplicationError("410 Gone", type="WEBHOOK_REFUSED", non_retryable=True)
    script = Script(
        failures={"webhook:1": [refused], "webhook:2": [ConnectionError("receiver restarting")]},
        signals={"activate": [("rollback", "operator pulled it")]},
    )
    run = await run_mutation(env, script, mutation(notify_url="https://hooks.example/genesis"))
    assert run.result is not None and run.result.status == MutationStatus.rolled_back  # not held up by its webhooks
    assert script.attempts("webhook") == [1, 1, 2, 1, 1]  # the refusal once; the hiccup retried
    assert [d.event["status"] for d in script.delivered] == ["sandbox_ok", "activated", "rolled_back"]
    assert script.delivered[-1].event["rollback_reason"] == "operator pulled it"


async def test_webhooks_whose_retry_window_has_closed_are_dropped_unsent(env):
    script = Script()
    run = await run_mutation(env, script, mutation(activate=False, notify_url="https://x", webhook_retry_window_s=1))
    assert run.result is not None and run.result.status == MutationStatus.sandbox_ok
    assert "webhook" not in script.names() and script.delivered == []


async def test_no_webhook_without_a_notify_url(env):
    script = Script(signals={"activate": window(population_after=110)})
    run = await run_mutation(env, script, mutation())
    assert run.result is not None and run.result.status == MutationStatus.kept
    assert "webhook" not in script.names()
