"""Every branch of GovernanceWorkflow on Temporal's time-skipping server, with its activities
replaced by name: shadow (on the journal's queue), the wait for an operator's ``decide`` signal
or the proposal's TTL, the decision, the apply; which decisions count, and how retries end.
The activities themselves run on the real services in tests/stack/test_governance.py."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable
from dataclasses import dataclass, field

import pytest
from temporalio import activity
from temporalio.client import WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from activities import names
from genesis.dto import GovernanceDecision, GovernanceOutcome, GovernanceRequest
from genesis.workflow_api import GOVERNANCE_DECIDE_SIGNAL, GOVERNANCE_WORKFLOW, journal_task_queue
from tests.workflow_doubles import fail_scripted, unique_queue
from workflows.governance import GovernanceWorkflow

REPORT_HASH = "a" * 64
OTHER_HASH = "b" * 64
STATUS_QUERY = "status"
TTL_SEC = 86_400  # a day to decide: it passes in about a second once time is skipped
DECIDED = {None: "expired", "approve": "approved", "reject": "rejected"}  # as the real decide_proposal records


def approve(report_hash: str = REPORT_HASH) -> GovernanceDecision:
    return GovernanceDecision(decision="approve", by="op_alice", report_hash=report_hash)


def reject() -> GovernanceDecision:
    return GovernanceDecision(decision="reject", by="op_bob", reason="not now")


@dataclass
class Script:
    """What each replaced activity does, and what they got: the calls (name, attempt), the queue
    each ran on, the workflow's status query while each ran, the decisions recorded."""

    shadow: list[Exception] = field(default_factory=list)  # raised by the first attempts, in order
    during_shadow: list[GovernanceDecision] = field(default_factory=list)  # signalled while the shadow runs
    decide: list[Exception] = field(default_factory=list)
    apply: Exception | dict | None = None  # the outcome's fields; None: applied as version 7
    calls: list[tuple[str, int]] = field(default_factory=list)
    queue_of: dict[str, str] = field(default_factory=dict)
    status_seen: dict[str, str] = field(default_factory=dict)
    decisions: list[GovernanceDecision | None] = field(default_factory=list)

    async def called(self, name: str) -> None:
        info = activity.info()
        self.calls.append((name, info.attempt))
        self.queue_of[name] = info.task_queue
        proposal = activity.client().get_workflow_handle(info.workflow_id)
        self.status_seen[name] = await proposal.query(STATUS_QUERY)

    def activities(self) -> tuple[list, list]:
        """The journal queue's activities, and the workflow queue's."""

        @activity.defn(name=names.SHADOW_PROPOSAL)
        async def shadow_proposal(proposal_id: str) -> str:
            await self.called("shadow")
            attempt = activity.info().attempt
            fail_scripted(self.shadow, attempt)
            proposal = activity.client().get_workflow_handle(activity.info().workflow_id)
            for decision in self.during_shadow:
                await proposal.signal(GOVERNANCE_DECIDE_SIGNAL, decision)
            return REPORT_HASH

        @activity.defn(name=names.DECIDE_PROPOSAL)
        async def decide_proposal(proposal_id: str, decision: GovernanceDecision | None) -> str:
            await self.called("decide")
            attempt = activity.info().attempt
            fail_scripted(self.decide, attempt)
            self.decisions.append(decision)
            return DECIDED[decision.decision if decision else None]

        @activity.defn(name=names.APPLY_PROPOSAL)
        async def apply_proposal(proposal_id: str) -> GovernanceOutcome:
            await self.called("apply")
            if isinstance(self.apply, Exception):
                raise self.apply
            applied = {"status": "applied", "report_hash": REPORT_HASH, "applied_version": 7}
            return GovernanceOutcome(proposal_id=proposal_id, **(self.apply or applied))

        return [shadow_proposal], [decide_proposal, apply_proposal]


async def wait_for_status(handle: WorkflowHandle, status: str) -> None:
    for _ in range(400):
        if await handle.query(STATUS_QUERY) == status:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"the proposal never reached {status!r}")


async def run_proposal(
    env,
    script: Script,
    decisions: list[GovernanceDecision] | None = None,
    then_expire: bool = False,
) -> GovernanceOutcome:
    """Run one proposal to its end and return its outcome (checked against the status query).
    ``decisions`` are signalled once it awaits approval (its TTL timer then runs in real time,
    until ``then_expire`` skips it); without them the TTL passes in about a second."""
    queue = unique_queue("governance")
    proposal_id = f"prop_{uuid.uuid4().hex[:8]}"
    on_journal, on_pipeline = script.activities()

    def start() -> Awaitable[WorkflowHandle]:
        return env.client.start_workflow(
            GOVERNANCE_WORKFLOW,
            GovernanceRequest(proposal_id=proposal_id, ttl_sec=TTL_SEC),
            id=f"governance-{proposal_id}",
            task_queue=queue,
            result_type=GovernanceOutcome,
        )

    async with (
        Worker(env.client, task_queue=queue, workflows=[GovernanceWorkflow], activities=on_pipeline),
        Worker(env.client, task_queue=journal_task_queue(queue), activities=on_journal),
    ):
        if decisions is None:
            handle = await start()
        else:
            with env.with_time_skipping_disabled():  # the TTL must not pass before the decisions
                handle = await start()
            await wait_for_status(handle, "awaiting_approval")
            for decision in decisions:
                await handle.signal(GOVERNANCE_DECIDE_SIGNAL, decision)
            if then_expire:
                await env.fast_forward(handle)  # unbounded: returns once the workflow has ended
        outcome = await handle.result()
        assert outcome.proposal_id == proposal_id
        assert await handle.query(STATUS_QUERY) == outcome.status
    return outcome


