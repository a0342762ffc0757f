"""Activation and rollback: Postgres (`trait_versions`) first, then the Redis registry the
engine loads from, then the telemetry event. Both are idempotent on mutation_id."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import redis.asyncio as aioredis
from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import async_sessionmaker
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities import names
from activities.selection import Departure, Record, finish, make_room, unfinished_departures
from activities.trait_records import announce, lock_trait
from genesis.db.models import Mutation, TraitVersion
from genesis.dto import ActivationRequest, ActivationResult, FailureCode, RollbackRequest, RollbackResult
from genesis.redis_keys import Channels
from pipeline import registry


def trait_file_name(trait_name: str, version: int) -> str:
    return f"trait_{trait_name}_v{version}.py"


def version_conflict_message(request: ActivationRequest, live: TraitVersion | None) -> str:
    found = (
        f"v{live.version} (mutation {live.mutation_id}) is live now" if live is not None else "no version is live now"
    )
    if request.expected_live_version is None:
        return (
            f"Activation: FAILED — VERSION_CONFLICT: this proposal adds '{request.trait_name}' as a new trait, "
            f"but {found}; nothing was activated. To modify it, propose again with "
            f'"replaces": {{"trait_name": "{request.trait_name}", "version": {live.version if live else "N"}}}'
        )
    advice = (
        f'propose again with "replaces": {{"trait_name": "{request.trait_name}", "version": {live.version}}}'
        if live is not None
        else "propose it again without replaces (as a new trait)"
    )
    return (
        f"Activation: FAILED — VERSION_CONFLICT: this proposal replaces '{request.trait_name}' "
        f"v{request.expected_live_version}, but {found} (it changed while this mutation was in its sandbox "
        f"test); nothing was activated. Read GET /api/traits/{request.trait_name} and {advice}"
    )


def not_owner_message(request: ActivationRequest, live: TraitVersion, owner: str | None) -> str:
    made_by = f"agent '{owner}'" if owner else "no registered agent"
    return (
        f"Activation: FAILED — NOT_TRAIT_OWNER: trait '{request.trait_name}' is live as v{live.version} "
        f"(mutation {live.mutation_id}), made by {made_by}, not by '{request.proposer_agent_id}' who proposed "
        f"this replacement (that version went live after the proposal was checked); nothing was activated. "
        f"Only the agent that made the live version may replace it, or an operator may approve the "
        f"replacement (X-Operator-Key with the proposal): propose your variant under another trait_name, "
        f"or ask an operator"
    )


class LifecycleActivities:
    def __init__(
        self,
        sessions: async_sessionmaker,
        redis: aioredis.Redis,
        mutations_dir: Path,
        record: Record,
        harm_fitness: float | None = None,
    ):
        self._sessions = sessions
        self._record = record  # a mutation's status change (a trait taken out to make room)
        self._redis = redis
        self._mutations_dir = mutations_dir
        # a trait rolled back for a population decline at or below this fitness delta did harm:
        # operators are told they may take the world back to before it (None: never said)
        self._harm_fitness = harm_fitness

    @activity.defn(name=names.ACTIVATE_TRAIT)
    async def activate_trait(self, request: ActivationRequest) -> ActivationResult:
        """Record version N of the trait, write mutations/trait_{name}_v{N}.py (an audit copy:
        nothing imports it), make it the live version and announce it.

        With ``check_live_version`` the live version must still be the one the proposal was based
        on, and with ``proposer_agent_id`` it must have been made by that agent unless someone
        approved replacing another agent's version (both checked under the trait's lock, in the
        same transaction that would supersede it); otherwise nothing is written and the result
        names the conflict."""
        async with self._sessions() as session, session.begin():
            await lock_trait(session, request.trait_name)  # one activation/rollback per trait at a time
            row = await session.scalar(select(TraitVersion).where(TraitVersion.mutation_id == request.mutation_id))
            previous = await session.scalar(
                select(TraitVersion)
                .where(TraitVersion.trait_name == request.trait_name, TraitVersion.status == "active")
                .with_for_update()
            )
            departures: list[Departure] = []
            if row is None:  # first attempt; a retry finds the row and only re-publishes
                live = previous.version if previous is not None else None
                if request.check_live_version and live != request.expected_live_version:
                    return ActivationResult(
                        trait_version=None,
                        previous_version=None,
                        registry_version=None,
                        file_path=None,
                        conflict=version_conflict_message(request, previous),
                        live_version=live,
                    )
                if (
                    previous is not None
                    and request.proposer_agent_id is not None
                    and request.replacement_approved_by is None
                ):
                    owner = await session.scalar(
                        select(Mutation.agent_id).where(Mutation.mutation_id == previous.mutation_id)
                    )
                    if owner != request.proposer_agent_id:
                        return ActivationResult(
                            trait_version=None,
                            previous_version=None,
                            registry_version=None,
                            file_path=None,
                            conflict=not_owner_message(request, previous, owner),
                            live_version=live,
                            conflict_code=FailureCode.NOT_TRAIT_OWNER.value,
                        )
                departures, refused = await make_room(session, self._redis, request.trait_name)
                if refused is not None:
                    return ActivationResult(
                        trait_version=None,
                        previous_version=None,
                        registry_version=None,
                        file_path=None,
                        conflict=refused,
                        live_version=live,
                        conflict_code=FailureCode.LIVE_SET_FULL.value,
                    )
                latest = await session.scalar(
                    select(func.max(TraitVersion.version)).where(TraitVersion.trait_name == request.trait_name)
                )
                version = (latest or 0) + 1
                path = self._mutations_dir / trait_file_name(request.trait_name, version)
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(request.code, encoding="utf-8")
                if previous is not None:
                    previous.status = "superseded"
                    await session.flush()
                row = TraitVersion(
                    trait_name=request.trait_name,
                    version=version,
                    mutation_id=request.mutation_id,
                    class_name=request.class_name,
                    code=request.code,
                    code_hash=request.code_hash,
                    file_path=str(path),
                    status="active",
                )
                session.add(row)
                await session.execute(
                    update(Mutation)
                    .where(Mutation.mutation_id == request.mutation_id)
                    .values(trait_version=version, replaced_version=live, activated_at=datetime.now(UTC))
                )
            else:  # a retry: what the first attempt took out may still need finishing
                departures = await unfinished_departures(session)
            if row.status != "active":
                raise ApplicationError(
                    f"mutation {request.mutation_id} was already {row.status}; not activating it again",
                    non_retryable=True,
                )
            previous_version = previous.version if previous is not None and previous.id != row.id else None
            if previous_version is None and previous is not None:  # a retry: what the first attempt replaced
                previous_version = await session.scalar(
                    select(Mutation.replaced_version).where(Mutation.mutation_id == request.mutation_id)
                )
            entry = await registry.entry_of(session, row)
        await finish(self._sessions, self._redis, self._record, departures)
        registry_version = await registry.put_entry(self._redis, entry)
        await self._redis.publish(
            Channels.MUTATION_APPLIED,
            registry.event_json(
                "MutationActivated",
                mutation_id=row.mutation_id,
                trait_name=row.trait_name,
                version=row.version,
                registry_version=registry_version,
            ),
        )
        replacing = f", replacing v{previous_version}" if previous_version else ""
        await self._feed(
            "mutation_applied",
            row.mutation_id,
            f"Trait '{row.trait_name}' v{row.version} is live{replacing} (registry v{registry_version})",
            trait_name=row.trait_name,
            version=row.version,
        )
        activity.logger.info("activated %s v%d (registry v%d)", row.trait_name, row.version, registry_version)
        return ActivationResult(
            trait_version=row.version,
            previous_version=previous_version,
            registry_version=registry_version,
            file_path=row.file_path,
        )

    @activity.defn(name=names.ROLLBACK_TRAIT)
    async def rollback_trait(self, request: RollbackRequest) -> RollbackResult:
        """Deregister the mutation's version; if it was live, restore the previous version of the
        same trait (if any). Announce it with reason and fitness delta."""
        async with self._sessions() as session, session.begin():
            await lock_trait(session, request.trait_name)
            row = await session.scalar(
                select(TraitVersion).where(TraitVersion.mutation_id == request.mutation_id).with_for_update()
            )
            if row is None or row.status == "rolled_back":
                return RollbackResult(rolled_back=False, restored_version=None, registry_version=None)
            was_live = row.status == "active"
            row.status = "rolled_back"
            restored = None
            if was_live:
                await session.flush()
                restored = await session.scalar(
                    select(TraitVersion)
                    .where(TraitVersion.trait_name == row.trait_name, TraitVersion.status == "superseded")
                    .order_by(TraitVersion.version.desc())
                    .limit(1)
                )
                if restored is not None:
                    restored.status = "active"
                await session.execute(
                    update(Mutation)
                    .where(Mutation.mutation_id == request.mutation_id)
                    .values(restored_version=restored.version if restored is not None else None)
                )
            restored_entry = await registry.entry_of(session, restored) if restored is not None else None
        registry_version = None
        if was_live:
            registry_version = (
                await registry.put_entry(self._redis, restored_entry)
                if restored_entry is not None
                else await registry.remove_entry(self._redis, row.trait_name)
            )
        await self._redis.publish(
            Channels.MUTATION_ROLLBACK,
            registry.event_json(
                "MutationRolledBack",
                mutation_id=row.mutation_id,
                trait_name=row.trait_name,
                reason=request.reason,
                fitness_delta=request.fitness_delta,
                restored_version=restored.version if restored is not None else None,
            ),
        )
        restored_text = f"; v{restored.version} restored" if restored is not None else ""
        delta = f", fitness {request.fitness_delta:+.3f}" if request.fitness_delta is not None else ""
        await self._feed(
            "rolled_back",
            row.mutation_id,
            f"Trait '{row.trait_name}' v{row.version} rolled back ({request.reason}{delta}){restored_text}",
            trait_name=row.trait_name,
            reason=request.reason,
        )
        if (
            was_live
            and self._harm_fitness is not None
            and request.reason == "population_decline"
            and request.fitness_delta is not None
            and request.fitness_delta <= self._harm_fitness
        ):
            # Rewinding the world abandons every agent's progress since: an operator's decision
            # (POST /v1/world/rollback with this mutation_id), never one agent's trait's.
            why = (
                f"trait '{row.trait_name}' v{row.version} did harm (population decline, fitness "
                f"{request.fitness_delta:+.3f}); an operator may take the world back to before it went live: "
                f"genesis world rollback --mutation {row.mutation_id} --reason '...'"
            )
            activity.logger.warning("rewind suggested: %s", why)
            await self._feed("rewind_suggested", row.mutation_id, f"Rewind suggested: {why}", trait_name=row.trait_name)
        return RollbackResult(
            rolled_back=True,
            restored_version=restored.version if restored is not None else None,
            registry_version=registry_version,
        )

    async def _feed(self, action: str, mutation_id: str, message: str, **extra) -> None:
        await announce(self._sessions, self._redis, action, mutation_id, message, **extra)
