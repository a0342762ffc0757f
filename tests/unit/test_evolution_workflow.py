"""Every branch of EvolutionCycleWorkflow on Temporal's time-skipping server, with its activities
replaced by name and its child MutationWorkflow by a stand-in registered under that name: which
steps run, in which order, what each stage records and announces, and how the cycle ends.
The activities themselves are tested on the real services (tests/stack/test_evolution*.py)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any

import pytest
from temporalio import activity, workflow
from temporalio.client import WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from activities import names
from genesis.dto import (
    CoderRequest,
    CoderResult,
    CycleContext,
    CycleKind,
    CycleUpdate,
    EvolutionCycleInput,
    EvolutionPlan,
    FeedPost,
    Lineage,
    MutationInput,
    MutationResult,
    MutationStatus,
    ParamsApply,
    ParamsRevert,
    ParentVersion,
    ProposalRequest,
)
from genesis.effects import WorldSample
from genesis.ids import MUTATION_ID_PATTERN, mutation_workflow_id
from genesis.workflow_api import EVOLUTION_QUERY, EVOLUTION_SIGNAL_WORLD_SNAPSHOT, EVOLUTION_WORKFLOW, MUTATION_WORKFLOW
from tests.workflow_doubles import unique_queue
from workflows.evolution import EvolutionCycleWorkflow

NEW_TRAIT = EvolutionPlan(action_type="new_trait", description="forage when hungry", trait_name="forager")
MODIFY_TRAIT = EvolutionPlan(action_type="modify_trait", description="forage sooner", trait_name="forager")
ADJUST_PARAMS = EvolutionPlan(action_type="adjust_params", description="more food", params={"food_spawn_rate": 1.5})
CODE = "class Forager(BaseTrait):\n    pass\n"
PARAMS_CHANGE = {
    "before": {"food_spawn_rate": 1.0},
    "after": {"food_spawn_rate": 1.5},
    "previous_overrides": {"food_spawn_rate": 1.2},
}


def valid(**changes) -> CoderResult:
    return CoderResult(**{"code": CODE, "ok": True, "class_name": "Forager", **changes})


def invalid(error: str = "no class derives from BaseTrait") -> CoderResult:
    return CoderResult(code="print('hi')", ok=False, failure_code="AST_NO_TRAIT_CLASS", error=error)


def llm_error(code: str, message: str) -> ApplicationError:
    """How the real LLM activities fail (activities/evolution.py ``_expected``), but retryable: the
    workflow's retry policy alone must decide which codes are worth another attempt."""
    return ApplicationError(message, type=code)


def sample(tick: int, entity_count: int = 100, avg_energy: float = 50.0, run_id: str = "run-a") -> WorldSample:
    return WorldSample(tick=tick, run_id=run_id, entity_count=entity_count, avg_energy=avg_energy)


@workflow.defn(name=MUTATION_WORKFLOW, sandboxed=False)  # trivially deterministic: spare its sandbox
class StandInMutationWorkflow:
    """The mutation pipeline, replaced: it ends as the fake submit activity wrote in the proposal's
    ``goal`` (a status and failure code, or an error that fails it)."""

    @workflow.run
    async def run(self, mutation: MutationInput) -> MutationResult:
        ending = json.loads(mutation.goal)
        if ending.get("error"):
            raise ApplicationError(ending["error"], non_retryable=True)
        return MutationResult(
            mutation_id=mutation.mutation_id,
            status=ending["status"],
            failure_reason_code=ending.get("failure_code"),
            validation_log=[mutation.code],
        )


