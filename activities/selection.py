"""Selection after the verdict: a kept trait leaves the live set (extinct) and comes back (revived),
and a full live set makes room for a newcomer.

The live set is the live ``trait_versions`` (active, not quarantined); the manifest's ``selection`` bounds it
(``max_live_traits``) and says when an uncarried trait goes extinct (``extinction_ticks``, which
the engine's ledger watches, engine/process/selection.py). When an activation or a revival would grow the
set past its bound, :func:`make_room` takes out the least fit kept traits by the live ledger —
first those no Molbot carries (the longest uncarried first), then the lowest mean effect — under
the live set's lock, in the activation's transaction; a trait still under its verdict is never
taken out, and with nothing to take out the activation is refused (``LIVE_SET_FULL``).

Taking a trait out is the same whichever way it goes: its version's status becomes ``extinct``,
it leaves the Redis registry (the engine unloads it; the journal records its departure, the
audit an event and a ``trait_set.changed`` receipt), its mutation's status becomes ``extinct``
with a ``mutation.extinct`` receipt and a line in its log, and the feed says so. The lineage
shows the version as extinct. Its owner may revive it (RevivalWorkflow), back to ``kept``."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio import activity

from activities import names
from activities.trait_records import announce, lock_trait
from genesis import redis_keys as keys
from genesis.db.models import Mutation, TraitVersion
from genesis.dto import FailureCode, FateRequest, FateResult, MutationStatus, StatusUpdate
from governance.records import manifests
from pipeline import live, registry

LIVE_SET_LOCK = 0x6C6976655F736574  # the transaction-level advisory lock of the live set's size

Record = Callable[[StatusUpdate], Awaitable[None]]


@dataclass(frozen=True)
class Departure:
    """A trait taken out to make room, to finish once its transaction has committed."""

    mutation_id: str
    trait_name: str
    version: int
    reason: str
    log: list[str]


async def read_ledger(redis: aioredis.Redis) -> dict[str, Any]:
    """The engine's live ledger (engine/core/ledger.py) as it last published it: trait -> its entry."""
    raw = await redis.get(keys.LEDGER_TRAITS)
    if not raw:
        return {}
    try:
        return dict(json.loads(raw).get("traits") or {})
    except (ValueError, AttributeError):
        return {}


def fitness_rank(entry: dict[str, Any] | None) -> tuple[int, float]:
    """Sort key, least fit first: uncarried (the longest first), then by mean ledger effect (a
    trait the ledger has no effect for yet counts as 0)."""
    if entry is not None and not entry.get("carriers"):
        return 0, -float(entry.get("uncarried_ticks") or 0)
    effect = (entry or {}).get("effect") or {}
    return 1, float(effect.get("mean") or 0.0)


def _why(entry: dict[str, Any] | None) -> str:
    if entry is None:
        return "the ledger has not seen it yet"
    if not entry.get("carriers"):
        return f"no Molbot has carried it for {entry.get('uncarried_ticks', 0):,} ticks"
    effect = entry.get("effect")
    if effect is None:
        return f"{entry['carriers']} carriers, no ledger effect yet"
    return f"{entry['carriers']} carriers, ledger effect {effect['mean']:+.1%}"


async def make_room(
    session: AsyncSession, redis: aioredis.Redis, trait_name: str
) -> tuple[list[Departure], str | None]:
    """Before ``trait_name`` goes live (in its activation's transaction, under its trait lock):
    take out what a full live set needs to take out. Returns the departures to finish after commit
    (:func:`finish`), or the refusal's message when nothing can make room."""
    await session.execute(select(func.pg_advisory_xact_lock(LIVE_SET_LOCK)))
    active = (
        await session.execute(
            select(TraitVersion.trait_name, TraitVersion.mutation_id, Mutation.status)
            .join(Mutation, Mutation.mutation_id == TraitVersion.mutation_id, isouter=True)
            .where(live.is_live())  # a quarantined version is on its way out: it takes no room
        )
    ).all()
    live_names = {name for name, _, _ in active}
    if trait_name in live_names:
        return [], None  # it replaces a live version: the set does not grow
    bound = (await manifests.current(await session.connection())).manifest.selection.max_live_traits
    excess = len(live_names) + 1 - bound
    if excess <= 0:
        return [], None
    ledger = await read_ledger(redis)
    candidates = sorted(
        ((name, mutation_id) for name, mutation_id, status in active if status == MutationStatus.kept.value),
        key=lambda c: (fitness_rank(ledger.get(c[0])), c[0]),
    )
    departures: list[Departure] = []
    for name, mutation_id in candidates:
        if len(departures) == excess:
            break
        row = await session.scalar(
            select(TraitVersion).where(TraitVersion.mutation_id == mutation_id).with_for_update()
        )
        if row is None or row.status != "active":
            continue  # rolled back or retired meanwhile
        row.status = "extinct"
        log = await session.scalar(select(Mutation.validation_log).where(Mutation.mutation_id == mutation_id))
        reason = (
            f"crowded out: the live set was full ({bound} traits) when '{trait_name}' went live, and it was "
            f"the least fit there by the live ledger ({_why(ledger.get(name))})"
        )
        departures.append(Departure(mutation_id, name, row.version, reason, list(log or [])))
    if len(departures) < excess:
        for d in departures:  # nothing is taken out for a refused activation
            row = await session.scalar(select(TraitVersion).where(TraitVersion.mutation_id == d.mutation_id))
            if row is not None:
                row.status = "active"
        return [], (
            f"{FailureCode.LIVE_SET_FULL.value}: the live set holds {len(live_names)} traits (the manifest's "
            f"max_live_traits is {bound}) and none of them can make room: a trait under its verdict is never "
            f"taken out. Try again once a verdict is given, or ask an operator to raise selection.max_live_traits"
        )
    return departures, None


