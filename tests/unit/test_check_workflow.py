"""Every branch of CheckWorkflow on Temporal's time-skipping server, with the gatekeeper and the
sandbox test replaced by name: what runs, in which order, and the verdict it answers. The real
activities are tested on the stack in tests/stack/test_check.py."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import pytest
from temporalio import activity
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ActivityError, ApplicationError, RetryState
from temporalio.worker import Worker

from activities import names
from genesis.dto import CheckResult, SandboxReport, SandboxRequest, TraitCheck, ValidationOutcome
from genesis.workflow_api import CHECK_WORKFLOW
from tests.workflow_doubles import fail_scripted, record_call, unique_queue
from workflows.check import CheckWorkflow

CODE_HASH = "h" * 64
GATEKEEPER_LOG = ["AST: OK", "Deduplication: OK"]


def check(timeout_s: float = 60.0) -> TraitCheck:
    return TraitCheck(
        check_id=f"chk{uuid.uuid4().hex[:8]}",
        agent_id="agt_1",
        trait_name="Forager",
        code="class Forager: ...",
        timeout_s=timeout_s,
    )


def passing_gatekeeper(class_name: str | None = "Forager") -> ValidationOutcome:
    return ValidationOutcome(ok=True, validation_log=list(GATEKEEPER_LOG), class_name=class_name, code_hash=CODE_HASH)


@dataclass
class Script:
    """What each replaced activity does, and the calls they got (name, attempt)."""

    outcome: ValidationOutcome = field(default_factory=passing_gatekeeper)
    report: SandboxReport = field(
        default_factory=lambda: SandboxReport(verdict="ok", summary="120 ticks", ticks_run=120)
    )
    gatekeeper: list[Exception] = field(default_factory=list)  # raised by the first attempts, in order
    sandbox: list[Exception] = field(default_factory=list)
    sandbox_always: Exception | None = None  # raised by every attempt
    calls: list[tuple[str, int]] = field(default_factory=list)
    sandbox_requests: list[SandboxRequest] = field(default_factory=list)

    def activities(self) -> list:
        @activity.defn(name=names.CHECK_TRAIT_CODE)
        async def check_trait_code(check: TraitCheck) -> ValidationOutcome:
            record_call(self.calls, "gatekeeper", self.gatekeeper)
            return self.outcome

        @activity.defn(name=names.RUN_SANDBOX_TEST)
        async def run_sandbox_test(request: SandboxRequest) -> SandboxReport:
            attempt = activity.info().attempt
            self.calls.append(("sandbox", attempt))
            self.sandbox_requests.append(request)
            if self.sandbox_always is not None:
                raise self.sandbox_always
            fail_scripted(self.sandbox, attempt)
            return self.report

        return [check_trait_code, run_sandbox_test]


async def run_check(env, script: Script, trait_check: TraitCheck) -> CheckResult:
    queue = unique_queue("check")
    async with Worker(env.client, task_queue=queue, workflows=[CheckWorkflow], activities=script.activities()):
        return await env.client.execute_workflow(
            CHECK_WORKFLOW, trait_check, id=f"check-{trait_check.check_id}", task_queue=queue, result_type=CheckResult
        )


async def test_code_that_passes_both_steps_is_passed_with_the_sandbox_report(skipping_env):
    script = Script(report=SandboxReport(verdict="ok", summary="120 ticks", ticks_run=120, warnings=["no intents"]))
    trait_check = check()
    result = await run_check(skipping_env, script, trait_check)
    assert script.calls == [("gatekeeper", 1), ("sandbox", 1)]
    assert result.verdict == "passed" and result.failure_reason_code is None and result.code_hash == CODE_HASH
    assert result.validation_log == [*GATEKEEPER_LOG, "Sandbox: OK — 120 ticks; WARNING: no intents"]
    assert result.sandbox_report is not None and result.sandbox_report["ticks_run"] == 120
    # the sandbox's containers are named after the check
    assert script.sandbox_requests == [
        SandboxRequest(
            mutation_id=trait_check.check_id, trait_name="Forager", class_name="Forager", code=trait_check.code
        )
    ]


async def test_a_gatekeeper_rejection_answers_at_once_without_a_sandbox_test(skipping_env):
    outcome = ValidationOutcome(
        ok=False, failure_code="AST_IMPORT_FORBIDDEN", validation_log=["AST: import os"], code_hash=CODE_HASH
    )
    script = Script(outcome=outcome)
    result = await run_check(skipping_env, script, check())
    assert script.calls == [("gatekeeper", 1)]
    assert result.verdict == "rejected" and result.failure_reason_code == "AST_IMPORT_FORBIDDEN"
    assert result.validation_log == ["AST: import os"] and result.sandbox_report is None
    assert result.code_hash == CODE_HASH


async def test_a_failed_sandbox_test_is_a_rejection_with_its_verdict_code(skipping_env):
    report = SandboxReport(verdict="SANDBOX_TIMEOUT", summary="3 calls over 50 ms", ticks_run=12, timeouts=3)
    script = Script(report=report)
    result = await run_check(skipping_env, script, check())
    assert script.calls == [("gatekeeper", 1), ("sandbox", 1)]
    assert result.verdict == "rejected" and result.failure_reason_code == "SANDBOX_TIMEOUT"
    assert result.validation_log[-1] == "Sandbox: FAILED — SANDBOX_TIMEOUT: 3 calls over 50 ms"
    assert result.sandbox_report is not None and result.sandbox_report["timeouts"] == 3


async def test_an_outcome_without_a_class_name_sends_an_empty_one_to_the_sandbox(skipping_env):
    script = Script(outcome=passing_gatekeeper(class_name=None))
    result = await run_check(skipping_env, script, check())
    assert result.verdict == "passed"
    assert script.sandbox_requests[0].class_name == ""


async def test_infrastructure_errors_of_both_steps_are_retried_then_the_check_answers(skipping_env):
    script = Script(gatekeeper=[ConnectionError("the database is away")], sandbox=[RuntimeError("docker hiccup")] * 2)
    result = await run_check(skipping_env, script, check())
    assert script.calls == [("gatekeeper", 1), ("gatekeeper", 2), ("sandbox", 1), ("sandbox", 2), ("sandbox", 3)]
    assert result.verdict == "passed"


async def test_a_sandbox_that_cannot_run_within_the_time_limit_fails_the_check(skipping_env):
    """Docker down for the whole check: retried until the time limit, then no verdict (API: 503)."""
    script = Script(sandbox_always=RuntimeError("docker is down"))
    with pytest.raises(WorkflowFailureError) as failure:
        await run_check(skipping_env, script, check(timeout_s=3))
    error = failure.value.cause
    assert isinstance(error, ApplicationError) and error.non_retryable
    assert error.message == "the sandbox test could not run"
    assert isinstance(error.cause, ActivityError) and error.cause.retry_state == RetryState.TIMEOUT
    assert [name for name, _ in script.calls].count("sandbox") >= 2  # retried before giving up


async def test_a_sandbox_refusal_that_is_not_retryable_fails_the_check_at_once(skipping_env):
    script = Script(sandbox_always=ApplicationError("image missing", type="SANDBOX_IMAGE", non_retryable=True))
    with pytest.raises(WorkflowFailureError) as failure:
        await run_check(skipping_env, script, check())
    assert script.calls == [("gatekeeper", 1), ("sandbox", 1)]
    assert isinstance(failure.value.cause, ApplicationError)
    assert failure.value.cause.message == "the sandbox test could not run"


async def test_a_gatekeeper_error_that_is_not_retried_fails_the_check(skipping_env):
    """The local activity's error is not caught: it fails the workflow (the API answers 503), and
    no sandbox test runs."""
    script = Script(gatekeeper=[ApplicationError("the gatekeeper crashed", non_retryable=True)])
    with pytest.raises(WorkflowFailureError) as failure:
        await run_check(skipping_env, script, check())
    # a local activity's failure reaches the workflow unwrapped (no ActivityError around it)
    assert isinstance(failure.value.cause, ApplicationError)
    assert failure.value.cause.message == "the gatekeeper crashed"
    assert script.calls == [("gatekeeper", 1)]