@dataclass
class Script:
    """What each replaced activity does, and what they got: the calls (name, attempt), the queue
    each ran on, the cycle's records and feed posts, the Coder's requests, the proposal, the
    world-parameter changes."""

    context: dict[str, Any] = field(default_factory=dict)  # CycleContext fields
    llm_queue: bool = False  # the LLM activities on a queue of their own (CycleContext.llm_task_queue)
    context_error: Exception | None = None
    architect: list[Exception | EvolutionPlan] = field(default_factory=lambda: [NEW_TRAIT])  # per attempt; last repeats
    coder: list[Exception | CoderResult] = field(default_factory=lambda: [valid()])  # one per call, then valid()
    child: dict[str, Any] = field(default_factory=lambda: {"status": MutationStatus.kept.value})
    params_change: dict[str, Any] = field(default_factory=lambda: dict(PARAMS_CHANGE))
    reports: list[WorldSample] = field(default_factory=list)  # sent by the engine once the params are applied
    # local activity -> how many attempts fail before the database is back
    outages: dict[str, int] = field(default_factory=dict)
    calls: list[tuple[str, int]] = field(default_factory=list)
    queue_of: dict[str, str] = field(default_factory=dict)
    cycles: list[EvolutionCycleInput] = field(default_factory=list)
    records: list[CycleUpdate] = field(default_factory=list)
    posts: list[FeedPost] = field(default_factory=list)
    coder_requests: list[CoderRequest] = field(default_factory=list)
    proposals: list[ProposalRequest] = field(default_factory=list)
    applied: list[ParamsApply] = field(default_factory=list)
    reverted: list[ParamsRevert] = field(default_factory=list)

    def steps(self) -> list[str]:
        """The calls but the records and feed posts, in order."""
        return [name for name, _ in self.calls if name not in ("record", "feed")]

    def stages(self) -> list[str]:
        return [record.stage for record in self.records]

    def announced(self) -> list[tuple[str, str]]:
        return [(post.agent, post.action) for post in self.posts]

    def called(self, name: str) -> None:
        info = activity.info()
        self.calls.append((name, info.attempt))
        self.queue_of[name] = info.task_queue
        if self.outages.get(name, 0) > 0:
            self.outages[name] -= 1
            raise ConnectionError("the database is away")

    def activities(self) -> list:
        @activity.defn(name=names.LOAD_CYCLE_CONTEXT)
        async def load_cycle_context(cycle: EvolutionCycleInput) -> CycleContext:
            self.called("context")
            self.cycles.append(cycle)
            if self.context_error is not None:
                raise self.context_error
            queue = activity.info().task_queue
            return CycleContext(
                **{
                    "trigger_id": cycle.trigger_id,
                    "workflow_id": activity.info().workflow_id,
                    "kind": cycle.kind,
                    "problem_type": "starvation",
                    "severity": "high",
                    "task_id": "task_1",
                    "llm_task_queue": f"{queue}-llm" if self.llm_queue else None,
                    **self.context,
                }
            )

        @activity.defn(name=names.ARCHITECT_PLAN)
        async def architect_plan(context: CycleContext) -> EvolutionPlan:
            self.called("architect")
            answer = self.architect.pop(0) if len(self.architect) > 1 else self.architect[0]
            if isinstance(answer, Exception):
                raise answer
            return answer

        @activity.defn(name=names.CODER_GENERATE)
        async def coder_generate(request: CoderRequest) -> CoderResult:
            self.called("coder")
            self.coder_requests.append(request)
            answer = self.coder.pop(0) if self.coder else valid()
            if isinstance(answer, Exception):
                raise answer
            return answer

        @activity.defn(name=names.SUBMIT_PROPOSAL)
        async def submit_proposal(request: ProposalRequest) -> MutationInput:
            self.called("submit")
            self.proposals.append(request)
            return MutationInput(
                mutation_id=request.mutation_id,
                agent_id="genesis-coder",
                trait_name=request.plan.trait_name or "",
                code=request.code,
                goal=json.dumps(self.child),  # how the stand-in MutationWorkflow ends
            )

        @activity.defn(name=names.RECORD_CYCLE)
        async def record_cycle(change: CycleUpdate) -> None:
            self.called("record")
            self.records.append(change)

        @activity.defn(name=names.PUBLISH_FEED)
        async def publish_feed(post: FeedPost) -> str:
            self.called("feed")
            self.posts.append(post)
            return f"{len(self.posts)}-0"

        @activity.defn(name=names.APPLY_WORLD_PARAMS)
        async def apply_world_params(request: ParamsApply) -> dict[str, Any]:
            self.called("apply")
            self.applied.append(request)
            # The engine applies the values and reports its snapshots to the cycle's workflow.
            cycle = activity.client().get_workflow_handle(request.workflow_id)
            for report in self.reports:
                await cycle.signal(EVOLUTION_SIGNAL_WORLD_SNAPSHOT, report)
            return self.params_change

        @activity.defn(name=names.REVERT_WORLD_PARAMS)
        async def revert_world_params(request: ParamsRevert) -> None:
            self.called("revert")
            self.reverted.append(request)

        return [
            load_cycle_context,
            architect_plan,
            coder_generate,
            submit_proposal,
            record_cycle,
            publish_feed,
            apply_world_params,
            revert_world_params,
        ]


