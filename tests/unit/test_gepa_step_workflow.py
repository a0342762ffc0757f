"""Every branch of GepaStepWorkflow on Temporal's time-skipping server, with its activities
replaced by name: the workflow's orchestration alone (what runs, in which order, what is
recorded), in seconds. The activities themselves are tested on the real services in
tests/stack/test_gepa_steps.py and test_gepa_code_mutation.py."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import pytest
from temporalio import activity
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from activities import names
from gepa_steps.dto import (
    GEPA_STEP_PROGRESS_QUERY,
    GEPA_STEP_WORKFLOW,
    STEP_FAILED,
    MutationOutcome,
    ProgramRun,
    ProgramStatus,
    ProgramStatusUpdate,
    StepRequest,
    StepResult,
)
from gepa_steps.step_workflow import GepaStepWorkflow
from tests.workflow_doubles import record_call, unique_queue

MERGE_REPORT = {"base_commit": "b" * 40, "from_first": [], "from_second": ["answer"], "conflicts": []}


def request(mutation_type: str = "prompt", **changes) -> StepRequest:
    body = {
        "client_id": "client_0123456789abcdef",
        "program_id": f"p{uuid.uuid4().hex[:8]}",
        "mutation_type": mutation_type,
        "program_json_path": "program.json",
        "entry_point": "qa.QA",
        "candidate": {"answer": "Answer."} if mutation_type == "prompt" else {},
        "test_examples": [{"question": "q"}],
        **changes,
    }
    return StepRequest(**body)


@dataclass
class Script:
    """What each replaced activity does, and the calls they got (name, attempt)."""

    start: Exception | None = None
    outages: dict[str, int] = field(default_factory=dict)  # local activity -> attempts the database is away
    mutate: list[Exception] = field(default_factory=list)  # raised by the first attempts, in order
    run: list[Exception] = field(default_factory=list)
    calls: list[tuple[str, int]] = field(default_factory=list)
    finished: list[ProgramStatusUpdate] = field(default_factory=list)

    def activities(self) -> list:
        @activity.defn(name=names.GEPA_START_PROGRAM)
        async def start(step: StepRequest) -> str:
            self.calls.append(("start", activity.info().attempt))
            self.database_away("start")
            if self.start is not None:
                raise self.start
            return "program_parent" if step.parent_program_id else "main"

        @activity.defn(name=names.GEPA_MUTATE)
        async def mutate(step: StepRequest, start: str) -> MutationOutcome:
            record_call(self.calls, "mutate", self.mutate)
            return MutationOutcome(
                branch_name=f"program_{step.program_id}",
                worktree=f"/w/{step.program_id}",
                commit="c" * 40,
                program_json={"answer": {"signature": {"instructions": f"from {start}"}}},
                merge=MERGE_REPORT if step.mutation_type == "merge" else None,
            )

        @activity.defn(name=names.GEPA_RUN_PROGRAM)
        async def run(step: StepRequest) -> ProgramRun:
            record_call(self.calls, "run", self.run)
            return ProgramRun(
                ok=True, pipeline_outputs=[{"example_id": 0, "output": {"answer": "A"}}], traces=[{"example_id": 0}]
            )

        @activity.defn(name=names.GEPA_FINISH_PROGRAM)
        async def finish(change: ProgramStatusUpdate) -> None:
            self.calls.append(("finish", activity.info().attempt))
            self.database_away("finish")
            self.finished.append(change)

        return [start, mutate, run, finish]

    def database_away(self, name: str) -> None:
        if activity.info().attempt <= self.outages.get(name, 0):
            raise ConnectionError("the database is away")


def verdict(message: str) -> ApplicationError:
    """How the real activities refuse a step's input (gepa_steps/activities.py ``rejected``)."""
    return ApplicationError(message, type=STEP_FAILED, non_retryable=True)


async def run_step(env, script: Script, step: StepRequest) -> StepResult:
    queue = unique_queue("gepa")
    async with Worker(env.client, task_queue=queue, workflows=[GepaStepWorkflow], activities=script.activities()):
        handle = await env.client.start_workflow(
            GEPA_STEP_WORKFLOW, step, id=f"gepa-{step.program_id}", task_queue=queue, result_type=StepResult
        )
        result = await handle.result()
        assert await handle.query(GEPA_STEP_PROGRESS_QUERY) == result.status
    return result


