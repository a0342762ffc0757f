"""The living world end to end: a real engine process (`python -m engine`) runs activated traits
in its trait-host container, reports its ticks to the observing workflows, and self-heals its
registry from Postgres; trait code never runs inside the engine process."""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid

import docker
import redis.asyncio as aioredis
from sqlalchemy import select

from engine.process.live_traits import host_owner
from genesis.db.models import TraitQuarantine, TraitVersion
from genesis.db.session import get_sessionmaker
from genesis.redis_keys import Channels
from pipeline import registry
from pipeline.quarantines import quarantined
from sandbox import image
from sandbox.container import containers_of
from tests import agents, traits
from tests.pipeline_steps import assert_honest_verdict, propose, wait_for_status, wait_until

# Reaches `os` the way a gatekeeper bypass would and leaves a marker wherever it runs.
MARKER = f"/tmp/genesis-trait-ran-{uuid.uuid4().hex[:8]}"
ROGUE = f'''
class Rogue:
    def __init__(self):
        for cls in ().__class__.__base__.__subclasses__():
            if cls.__name__ == "_wrap_close":
                g = cls.__init__.__globals__
                g["close"](g["open"]("{MARKER}", g["O_CREAT"] | g["O_WRONLY"]))

    async def execute(self, entity) -> None:
        entity.state = "rogue"
'''

RAISER = """
class Raiser:
    async def execute(self, entity) -> None:
        raise RuntimeError("always broken")
"""


async def active_traits(http) -> list[str]:
    return (await http.get("/api/stats")).json()["active_traits"]


def engine_host(engine_pid: int):
    [container] = containers_of(docker.from_env(), host_owner(engine_pid))
    return container


async def test_activated_trait_goes_live_and_gets_a_verdict(http, engine_proc):
    mutation_id = await propose(http, traits.seeker(601), trait_name="live_seeker", agent_id="living-world")
    await wait_for_status(http, mutation_id, {"activated", "kept", "rolled_back"})
    status = await wait_for_status(http, mutation_id, {"kept", "rolled_back"}, timeout_s=120)
    effects = (await http.get(f"/api/mutations/{mutation_id}/effects")).json()
    assert effects["observed"] is True and effects["status"] == status["status"]
    assert_honest_verdict(effects)
    assert effects["effects"]["window_ticks"] >= 60
    assert set(effects["effects"]) >= {"entity_count_delta", "avg_energy_delta", "death_starvation_delta"}
    # Observed at all means the engine ran the trait: it only reports windows for live traits.
    assert any(line.startswith("Observation: ") and "fitness" in line for line in status["validation_log"])


async def _has(http, trait: str) -> bool:
    return trait in await active_traits(http)


async def test_trait_code_never_runs_in_the_engine_process(http, settings, engine_proc):
    redis = aioredis.from_url(settings.redis_url)
    try:
        await registry.put_entry(
            redis,
            registry.RegistryEntry(
                trait_name="rogue",
                version=1,
                mutation_id="mut_r0c0e0000001",
                class_name="Rogue",
                code=ROGUE,
                code_hash="0" * 64,
            ),
        )
        await wait_until(lambda: _has(http, "rogue"), what="the engine to load the rogue trait")
    finally:
        await redis.aclose()
    # The constructor ran (the trait is live) — inside the trait-host container, not here.
    assert not os.path.exists(MARKER), "trait code ran on the host"
    check = engine_host(engine_proc.proc.pid).exec_run(
        [image.PYTHON_IN_IMAGE, "-I", "-S", "-c", f"import os; print(os.path.exists({MARKER!r}))"]
    )
    assert check.output.decode().strip() == "True", check.output


