"""A bounded live set: with the manifest's ``selection.max_live_traits`` live, an activation takes out
the least fit kept trait by the live ledger (an uncarried one first), never one under its verdict,
and is refused with ``LIVE_SET_FULL`` when nothing can make room; a revival makes room the same way.

The activities run against a database and Redis db of their own (the suite's hold other modules'
live traits); the ledger is written to Redis as the engine publishes it."""

from __future__ import annotations

import json

import pytest
from redis import asyncio as aioredis
from sqlalchemy import select, update

from activities.lifecycle import LifecycleActivities
from activities.mutations import MutationRecordActivities
from activities.selection import SelectionActivities
from genesis import redis_keys as keys
from genesis.db.models import Mutation, TraitVersion
from genesis.db.session import get_sessionmaker
from genesis.dto import FateRequest
from pipeline import registry
from tests.own_stack import own_settings, set_rules
from tests.pipeline_steps import activation


@pytest.fixture
async def live_set(settings):
    own = await own_settings(settings, "live_set")
    await set_rules(own.database_url, "test: a small live set", selection={"max_live_traits": 3})
    sessions = get_sessionmaker(own.database_url)
    redis = aioredis.from_url(own.redis_url)
    records = MutationRecordActivities(sessions, redis)
    lifecycle = LifecycleActivities(sessions, redis, own.mutations_dir, records.record)
    yield own, sessions, redis, lifecycle, SelectionActivities(sessions, redis, records.record)
    await redis.aclose()


async def go_live(own, sessions, lifecycle, name: str, variant: int, kept: bool = True) -> str:
    request = await activation(own, name, variant)
    result = await lifecycle.activate_trait(request)
    assert result.conflict is None, result.conflict
    if kept:
        async with sessions() as session, session.begin():
            await session.execute(
                update(Mutation).where(Mutation.mutation_id == request.mutation_id).values(status="kept")
            )
    return request.mutation_id


async def publish_ledger(redis, traits: dict[str, dict]) -> None:
    """The ledger as the engine would publish it: trait -> carriers, uncarried ticks, effect."""
    await redis.set(keys.LEDGER_TRAITS, json.dumps({"tick": 9000, "traits": traits}))


async def statuses(sessions, *mutation_ids: str) -> list[tuple[str, str]]:
    """(mutation status, version status) of each."""
    async with sessions() as session:
        rows = (
            await session.execute(
                select(Mutation.mutation_id, Mutation.status, TraitVersion.status)
                .join(TraitVersion, TraitVersion.mutation_id == Mutation.mutation_id)
                .where(Mutation.mutation_id.in_(mutation_ids))
            )
        ).all()
    by_id = {m: (mutation, version) for m, mutation, version in rows}
    return [by_id[m] for m in mutation_ids]


async def test_a_full_live_set_takes_out_the_least_fit_kept_trait(live_set):
    own, sessions, redis, lifecycle, selection = live_set
    strong = await go_live(own, sessions, lifecycle, "strong", 1)
    weak = await go_live(own, sessions, lifecycle, "weak", 2)
    idle = await go_live(own, sessions, lifecycle, "idle", 3)
    await publish_ledger(
        redis,
        {
            "strong": {"carriers": 40, "uncarried_ticks": 0, "effect": {"mean": 0.3, "low": 0.1, "high": 0.5}},
            "weak": {"carriers": 30, "uncarried_ticks": 0, "effect": {"mean": -0.1, "low": -0.3, "high": 0.1}},
            "idle": {"carriers": 0, "uncarried_ticks": 4000, "effect": None},
        },
    )
    # The set is full (3): a fourth name makes room, and an uncarried trait goes first.
    fourth = await go_live(own, sessions, lifecycle, "fourth", 4)
    assert await statuses(sessions, idle, fourth) == [("extinct", "extinct"), ("kept", "active")]
    async with sessions() as session:
        log = (await session.get(Mutation, idle)).validation_log
    assert log[-1].startswith("Extinct: crowded out: the live set was full (3 traits) when 'fourth' went live")
    assert "no Molbot has carried it for 4,000 ticks" in log[-1]
    assert "idle" not in await registry.read_entries(redis)
    # A new version of a live trait does not grow the set: nothing is taken out.
    await go_live(own, sessions, lifecycle, "strong", 5)
    assert await statuses(sessions, weak) == [("kept", "active")]
    # Then, with every one carried, the lowest ledger effect goes.
    await publish_ledger(
        redis,
        {
            "strong": {"carriers": 40, "uncarried_ticks": 0, "effect": {"mean": 0.3, "low": 0.1, "high": 0.5}},
            "weak": {"carriers": 30, "uncarried_ticks": 0, "effect": {"mean": -0.1, "low": -0.3, "high": 0.1}},
            "fourth": {"carriers": 12, "uncarried_ticks": 0, "effect": None},
        },
    )
    # The owner revives the extinct one: the set is full, so the least fit makes room for it.
    revived = await selection.revive_trait(FateRequest(mutation_id=idle, trait_name="idle", reason="test"))
    assert revived.changed, revived
    assert await statuses(sessions, weak, idle) == [("extinct", "extinct"), ("extinct", "active")]
    assert (await registry.read_entries(redis))["idle"].mutation_id == idle
    assert strong  # still live: the fittest


async def test_a_set_full_of_traits_under_their_verdict_refuses_the_next(live_set):
    own, sessions, redis, lifecycle, _ = live_set
    under_verdict = [await go_live(own, sessions, lifecycle, f"judged_{k}", k, kept=False) for k in range(3)]
    request = await activation(own, "one_too_many", 9)
    result = await lifecycle.activate_trait(request)
    assert result.trait_version is None and result.conflict_code == "LIVE_SET_FULL"
    assert "max_live_traits is 3" in result.conflict and "under its verdict" in result.conflict
    assert await statuses(sessions, *under_verdict) == [("sandbox_ok", "active")] * 3
    assert "one_too_many" not in await registry.read_entries(redis)
    async with sessions() as session:
        assert await session.scalar(select(TraitVersion).where(TraitVersion.mutation_id == request.mutation_id)) is None
