"""The side effects of an evolution cycle: the world context, the Architect and Coder LLM calls
(with their token usage added to the cycle's row), the proposal the Coder makes, the cycle
record, feed messages, and world-parameter changes.

LLM failures are ApplicationErrors whose type is the error code: ``LLM_UNAVAILABLE`` is retried
by the workflow's retry policy; ``LLM_OFF``, ``LLM_BAD_REPLY`` and ``LLM_UNPARSEABLE`` are not."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

import redis.asyncio as aioredis
from prometheus_client import Counter
from sqlalchemy import select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import async_sessionmaker
from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

import gatekeeper
from activities import names
from engine.core.model import world_params as configured_world_params
from evolution import feed, llm, operator, prompts, tasks, world_metrics
from evolution.watcher import deltas as telemetry_deltas
from genesis import redis_keys as keys, world_params
from genesis.config import Settings
from genesis.db.models import EvolutionCycle, Mutation, TraitVersion
from genesis.dto import (
    AgentTask,
    CoderRequest,
    CoderResult,
    CycleContext,
    CycleKind,
    CycleUpdate,
    EvolutionCycleInput,
    EvolutionPlan,
    FailureCode,
    FeedPost,
    Lineage,
    MutationInput,
    MutationStatus,
    ParamsApply,
    ParamsRevert,
    ParentVersion,
    ProposalRequest,
    TaskSeverity,
)
from genesis.ids import mutation_workflow_id
from genesis.workflow_api import evolution_workflow_id, llm_task_queue
from pipeline import lineage
from pipeline.mutation_proposals import mutation_input

CODER_AGENT_ID = "genesis-coder"
# The built-in evolution acts for the operator who runs the world: it may modify any agent's
# trait, and its proposals record that approval (activation checks the live version's owner).
EVOLUTION_APPROVAL = "the built-in evolution"
UNPARSEABLE = "LLM_UNPARSEABLE"
OPERATOR_DRAWS = 5  # seeds the built-in operator tries for code no mutation had yet

# Prometheus (the worker's /metrics, GENESIS_WORKER_METRICS_PORT)
LLM_CALLS = Counter("genesis_llm_calls", "LLM calls of evolution cycles: ok or the error code", ["provider", "outcome"])
LLM_TOKENS = Counter("genesis_llm_tokens", "Tokens of evolution cycles' LLM answers", ["provider", "direction"])
CYCLES_ENDED = Counter(
    "genesis_evolution_cycles_ended", "Evolution cycles that ended, by status and stage", ["status", "stage"]
)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _json(value: Any, default: Any) -> Any:
    try:
        return json.loads(value) if value else default
    except ValueError:
        return default


def _snapshot_report(snapshot: dict[str, Any], history: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "tick": snapshot.get("tick"),
        "entity_count": snapshot.get("entity_count"),
        "avg_energy": round(float(snapshot.get("avg_energy") or 0.0), 2),
        "deaths_last_period": snapshot.get("deaths_last_period"),
        "births_last_period": snapshot.get("births_last_period"),
        "resource_density": snapshot.get("resource_density"),
        "death_breakdown": {c: int(snapshot.get(f"death_{c}") or 0) for c in world_metrics.DEATH_CAUSES},
        "deltas": telemetry_deltas(history),
    }


def _expected(message: str, code: str, retryable: bool = False) -> ApplicationError:
    """An LLM that is away or answers nonsense is an expected outcome, not a bug: BENIGN keeps the
    SDK from logging each failed attempt with a full traceback (seconds of rendering under load)."""
    return ApplicationError(message, type=code, non_retryable=not retryable, category=ApplicationErrorCategory.BENIGN)


class EvolutionActivities:
    def __init__(self, settings: Settings, sessions: async_sessionmaker, redis: aioredis.Redis):
        self._settings = settings
        self._sessions = sessions
        self._redis = redis

    # -- context -------------------------------------------------------------------------------

    @activity.defn(name=names.LOAD_CYCLE_CONTEXT)
    async def load_cycle_context(self, cycle: EvolutionCycleInput) -> CycleContext:
        """Step A: the WorldReport the Watcher wrote (``evo:trigger:{id}``), else — a periodic
        run, or a report that expired — the latest snapshots; the live traits; the adjustable
        world parameters in force."""
        s = self._settings
        trigger_id = cycle.trigger_id or ""
        raw = {_text(k): _text(v) for k, v in (await self._redis.hgetall(keys.evolution_trigger(trigger_id))).items()}
        if raw:
            snapshot = _json(raw.get("snapshot"), {})
            report = _snapshot_report(snapshot, [])
            report["deltas"] = _json(raw.get("deltas"), {})
            report["death_breakdown"] = _json(raw.get("death_breakdown"), report["death_breakdown"])
            problem, severity = raw.get("problem_type", "unknown"), raw.get("severity", "medium")
            area, task_id = raw.get("suggested_area", "traits"), raw.get("task_id") or None
        else:
            history = await world_metrics.recent_snapshots(self._redis, s.engine.snapshot_interval)
            report = _snapshot_report(history[0], history) if history else {}
            problem = "periodic_improvement" if cycle.kind == CycleKind.periodic_improvement else "unknown"
            severity, area, task_id = "low", "traits", None
            if cycle.kind == CycleKind.periodic_improvement:
                task_id = await self._publish_periodic_task(
                    trigger_id, cycle.schedule_id, history[0] if history else {}
                )
        active = sorted(_text(k) for k in await self._redis.hkeys(keys.REGISTRY_TRAITS))
        return CycleContext(
            trigger_id=trigger_id,
            workflow_id=evolution_workflow_id(trigger_id),
            kind=cycle.kind,
            problem_type=problem,
            severity=severity,
            suggested_area=area,
            task_id=task_id,
            report=report,
            active_traits=active,
            world_params=await self._params_in_force(),
            observation_window_ticks=s.observation.window_ticks,
            observation_timeout_s=s.observation.timeout_s,
            rollback_threshold=s.rollback_threshold,
            llm_attempts=s.llm.attempts,
            llm_task_queue=llm_task_queue(s.task_queue),
        )

    async def _publish_periodic_task(self, trigger_id: str, schedule_id: str | None, curr: dict[str, Any]) -> str:
        """A ``periodic_improvement`` task for external agents beside the operator's own cycle
        (its TaskWorkflow publishes it, with that severity's time to live). Its id comes from the
        trigger's, so a retried activity starts it once."""
        from temporalio.exceptions import WorkflowAlreadyStartedError

        task = AgentTask(
            task_id=f"task_{hashlib.sha256(trigger_id.encode()).hexdigest()[:12]}",
            expires_at=round(time.time() + self._settings.task.ttl_s(TaskSeverity.periodic_improvement.value), 3),
            source="schedule",
            problem_type="periodic_improvement",
            severity=TaskSeverity.periodic_improvement,
            description="Periodic improvement: no anomaly, but the world could thrive better. A trait that helps "
            "Molbots gather energy, live longer or raise more offspring is welcome"
            + (f" (schedule {schedule_id})" if schedule_id else ""),
            world_context={
                "tick": int(curr.get("tick", 0)),
                "entity_count": int(curr.get("entity_count", 0)),
                "avg_energy": float(curr.get("avg_energy", 0.0)),
                "trait_diversity": int(curr.get("trait_diversity", 0)),
                "trigger_id": trigger_id,
            },
            constraints=list(tasks.TASK_CONSTRAINTS),
        )
        try:
            await tasks.start_workflow(activity.client(), self._settings.task_queue, task)
        except WorkflowAlreadyStartedError:
            return task.task_id  # an earlier attempt of this activity started it
        await feed.publish(
            self._redis, "scheduler", "task_published",
            f"Task {task.task_id} (periodic_improvement) published for external agents", trigger_id=trigger_id,
            workflow_id=evolution_workflow_id(trigger_id), task_id=task.task_id, problem_type=task.problem_type,
        )  # fmt: skip
        return task.task_id

    async def _params_in_force(self) -> dict[str, float]:
        """The adjustable parameters of the running world (``engine:params``), else the
        configured ones with the current overrides."""
        running = _json(await self._redis.get(keys.ENGINE_PARAMS), None)
        if not isinstance(running, dict):
            running = asdict(configured_world_params(self._settings.engine))
            running.update(
                world_params.clean_overrides(
                    world_params.read_record(await self._redis.get(keys.WORLD_PARAMS_OVERRIDES)).get("overrides")
                )
            )
        return {name: running[name] for name in world_params.ALLOWED if name in running}

    # -- the LLM steps --------------------------------------------------------------------------

    async def _ask(self, trigger_id: str, step: str, system: str, prompt: str) -> str:
        """One LLM call; its tokens and cost are added to the cycle's row."""
        try:
            reply = await llm.complete(self._settings, system, prompt)
        except llm.LLMError as exc:
            LLM_CALLS.labels(self._settings.llm.provider, exc.code).inc()
            activity.logger.warning("%s of %s: %s", step, trigger_id, exc)  # one line, no traceback
            raise _expected(f"{step}: {exc}", exc.code, retryable=exc.retryable) from exc
        LLM_CALLS.labels(reply.provider, "ok").inc()
        LLM_TOKENS.labels(reply.provider, "in").inc(reply.tokens_in)
        LLM_TOKENS.labels(reply.provider, "out").inc(reply.tokens_out)
        cost = llm.estimated_cost(self._settings, reply.tokens_in, reply.tokens_out)
        async with self._sessions() as session:
            await session.execute(
                update(EvolutionCycle)
                .where(EvolutionCycle.trigger_id == trigger_id)
                .values(
                    llm_calls=EvolutionCycle.llm_calls + 1,
                    tokens_in=EvolutionCycle.tokens_in + reply.tokens_in,
                    tokens_out=EvolutionCycle.tokens_out + reply.tokens_out,
                    estimated_cost_usd=EvolutionCycle.estimated_cost_usd + cost,
                    provider=reply.provider,
                    model=reply.model,
                    updated_at=datetime.now(UTC),
                )
            )
            await session.commit()
        activity.logger.info("%s of %s: %d tokens in, %d out", step, trigger_id, reply.tokens_in, reply.tokens_out)
        return reply.text

    # -- the built-in operator (GENESIS_LLM_PROVIDER=builtin) ---------------------------------------

    def _builtin(self, trigger_id: str) -> bool:
        """The operator plans and codes the cycle: it is the provider, or it is mixed in beside
        an LLM and draws this cycle."""
        llm_settings = self._settings.llm
        if llm_settings.provider == operator.PROVIDER:
            return True
        return llm_settings.provider != "off" and operator.takes_cycle(trigger_id, llm_settings.builtin_share)

    async def _fit_parents(self) -> dict[str, tuple[str, ParentVersion]]:
        """The live traits whose carriers did well (``operator.fit_parent``): the operator's
        parents, each with its source and its live version. With selection off
        (GENESIS_VERDICT_MODE=off) fitness informs nothing: every live trait may be a parent."""
        selection = self._settings.verdict.mode != "off"
        query = (
            select(
                TraitVersion.trait_name,
                TraitVersion.version,
                TraitVersion.mutation_id,
                TraitVersion.code,
                Mutation.fitness_verdict,
                Mutation.effects,
                Mutation.verdict_report.is_not(None),
            )
            .join(Mutation, Mutation.mutation_id == TraitVersion.mutation_id)
            .where(TraitVersion.status == "active")
        )
        if selection:
            query = query.where(Mutation.fitness_verdict.in_(operator.FIT_VERDICTS))
        async with self._sessions() as session:
            rows = (await session.execute(query)).all()
        return {
            name: (code, lineage.parent_version(name, version, mutation_id))
            for name, version, mutation_id, code, verdict, effects, by_experiment in rows
            if not selection or operator.fit_parent(verdict, effects, by_experiment)
        }

    async def _known_code(self, code_hash: str | None) -> Mutation | None:
        """A mutation that already had this code (any status): proposing it again is a waste of
        a cycle and of the feed (``DUPLICATE_CODE`` at best)."""
        if code_hash is None:
            return None
        async with self._sessions() as session:
            return await session.scalar(select(Mutation).where(Mutation.code_hash == code_hash).limit(1))

    async def _builtin_code(self, request: CoderRequest) -> tuple[str, Lineage]:
        """The operator's variant and its lineage, a variant whose code no mutation had yet
        (up to ``OPERATOR_DRAWS`` seeds; the caller reports a duplicate if all were known)."""
        for draw in range(OPERATOR_DRAWS):
            code, origin = await self._builtin_variant(request, draw)
            result = await asyncio.to_thread(gatekeeper.validate, request.plan.trait_name or "", code)
            if not result.ok or await self._known_code(result.code_hash) is None:
                break
            activity.logger.info("operator of %s: draw %d gave known code; drawing again", request.trigger_id, draw)
        return code, origin

    async def _builtin_variant(self, request: CoderRequest, draw: int) -> tuple[str, Lineage]:
        """One variant and its lineage: the live versions of the traits it varied."""
        plan = request.plan
        fit = {name: found for name, found in (await self._fit_parents()).items() if name != plan.trait_name}
        parents = {name: code for name, (code, _) in fit.items()}
        seed = operator.seed_of(request.trigger_id if draw == 0 else f"{request.trigger_id}#{draw}", request.attempt)
        try:
            variant = operator.vary(plan.trait_name or "", seed, anomaly=plan.target_behavior, parents=parents)
        except operator.NotATrait as exc:  # a live parent the operator cannot read: start from a seed
            activity.logger.info("operator of %s: %s; starting from a seed trait", request.trigger_id, exc)
            variant = operator.vary(plan.trait_name or "", seed, anomaly=plan.target_behavior)
        activity.logger.info(
            "operator of %s: %s from %s (%s), seed %d",
            request.trigger_id,
            variant.trait_name,
            ", ".join(variant.parents),
            ", ".join(variant.operators),
            seed,
        )
        return variant.code, Lineage(
            origin=operator.PROVIDER,
            parents=[fit[name][1] for name in variant.trait_parents],
            operators=variant.operator_names,
            seed=seed,
            seed_trait=variant.seed_trait,
        )

    @activity.defn(name=names.ARCHITECT_PLAN)
    async def architect_plan(self, context: CycleContext) -> EvolutionPlan:
        """Steps B-D: the Architect's plan, read tolerantly and checked."""
        if self._builtin(context.trigger_id):
            async with self._sessions() as session:  # the cycle's record names who planned it
                await session.execute(
                    update(EvolutionCycle)
                    .where(EvolutionCycle.trigger_id == context.trigger_id)
                    .values(provider=operator.PROVIDER, model=None, updated_at=datetime.now(UTC))
                )
                await session.commit()
            return operator.plan(context)
        text = await self._ask(
            context.trigger_id, "Architect", prompts.ARCHITECT_SYSTEM, prompts.architect_prompt(context)
        )
        try:
            return prompts.parse_plan(text, context)
        except prompts.PlanError as exc:
            raise _expected(f"Architect: {exc}", UNPARSEABLE) from exc

    @activity.defn(name=names.CODER_GENERATE)
    async def coder_generate(self, request: CoderRequest) -> CoderResult:
        """Steps F-I: the Coder's code (from a code block) and the gatekeeper's pre-validation.
        A modification is written from the live version's source."""
        plan = request.plan
        current, live_version = None, None
        origin = Lineage(origin=self._settings.llm.provider)
        if plan.action_type == "modify_trait":
            async with self._sessions() as session:
                live = await session.scalar(
                    select(TraitVersion).where(
                        TraitVersion.trait_name == plan.trait_name, TraitVersion.status == "active"
                    )
                )
            if live is not None:
                current, live_version = live.code, live.version
                origin.parents = [lineage.parent_version(live.trait_name, live.version, live.mutation_id)]
        if self._builtin(request.trigger_id):
            code, origin = await self._builtin_code(request)
        else:
            if request.rejected_code is not None and request.feedback:
                prompt = prompts.retry_prompt(plan, current, request.rejected_code, request.feedback)
            else:
                prompt = prompts.coder_prompt(plan, current)
            step = f"Coder (attempt {request.attempt})"
            text = await self._ask(request.trigger_id, step, prompts.CODER_SYSTEM, prompt)
            code = prompts.extract_code(text)
        if not code.strip():
            raise _expected("Coder: the answer holds no code", UNPARSEABLE)
        result = await asyncio.to_thread(gatekeeper.validate, plan.trait_name or "", code)  # CPU work: off the loop
        ok, failure_code = result.ok, result.failure_code
        error = None if result.ok else f"{result.failure_code}: {result.validation_log[-1]}"
        known = await self._known_code(result.code_hash) if result.ok else None
        if known is not None:  # never proposed again: the workflow's retry asks for other code
            ok, failure_code = False, FailureCode.DUPLICATE_CODE.value
            error = (
                f"{failure_code}: identical code already belongs to mutation {known.mutation_id} "
                f"({known.trait_name}, {known.status}); write different logic"
            )
        return CoderResult(
            code=code,
            ok=ok,
            failure_code=failure_code,
            error=error,
            class_name=result.class_name,
            live_version=live_version,
            lineage=origin,
        )

    # -- the proposal ---------------------------------------------------------------------------

    @activity.defn(name=names.SUBMIT_PROPOSAL)
    async def submit_proposal(self, request: ProposalRequest) -> MutationInput:
        """Record the Coder's code as a proposal of agent ``genesis-coder`` (status queued, like
        ``POST /api/mutations/propose``, approved to replace another agent's version) and return
        its workflow input. Idempotent."""
        plan = request.plan
        modifies = plan.action_type == "modify_trait"
        values: dict[str, object] = dict(
            mutation_id=request.mutation_id,
            agent_id=CODER_AGENT_ID,
            task_id=request.task_id,
            trait_name=plan.trait_name,
            goal=plan.description[:2000],
            code=request.code,
            status=MutationStatus.queued.value,
            validation_log=[],
            workflow_id=mutation_workflow_id(request.mutation_id),
            replaces_trait=plan.trait_name if modifies else None,
            replaces_version=request.replaces_version if modifies else None,
            replacement_approved_by=EVOLUTION_APPROVAL,
            lineage=request.lineage.model_dump() if request.lineage is not None else None,
        )
        async with self._sessions() as session:
            await session.execute(
                insert(Mutation).values(**values).on_conflict_do_nothing(index_elements=["mutation_id"])
            )
            await session.commit()
            record = await session.get(Mutation, request.mutation_id)
        return mutation_input(record, self._settings)

    # -- the record and the feed ------------------------------------------------------------------

    @activity.defn(name=names.RECORD_CYCLE)
    async def record_cycle(self, change: CycleUpdate) -> None:
        """Upsert the cycle's row (fields left None keep their value)."""
        values = {k: v for k, v in change.model_dump().items() if v is not None}
        values["updated_at"] = datetime.now(UTC)
        insert_values = {
            "workflow_id": evolution_workflow_id(change.trigger_id),
            "kind": CycleKind.anomaly.value,
            **values,
        }
        async with self._sessions() as session:
            await session.execute(
                insert(EvolutionCycle)
                .values(**insert_values)
                .on_conflict_do_update(
                    index_elements=["trigger_id"], set_={k: v for k, v in values.items() if k != "trigger_id"}
                )
            )
            await session.commit()
        if change.status != "running":
            CYCLES_ENDED.labels(change.status, change.stage).inc()

    @activity.defn(name=names.PUBLISH_FEED)
    async def publish_feed(self, post: FeedPost) -> str:
        return await feed.publish(
            self._redis,
            post.agent,
            post.action,
            post.message,
            trigger_id=post.trigger_id,
            mutation_id=post.mutation_id,
            workflow_id=post.workflow_id,
            **post.extra,
        )

    # -- world parameters -------------------------------------------------------------------------

    @activity.defn(name=names.APPLY_WORLD_PARAMS)
    async def apply_world_params(self, request: ParamsApply) -> dict[str, Any]:
        """Put the new values on top of the overrides in force; the engine applies them within
        a second and reports its snapshots to ``request.workflow_id``. Idempotent per trigger.
        Returns the ParamsChange (before, after, previous_overrides) as a dict."""
        record = world_params.read_record(await self._redis.get(keys.WORLD_PARAMS_OVERRIDES))
        if record.get("trigger_id") == request.trigger_id:  # a retry: already applied
            return record["change"]
        previous = world_params.clean_overrides(record.get("overrides"))
        in_force = await self._params_in_force()
        change = world_params.ParamsChange(
            before={n: in_force[n] for n in request.params if n in in_force},
            after=dict(request.params),
            previous_overrides=previous,
        )
        new_record = {
            "overrides": {**previous, **request.params},
            "trigger_id": request.trigger_id,
            "workflow_id": request.workflow_id,
            "change": change.model_dump(),
            "applied_at": time.time(),
        }
        await self._redis.set(keys.WORLD_PARAMS_OVERRIDES, json.dumps(new_record, separators=(",", ":")))
        described = ", ".join(f"{n} {change.before.get(n)} → {v}" for n, v in request.params.items())
        await feed.publish(
            self._redis,
            "patcher",
            "params_adjusted",
            f"World parameters changed: {described}; observing the world before keeping them",
            trigger_id=request.trigger_id,
            workflow_id=request.workflow_id,
            params=request.params,
        )
        return change.model_dump()

    @activity.defn(name=names.REVERT_WORLD_PARAMS)
    async def revert_world_params(self, request: ParamsRevert) -> None:
        """Restore the overrides in force before the change (only if nothing newer replaced it)."""
        record = world_params.read_record(await self._redis.get(keys.WORLD_PARAMS_OVERRIDES))
        if record.get("trigger_id") == request.trigger_id:
            restored = {
                "overrides": request.previous_overrides,
                "trigger_id": None,
                "workflow_id": None,
                "reverted": request.trigger_id,
                "applied_at": time.time(),
            }
            await self._redis.set(keys.WORLD_PARAMS_OVERRIDES, json.dumps(restored, separators=(",", ":")))
        await feed.publish(
            self._redis,
            "patcher",
            "rolled_back",
            f"World parameter change of {request.trigger_id} rolled back ({request.reason})",
            trigger_id=request.trigger_id,
            workflow_id=request.workflow_id,
            reason=request.reason,
        )
