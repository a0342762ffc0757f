"""EvolutionCycleWorkflow (id ``evolution-<trigger_id>``): context → Architect → Coder (one
retry with the validator's feedback) → child MutationWorkflow, or a bounded world-parameter
change observed and rolled back like a trait (logic-flow.md 3.3-3.4, 3.7).

Every stage is written to ``evolution_cycles`` and announced on the Evolution Feed. An LLM that
is off, unreachable (after the retry policy's attempts) or unparseable ends the cycle with an
``llm_error`` message: the world goes on. Orchestration only: activities are referenced by name."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, ChildWorkflowError

with workflow.unsafe.imports_passed_through():
    from activities import names
    from genesis.dto import (
        CoderRequest,
        CoderResult,
        CycleContext,
        CycleUpdate,
        EvolutionCycleInput,
        EvolutionPlan,
        FeedPost,
        MutationInput,
        MutationResult,
        MutationStatus,
        ParamsApply,
        ParamsRevert,
        ProposalRequest,
    )
    from genesis.effects import WorldSample, compute_effects, verdict
    from genesis.ids import mutation_workflow_id
    from genesis.workflow_api import (
        EVOLUTION_QUERY,
        EVOLUTION_SIGNAL_WORLD_SNAPSHOT,
        EVOLUTION_WORKFLOW,
        MUTATION_WORKFLOW,
        trigger_id_of,
    )

LOCAL_RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=200), maximum_interval=timedelta(seconds=10), maximum_attempts=20
)
# Not worth another attempt: no LLM configured, an answer that is not the protocol, or no plan/code in it.
LLM_FINAL_ERRORS = ["LLM_OFF", "LLM_BAD_REPLY", "LLM_UNPARSEABLE"]
# One LLM step with its retries, also bounding the wait for an LLM worker (queue <task_queue>-llm).
LLM_STEP_LIMIT = timedelta(minutes=15)
# The mutation pipeline ran to a verdict (a rollback after observation is a verdict too).
JUDGED = {MutationStatus.activated, MutationStatus.kept, MutationStatus.sandbox_ok, MutationStatus.rolled_back}


@workflow.defn(name=EVOLUTION_WORKFLOW)
class EvolutionCycleWorkflow:
    def __init__(self) -> None:
        self._state: dict[str, Any] = {"stage": "starting", "status": "running"}
        self._first: WorldSample | None = None
        self._latest: WorldSample | None = None
        self._trigger_id = ""
        self._workflow_id = ""

    @workflow.query(name=EVOLUTION_QUERY)
    def cycle(self) -> dict[str, Any]:
        return dict(self._state)

    @workflow.signal(name=EVOLUTION_SIGNAL_WORLD_SNAPSHOT)
    def world_snapshot(self, sample: WorldSample) -> None:
        """The engine reports each snapshot while this cycle's world-parameter change is observed."""
        if self._first is None or sample.run_id != self._first.run_id:
            self._first = sample  # first report, or the engine restarted: the window starts over
        self._latest = sample

    @workflow.run
    async def run(self, cycle: EvolutionCycleInput) -> dict[str, Any]:
        self._workflow_id = workflow.info().workflow_id
        self._trigger_id = cycle.trigger_id or trigger_id_of(self._workflow_id)
        cycle = cycle.model_copy(update={"trigger_id": self._trigger_id})
        await self._record("loading_context", workflow_id=self._workflow_id, kind=cycle.kind.value)
        context: CycleContext = await workflow.execute_activity(
            names.LOAD_CYCLE_CONTEXT,
            cycle,
            result_type=CycleContext,
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=LOCAL_RETRY,
        )
        await self._record("planning", problem_type=context.problem_type, severity=context.severity)
        llm_retry = RetryPolicy(
            initial_interval=timedelta(seconds=1),
            backoff_coefficient=2.0,
            maximum_interval=timedelta(seconds=30),
            maximum_attempts=context.llm_attempts,
            non_retryable_error_types=LLM_FINAL_ERRORS,
        )
        try:
            plan: EvolutionPlan = await workflow.execute_activity(
                names.ARCHITECT_PLAN,
                context,
                result_type=EvolutionPlan,
                task_queue=context.llm_task_queue,
                start_to_close_timeout=timedelta(minutes=5),
                schedule_to_close_timeout=LLM_STEP_LIMIT,
                retry_policy=llm_retry,
            )
        except ActivityError as err:
            return await self._llm_failed("architect", err)
        await self._record("planned", action_type=plan.action_type, plan=plan.model_dump())
        target = plan.trait_name or ", ".join(f"{k}={v}" for k, v in (plan.params or {}).items())
        await self._feed(
            "architect",
            "plan_created",
            f"Plan: {plan.action_type} {target} — {plan.description}",
            action_type=plan.action_type,
            problem_type=context.problem_type,
        )
        if plan.action_type == "adjust_params":
            return await self._adjust_params(context, plan)
        return await self._code_and_propose(context, plan, llm_retry)

    # -- new_trait / modify_trait -------------------------------------------------------------------

    async def _code_and_propose(
        self, context: CycleContext, plan: EvolutionPlan, llm_retry: RetryPolicy
    ) -> dict[str, Any]:
        request = CoderRequest(trigger_id=self._trigger_id, plan=plan)
        result: CoderResult | None = None
        for attempt in (1, 2):
            await self._record("coding", attempts=attempt)
            try:
                result = await workflow.execute_activity(
                    names.CODER_GENERATE,
                    request,
                    result_type=CoderResult,
                    task_queue=context.llm_task_queue,
                    start_to_close_timeout=timedelta(minutes=5),
                    schedule_to_close_timeout=LLM_STEP_LIMIT,
                    retry_policy=llm_retry,
                )
            except ActivityError as err:
                return await self._llm_failed("coder", err)
            await self._record("validated" if result.ok else "validation_failed", code=result.code, attempts=attempt)
            if result.ok:
                break
            if attempt == 1:
                await self._feed(
                    "coder",
                    "validation_failed",
                    f"Generated code rejected: {result.error}. Retrying once with the validator's feedback.",
                    failure_code=result.failure_code,
                    attempt=attempt,
                )
                request = CoderRequest(
                    trigger_id=self._trigger_id, plan=plan, attempt=2, rejected_code=result.code, feedback=result.error
                )
            else:
                await self._feed(
                    "coder",
                    "validation_failed",
                    f"Retry also failed: {result.error}. Giving up on this cycle.",
                    failure_code=result.failure_code,
                    attempt=attempt,
                )
                return await self._end("validation_failed", "failed", error=f"code rejected twice: {result.error}")
        assert result is not None
        mutation_id = f"mut_{workflow.uuid4().hex[:12]}"
        workflow_id = mutation_workflow_id(mutation_id)
        mutation: MutationInput = await workflow.execute_activity(
            names.SUBMIT_PROPOSAL,
            ProposalRequest(
                trigger_id=self._trigger_id,
                mutation_id=mutation_id,
                plan=plan,
                code=result.code,
                task_id=context.task_id,
                replaces_version=result.live_version,
                lineage=result.lineage,  # computed by the Coder's activity (None in older histories)
            ),
            result_type=MutationInput,
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=LOCAL_RETRY,
        )
        await self._record("mutation_running", mutation_id=mutation_id, mutation_status=MutationStatus.queued.value)
        modifies = f" (modifies v{result.live_version})" if result.live_version else ""
        await self._feed(
            "coder",
            "code_generated",
            f"Trait '{plan.trait_name}' ({result.class_name}){modifies} passed pre-validation; "
            f"proposed as mutation {mutation_id}",
            mutation_id=mutation_id,
            mutation_workflow_id=workflow_id,
        )
        try:
            outcome: MutationResult = await workflow.execute_child_workflow(
                MUTATION_WORKFLOW,
                mutation,
                id=workflow_id,
                result_type=MutationResult,
                parent_close_policy=workflow.ParentClosePolicy.ABANDON,
            )
        except ChildWorkflowError as err:
            return await self._end(
                "mutation_failed",
                "failed",
                mutation_id=mutation_id,
                mutation_status=MutationStatus.failed.value,
                error=_root_message(err),
            )
        succeeded = outcome.status in JUDGED
        error = (
            None
            if succeeded
            else f"mutation {outcome.status.value}"
            + (f" ({outcome.failure_reason_code})" if outcome.failure_reason_code else "")
        )
        return await self._end(
            "completed" if succeeded else "mutation_" + outcome.status.value,
            "succeeded" if succeeded else "failed",
            mutation_id=mutation_id,
            mutation_status=outcome.status.value,
            error=error,
        )

    # -- adjust_params ------------------------------------------------------------------------------

    async def _adjust_params(self, context: CycleContext, plan: EvolutionPlan) -> dict[str, Any]:
        await self._record("applying_params")
        change: dict[str, Any] = await workflow.execute_activity(
            names.APPLY_WORLD_PARAMS,
            ParamsApply(trigger_id=self._trigger_id, workflow_id=self._workflow_id, params=plan.params or {}),
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=LOCAL_RETRY,
        )
        await self._record("observing", params_change=change, mutation_status=MutationStatus.activated.value)
        window = context.observation_window_ticks
        try:
            await workflow.wait_condition(
                lambda: (
                    self._first is not None
                    and self._latest is not None
                    and self._latest.tick - self._first.tick >= window
                ),
                timeout=timedelta(seconds=context.observation_timeout_s),
            )
        except TimeoutError:
            return await self._end(
                "completed",
                "succeeded",
                mutation_status=MutationStatus.kept.value,
                error="the engine reported no complete observation window; kept without a verdict",
            )
        assert self._first is not None and self._latest is not None
        effects = compute_effects("", self._first, self._latest)
        fitness = verdict(effects, context.rollback_threshold)
        change = {**change, "effects": effects.model_dump(), "fitness_verdict": fitness}
        if fitness != "negative":
            return await self._end(
                "completed", "succeeded", mutation_status=MutationStatus.kept.value, params_change=change
            )
        reason = "population_decline" if effects.entity_count_delta < 0 else "negative_fitness"
        await workflow.execute_activity(
            names.REVERT_WORLD_PARAMS,
            ParamsRevert(
                trigger_id=self._trigger_id,
                workflow_id=self._workflow_id,
                previous_overrides=change.get("previous_overrides") or {},
                reason=reason,
            ),
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=LOCAL_RETRY,
        )
        return await self._end(
            "rolled_back",
            "succeeded",
            mutation_status=MutationStatus.rolled_back.value,
            params_change=change,
            error=f"rolled back: {reason} (fitness {effects.fitness_delta:+.3f})",
        )

    # -- helpers ------------------------------------------------------------------------------------

    async def _llm_failed(self, agent: str, err: ActivityError) -> dict[str, Any]:
        cause = err.cause
        if isinstance(cause, ApplicationError) and cause.type:
            code, message = cause.type, cause.message  # ours says which step and which server
        else:
            code, message = "LLM_UNAVAILABLE", _root_message(err)
        await self._feed(agent, "llm_error", f"{message}. Skipping this cycle; the world goes on.", error=code)
        return await self._end("llm_error", "failed", error=f"{code}: {message}")

    async def _end(self, stage: str, status: str, **fields: Any) -> dict[str, Any]:
        await self._record(stage, status=status, **fields)
        action = "cycle_completed" if status == "succeeded" else "cycle_failed"
        detail = fields.get("error") or fields.get("mutation_status") or stage
        await self._feed(
            "evolution",
            action,
            f"Evolution cycle {self._trigger_id} ended: {stage} ({detail})",
            mutation_id=fields.get("mutation_id"),
            stage=stage,
        )
        return dict(self._state)

    async def _record(self, stage: str, status: str = "running", **fields: Any) -> None:
        self._state.update(
            {
                "trigger_id": self._trigger_id,
                "stage": stage,
                "status": status,
                **{k: v for k, v in fields.items() if v is not None},
            }
        )
        await workflow.execute_local_activity(
            names.RECORD_CYCLE,
            CycleUpdate(trigger_id=self._trigger_id, stage=stage, status=status, **fields),
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=LOCAL_RETRY,
        )

    async def _feed(self, agent: str, action: str, message: str, mutation_id: str | None = None, **extra: Any) -> None:
        await workflow.execute_local_activity(
            names.PUBLISH_FEED,
            FeedPost(
                agent=agent,
                action=action,
                message=message,
                trigger_id=self._trigger_id,
                mutation_id=mutation_id or self._state.get("mutation_id"),
                workflow_id=self._workflow_id,
                extra=extra,
            ),
            start_to_close_timeout=timedelta(seconds=10),
            retry_policy=LOCAL_RETRY,
        )


def _root_message(err: BaseException) -> str:
    while err.__cause__ is not None:
        err = err.__cause__
    return str(err)
