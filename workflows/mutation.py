"""MutationWorkflow: validate → sandbox → verdict, every transition persisted and searchable.

Orchestration only: no I/O here. Activities are referenced by name."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, FailureError

with workflow.unsafe.imports_passed_through():
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
        TraitShadowOutcome,
        TraitShadowRequest,
        ValidationOutcome,
        ValidationRequest,
        WebhookDelivery,
    )
    from genesis.effects import INCONCLUSIVE, CarrierMinimum, WorldSample, compute_effects, trait_verdict, verdict
    from genesis.workflow_api import (
        MUTATION_APPROVAL_SIGNAL,
        MUTATION_WORKFLOW,
        SA_AGENT_ID,
        SA_FAILURE_CODE,
        SA_STATUS,
        SA_TRAIT_NAME,
        TASK_SIGNAL_MUTATION_ACTIVATED,
        journal_task_queue,
        task_workflow_id,
        verdict_task_queue,
    )

VERDICT_CODES = {code.value for code in FailureCode}

# Short database writes and the pure gatekeeper: local activities, retried on infrastructure errors.
LOCAL_RETRY = RetryPolicy(initial_interval=timedelta(milliseconds=200), maximum_interval=timedelta(seconds=10))
# Docker hiccups are retried for up to an hour of schedule time; verdicts are results, not errors.
SANDBOX_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30))
LIFECYCLE_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30))
WEBHOOK_EVENT = "MutationStatusChanged"
# Histories recorded before a verdict needed carriers replay with the world-only verdict.
VERDICT_NEEDS_CARRIERS = "verdict-needs-carriers"
# Histories recorded before the manifest's approval rules replay without asking about them.
APPROVALS = "approvals"
# ... and before the shadow of a held mutation's trait in a fork of the live world.
APPROVAL_SHADOW = "approval-shadow"
# Runs started before it took the first decision whenever it came, naming a report or not; later
# runs take only decisions sent at the approval stage, and an approval only of the report shown.
APPROVAL_AT_STAGE = "approval-at-stage"
# ... and before a trait's verdict was an experiment in forks of the live world.
VERDICT_EXPERIMENT = "verdict-experiment"
# A replicate that keeps failing (its trait host, Docker) is given up after these attempts.
REPLICATE_RETRY = RetryPolicy(initial_interval=timedelta(seconds=2), maximum_attempts=3)
# A shadow is information for the operator, never a verdict: after these attempts the mutation
# waits for a decision without one.
SHADOW_RETRY = RetryPolicy(initial_interval=timedelta(seconds=2), maximum_attempts=3)


@workflow.defn(name=MUTATION_WORKFLOW)
class MutationWorkflow:
    def __init__(self) -> None:
        self._result: MutationResult | None = None
        self._rollback_reason: str | None = None
        self._first_sample: WorldSample | None = None
        self._latest_sample: WorldSample | None = None
        self._mutation: MutationInput | None = None
        # Status changes waiting to be POSTed to notify_url, sent in order by one sender task.
        self._webhooks: list[WebhookDelivery] = []
        self._webhook_sender: asyncio.Task | None = None
        self._notified_status: MutationStatus | None = None
        self._webhook_sequence = 0
        self._decisions: list[MutationApproval] = []  # every approval signal, in order

    @workflow.query(name="status")
    def status(self) -> MutationResult | None:
        return self._result

    @workflow.signal(name="rollback")
    def request_rollback(self, reason: str) -> None:
        """Operator or API: deregister this trait (restoring the previous version, if any)."""
        if self._rollback_reason is None:
            self._rollback_reason = reason or "requested"

    @workflow.signal(name=MUTATION_APPROVAL_SIGNAL)
    def decide_approval(self, decision: MutationApproval) -> None:
        """An operator's decision on a mutation awaiting approval; which one counts is decided at
        that stage (``_decision``)."""
        self._decisions.append(decision)

    def _decision(self, since: int, report_hash: str | None) -> MutationApproval | None:
        """The first decision sent at the approval stage (from ``since``) that holds: a rejection,
        or an approval of the report the operator was shown (any approval when there is none)."""
        for decision in self._decisions[since:]:
            if decision.decision == "reject" or report_hash is None or decision.report_hash == report_hash:
                return decision
        return None

    @workflow.signal(name="world_snapshot")
    def world_snapshot(self, sample: WorldSample) -> None:
        """The engine reports each telemetry snapshot while this trait is live."""
        if self._first_sample is None or sample.run_id != self._first_sample.run_id:
            self._first_sample = sample  # first report, or the engine restarted: the window starts over
        self._latest_sample = sample

    @workflow.run
    async def run(self, mutation: MutationInput) -> MutationResult:
        self._mutation = mutation
        try:
            return await self._run(mutation)
        finally:  # the record is final already; deliver what the receiver has not got yet
            if self._webhook_sender is not None:
                await self._webhook_sender

    async def _run(self, mutation: MutationInput) -> MutationResult:
        self._result = MutationResult(mutation_id=mutation.mutation_id, status=MutationStatus.queued)
        workflow.upsert_search_attributes(
            [SA_AGENT_ID.value_set(mutation.agent_id), SA_TRAIT_NAME.value_set(mutation.trait_name)]
        )
        accepted = ["Accepted: validation started"]
        sandbox_line = f"Sandbox: running {mutation.trait_name} in a fresh trait-host container"
        # One local activity records "validating", validates and, on a pass, records the log with
        # the code-hash claim: the workflow builds both records and follows them in its own state.
        update = self._follow(MutationStatus.validating, log=accepted)
        validation = ValidationRequest(mutation=mutation, accepted=update, next_line=sandbox_line)
        try:
            outcome: ValidationOutcome = await _local_activity(
                names.VALIDATE_AND_RECORD_MUTATION, validation, result_type=ValidationOutcome
            )
        except (ActivityError, ApplicationError) as err:
            rejection = _verdict_of(err)
            if rejection is None:  # validation could not run at all (e.g. Postgres down past retries)
                await self._finish(MutationStatus.failed, None, [f"Validation could not run: {_root_message(err)}"])
                raise
            self._notify(MutationStatus.validating, accepted, None, {})  # recorded before it validated
            return await self._finish(MutationStatus.rejected, rejection.failure_code, rejection.validation_log)

        log = [*outcome.validation_log, sandbox_line]
        self._notify(MutationStatus.validating, accepted, None, {})
        self._follow(MutationStatus.validating, log=log, class_name=outcome.class_name, code_hash=outcome.code_hash)
        try:
            report: SandboxReport = await workflow.execute_activity(
                names.RUN_SANDBOX_TEST,
                SandboxRequest(
                    mutation_id=mutation.mutation_id,
                    trait_name=mutation.trait_name,
                    class_name=outcome.class_name or "",
                    code=mutation.code,
                ),
                result_type=SandboxReport,
                start_to_close_timeout=timedelta(minutes=5),
                schedule_to_close_timeout=timedelta(hours=1),
                heartbeat_timeout=timedelta(seconds=10),
                retry_policy=SANDBOX_RETRY,
            )
        except ActivityError as err:
            log[-1] = f"Sandbox: could not run (infrastructure): {_root_message(err)}"
            await self._finish(MutationStatus.failed, None, log)
            raise ApplicationError(f"sandbox test could not run: {_root_message(err)}", non_retryable=True) from err

        # The verdict's line takes the place of the "running" line; the activity wrote nothing.
        sandbox_report = report.model_dump()
        if report.verdict == "ok":
            log = [*log[:-1], report.log_line()]
            if not mutation.activate:
                return await self._finish(MutationStatus.sandbox_ok, None, log, sandbox_report)
            await self._transition(MutationStatus.sandbox_ok, log=log, sandbox_report=sandbox_report)
            if workflow.patched(APPROVALS):
                refused = await self._await_approval(mutation, outcome, log, sandbox_report)
                if refused is not None:
                    return refused
            return await self._live(mutation, outcome, log, sandbox_report)
        log = [*log[:-1], report.log_line()]
        return await self._finish(MutationStatus.rejected, report.verdict, log, sandbox_report)

    async def _await_approval(
        self, mutation: MutationInput, outcome: ValidationOutcome, log: list[str], sandbox_report: dict
    ) -> MutationResult | None:
        """Where the manifest's approval rules say so, wait for an operator's decision on a
        durable timer: None when approved (``log`` says by whom), else the rejected result."""
        need: ApprovalNeed = await _local_activity(
            names.APPROVAL_NEEDED,
            ApprovalQuery(
                mutation_id=mutation.mutation_id,
                agent_id=mutation.agent_id,
                trait_name=mutation.trait_name,
                replaces_live=mutation.replaces is not None,
            ),
            result_type=ApprovalNeed,
        )
        if not need.required:
            return None
        shadow_report = await self._shadow(mutation, outcome, log) if workflow.patched(APPROVAL_SHADOW) else None
        if workflow.patched(APPROVAL_AT_STAGE):  # counted before the stage begins: none sent at it is missed
            since, shown = len(self._decisions), (shadow_report or {}).get("report_hash")
        else:
            since, shown = 0, None
        log.append(f"Approval: waiting for an operator ({need.reason}); it expires in {need.ttl_sec} s")
        await self._transition(
            MutationStatus.awaiting_approval, log=log, sandbox_report=sandbox_report, shadow_report=shadow_report
        )
        try:
            await workflow.wait_condition(
                lambda: self._decision(since, shown) is not None, timeout=timedelta(seconds=need.ttl_sec)
            )
        except TimeoutError:
            expired = [*log, f"Approval: expired, no operator decided within {need.ttl_sec} s"]
            return await self._finish(
                MutationStatus.rejected, FailureCode.APPROVAL_EXPIRED.value, expired, sandbox_report
            )
        decided = self._decision(since, shown)
        assert decided is not None
        if decided.decision == "reject":
            why = [*log, f"Approval: rejected by {decided.by}: {decided.reason or 'no reason given'}"]
            return await self._finish(MutationStatus.rejected, FailureCode.APPROVAL_REJECTED.value, why, sandbox_report)
        log.append(f"Approval: approved by {decided.by}")
        return None

    async def _shadow(self, mutation: MutationInput, outcome: ValidationOutcome, log: list[str]) -> dict | None:
        """The trait's shadow in a fork of the live world, for the operator who decides (its line
        in ``log``): the report with its hash, or None when none could be run."""
        log.append(f"Shadow: running {mutation.trait_name} beside the live traits in a fork of the world")
        await self._transition(MutationStatus.sandbox_ok, log=log)
        try:
            shadow: TraitShadowOutcome = await workflow.execute_activity(
                names.SHADOW_MUTATION,
                TraitShadowRequest(
                    mutation_id=mutation.mutation_id,
                    agent_id=mutation.agent_id,
                    trait_name=mutation.trait_name,
                    class_name=outcome.class_name or "",
                    code=mutation.code,
                    code_hash=outcome.code_hash or "",
                ),
                result_type=TraitShadowOutcome,
                task_queue=journal_task_queue(workflow.info().task_queue),
                start_to_close_timeout=timedelta(minutes=15),
                heartbeat_timeout=timedelta(seconds=30),
                retry_policy=SHADOW_RETRY,
            )
        except ActivityError as err:
            log[-1] = f"Shadow: could not run ({_root_message(err)}); decide on the sandbox report"
            return None
        if shadow.report is None:
            log[-1] = f"Shadow: not run ({shadow.not_run}); decide on the sandbox report"
            return None
        log[-1] = _shadow_line(shadow.report)
        return {**shadow.report, "report_hash": shadow.report_hash}

    async def _transition(
        self,
        status: MutationStatus,
        *,
        log: list[str],
        failure_code: str | None = None,
        class_name: str | None = None,
        code_hash: str | None = None,
        sandbox_report: dict | None = None,
        **later: Any,
    ) -> None:
        """Persist one status change (``later``: trait_version, effects, fitness_verdict, rollback_reason).
        The workflow is the only writer of its mutation's status: every change goes through here
        (or, in its first task, through the validation activity it hands the record to)."""
        update = self._follow(
            status,
            log=log,
            failure_code=failure_code,
            class_name=class_name,
            code_hash=code_hash,
            sandbox_report=sandbox_report,
            **later,
        )
        await _local_activity(names.RECORD_MUTATION_STATUS, update)
        self._notify(status, log, failure_code, later)

    def _follow(
        self,
        status: MutationStatus,
        *,
        log: list[str],
        failure_code: str | None = None,
        class_name: str | None = None,
        code_hash: str | None = None,
        sandbox_report: dict | None = None,
        **later: Any,
    ) -> StatusUpdate:
        """A status change in the workflow's own state (the status query, search attributes);
        returns the record of it, for an activity to persist."""
        assert self._result is not None
        carried = {
            k: getattr(self._result, k)
            for k in ("trait_version", "effects", "fitness_verdict", "shadow_report", "verdict_report")
        }
        self._result = MutationResult(
            mutation_id=self._result.mutation_id,
            status=status,
            failure_reason_code=failure_code,
            validation_log=log,
            sandbox_report=sandbox_report if sandbox_report is not None else self._result.sandbox_report,
            **{**carried, **{k: v for k, v in later.items() if k in carried and v is not None}},
        )
        attributes = [SA_STATUS.value_set(status.value)]
        if failure_code:
            attributes.append(SA_FAILURE_CODE.value_set(failure_code))
        workflow.upsert_search_attributes(attributes)
        return StatusUpdate(
            mutation_id=self._result.mutation_id,
            status=status,
            failure_reason_code=failure_code,
            validation_log=log,
            class_name=class_name,
            code_hash=code_hash,
            sandbox_report=sandbox_report,
            **later,
        )

    def _notify(self, status: MutationStatus, log: list[str], failure_code: str | None, later: dict) -> None:
        """Queue a webhook for a status change (not for a rewrite of the same status)."""
        mutation = self._mutation
        if mutation is None or not mutation.notify_url or status == self._notified_status:
            return
        previous = self._notified_status or MutationStatus.queued
        self._notified_status = status
        self._webhook_sequence += 1
        sequence = self._webhook_sequence
        now = workflow.now().timestamp()
        event = {
            "event": WEBHOOK_EVENT,
            "sequence": sequence,
            "mutation_id": mutation.mutation_id,
            "agent_id": mutation.agent_id,
            "trait_name": mutation.trait_name,
            "task_id": mutation.task_id,
            "status": status.value,
            "previous_status": previous.value,
            "failure_reason_code": failure_code,
            "message": log[-1] if log else None,
            "occurred_at": round(now, 3),
            "status_url": f"/api/mutations/{mutation.mutation_id}/status",
            **{
                k: later[k] for k in ("trait_version", "fitness_verdict", "rollback_reason") if later.get(k) is not None
            },
        }
        verdict_reason = (later.get("effects") or {}).get("verdict_reason")
        if verdict_reason:  # why the verdict is what it is (inconclusive: too few carriers to judge)
            event["verdict_reason"] = verdict_reason
        self._webhooks.append(
            WebhookDelivery(
                delivery_id=(
                    f"{mutation.mutation_id}.{workflow.info().run_id[:8]}.{sequence}"
                    if mutation.retried
                    else f"{mutation.mutation_id}.{sequence}"
                ),
                mutation_id=mutation.mutation_id,
                agent_id=mutation.agent_id,
                notify_url=mutation.notify_url,
                event=event,
                deadline=now + mutation.webhook_retry_window_s,
            )
        )
        if self._webhook_sender is None or self._webhook_sender.done():
            self._webhook_sender = asyncio.create_task(self._send_webhooks(mutation))

    async def _send_webhooks(self, mutation: MutationInput) -> None:
        """One at a time, in order; each retried until its deadline. A receiver that is down
        delays only its own notifications, never the mutation (its status is already recorded)."""
        retry = RetryPolicy(
            initial_interval=timedelta(seconds=1),
            backoff_coefficient=2.0,
            maximum_interval=timedelta(seconds=mutation.webhook_max_retry_interval_s),
            non_retryable_error_types=["WEBHOOK_URL_FORBIDDEN", "WEBHOOK_REFUSED"],
        )
        while self._webhooks:
            delivery = self._webhooks.pop(0)
            remaining = delivery.deadline - workflow.now().timestamp()
            if remaining <= 1:
                workflow.logger.warning("webhook %s dropped: its retry window closed", delivery.delivery_id)
                continue
            try:
                await workflow.execute_activity(
                    names.DELIVER_WEBHOOK,
                    delivery,
                    start_to_close_timeout=timedelta(seconds=30),
                    schedule_to_close_timeout=timedelta(seconds=remaining),
                    retry_policy=retry,
                )
            except ActivityError as err:
                workflow.logger.warning("webhook %s not delivered: %s", delivery.delivery_id, _root_message(err))

    async def _finish(
        self,
        status: MutationStatus,
        failure_code: str | None,
        log: list[str],
        sandbox_report: dict | None = None,
        **later: Any,
    ) -> MutationResult:
        await self._transition(
            status, log=log, failure_code=failure_code, sandbox_report=sandbox_report, final=True, **later
        )
        assert self._result is not None
        return self._result

    async def _live(
        self, mutation: MutationInput, outcome: ValidationOutcome, log: list[str], sandbox_report: dict
    ) -> MutationResult:
        """activate → observe the world for the window → keep, or roll back."""
        if self._rollback_reason is not None:  # withdrawn before it went live
            log.append(f"Rollback: requested before activation ({self._rollback_reason}); never activated")
            return await self._finish(MutationStatus.rolled_back, None, log, rollback_reason=self._rollback_reason)
        request = ActivationRequest(
            mutation_id=mutation.mutation_id,
            trait_name=mutation.trait_name,
            class_name=outcome.class_name or "",
            code=mutation.code,
            code_hash=outcome.code_hash or "",
            proposer_agent_id=mutation.agent_id,
            replacement_approved_by=mutation.replacement_approved_by,
        )
        expects = _expected_live_version(mutation)
        if expects is not None:
            request.check_live_version, request.expected_live_version = True, expects[0]
        activation: ActivationResult = await workflow.execute_activity(
            names.ACTIVATE_TRAIT,
            request,
            result_type=ActivationResult,
            start_to_close_timeout=timedelta(seconds=30),
            schedule_to_close_timeout=timedelta(minutes=30),
            retry_policy=LIFECYCLE_RETRY,
        )
        if activation.conflict is not None:  # the live version changed while it was in its sandbox test
            log.append(activation.conflict)  # VERSION_CONFLICT, or NOT_TRAIT_OWNER: another agent's is live now
            return await self._finish(MutationStatus.rejected, activation.conflict_code, log)
        replaced = f", replacing v{activation.previous_version}" if activation.previous_version else ""
        log.append(
            f"Activation: trait_{mutation.trait_name}_v{activation.trait_version}.py is live "
            f"(registry v{activation.registry_version}{replaced})"
        )
        if mutation.experiment is not None:  # the line _judge_by_experiment starts from
            log.append(_experiment_line(mutation.experiment))
        else:
            log.append(f"Observation: watching {mutation.observation_window_ticks} world ticks")
        await self._transition(MutationStatus.activated, log=log, trait_version=activation.trait_version)
        if mutation.task_id:
            await self._close_task(mutation)
        if mutation.experiment is not None and workflow.patched(VERDICT_EXPERIMENT):
            return await self._judge_by_experiment(mutation, mutation.experiment, activation, log)

        window = mutation.observation_window_ticks
        try:
            await workflow.wait_condition(
                lambda: self._rollback_reason is not None or self._window_complete(window),
                timeout=timedelta(seconds=mutation.observation_timeout_s),
            )
            observed = True
        except TimeoutError:
            observed = False
        effects = None
        if self._rollback_reason is None and observed:
            assert self._first_sample is not None and self._latest_sample is not None
            effects = compute_effects(mutation.trait_name, self._first_sample, self._latest_sample)
            if workflow.patched(VERDICT_NEEDS_CARRIERS):
                minimum = CarrierMinimum(mutation.min_carriers, mutation.min_carrier_share)
                effects, fitness = trait_verdict(
                    effects, self._first_sample.entity_count, mutation.rollback_threshold, minimum
                )
            else:
                fitness = verdict(effects, mutation.rollback_threshold)
            log[-1] = (
                f"Observation: {effects.window_ticks} ticks — population {effects.entity_count_delta:+d}, "
                f"avg energy {effects.avg_energy_delta:+.1f}, starvation deaths {effects.death_starvation_delta:+d}, "
                f"fitness {effects.fitness_delta:+.3f} → {fitness}"
                + _carriers_note(fitness, effects.carriers_seen, effects.carriers_needed)
            )
            if fitness != "negative":
                return await self._finish(
                    MutationStatus.kept, None, log, effects=effects.model_dump(), fitness_verdict=fitness
                )
            self._rollback_reason = "population_decline" if effects.entity_count_delta < 0 else "negative_fitness"
            await self._transition(
                MutationStatus.activated, log=log, effects=effects.model_dump(), fitness_verdict=fitness
            )
        elif self._rollback_reason is None:
            log[-1] = (
                f"Observation: the engine reported no complete {window}-tick window within "
                f"{mutation.observation_timeout_s:.0f}s (is `python -m engine` running?); kept without a verdict"
            )
            return await self._finish(MutationStatus.kept, None, log)

        return await self._roll_back(mutation, log, effects.fitness_delta if effects else None)

    async def _roll_back(self, mutation: MutationInput, log: list[str], fitness_delta: float | None) -> MutationResult:
        assert self._rollback_reason is not None
        rollback: RollbackResult = await workflow.execute_activity(
            names.ROLLBACK_TRAIT,
            RollbackRequest(
                mutation_id=mutation.mutation_id,
                trait_name=mutation.trait_name,
                reason=self._rollback_reason,
                fitness_delta=fitness_delta,
            ),
            result_type=RollbackResult,
            start_to_close_timeout=timedelta(seconds=30),
            schedule_to_close_timeout=timedelta(minutes=30),
            retry_policy=LIFECYCLE_RETRY,
        )
        restored = f"; v{rollback.restored_version} restored" if rollback.restored_version else ""
        log.append(f"Rollback: {self._rollback_reason}{restored}")
        return await self._finish(MutationStatus.rolled_back, None, log, rollback_reason=self._rollback_reason)

    async def _judge_by_experiment(
        self,
        mutation: MutationInput,
        settings: verdicts.ExperimentSettings,
        activation: ActivationResult,
        log: list[str],
    ) -> MutationResult:
        """The verdict from an experiment beside the live world (genesis/verdicts.py): replicates
        in batches on the verdict queue until the interval decides or the budget is spent; kept
        unless negative (with selection off: kept, the report recorded and no verdict given). The
        seed's world deltas over the window are reported beside it when the engine has reported
        the window by then; they do not decide."""
        assert activation.trait_version is not None
        queue = verdict_task_queue(workflow.info().task_queue)
        log[-1] = _experiment_line(settings)
        planned: verdicts.PlanOutcome = await workflow.execute_activity(
            names.PLAN_VERDICT,
            verdicts.PlanRequest(
                mutation_id=mutation.mutation_id,
                trait_name=mutation.trait_name,
                trait_version=activation.trait_version,
                previous_version=activation.previous_version,
                settings=settings,
            ),
            result_type=verdicts.PlanOutcome,
            task_queue=queue,
            start_to_close_timeout=timedelta(minutes=1),
            schedule_to_close_timeout=timedelta(minutes=30),
            retry_policy=LIFECYCLE_RETRY,
        )
        outcomes: list[verdicts.ReplicateOutcome] = []
        fitness: str | None = None
        report: dict | None = None
        failed_part_way = False
        if planned.plan is None:
            fitness, reason = INCONCLUSIVE, f"no experiment could run: {planned.not_run}"
        while planned.plan is not None and fitness is None and self._rollback_reason is None:
            start = len(outcomes)
            count = min(settings.min_replicates if not outcomes else settings.batch, settings.max_replicates - start)
            try:
                outcomes += await asyncio.gather(
                    *(self._replicate(planned.plan, index, queue) for index in range(start, start + count))
                )
            except ActivityError as err:
                fitness, reason = INCONCLUSIVE, f"the experiment could not run: {_root_message(err)}"
                failed_part_way = True
                break
            fitness, reason, _ = verdicts.decide(settings, outcomes)
            log[-1] = f"Verdict: {len(outcomes)} replicates — {reason}"
            await self._transition(MutationStatus.activated, log=log)
        if planned.plan is not None and outcomes:
            report = verdicts.report(planned.plan, outcomes)
            if failed_part_way:  # the report of the replicates that ran says why it stopped
                report.update(verdict=INCONCLUSIVE, reason=reason)
                report["report_hash"] = verdicts.report_hash(report)
        if self._rollback_reason is None:
            assert fitness is not None
            ticks = report["ticks"] if report is not None else 0
            log[-1] = f"Verdict: {fitness} — {reason} ({len(outcomes)} replicates, {ticks:,} ticks)"
            effects = self._window_effects(mutation, reason)
            if not mutation.selection:  # only inputs made with selection off: recorded, not acted on
                log[-1] = f"Verdict, not acted on (selection is off): {log[-1].removeprefix('Verdict: ')}"
                return await self._finish(MutationStatus.kept, None, log, effects=effects, verdict_report=report)
            if fitness != verdicts.NEGATIVE:
                return await self._finish(
                    MutationStatus.kept, None, log, effects=effects, fitness_verdict=fitness, verdict_report=report
                )
            self._rollback_reason = f"negative verdict: {reason}"
            await self._transition(
                MutationStatus.activated, log=log, effects=effects, fitness_verdict=fitness, verdict_report=report
            )
        return await self._roll_back(mutation, log, None)

    async def _replicate(self, plan: verdicts.ExperimentPlan, index: int, queue: str) -> verdicts.ReplicateOutcome:
        return await workflow.execute_activity(
            names.RUN_VERDICT_REPLICATE,
            verdicts.ReplicateRequest(plan=plan, index=index),
            result_type=verdicts.ReplicateOutcome,
            task_queue=queue,
            schedule_to_close_timeout=timedelta(hours=1),  # queued behind other verdicts' replicates
            start_to_close_timeout=timedelta(minutes=15),
            heartbeat_timeout=timedelta(seconds=30),
            retry_policy=REPLICATE_RETRY,
        )

    def _window_effects(self, mutation: MutationInput, reason: str) -> dict | None:
        """The seed's world deltas over the window, if the engine has reported it by now."""
        if not self._window_complete(mutation.observation_window_ticks):
            return None
        assert self._first_sample is not None and self._latest_sample is not None
        effects = compute_effects(mutation.trait_name, self._first_sample, self._latest_sample)
        return effects.model_copy(update={"verdict_reason": reason}).model_dump()

    async def _close_task(self, mutation: MutationInput) -> None:
        """The task this mutation answers is done: tell its TaskWorkflow (it may have ended already)."""
        assert mutation.task_id is not None
        try:
            await workflow.get_external_workflow_handle(task_workflow_id(mutation.task_id)).signal(
                TASK_SIGNAL_MUTATION_ACTIVATED, mutation.mutation_id
            )
        except FailureError as err:  # no such task, or it expired or was resolved before
            workflow.logger.info("task %s not signalled: %s", mutation.task_id, err)

    def _window_complete(self, window: int) -> bool:
        first, latest = self._first_sample, self._latest_sample
        return first is not None and latest is not None and latest.tick - first.tick >= window