async def wait_for_stage(handle: WorkflowHandle, stage: str) -> None:
    for _ in range(400):
        if (await handle.query(EVOLUTION_QUERY))["stage"] == stage:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"the cycle never reached {stage!r}")


async def run_cycle(
    env,
    script: Script,
    cycle: EvolutionCycleInput | None = None,
    workflow_id: str | None = None,
    reports_while_observing: list[WorldSample] | None = None,
) -> dict[str, Any]:
    """Run one cycle to its end and return its result (checked against the ``cycle`` query).
    ``reports_while_observing``: snapshots sent once it observes; its timer then runs in real time."""
    queue = unique_queue("evolution")
    trigger_id = f"trg_{uuid.uuid4().hex[:8]}"
    cycle = cycle or EvolutionCycleInput(trigger_id=trigger_id)
    workflow_id = workflow_id or f"evolution-{cycle.trigger_id or trigger_id}"
    fakes = script.activities()
    workflows = [EvolutionCycleWorkflow, StandInMutationWorkflow]

    def start() -> Awaitable[WorkflowHandle]:
        return env.client.start_workflow(EVOLUTION_WORKFLOW, cycle, id=workflow_id, task_queue=queue, result_type=dict)

    async with (
        Worker(env.client, task_queue=queue, workflows=workflows, activities=fakes),
        Worker(env.client, task_queue=f"{queue}-llm", activities=fakes),
    ):
        if reports_while_observing is None:
            handle = await start()
        else:
            with env.with_time_skipping_disabled():  # the observation timer must not pass before the reports
                handle = await start()
            await wait_for_stage(handle, "observing")
            for report in reports_while_observing:
                await handle.signal(EVOLUTION_SIGNAL_WORLD_SNAPSHOT, report)
        result = await handle.result()
        assert await handle.query(EVOLUTION_QUERY) == result
    return result


# -- new_trait / modify_trait ---------------------------------------------------------------------


async def test_a_new_trait_is_planned_coded_proposed_and_judged_by_its_mutation(skipping_env):
    script = Script(context={"problem_type": "overpopulation", "severity": "medium"})
    result = await run_cycle(skipping_env, script)
    assert script.steps() == ["context", "architect", "coder", "submit"]
    assert script.stages() == [
        "loading_context",
        "planning",
        "planned",
        "coding",
        "validated",
        "mutation_running",
        "completed",
    ]
    assert script.announced() == [
        ("architect", "plan_created"),
        ("coder", "code_generated"),
        ("evolution", "cycle_completed"),
    ]
    (proposal,) = script.proposals
    mutation_id = proposal.mutation_id
    assert MUTATION_ID_PATTERN.match(mutation_id)
    assert proposal.plan == NEW_TRAIT and proposal.code == CODE and proposal.task_id == "task_1"
    assert proposal.replaces_version is None and proposal.lineage is None
    assert result["stage"] == "completed" and result["status"] == "succeeded" and "error" not in result
    assert result["mutation_id"] == mutation_id and result["mutation_status"] == "kept"
    assert result["problem_type"] == "overpopulation" and result["severity"] == "medium"
    assert result["plan"] == NEW_TRAIT.model_dump() and result["code"] == CODE and result["attempts"] == 1
    assert script.posts[0].message == "Plan: new_trait forager — forage when hungry"
    assert script.posts[1].message == (
        f"Trait 'forager' (Forager) passed pre-validation; proposed as mutation {mutation_id}"
    )
    assert script.posts[1].extra["mutation_workflow_id"] == mutation_workflow_id(mutation_id)
    # the feed posts after the proposal name its mutation
    assert [post.mutation_id for post in script.posts] == [None, mutation_id, mutation_id]
    # the child ran under the mutation's workflow id, on the proposal the submit activity returned
    child = skipping_env.client.get_workflow_handle(mutation_workflow_id(mutation_id), result_type=MutationResult)
    assert (await child.result()).validation_log == [CODE]