async def register_directly_and_await_quarantine(
    settings, name: str, mutation_id: str, class_name: str, code: str
) -> dict:
    """Put a trait straight into the live registry (as if it had passed its sandbox test) and
    return the engine's quarantine message for it from ch:feed."""
    redis = aioredis.from_url(settings.redis_url)
    pubsub = redis.pubsub()
    await pubsub.subscribe(Channels.FEED)
    try:
        await registry.put_entry(
            redis,
            registry.RegistryEntry(
                trait_name=name,
                version=1,
                mutation_id=mutation_id,
                class_name=class_name,
                code=code,
                code_hash=uuid.uuid4().hex * 2,
            ),
        )
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            raw = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
            if raw and json.loads(raw["data"]).get("trait_name") == name:
                return json.loads(raw["data"])
        raise AssertionError(f"no quarantine message for {name} on ch:feed")
    finally:
        await pubsub.aclose()
        await redis.aclose()


async def test_a_trait_that_keeps_raising_is_quarantined(http, settings, engine_proc):
    message = await register_directly_and_await_quarantine(settings, "raiser", "mut_4a15e4000001", "Raiser", RAISER)
    assert message["action"] == "trait_quarantined" and "always broken" in message["message"]

    async def dropped() -> bool:
        return "raiser" not in await active_traits(http)

    await wait_until(dropped, timeout_s=10, what="the quarantined trait to leave the active set")
    assert (await http.get("/api/world/state")).status_code == 200, "the world keeps ticking"
    # Recorded for good (it has no mutation record, so there is no workflow to tell).
    await wait_until(
        lambda: _quarantine_recorded(settings, "mut_4a15e4000001"),
        timeout_s=10,
        what="the quarantine to be recorded in Postgres",
    )


async def _quarantine_recorded(settings, mutation_id: str) -> bool:
    async with get_sessionmaker(settings.database_url)() as session:
        return await session.get(TraitQuarantine, mutation_id) is not None


# Slipped past the gatekeeper (registered directly): reaches the host program's classes through a
# subclass walk and makes its own process answer every tick with garbage instead of intents.
CORRUPTER = """
class Corrupter:
    async def execute(self, entity) -> None:
        for cls in ().__class__.__base__.__subclasses__():
            if cls.__name__ == "IntentColumns":
                cls.encode = lambda self, blob=None: {"count": "garbage"}
        entity.direction = 1.0
"""


async def test_a_trait_that_corrupts_its_host_gets_the_host_replaced_and_is_quarantined(http, settings, engine_proc):
    tick_before = (await engine_status(http))["tick"]
    message = await register_directly_and_await_quarantine(
        settings, "corrupter", "mut_c0bb1e000001", "Corrupter", CORRUPTER
    )
    assert message["action"] == "trait_quarantined" and "unusable reply" in message["message"], message

    async def ticking() -> bool:
        return (await engine_status(http))["tick"] > tick_before + 60

    await wait_until(ticking, timeout_s=10, what="the world to keep ticking")

    async def dropped() -> bool:  # the stats are published once a second
        return "corrupter" not in await active_traits(http)

    await wait_until(dropped, timeout_s=10, what="the quarantined trait to leave the active set")


async def test_engine_restart_rebuilds_the_registry_from_postgres(http, settings, engine_proc):
    # A trait of its own that is live for good (kept): earlier tests' traits may have been rolled
    # back, or quarantined by a host another trait corrupted.
    mutation_id = await propose(http, traits.seeker(603), trait_name="restart_seeker", agent_id="living-world")
    status = await wait_for_status(http, mutation_id, {"kept", "rolled_back"}, timeout_s=120)
    assert status["status"] == "kept", status
    async with get_sessionmaker(settings.database_url)() as session:
        expected = set(
            (
                await session.scalars(
                    select(TraitVersion.trait_name).where(
                        TraitVersion.status == "active", ~quarantined(TraitVersion.mutation_id)
                    )
                )
            ).all()
        )
    assert "restart_seeker" in expected
    engine_proc.stop()
    redis = aioredis.from_url(settings.redis_url)
    try:
        await redis.delete("meta:registry:traits")  # Redis lost the registry
        await redis.delete("engine:status")
        engine_proc.start()
        await wait_until(lambda: redis.exists("engine:status"), what="the engine to restart")
        entries = await registry.read_entries(redis)
    finally:
        await redis.aclose()
    assert set(entries) == expected, "registry = the active versions in Postgres (the rogue entries are gone)"
    await wait_until(lambda: _covers(http, expected), what="the engine to load the active traits again")