def _experiment_line(settings: verdicts.ExperimentSettings) -> str:
    return (
        f"Verdict: an experiment in forks of the live world, {settings.horizon_ticks} ticks a copy, "
        f"{settings.min_replicates} to {settings.max_replicates} replicates"
    )


def _shadow_line(report: dict) -> str:
    """The validation log's line for a shadow report (activities/trait_shadow.py)."""
    b, c, name = report["baseline"], report["candidate"], report["trait"]["name"]
    line = (
        f"Shadow: {report['ticks']} ticks from tick {report['from_tick']} — population {c['population_end']} "
        f"with it, {b['population_end']} without ({report['differences']['population_end']:+d}), deaths "
        f"{report['differences']['deaths']:+d}; {c['carriers']['start']} Molbots carried it at the start, "
        f"{c['carriers']['max']} at most"
    )
    quarantined = c["traits"].get(name, {}).get("quarantined_at_tick")
    if quarantined is not None:
        line += f"; the engine would quarantine it at tick {quarantined}"
    return line


def _carriers_note(fitness: str, seen: int, needed: int | None) -> str:
    """What the observation line says about the trait's carriers (nothing in older histories)."""
    if needed is None:
        return ""
    if fitness == INCONCLUSIVE:
        return f": only {seen} Molbot(s) carried it, a verdict needs {needed}; kept"
    return f" ({seen} carriers)"