async def unfinished_departures(session: AsyncSession) -> list[Departure]:
    """Versions taken out to make room whose mutation is not recorded ``extinct`` yet (their
    activation was retried after its transaction had committed)."""
    rows = (
        await session.execute(
            select(TraitVersion, Mutation.validation_log)
            .join(Mutation, Mutation.mutation_id == TraitVersion.mutation_id)
            .where(TraitVersion.status == "extinct", Mutation.status == MutationStatus.kept.value)
        )
    ).all()
    return [
        Departure(row.mutation_id, row.trait_name, row.version, "crowded out: the live set was full", list(log or []))
        for row, log in rows
    ]


async def leave_registry(redis: aioredis.Redis, trait_name: str, mutation_id: str) -> int | None:
    """Take the trait out of the registry if the version there is this mutation's."""
    entry = (await registry.read_entries(redis)).get(trait_name)
    if entry is None or entry.mutation_id != mutation_id:
        return None
    return await registry.remove_entry(redis, trait_name)


FATES = {"extinct": "is extinct", "revived": "is live again"}


async def announce_fate(
    sessions: async_sessionmaker, redis: aioredis.Redis, fate: str, mutation_id: str, name: str, version: int, why: str
) -> None:
    """The Evolution Feed's line (action ``extinct`` or ``revived``)."""
    message = f"Trait '{name}' v{version} {FATES[fate]}: {why}"
    await announce(sessions, redis, fate, mutation_id, message, trait_name=name, reason=why)


async def finish(
    sessions: async_sessionmaker, redis: aioredis.Redis, record: Record, departures: list[Departure]
) -> None:
    """What follows a committed departure: the registry, the mutation's record and receipt, the feed."""
    for d in departures:
        await leave_registry(redis, d.trait_name, d.mutation_id)
        await record(
            StatusUpdate(
                mutation_id=d.mutation_id,
                status=MutationStatus.extinct,
                validation_log=[*d.log, f"Extinct: {d.reason}"],
                fate_reason=d.reason,
            )
        )
        await announce_fate(sessions, redis, "extinct", d.mutation_id, d.trait_name, d.version, d.reason)


class SelectionActivities:
    def __init__(self, sessions: async_sessionmaker, redis: aioredis.Redis, record: Record):
        self._sessions = sessions
        self._redis = redis
        self._record = record

    @activity.defn(name=names.RETIRE_TRAIT)
    async def retire_trait(self, request: FateRequest) -> FateResult:
        """A kept trait goes extinct (ExtinctionWorkflow). Idempotent: a second call changes nothing."""
        async with self._sessions() as session, session.begin():
            await lock_trait(session, request.trait_name)
            row = await session.scalar(
                select(TraitVersion).where(TraitVersion.mutation_id == request.mutation_id).with_for_update()
            )
            mutation = await session.get(Mutation, request.mutation_id)
            if row is None or mutation is None or row.status != "active":
                return FateResult(changed=False, conflict=f"its version is {row.status if row else 'not on record'}")
            if mutation.status != MutationStatus.kept.value:
                return FateResult(changed=False, conflict=f"it is {mutation.status}, not kept")
            row.status = "extinct"
            log, version = list(mutation.validation_log or []), row.version
        registry_version = await leave_registry(self._redis, request.trait_name, request.mutation_id)
        await announce_fate(
            self._sessions, self._redis, "extinct", request.mutation_id, request.trait_name, version, request.reason
        )
        return FateResult(changed=True, log=log, registry_version=registry_version)

    @activity.defn(name=names.REVIVE_TRAIT)
    async def revive_trait(self, request: FateRequest) -> FateResult:
        """An extinct trait comes back live (RevivalWorkflow): refused while another version of the
        trait is live, or when a full live set cannot make room."""
        async with self._sessions() as session, session.begin():
            await lock_trait(session, request.trait_name)
            row = await session.scalar(
                select(TraitVersion).where(TraitVersion.mutation_id == request.mutation_id).with_for_update()
            )
            mutation = await session.get(Mutation, request.mutation_id)
            if row is None or mutation is None:
                return FateResult(changed=False, conflict="no trait version of this mutation is on record")
            if row.status != "extinct":
                return FateResult(changed=False, conflict=f"its version is {row.status}, not extinct")
            live_version = await session.scalar(
                select(TraitVersion.version).where(
                    TraitVersion.trait_name == row.trait_name, TraitVersion.status == "active"
                )
            )
            if live_version is not None:
                return FateResult(
                    changed=False,
                    conflict=f"v{live_version} of '{row.trait_name}' is live now: propose a new version instead",
                    conflict_code=FailureCode.VERSION_CONFLICT.value,
                )
            departures, refused = await make_room(session, self._redis, row.trait_name)
            if refused is not None:
                return FateResult(changed=False, conflict=refused, conflict_code=FailureCode.LIVE_SET_FULL.value)
            row.status = "active"
            log, version = list(mutation.validation_log or []), row.version
            entry = await registry.entry_of(session, row)
        await finish(self._sessions, self._redis, self._record, departures)
        registry_version = await registry.put_entry(self._redis, entry)
        await announce_fate(
            self._sessions, self._redis, "revived", request.mutation_id, request.trait_name, version, request.reason
        )
        return FateResult(changed=True, log=log, registry_version=registry_version)