async def test_a_modification_proposes_the_live_version_it_replaces_and_its_lineage(skipping_env):
    lineage = Lineage(
        origin="openai", parents=[ParentVersion(trait_name="forager", version=3, mutation_id="mut_aaaaaaaaaaaa")]
    )
    script = Script(architect=[MODIFY_TRAIT], coder=[valid(live_version=3, lineage=lineage)])
    result = await run_cycle(skipping_env, script)
    (proposal,) = script.proposals
    assert proposal.replaces_version == 3 and proposal.lineage == lineage
    assert "(Forager) (modifies v3) passed pre-validation" in script.posts[1].message
    assert result["status"] == "succeeded" and result["action_type"] == "modify_trait"


async def test_code_rejected_once_is_regenerated_with_the_validators_feedback(skipping_env):
    script = Script(coder=[invalid("no class derives from BaseTrait"), valid()])
    result = await run_cycle(skipping_env, script)
    first, second = script.coder_requests
    assert first.attempt == 1 and first.rejected_code is None and first.feedback is None
    assert second.attempt == 2 and second.rejected_code == "print('hi')"
    assert second.feedback == "no class derives from BaseTrait" and second.plan == NEW_TRAIT
    assert script.stages()[3:7] == ["coding", "validation_failed", "coding", "validated"]
    coding = [
        record.attempts for record in script.records if record.stage in ("coding", "validation_failed", "validated")
    ]
    assert coding == [1, 1, 2, 2]
    retrying = script.posts[1]
    assert (retrying.agent, retrying.action) == ("coder", "validation_failed")
    assert retrying.message.endswith("Retrying once with the validator's feedback.")
    assert retrying.extra == {"failure_code": "AST_NO_TRAIT_CLASS", "attempt": 1}
    assert script.steps() == ["context", "architect", "coder", "coder", "submit"]
    assert result["status"] == "succeeded" and result["attempts"] == 2 and result["code"] == CODE


async def test_code_rejected_twice_ends_the_cycle_without_a_proposal(skipping_env):
    script = Script(coder=[invalid("first"), invalid("still no trait class")])
    result = await run_cycle(skipping_env, script)
    assert script.steps() == ["context", "architect", "coder", "coder"]
    assert script.proposals == []
    assert script.announced() == [
        ("architect", "plan_created"),
        ("coder", "validation_failed"),
        ("coder", "validation_failed"),
        ("evolution", "cycle_failed"),
    ]
    assert script.posts[2].message == "Retry also failed: still no trait class. Giving up on this cycle."
    assert result["stage"] == "validation_failed" and result["status"] == "failed"
    assert result["error"] == "code rejected twice: still no trait class"
    assert script.posts[-1].message.endswith("ended: validation_failed (code rejected twice: still no trait class)")