async def test_an_approved_proposal_is_shadowed_on_the_journal_queue_then_applied(skipping_env):
    script = Script()
    outcome = await run_proposal(skipping_env, script, decisions=[approve()])
    assert script.calls == [("shadow", 1), ("decide", 1), ("apply", 1)]
    queue = script.queue_of["decide"]
    assert script.queue_of == {"shadow": journal_task_queue(queue), "decide": queue, "apply": queue}
    assert script.status_seen == {"shadow": "shadowing", "decide": "awaiting_approval", "apply": "approved"}
    assert script.decisions == [approve()]
    assert outcome.status == "applied" and outcome.applied_version == 7 and outcome.report_hash == REPORT_HASH


async def test_a_rejected_proposal_is_not_applied(skipping_env):
    script = Script()
    outcome = await run_proposal(skipping_env, script, decisions=[reject()])
    assert script.calls == [("shadow", 1), ("decide", 1)]
    assert script.decisions == [reject()]
    assert outcome == GovernanceOutcome(proposal_id=outcome.proposal_id, status="rejected", report_hash=REPORT_HASH)


async def test_an_undecided_proposal_expires_when_its_ttl_passes(skipping_env):
    script = Script()
    outcome = await run_proposal(skipping_env, script)
    assert script.calls == [("shadow", 1), ("decide", 1)]
    assert script.decisions == [None]
    assert outcome.status == "expired" and outcome.report_hash == REPORT_HASH and outcome.applied_version is None


async def test_an_approval_of_another_report_is_ignored_and_the_proposal_expires(skipping_env):
    script = Script()
    outcome = await run_proposal(skipping_env, script, decisions=[approve(OTHER_HASH)], then_expire=True)
    assert script.decisions == [None]
    assert outcome.status == "expired" and ("apply", 1) not in script.calls


@pytest.mark.parametrize(
    ("decisions", "status"),
    [([reject(), approve()], "rejected"), ([approve(), reject()], "applied")],
    ids=["reject then approve", "approve then reject"],
)
async def test_the_first_decision_that_counts_wins(skipping_env, decisions, status):
    script = Script()
    outcome = await run_proposal(skipping_env, script, decisions=decisions)
    assert script.decisions == decisions[:1]
    assert outcome.status == status


async def test_an_ignored_approval_does_not_block_a_later_decision(skipping_env):
    script = Script()
    outcome = await run_proposal(skipping_env, script, decisions=[approve(OTHER_HASH), approve()])
    assert script.decisions == [approve()]
    assert outcome.status == "applied"


async def test_a_rejection_sent_while_the_shadow_runs_is_taken_without_waiting(skipping_env):
    script = Script(during_shadow=[reject()])
    outcome = await run_proposal(skipping_env, script)
    assert script.decisions == [reject()]  # not the expiry
    assert outcome.status == "rejected" and outcome.report_hash == REPORT_HASH


async def test_an_approval_sent_as_the_shadow_ends_is_not_lost(skipping_env):
    """The shadow activity records the report (and the API accepts approvals of it) before its
    result reaches the workflow: an approval in that gap counts once the report is confirmed."""
    script = Script(during_shadow=[approve()])
    outcome = await run_proposal(skipping_env, script)
    assert script.calls == [("shadow", 1), ("decide", 1), ("apply", 1)]
    assert outcome.status == "applied"


async def test_an_early_approval_of_another_report_is_ignored(skipping_env):
    script = Script(during_shadow=[approve("f" * 64)])
    outcome = await run_proposal(skipping_env, script)
    assert outcome.status == "expired"


async def test_an_apply_that_finds_the_manifest_moved_ends_failed(skipping_env):
    moved = "the manifest moved since the proposal was shadowed: version 8 is in force"
    script = Script(apply={"status": "failed", "detail": moved})  # as the real apply_proposal answers
    outcome = await run_proposal(skipping_env, script, decisions=[approve()])
    assert script.calls == [("shadow", 1), ("decide", 1), ("apply", 1)]
    assert outcome.status == "failed" and outcome.detail == moved


async def test_a_transient_shadow_error_is_retried(skipping_env):
    script = Script(shadow=[RuntimeError("the journal is being rotated")])
    outcome = await run_proposal(skipping_env, script, decisions=[reject()])
    assert script.calls == [("shadow", 1), ("shadow", 2), ("decide", 1)]
    assert outcome.status == "rejected"


async def test_a_shadow_that_keeps_failing_fails_the_workflow_after_five_attempts(skipping_env):
    script = Script(shadow=[RuntimeError("the journal is unreadable")] * 5)
    with pytest.raises(WorkflowFailureError) as failure:
        await run_proposal(skipping_env, script)
    assert script.calls == [("shadow", attempt) for attempt in range(1, 6)]
    assert str(failure.value.cause.cause) == "RuntimeError: the journal is unreadable"


@pytest.mark.parametrize(
    ("step", "error_type"),
    [("shadow", "SHADOW_FAILED"), ("decide", "ILLEGAL_TRANSITION"), ("apply", "ILLEGAL_TRANSITION")],
)
async def test_a_final_error_is_not_retried_and_fails_the_workflow(skipping_env, step, error_type):
    # retryable as raised: the workflow's retry policy alone must stop it
    error = ApplicationError(f"{step} refused", type=error_type)
    script = Script(**{step: error if step == "apply" else [error]})
    with pytest.raises(WorkflowFailureError) as failure:
        await run_proposal(skipping_env, script, decisions=None if step == "shadow" else [approve()])
    assert script.calls[-1] == (step, 1) and [name for name, _ in script.calls].count(step) == 1
    assert failure.value.cause.cause.type == error_type