async def _covers(http, names: set[str]) -> bool:
    return names <= set(await active_traits(http))


BUSY_LOOP = """
class Spinner:
    async def execute(self, entity) -> None:
        while True:
            pass
"""


async def engine_status(http) -> dict:
    return (await http.get("/api/stats")).json()


async def test_a_trait_that_busy_loops_is_quarantined_and_the_tick_rate_recovers(http, settings, engine_proc):
    """It passed its 50-tick sandbox test (say) and then spins forever in the live world."""
    message = await register_directly_and_await_quarantine(
        settings, "spinner", "mut_5b1a00000001", "Spinner", BUSY_LOOP
    )
    assert message["action"] == "trait_quarantined"
    await asyncio.sleep(2.5)  # a full status window (published every second) after the quarantine
    stats = await engine_status(http)
    assert "spinner" not in stats["active_traits"]
    assert stats["ticks_per_second"] >= 0.8 * settings.engine.tick_rate


async def test_killed_trait_host_restarts_and_reloads_the_traits(http, engine_proc):
    live = await wait_until(lambda: active_traits(http), what="live traits")
    engine_host(engine_proc.proc.pid).kill()
    tick_before = (await engine_status(http))["tick"]
    await wait_until(lambda: _new_host_running(engine_proc.proc.pid), what="a new trait host")
    await wait_until(lambda: _covers(http, set(live)), what="the traits to be reloaded")

    async def ticked() -> bool:  # stats are published once a second: allow a window or two
        return (await engine_status(http))["tick"] > tick_before

    await wait_until(ticked, timeout_s=5, what="ticks to keep flowing")


async def _new_host_running(engine_pid: int) -> bool:
    hosts = containers_of(docker.from_env(), host_owner(engine_pid))
    return any(c.attrs.get("State") == "running" or c.status == "running" for c in hosts)


async def test_engine_killed_mid_observation_and_restarted_still_completes_the_workflow(http, settings, engine_proc):
    mutation_id = await propose(http, traits.seeker(701), trait_name="survives_restart", agent_id="living-world")
    await wait_for_status(http, mutation_id, {"activated"})
    engine_proc.kill()  # SIGKILL: no clean shutdown
    engine_proc.start()
    await wait_for_status(http, mutation_id, {"kept", "rolled_back"}, timeout_s=120)
    effects = (await http.get(f"/api/mutations/{mutation_id}/effects")).json()
    assert effects["observed"] is True and effects["effects"]["window_ticks"] >= settings.observation.window_ticks


async def carriers_of(http, trait: str) -> list[dict]:
    entities = (await http.get("/api/world/entities", params={"limit": 500})).json()["entities"]
    return [e for e in entities if trait in e["traits"]]


async def test_trait_spreads_to_newborns_and_rollback_removes_it_from_its_carriers(http, engine_proc):
    mutation_id = await propose(http, traits.seeker(801), trait_name="spreading_seeker", agent_id="living-world")
    await wait_for_status(http, mutation_id, {"activated", "kept"})
    carriers = await wait_until(
        lambda: carriers_of(http, "spreading_seeker"), timeout_s=90, what="newborns carrying the trait"
    )
    assert all(e["age"] < 10_000 for e in carriers)
    response = await http.post(
        f"/api/mutations/{mutation_id}/rollback",
        json={"reason": "test rollback"},
        headers=await agents.headers(http, "living-world"),
    )
    assert response.status_code == 202, response.text
    await wait_for_status(http, mutation_id, {"rolled_back"})

    async def gone() -> bool:
        return not await carriers_of(http, "spreading_seeker") and "spreading_seeker" not in await active_traits(http)

    await wait_until(gone, timeout_s=30, what="the trait to leave every carrier")