async def test_a_step_mutates_runs_and_records_its_success(skipping_env):
    script = Script()
    step = request(capture_traces=True)
    result = await run_step(skipping_env, script, step)
    assert [name for name, _ in script.calls] == ["start", "mutate", "run", "finish"]
    assert result.status == "success" and result.error is None
    assert result.branch_name == f"program_{step.program_id}" and result.commit == "c" * 40
    assert result.program_json == {"answer": {"signature": {"instructions": "from main"}}}
    assert result.pipeline_outputs == [{"example_id": 0, "output": {"answer": "A"}}] and result.traces
    (finished,) = script.finished
    assert finished.status == ProgramStatus.completed and finished.result == result
    assert finished.branch_name == result.branch_name and finished.program_json == result.program_json


async def test_traces_are_returned_only_when_asked_for(skipping_env):
    result = await run_step(skipping_env, Script(), request(capture_traces=False))
    assert result.status == "success" and result.traces is None


async def test_a_merge_step_returns_its_report_and_starts_from_the_first_parent(skipping_env):
    step = request("merge", parent_program_id="p1", second_parent_program_id="p2")
    result = await run_step(skipping_env, Script(), step)
    assert result.status == "success" and result.merge == MERGE_REPORT
    assert result.program_json == {"answer": {"signature": {"instructions": "from program_parent"}}}


async def test_a_refused_start_records_the_failure_and_mutates_nothing(skipping_env):
    script = Script(start=verdict("unknown client_id 'client_0123456789abcdef'"))
    result = await run_step(skipping_env, script, request())
    assert script.calls == [("start", 1), ("finish", 1)]
    assert result.status == "failed" and result.error == "unknown client_id 'client_0123456789abcdef'"
    assert result.branch_name is None and result.program_json is None
    assert script.finished[0].status == ProgramStatus.failed and script.finished[0].result == result


async def test_a_refused_mutation_is_not_retried_and_fails_the_step(skipping_env):
    script = Script(mutate=[verdict("the coding agent's patch does not apply: corrupt patch")])
    result = await run_step(skipping_env, script, request("code", change_request="x"))
    assert script.calls == [("start", 1), ("mutate", 1), ("finish", 1)]
    assert result.status == "failed" and result.error == "the coding agent's patch does not apply: corrupt patch"


async def test_an_infrastructure_error_is_retried_then_the_step_goes_on(skipping_env):
    script = Script(mutate=[RuntimeError("docker hiccup")], run=[RuntimeError("host died"), RuntimeError("again")])
    result = await run_step(skipping_env, script, request())
    assert script.calls == [
        ("start", 1),
        ("mutate", 1),
        ("mutate", 2),
        ("run", 1),
        ("run", 2),
        ("run", 3),
        ("finish", 1),
    ]
    assert result.status == "success"


async def test_a_run_that_keeps_failing_ends_failed_and_keeps_the_mutations_program(skipping_env):
    script = Script(run=[RuntimeError("the program host failed")] * 3)
    result = await run_step(skipping_env, script, request())
    assert [name for name, _ in script.calls].count("run") == 3  # INFRA_RETRY's maximum_attempts
    assert result.status == "failed" and result.error == "the program host failed"
    assert result.branch_name is None  # a failed step's branch is deleted by the finish activity
    assert result.program_json == {"answer": {"signature": {"instructions": "from main"}}}
    finished = script.finished[0]
    assert finished.status == ProgramStatus.failed and finished.program_json == result.program_json


@pytest.mark.parametrize("failing", ["start", "finish"])
async def test_database_steps_are_retried_until_they_succeed(skipping_env, failing):
    """The local start and finish activities retry (DB_RETRY) through a database outage."""
    script = Script(outages={failing: 2})
    result = await run_step(skipping_env, script, request())
    assert result.status == "success"
    assert [attempt for name, attempt in script.calls if name == failing] == [1, 2, 3]
    assert len(script.finished) == 1