# a rollback after observation is a verdict too
@pytest.mark.parametrize("status", ["activated", "kept", "sandbox_ok", "rolled_back"])
async def test_a_mutation_that_reached_a_verdict_completes_the_cycle(skipping_env, status):
    result = await run_cycle(skipping_env, Script(child={"status": status}))
    assert result["stage"] == "completed" and result["status"] == "succeeded"
    assert result["mutation_status"] == status and "error" not in result


@pytest.mark.parametrize(
    ("status", "failure_code", "error"),
    [("rejected", "SANDBOX_TIMEOUT", "mutation rejected (SANDBOX_TIMEOUT)"), ("failed", None, "mutation failed")],
)
async def test_a_mutation_without_a_verdict_fails_the_cycle_with_its_status(skipping_env, status, failure_code, error):
    script = Script(child={"status": status, "failure_code": failure_code})
    result = await run_cycle(skipping_env, script)
    assert result["stage"] == f"mutation_{status}" and result["status"] == "failed"
    assert result["mutation_status"] == status and result["error"] == error
    assert script.announced()[-1] == ("evolution", "cycle_failed")
    assert script.posts[-1].extra["stage"] == f"mutation_{status}"


async def test_a_mutation_workflow_that_fails_ends_the_cycle_with_its_root_cause(skipping_env):
    script = Script(child={"error": "the sandbox host vanished"})
    result = await run_cycle(skipping_env, script)
    assert result["stage"] == "mutation_failed" and result["status"] == "failed"
    assert result["mutation_status"] == "failed" and result["error"] == "the sandbox host vanished"
    assert result["mutation_id"] == script.proposals[0].mutation_id


async def test_a_coder_llm_error_ends_the_cycle_without_a_retry(skipping_env):
    script = Script(coder=[invalid(), llm_error("LLM_BAD_REPLY", "the LLM answered without a code block")])
    result = await run_cycle(skipping_env, script)
    assert script.calls.count(("coder", 1)) == 2 and ("coder", 2) not in script.calls  # LLM_BAD_REPLY is final
    assert script.proposals == []
    assert script.announced()[-2:] == [("coder", "llm_error"), ("evolution", "cycle_failed")]
    assert script.posts[-2].extra == {"error": "LLM_BAD_REPLY"}
    assert result["stage"] == "llm_error" and result["status"] == "failed"
    assert result["error"] == "LLM_BAD_REPLY: the LLM answered without a code block"


# -- the Architect ------------------------------------------------------------------------------


@pytest.mark.parametrize("code", ["LLM_OFF", "LLM_BAD_REPLY", "LLM_UNPARSEABLE"])
async def test_a_final_architect_error_is_not_retried_and_ends_the_cycle(skipping_env, code):
    script = Script(architect=[llm_error(code, "no plan today")])
    result = await run_cycle(skipping_env, script)
    assert script.steps() == ["context", "architect"]
    assert script.stages() == ["loading_context", "planning", "llm_error"]
    assert script.announced() == [("architect", "llm_error"), ("evolution", "cycle_failed")]
    assert script.posts[0].message == "no plan today. Skipping this cycle; the world goes on."
    assert result["status"] == "failed" and result["error"] == f"{code}: no plan today"


async def test_an_unreachable_llm_is_tried_llm_attempts_times_then_the_cycle_ends(skipping_env):
    script = Script(context={"llm_attempts": 2}, architect=[llm_error("LLM_UNAVAILABLE", "connection refused")])
    result = await run_cycle(skipping_env, script)
    assert script.steps() == ["context", "architect", "architect"]
    assert [attempt for name, attempt in script.calls if name == "architect"] == [1, 2]
    assert result["stage"] == "llm_error" and result["error"] == "LLM_UNAVAILABLE: connection refused"


async def test_an_llm_back_within_its_attempts_lets_the_cycle_go_on(skipping_env):
    script = Script(architect=[llm_error("LLM_UNAVAILABLE", "connection refused"), NEW_TRAIT])
    result = await run_cycle(skipping_env, script)
    assert [attempt for name, attempt in script.calls if name == "architect"] == [1, 2]
    assert result["stage"] == "completed" and result["status"] == "succeeded"


