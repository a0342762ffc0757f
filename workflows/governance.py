"""GovernanceWorkflow: a proposal to change the world's rules, propose -> shadow -> approve ->
apply (docs/governance.md). The shadow runs on the journal's queue (where the journal is); then
the workflow waits on a durable timer for an operator's decision (the ``decide`` signal): an
approval counts only for the shadow report it names; none before the manifest's
``governance.proposal_ttl_sec`` and the proposal expires. An approval that arrives while the
shadow's result is on its way counts once the report it names is the one the shadow returned.
Every step is an activity that records it with a signed receipt; the status is visible as a
query and in the Temporal UI."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from activities import names
    from genesis.dto import GovernanceDecision, GovernanceOutcome, GovernanceRequest
    from genesis.workflow_api import GOVERNANCE_DECIDE_SIGNAL, GOVERNANCE_WORKFLOW, journal_task_queue

RETRY = RetryPolicy(maximum_attempts=5, non_retryable_error_types=["ILLEGAL_TRANSITION", "SHADOW_FAILED"])
# Runs started before it ignore an approval that arrives while the shadow's result is on its way
# (the shadow activity records the report, and the API accepts approvals of it, before it returns).
EARLY_APPROVAL = "governance-early-approval"


@workflow.defn(name=GOVERNANCE_WORKFLOW)
class GovernanceWorkflow:
    def __init__(self) -> None:
        self._status = "proposed"
        self._report_hash: str | None = None
        self._decision: GovernanceDecision | None = None
        self._early: list[GovernanceDecision] = []  # approvals sent before the shadow's report reached here

    @workflow.signal(name=GOVERNANCE_DECIDE_SIGNAL)
    def decide(self, decision: GovernanceDecision) -> None:
        """An operator's decision; the first that counts wins. An approval of another report than
        the shadow's is ignored (the API refuses it first)."""
        if self._decision is not None:
            return
        if decision.decision == "approve" and self._report_hash is None:
            if decision.report_hash is not None:
                self._early.append(decision)  # judged against the report once it arrives
            return
        if decision.decision == "approve" and decision.report_hash != self._report_hash:
            return
        self._decision = decision

    @workflow.query(name="status")
    def status(self) -> str:
        return self._status

    @workflow.run
    async def run(self, request: GovernanceRequest) -> GovernanceOutcome:
        pid = request.proposal_id
        self._status = "shadowing"
        self._report_hash = await workflow.execute_activity(
            names.SHADOW_PROPOSAL,
            pid,
            result_type=str,
            task_queue=journal_task_queue(workflow.info().task_queue),
            start_to_close_timeout=timedelta(minutes=15),
            retry_policy=RETRY,
        )
        self._status = "awaiting_approval"
        if self._early and workflow.patched(EARLY_APPROVAL):
            for early in self._early:
                self.decide(early)
        try:
            await workflow.wait_condition(
                lambda: self._decision is not None, timeout=timedelta(seconds=request.ttl_sec)
            )
        except TimeoutError:
            pass
        decided = await workflow.execute_activity(
            names.DECIDE_PROPOSAL,
            args=[pid, self._decision],
            result_type=str,
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=RETRY,
        )
        self._status = decided
        if decided != "approved":
            return GovernanceOutcome(proposal_id=pid, status=decided, report_hash=self._report_hash)
        outcome = await workflow.execute_activity(
            names.APPLY_PROPOSAL,
            pid,
            result_type=GovernanceOutcome,
            start_to_close_timeout=timedelta(seconds=60),
            retry_policy=RETRY,
        )
        self._status = outcome.status
        return outcome
