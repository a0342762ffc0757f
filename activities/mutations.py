"""Mutation record activities: gatekeeper + dedupe (step 2-11) and status persistence; and the
same gatekeeper and dedupe for a check, which reads the records and writes nothing."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import redis.asyncio as aioredis
from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

import gatekeeper
from activities import names
from activities.metrics import STATUS_TRANSITIONS
from activities.trait_records import announce
from audit import receipts
from genesis import signing
from genesis.db.models import Mutation
from genesis.dto import (
    ApprovalNeed,
    ApprovalQuery,
    FailureCode,
    MutationInput,
    MutationStatus,
    StatusUpdate,
    TraitCheck,
    ValidationOutcome,
    ValidationRequest,
    terminal_statuses,
)
from governance.records import manifests
from pipeline import ratelimit

ENDED = terminal_statuses(activate=True)
DEDUPLICATION_OK = "Deduplication: OK"


class MutationRecordActivities:
    def __init__(
        self,
        sessions: async_sessionmaker,
        redis: aioredis.Redis | None = None,
        keyring: signing.Keyring | None = None,
    ):
        self._sessions = sessions
        self._redis = redis  # releases the agent's active-mutation slot (rate limits) at the end
        # signs a receipt of each stage (None: none are issued)
        self._signer = receipts.Signer(sessions, keyring) if keyring is not None else None

    @activity.defn(name=names.VALIDATE_AND_RECORD_MUTATION)
    async def validate_and_record_mutation(self, request: ValidationRequest) -> ValidationOutcome:
        """The workflow's first three steps in one local activity (each would cost the workflow
        ~10 ms of dispatch on its own): record ``request.accepted``; steps 2-10 (pure AST checks),
        then step 11, claiming the code hash in Postgres; and if the code passes, record status
        validating with its log and ``request.next_line`` in the transaction that claims its hash.

        A rejection is a non-retryable ApplicationError whose type is the failure code and whose
        details carry the ValidationOutcome (with the validation log)."""
        await self.record(request.accepted)
        return await self._validate(request.mutation, request.next_line)

    async def _validate(self, mutation: MutationInput, next_line: str) -> ValidationOutcome:
        outcome = await _gatekeep(mutation.trait_name, mutation.code)
        if outcome.ok:
            code_hash = outcome.code_hash
            assert code_hash is not None, "a passing validation always hashes the tree"
            passed = [*outcome.validation_log, DEDUPLICATION_OK]
            recorded = _record_values(
                StatusUpdate(
                    mutation_id=mutation.mutation_id,
                    status=MutationStatus.validating,
                    validation_log=[*passed, next_line],
                    class_name=outcome.class_name,
                )
            )
            holder = await self._claim_code_hash(mutation.mutation_id, code_hash, recorded)
            if holder is not None and _proposes_again(holder, mutation.agent_id):
                await self._release_code_hash(holder.mutation_id)  # its owner takes it back
                holder = await self._claim_code_hash(mutation.mutation_id, code_hash, recorded)
            if holder is None:
                outcome.validation_log = passed
                STATUS_TRANSITIONS.labels(MutationStatus.validating.value).inc()
            else:
                _duplicate(outcome, code_hash, holder.mutation_id, holder.status)
        if not outcome.ok:  # a rejection is an expected outcome: BENIGN keeps its traceback out of the log
            raise ApplicationError(
                outcome.validation_log[-1],
                outcome.model_dump(),
                type=outcome.failure_code,
                non_retryable=True,
                category=ApplicationErrorCategory.BENIGN,
            )
        return outcome

    async def _claim_code_hash(self, mutation_id: str, code_hash: str, recorded: dict) -> Mutation | None:
        """Take the live slot for this code hash (writing ``recorded`` with it, and the signed
        receipt of the passed validation in the same transaction); return the other mutation
        holding it, if any (then nothing is written)."""
        keyring = await self._signer.ready() if self._signer is not None else None
        async with self._sessions() as session:
            try:
                written = (
                    await session.execute(
                        update(Mutation)
                        .where(Mutation.mutation_id == mutation_id)
                        .values(code_hash=code_hash, holds_code_hash=True, **recorded)
                        .returning(*STAGE_SUBJECT)
                    )
                ).first()
            except IntegrityError:
                await session.rollback()
            else:
                if written is not None and keyring is not None:
                    passed = StatusUpdate(
                        mutation_id=mutation_id, status=MutationStatus.validating, code_hash=code_hash
                    )
                    await _issue_stage_receipts(session, keyring, passed, written)
                await session.commit()
                return None
            holder = await session.scalar(
                select(Mutation).where(Mutation.code_hash == code_hash, Mutation.holds_code_hash)
            )
            if holder is None or holder.mutation_id == mutation_id:  # released meanwhile: retry
                raise ApplicationError("code hash slot changed while claiming it; retrying")
            return holder

    async def _release_code_hash(self, mutation_id: str) -> None:
        """A rolled-back mutation gives its code hash up (its owner proposes the code again)."""
        async with self._sessions() as session, session.begin():
            await session.execute(
                update(Mutation)
                .where(Mutation.mutation_id == mutation_id, Mutation.status == MutationStatus.rolled_back.value)
                .values(holds_code_hash=False)
            )

    @activity.defn(name=names.CHECK_TRAIT_CODE)
    async def check_trait_code(self, check: TraitCheck) -> ValidationOutcome:
        """Steps 2-11 for a check: the gatekeeper, then dedupe as a lookup of the mutation that
        holds the code hash (a proposal claims it; a check only reads). A rejection is a result
        here (``ok`` false), not an error: nothing needs to be undone or retried."""
        outcome = await _gatekeep(check.trait_name, check.code)
        if not outcome.ok:
            return outcome
        assert outcome.code_hash is not None, "a passing validation always hashes the tree"
        async with self._sessions() as session:
            holder = (
                await session.execute(
                    select(Mutation.mutation_id, Mutation.status, Mutation.agent_id).where(
                        Mutation.code_hash == outcome.code_hash, Mutation.holds_code_hash
                    )
                )
            ).first()
        if holder is None:
            outcome.validation_log.append(DEDUPLICATION_OK)
        elif _proposes_again(holder, check.agent_id):
            outcome.validation_log.append(
                f"{DEDUPLICATION_OK} (the code of your rolled-back mutation {holder.mutation_id}: "
                "you may propose it again)"
            )
        else:
            _duplicate(outcome, outcome.code_hash, holder.mutation_id, holder.status)
        return outcome

    @activity.defn(name=names.APPROVAL_NEEDED)
    async def approval_needed(self, query: ApprovalQuery) -> ApprovalNeed:
        """Whether the manifest's approval rules hold this mutation for an operator: an agent's
        first ``approvals.first_traits`` traits (counted by the ones that went live), and, with
        ``approvals.replaces_live``, any trait that replaces a live one."""
        async with self._sessions() as session:
            conn = await session.connection()
            approvals = (await manifests.current(conn)).manifest.approvals
            reasons = []
            if approvals.first_traits:
                went_live = await session.scalar(
                    select(func.count())
                    .select_from(Mutation)
                    .where(Mutation.agent_id == query.agent_id, Mutation.activated_at.is_not(None))
                )
                if (went_live or 0) < approvals.first_traits:
                    reasons.append(f"one of the agent's first {approvals.first_traits} traits")
            if approvals.replaces_live and query.replaces_live:
                reasons.append("it replaces a live trait")
        return ApprovalNeed(required=bool(reasons), reason="; ".join(reasons), ttl_sec=approvals.ttl_sec)

    @activity.defn(name=names.RECORD_MUTATION_STATUS)
    async def record_mutation_status(self, change: StatusUpdate) -> None:
        """Persist one transition. Idempotent: replays write the same values."""
        await self.record(change)

    async def record(self, change: StatusUpdate) -> None:
        """Write a status change the workflow made (its status activity and its validation activity),
        with the signed receipts of the stage it stands for in the same transaction: a status is
        never recorded without its receipts, and a retry issues none twice (one per mutation and kind)."""
        keyring = await self._signer.ready() if self._signer is not None and stage_receipts(change) else None
        async with self._sessions() as session:
            written = (
                await session.execute(
                    update(Mutation)
                    .where(Mutation.mutation_id == change.mutation_id)
                    .values(**_record_values(change))
                    .returning(*STAGE_SUBJECT)
                )
            ).first()
            if written is not None and keyring is not None:
                await _issue_stage_receipts(session, keyring, change, written)
            await session.commit()
        if written is None:
            raise ApplicationError(f"no mutation record {change.mutation_id}", non_retryable=True)
        agent_id, trait_name, version, _ = written
        STATUS_TRANSITIONS.labels(change.status.value).inc()
        if self._redis is not None and (change.final or change.status in ENDED):
            # The mutation has ended: its agent may have another one in flight. Removing an
            # absent slot is a no-op, so replays and retries release it once.
            await ratelimit.release(self._redis, agent_id, change.mutation_id)
        if self._redis is not None and change.final and change.status == MutationStatus.kept:
            await self._announce_kept(self._redis, change, trait_name, version)

    async def _announce_kept(
        self, redis: aioredis.Redis, change: StatusUpdate, trait_name: str, version: int | None
    ) -> None:
        """The feed line of a kept trait, saying what its verdict was and why (best effort: the
        record is written, and a retry for a feed hiccup would announce it twice)."""
        reason = (change.effects or {}).get("verdict_reason")
        report = change.verdict_report
        if change.fitness_verdict is None and report is not None:  # selection off: recorded, not acted on
            reason = report.get("reason")
            verdict = f"kept whatever its verdict (selection is off): the experiment found it {report.get('verdict')}"
        elif change.fitness_verdict is None:
            verdict = "kept without a verdict: the engine reported no complete observation window"
        else:
            verdict = f"kept: fitness {change.fitness_verdict}" + (f" — {reason}" if reason else "")
        try:
            await announce(
                self._sessions,
                redis,
                "kept",
                change.mutation_id,
                f"Trait '{trait_name}' v{version} {verdict}",
                trait_name=trait_name,
                version=version,
                fitness_verdict=change.fitness_verdict,
                verdict_reason=reason,
            )
        except Exception as exc:
            activity.logger.warning("could not announce the verdict of %s on the feed: %s", change.mutation_id, exc)


async def _gatekeep(trait_name: str, code: str) -> ValidationOutcome:
    """Steps 2-10, the pure AST checks. A validation is CPU work (~0.5 ms for a 2 KB trait, more
    for large ones): in a thread, so the worker's event loop keeps serving workflow tasks and
    heartbeats meanwhile."""
    result = await asyncio.to_thread(gatekeeper.validate, trait_name, code)
    return ValidationOutcome(
        ok=result.ok,
        failure_code=result.failure_code,
        validation_log=list(result.validation_log),
        class_name=result.class_name,
        code_hash=result.code_hash,
    )


def _proposes_again(holder: Any, agent_id: str | None) -> bool:
    """Whether the mutation holding a code hash gives it up to this proposer: its own code, rolled
    back (the world or the rules may have changed since). Anyone else's, or one in flight, live
    or kept, holds it."""
    return holder.status == MutationStatus.rolled_back.value and bool(agent_id) and holder.agent_id == agent_id


def _duplicate(outcome: ValidationOutcome, code_hash: str, holder_id: str, holder_status: str) -> None:
    """Step 11 failed: the mutation ``holder_id`` holds this code hash. The line names only what
    every client may read anyway (a mutation's id, status and code hash are public)."""
    outcome.ok = False
    outcome.failure_code = FailureCode.DUPLICATE_CODE.value
    outcome.validation_log.append(
        f"Deduplication: FAILED — identical code (SHA-256 {code_hash[:12]}…) "
        f"already belongs to mutation {holder_id} ({holder_status}); change the logic"
    )


def _record_values(change: StatusUpdate) -> dict:
    """The mutation record's columns a status change sets (None fields are left as they are)."""
    values: dict = {"status": change.status.value, "updated_at": datetime.now(UTC)}
    for field in (
        "failure_reason_code",
        "validation_log",
        "class_name",
        "sandbox_report",
        "shadow_report",
        "trait_version",
        "effects",
        "fitness_verdict",
        "verdict_report",
        "rollback_reason",
    ):
        value = getattr(change, field)
        if value is not None:
            values[field] = value
    if change.status in (MutationStatus.rejected, MutationStatus.failed):
        values["holds_code_hash"] = False  # rejected code may be fixed and proposed again
    return values


# The mutation record's columns a stage receipt's subject names, in this order.
STAGE_SUBJECT = (Mutation.agent_id, Mutation.trait_name, Mutation.trait_version, Mutation.code_hash)


async def _issue_stage_receipts(
    session: AsyncSession, keyring: signing.Keyring, change: StatusUpdate, written: Sequence[Any]
) -> None:
    """The signed receipts of a recorded stage, in the session's transaction (audit/receipts.py)."""
    agent_id, trait_name, trait_version, code_hash = written
    subject = {
        "mutation_id": change.mutation_id,
        "agent_id": agent_id,
        "trait_name": trait_name,
        "trait_version": trait_version,
        "code_hash": code_hash,
    }
    for kind, body in stage_receipts(change):
        topic = f"{change.mutation_id}:{kind}"
        if kind in REPEATABLE_RECEIPTS:  # may happen again to the same mutation, in another workflow run
            topic += f":{_workflow_run_id()}"
            body = {**body, "workflow_run_id": _workflow_run_id()}
        await receipts.issue(session, keyring, kind, topic, subject, body)


# a failed run may be retried (a fresh run) and fail again; an extinct trait revived and extinct again
REPEATABLE_RECEIPTS = ("mutation.failed", "mutation.extinct", "mutation.revived")


def _workflow_run_id() -> str:
    """The workflow run whose activity this is ('' outside an activity)."""
    try:
        return activity.info().workflow_run_id or ""
    except RuntimeError:
        return ""


def _signable(value: Any) -> Any:
    """A number as a receipt can carry it: canonical CBOR has no NaN or infinity (their text
    instead), and a receipt that cannot be signed must not block the status it goes with."""
    return repr(value) if isinstance(value, float) and not math.isfinite(value) else value


def stage_receipts(change: StatusUpdate) -> list[tuple[str, dict]]:
    """The receipts a recorded status change stands for: (kind, body)."""
    effects = change.effects or {}
    observed = {
        "fitness_verdict": change.fitness_verdict,
        "fitness_delta": _signable(effects.get("fitness_delta")),
        "window_ticks": effects.get("window_ticks"),
        "entity_count_delta": effects.get("entity_count_delta"),
        "verdict_reason": effects.get("verdict_reason"),
    }
    status = change.status
    if status == MutationStatus.validating:  # recorded on acceptance too: only the passed gatekeeper counts
        passed = change.code_hash is not None
        return [("mutation.validated", {"gatekeeper": "passed", "code_hash": change.code_hash})] if passed else []
    if status == MutationStatus.sandbox_ok:
        return [("mutation.sandbox_verdict", {"verdict": "passed"})]
    if status == MutationStatus.rejected:
        code = change.failure_reason_code
        out = [("mutation.rejected", {"failure_reason_code": code})]
        if code and code.startswith("SANDBOX_"):
            out.insert(0, ("mutation.sandbox_verdict", {"verdict": "failed", "failure_reason_code": code}))
        return out
    if status == MutationStatus.activated:
        if change.effects:
            return [("mutation.observed", observed)]
        return [("mutation.activated", {"trait_version": change.trait_version})]
    if status == MutationStatus.kept and change.fate_reason is None:
        out = [("mutation.observed", observed)] if change.effects else []
        return [*out, ("mutation.kept", {"fitness_verdict": change.fitness_verdict})]
    if status == MutationStatus.rolled_back:
        return [("mutation.rolled_back", {"reason": change.rollback_reason})]
    if status == MutationStatus.failed:  # no verdict on the code: the run could not finish
        return [("mutation.failed", {})]
    if status == MutationStatus.extinct:
        return [("mutation.extinct", {"reason": change.fate_reason})]
    if status == MutationStatus.kept and change.fate_reason is not None:
        return [("mutation.revived", {"reason": change.fate_reason})]
    return []