async def test_an_llm_failure_without_an_error_code_is_reported_as_unavailable_with_its_root_cause(skipping_env):
    """The real case is a timeout (no LLM worker polls its queue for LLM_STEP_LIMIT); an error
    without a type takes the same branch and its cause chain is walked to the root."""
    untyped = ApplicationError("the LLM call broke", non_retryable=True)
    untyped.__cause__ = ConnectionResetError("reset by peer")
    result = await run_cycle(skipping_env, Script(architect=[untyped]))
    assert result["stage"] == "llm_error" and result["status"] == "failed"
    assert result["error"] == "LLM_UNAVAILABLE: ConnectionResetError: reset by peer"


async def test_llm_steps_run_on_the_llm_queue_and_the_others_on_the_workflows(skipping_env):
    script = Script(llm_queue=True)
    result = await run_cycle(skipping_env, script)
    queue = script.queue_of["context"]
    assert script.queue_of["architect"] == script.queue_of["coder"] == f"{queue}-llm"
    assert script.queue_of["submit"] == script.queue_of["record"] == script.queue_of["feed"] == queue
    assert result["status"] == "succeeded"


# -- the cycle's start and its records ----------------------------------------------------------


async def test_a_scheduled_run_takes_its_trigger_id_from_its_workflow_id(skipping_env):
    trigger_id = f"periodic-{uuid.uuid4().hex[:8]}-2025-01-01T00:00:00Z"
    script = Script()
    cycle = EvolutionCycleInput(kind=CycleKind.periodic_improvement, schedule_id="periodic")
    result = await run_cycle(skipping_env, script, cycle, workflow_id=f"evolution-{trigger_id}")
    assert script.cycles[0].trigger_id == trigger_id and script.cycles[0].kind == CycleKind.periodic_improvement
    first = script.records[0]
    assert first.trigger_id == trigger_id and first.workflow_id == f"evolution-{trigger_id}"
    assert first.kind == "periodic_improvement"
    assert {record.trigger_id for record in script.records} == {trigger_id}
    assert {post.trigger_id for post in script.posts} == {trigger_id}
    assert result["trigger_id"] == trigger_id and result["kind"] == "periodic_improvement"


async def test_a_context_that_cannot_be_loaded_fails_the_workflow_before_any_llm_call(skipping_env):
    script = Script(context_error=ApplicationError("no such trigger", non_retryable=True))
    with pytest.raises(WorkflowFailureError) as failure:
        await run_cycle(skipping_env, script)
    assert str(failure.value.cause.cause) == "no such trigger"
    assert script.steps() == ["context"] and script.stages() == ["loading_context"]


@pytest.mark.parametrize("local", ["record", "feed"])
async def test_records_and_feed_posts_are_retried_through_a_database_outage(skipping_env, local):
    script = Script(outages={local: 2})
    result = await run_cycle(skipping_env, script)
    assert [attempt for name, attempt in script.calls if name == local][:4] == [1, 2, 3, 1]
    assert result["status"] == "succeeded" and len(script.records) == 7 and len(script.posts) == 3


# -- adjust_params ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("after", "fitness"),
    [(sample(300, entity_count=110, avg_energy=55.0), "positive"), (sample(300, entity_count=101), "neutral")],
    ids=["positive", "neutral"],
)
async def test_a_params_change_that_does_no_harm_over_its_window_is_kept(skipping_env, after, fitness):
    script = Script(architect=[ADJUST_PARAMS], context={"observation_window_ticks": 300}, reports=[sample(0), after])
    result = await run_cycle(skipping_env, script)
    assert script.steps() == ["context", "architect", "apply"]
    assert script.stages() == ["loading_context", "planning", "planned", "applying_params", "observing", "completed"]
    (applied,) = script.applied
    assert applied.params == {"food_spawn_rate": 1.5} and applied.workflow_id == script.records[0].workflow_id
    assert script.posts[0].message == "Plan: adjust_params food_spawn_rate=1.5 — more food"
    assert result["stage"] == "completed" and result["status"] == "succeeded" and "error" not in result
    assert result["mutation_status"] == "kept"
    change = result["params_change"]
    assert change["fitness_verdict"] == fitness and change["effects"]["window_ticks"] == 300
    assert change["before"] == PARAMS_CHANGE["before"]


