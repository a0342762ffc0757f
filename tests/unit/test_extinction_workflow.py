"""Every branch of ExtinctionWorkflow and RevivalWorkflow on Temporal's time-skipping server, with
their activities replaced by name: a change is recorded with its reason, a refusal or a change
already made records nothing. The real activities run in tests/stack/test_selection.py."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import pytest
from temporalio import activity
from temporalio.worker import Worker

from activities import names
from genesis.dto import FateRequest, FateResult, MutationStatus, StatusUpdate
from genesis.workflow_api import EXTINCTION_WORKFLOW, REVIVAL_WORKFLOW
from tests.workflow_doubles import record_call, unique_queue
from workflows.extinction import ExtinctionWorkflow, RevivalWorkflow

LOG = ["AST: OK", "Activated v3", "Kept"]

# (workflow name, the activity it runs, the status it records, the log line's prefix)
EXTINCTION = (EXTINCTION_WORKFLOW, "retire", MutationStatus.extinct, "Extinct")
REVIVAL = (REVIVAL_WORKFLOW, "revive", MutationStatus.kept, "Revived")
BOTH = pytest.mark.parametrize("fate", [EXTINCTION, REVIVAL], ids=["extinction", "revival"])


def fate_request() -> FateRequest:
    return FateRequest(
        mutation_id=f"mut{uuid.uuid4().hex[:8]}", trait_name="Forager", reason="no carrier for 5000 ticks"
    )


@dataclass
class Script:
    """What each replaced activity does, and the calls they got (name, attempt)."""

    result: FateResult = field(default_factory=lambda: FateResult(changed=True, log=list(LOG), registry_version=8))
    change: list[Exception] = field(default_factory=list)  # raised by the first attempts, in order
    record: list[Exception] = field(default_factory=list)
    calls: list[tuple[str, int]] = field(default_factory=list)
    records: list[StatusUpdate] = field(default_factory=list)

    def activities(self) -> list:
        def change_activity(name: str, label: str):
            @activity.defn(name=name)
            async def change(request: FateRequest) -> FateResult:
                record_call(self.calls, label, self.change)
                return self.result

            return change

        @activity.defn(name=names.RECORD_MUTATION_STATUS)
        async def record_mutation_status(change: StatusUpdate) -> None:
            record_call(self.calls, "record", self.record)
            self.records.append(change)

        return [
            change_activity(names.RETIRE_TRAIT, "retire"),
            change_activity(names.REVIVE_TRAIT, "revive"),
            record_mutation_status,
        ]


async def run_fate(env, script: Script, workflow_name: str, request: FateRequest) -> FateResult:
    queue = unique_queue("fate")
    workflows = [ExtinctionWorkflow, RevivalWorkflow]
    async with Worker(env.client, task_queue=queue, workflows=workflows, activities=script.activities()):
        return await env.client.execute_workflow(
            workflow_name, request, id=f"fate-{request.mutation_id}", task_queue=queue, result_type=FateResult
        )


@BOTH
async def test_a_change_is_recorded_with_its_status_and_reason(skipping_env, fate):
    workflow_name, activity_label, status, line = fate
    script = Script()
    request = fate_request()
    result = await run_fate(skipping_env, script, workflow_name, request)
    assert script.calls == [(activity_label, 1), ("record", 1)]
    assert result == script.result
    assert script.records == [
        StatusUpdate(
            mutation_id=request.mutation_id,
            status=status,
            validation_log=[*LOG, f"{line}: no carrier for 5000 ticks"],
            fate_reason="no carrier for 5000 ticks",
        )
    ]


@BOTH
async def test_nothing_is_recorded_when_nothing_changed(skipping_env, fate):
    """Already extinct (or live): the activity is idempotent, the record already says so."""
    workflow_name, activity_label, *_ = fate
    script = Script(result=FateResult(changed=False))
    result = await run_fate(skipping_env, script, workflow_name, fate_request())
    assert script.calls == [(activity_label, 1)]
    assert result.changed is False and script.records == []


async def test_a_refused_revival_returns_its_conflict_and_records_nothing(skipping_env):
    refusal = FateResult(changed=False, conflict="v4 of Forager is live", conflict_code="VERSION_CONFLICT")
    script = Script(result=refusal)
    result = await run_fate(skipping_env, script, REVIVAL_WORKFLOW, fate_request())
    assert script.calls == [("revive", 1)]
    assert result == refusal


@BOTH
async def test_infrastructure_errors_of_the_change_and_its_record_are_retried(skipping_env, fate):
    workflow_name, activity_label, *_ = fate
    script = Script(change=[ConnectionError("the database is away")], record=[ConnectionError("again")])
    result = await run_fate(skipping_env, script, workflow_name, fate_request())
    assert script.calls == [(activity_label, 1), (activity_label, 2), ("record", 1), ("record", 2)]
    assert result.changed and len(script.records) == 1