def _local_activity(name: str, arg: Any, result_type: type | None = None) -> Any:
    """A short database write or the gatekeeper, as a local activity retried on infrastructure errors."""
    return workflow.execute_local_activity(
        name, arg, result_type=result_type, start_to_close_timeout=timedelta(seconds=30), retry_policy=LOCAL_RETRY
    )


def _expected_live_version(mutation: MutationInput) -> tuple[int | None] | None:
    """The live version activation must find, as a 1-tuple (``(None,)``: none may be live), or
    None when activation replaces whatever is live (``replaces`` without a version, or the
    permissive policy)."""
    if mutation.replaces is not None:
        return (mutation.replaces.version,) if mutation.replaces.version is not None else None
    return (None,) if mutation.require_new else None


def _verdict_of(err: ActivityError | ApplicationError) -> ValidationOutcome | None:
    """The gatekeeper's rejection carried by a non-retryable ApplicationError, if that is what
    failed (a failed local activity may surface wrapped in ActivityError or bare)."""
    cause = err.cause if isinstance(err, ActivityError) else err
    if isinstance(cause, ApplicationError) and cause.type in VERDICT_CODES and cause.details:
        return ValidationOutcome.model_validate(cause.details[0])
    return None


def _root_message(err: BaseException) -> str:
    while err.__cause__ is not None:
        err = err.__cause__
    return str(err)