@pytest.mark.parametrize(
    ("after", "reason", "fitness_delta"),
    [
        (sample(300, entity_count=70), "population_decline", -0.15),
        (sample(300, entity_count=100, avg_energy=20.0), "negative_fitness", -0.18),
    ],
    ids=["population decline", "energy drop"],
)
async def test_a_params_change_that_harms_the_world_is_reverted(skipping_env, after, reason, fitness_delta):
    script = Script(architect=[ADJUST_PARAMS], reports=[sample(0), after])
    result = await run_cycle(skipping_env, script)
    assert script.steps() == ["context", "architect", "apply", "revert"]
    (revert,) = script.reverted
    assert revert.reason == reason and revert.previous_overrides == {"food_spawn_rate": 1.2}
    assert revert.workflow_id == script.applied[0].workflow_id
    assert result["stage"] == "rolled_back" and result["status"] == "succeeded"
    assert result["mutation_status"] == "rolled_back"
    assert result["error"] == f"rolled back: {reason} (fitness {fitness_delta:+.3f})"
    assert result["params_change"]["fitness_verdict"] == "negative"
    assert script.announced()[-1] == ("evolution", "cycle_completed")


async def test_a_revert_without_earlier_overrides_restores_none(skipping_env):
    change = {"before": {"food_spawn_rate": 1.0}, "after": {"food_spawn_rate": 1.5}}  # nothing was overridden
    script = Script(architect=[ADJUST_PARAMS], params_change=change, reports=[sample(0), sample(300, entity_count=50)])
    result = await run_cycle(skipping_env, script)
    assert script.reverted[0].previous_overrides == {}
    assert result["stage"] == "rolled_back"


@pytest.mark.parametrize("reports", [[], [sample(0), sample(299)]], ids=["no report", "a window short of its ticks"])
async def test_a_params_change_without_a_complete_window_is_kept_unjudged_when_the_timer_fires(skipping_env, reports):
    script = Script(architect=[ADJUST_PARAMS], context={"observation_timeout_s": 86_400.0}, reports=reports)
    result = await run_cycle(skipping_env, script)  # a day of observation, skipped
    assert script.steps() == ["context", "architect", "apply"]
    assert result["stage"] == "completed" and result["status"] == "succeeded"
    assert result["mutation_status"] == "kept"
    assert result["error"] == "the engine reported no complete observation window; kept without a verdict"
    assert "fitness_verdict" not in result["params_change"]


async def test_an_engine_restart_starts_the_observation_window_over(skipping_env):
    # Measured from the first run's report the population halved (a rollback); the restarted
    # run's own window (its ticks start again, its run_id differs) shows no change.
    reports = [sample(0), sample(10, entity_count=50, run_id="run-b"), sample(310, entity_count=50, run_id="run-b")]
    script = Script(architect=[ADJUST_PARAMS], reports=reports)
    result = await run_cycle(skipping_env, script)
    effects = result["params_change"]["effects"]
    assert effects["window_ticks"] == 300 and effects["entity_count_delta"] == 0
    assert result["stage"] == "completed" and script.reverted == []


async def test_a_window_filled_by_reports_arriving_while_it_observes_is_judged(skipping_env):
    script = Script(architect=[ADJUST_PARAMS], reports=[sample(0)])
    while_observing = [sample(150, entity_count=90), sample(300, entity_count=70)]
    result = await run_cycle(skipping_env, script, reports_while_observing=while_observing)
    assert result["stage"] == "rolled_back" and script.reverted[0].reason == "population_decline"
    assert result["params_change"]["effects"]["entity_count_delta"] == -30
