"""Agents distrust each other: traits that got past the gatekeeper (loaded here directly, as a
bypass would) and the sandbox test, then act live in the trait host, cannot see, change or starve
another agent's traits, and whatever they do is blamed on them alone.

The host-level tests drive a real trait-host container tick by tick; the engine-level test runs
the real engine loop with hostile and benign traits of several agents."""

from __future__ import annotations

import asyncio
import time

import docker
import pytest
import redis.asyncio as aioredis

from engine.process.live_traits import HostTraitRunner
from engine.process.loop import Engine
from pipeline import registry
from tests import trait_hosts
from tests.own_stack import redis_db_below

# Reports what it sees of its entity, and what two shared modules compute, in its state.
OBSERVER = """import math
import random

class Observer:
    async def execute(self, entity) -> None:
        rng = random.Random(entity.id)
        entity.state = "%d|%d|%d|%d|%.6f|%s" % (
            math.floor(entity.energy), math.floor(entity.x), entity.age, len(entity.traits),
            rng.random(), ",".join(entity.traits))[:32]
"""

# Everything a trait could try (without the gatekeeper) to change what the traits after it see.
FORGER = """import math
import random

class Forger:
    async def execute(self, entity) -> None:
        e = entity
        cls = e.__class__
        for name in ("energy", "x", "age", "traits"):
            try:
                setattr(cls, name, property(lambda self: 1e9))
            except Exception:
                pass
        try:
            e.bind([[0.0]] * 20, [("forged",)])
        except Exception:
            pass
        math.floor = lambda value: 424242
        random.Random.random = lambda self: 0.5
        random.seed(0)
        entity.state = "forged"
"""

# Only patches a shared module (the rest of the forger would break its agent's other traits).
PATCHER = """import math

class Patcher:
    async def execute(self, entity) -> None:
        math.floor = lambda value: 424242
"""

# A C-level call no in-process alarm can interrupt.
C_BUSY = """class CBusy:
    async def execute(self, entity) -> None:
        entity.state = "n%d" % sum(range(10 ** 12))
"""

# Hangs from its very first call, and swallows the in-process alarm.
HANG = """class Hang:
    async def execute(self, entity) -> None:
        while True:
            try:
                while True:
                    pass
            except BaseException:
                pass
"""

# Hands back ints no encoder should have to render, and raises one.
HUGE = """class Huge:
    async def execute(self, entity) -> None:
        entity.move(10 ** 5000, 1.0)
        entity.state = 10 ** 5000
        if entity.id % 2:
            raise ValueError(10 ** 5000)
"""

BENIGN = """class Benign:
    def __init__(self):
        self.calls = 0

    async def execute(self, entity) -> None:
        self.calls = self.calls + 1
        entity.direction = 0.1 * (self.calls % 10)
"""


@pytest.fixture(scope="module")
def client():
    return docker.from_env()


def named(source: str, name: str) -> str:
    """The same trait under another class name (two traits from one source)."""
    return source.replace(f"class {trait_hosts.trait_class(source)}", f"class {name}")


def observed(reply: dict) -> dict[int, str]:
    """Each entity's state as the last trait in ``run`` set it."""
    return {
        entity_id: [i[2] for i in intents if i[:2] == ["set", "state"]][-1]
        for entity_id, intents in reply["intents"].items()
    }


def test_forging_and_monkeypatching_never_reach_another_agents_trait(client):
    """The forger runs first, in the same ticks, as another agent: the observer sees exactly what
    it sees in a host of its own."""
    with trait_hosts.start(client, "test-iso-forge") as shared, trait_hosts.start(client, "test-iso-alone") as alone:
        assert trait_hosts.load(shared, "a_forger", FORGER, agent="mallory")["ok"]
        assert trait_hosts.load(shared, "b_observer", OBSERVER, agent="alice")["ok"]
        assert trait_hosts.load(alone, "b_observer", OBSERVER, agent="alice")["ok"]
        worlds = [trait_hosts.world(["a_forger", "b_observer"]), trait_hosts.world(["a_forger", "b_observer"])]
        for _ in range(3):
            with_forger = trait_hosts.tick(shared, worlds[0], ["a_forger", "b_observer"])
            assert with_forger["results"]["a_forger"]["error_count"] == 0  # it ran, unhindered in its own process
            reference = trait_hosts.tick(alone, worlds[1], ["b_observer"])
            seen = observed(with_forger)
            assert seen == observed(reference) and seen
            assert not any("424242" in s or "1000000000" in s or "forged" in s for s in seen.values())
            for w, reply in zip(worlds, (with_forger, reference)):
                w.step(reply["intents"])


def test_an_unload_leaves_nothing_behind_in_its_agents_process(client):
    """Traits of one agent share a process, so a patch reaches the agent's own other traits, but
    only while the patcher is loaded: its unload recycles the process."""
    with trait_hosts.start(client, "test-iso-unload") as host:
        assert trait_hosts.load(host, "a_patcher", PATCHER, agent="mallory")["ok"]
        assert trait_hosts.load(host, "b_observer", OBSERVER, agent="mallory")["ok"]
        w = trait_hosts.world(["a_patcher", "b_observer"])
        patched = observed(trait_hosts.tick(host, w, ["a_patcher", "b_observer"]))
        assert patched and all(state.startswith("424242|424242|") for state in patched.values()), patched
        assert host.request({"op": "unload", "trait": "a_patcher"}, 10)["ok"]
        clean = observed(trait_hosts.tick(host, w, ["b_observer"]))
        assert clean and not any("424242" in s for s in clean.values()), clean


@pytest.mark.parametrize("attacker, source", [("a_cbusy", C_BUSY), ("a_hang", HANG)])
def test_a_call_that_cannot_be_interrupted_is_killed_and_blamed_on_its_trait_alone(client, attacker, source):
    """First kill: the attacker becomes a suspect and moves to a process of its own (its agent's
    other trait loses that one tick, no other agent's trait notices); second kill, alone:
    confirmed. Nothing is blamed on anyone else."""
    with trait_hosts.start(client, f"test-iso-{attacker[2:]}") as host:
        assert trait_hosts.load(host, attacker, source, agent="mallory")["ok"]
        assert trait_hosts.load(host, "b_mates", named(BENIGN, "Mate"), agent="mallory")["ok"]
        assert trait_hosts.load(host, "c_other", BENIGN, agent="alice")["ok"]
        run = [attacker, "b_mates", "c_other"]
        w = trait_hosts.world(run)
        first = trait_hosts.tick(host, w, run)["results"]
        assert first[attacker]["killed"] and first[attacker]["confirmed"] is False
        assert first["b_mates"].get("lost") and first["b_mates"]["error_count"] == 0
        assert first["c_other"]["calls"] == len(w.entities) and not first["c_other"].get("lost")
        second = trait_hosts.tick(host, w, run)["results"]
        assert second[attacker]["killed"] and second[attacker]["confirmed"] is True
        for name in ("b_mates", "c_other"):
            assert second[name]["calls"] == len(w.entities) and second[name]["error_count"] == 0
            assert not second[name].get("lost") and not second[name].get("killed")
        stats = host.request({"op": "stats"}, 10)
        assert {tuple(p["traits"]) for p in stats["workers"]} == {("b_mates",), ("c_other",)}


def test_huge_ints_are_contained_in_the_trait_that_made_them(client):
    with trait_hosts.start(client, "test-iso-huge") as host:
        assert trait_hosts.load(host, "huge", HUGE, agent="mallory")["ok"]
        w = trait_hosts.world(["huge"], population=4)
        reply = trait_hosts.tick(host, w, ["huge"])
        result = reply["results"]["huge"]
        assert result["error_count"] == 2 and all(e["error"].startswith("ValueError") for e in result["errors"])
        for intents in reply["intents"].values():
            assert ["move", "<int out of range>", 1.0] in intents
            assert ["set", "state", "<int out of range>"] in intents
        report = w.step(reply["intents"])
        assert {eid for eid, _why in report.rejected_intents} == set(w.entities)  # the engine refuses them
        assert trait_hosts.tick(host, w, ["huge"])["ok"], "the host lives on"


def test_a_trait_may_not_flood_the_engine_with_intents(client):
    flood = (
        "class Flood:\n    async def execute(self, entity) -> None:\n"
        "        for _ in range(1000):\n            entity.eat()\n"
    )
    with trait_hosts.start(client, "test-iso-flood") as host:
        assert trait_hosts.load(host, "flood", flood)["ok"]
        w = trait_hosts.world(["flood"], population=2)
        reply = trait_hosts.tick(host, w, ["flood"])
        errors = reply["results"]["flood"]["errors"]
        assert errors and "more than 16 intents in one call" in errors[0]["error"]
        assert all(len(intents) == 16 for intents in reply["intents"].values())


# -- the live engine --------------------------------------------------------------------------


async def test_hostile_traits_are_quarantined_alone_within_seconds_and_the_world_keeps_its_pace(settings):
    """Three attackers of three agents (a C-level busy call, a hang from the first tick, huge
    ints raised every call) beside benign traits, some of the attackers' own agents: only the
    attackers are quarantined, within seconds; the host never restarts, no tick runs without
    traits, no other agent's trait loses a tick, and the world keeps over 30 ticks a second."""
    own = settings.override(redis_url=redis_db_below(4), engine_snapshot_interval=10**9, engine_trait_gain_chance=0.0)
    redis = aioredis.from_url(own.redis_url)
    await redis.flushdb()
    hostile = {"a_cbusy": (C_BUSY, "mallory"), "a_hang": (HANG, "trudy"), "a_huge": (HUGE, "eve")}
    benign = {
        "b_mallorys_own": (named(BENIGN, "MallorysOwn"), "mallory"),
        "c_alice": (BENIGN, "alice"),
        "d_bob": (named(BENIGN, "Bob"), "bob"),
    }
    await trait_hosts.register(redis, {**hostile, **benign}, 0, prefix="15a")
    names = sorted({**hostile, **benign})
    world = trait_hosts.crowd(names, 300, seed=5)
    runner = HostTraitRunner(own, redis)
    engine = Engine(own, runner, world=world)
    try:
        await engine.start()
        assert sorted(runner.active_traits()) == names
        started = time.perf_counter()
        ticks = 0
        quarantined_at: dict[str, float] = {}
        while time.perf_counter() - started < 6.0:
            await engine.tick_once()
            ticks += 1
            for name in runner.stats.quarantined:
                quarantined_at.setdefault(name, time.perf_counter() - started)
            await asyncio.sleep(0)
        rate = ticks / (time.perf_counter() - started)
        assert sorted(runner.stats.quarantined) == sorted(hostile), runner.stats
        assert max(quarantined_at.values()) < 5.0, quarantined_at
        assert sorted(runner.active_traits()) == sorted(benign)
        assert runner.stats.restarts == 0 and runner.stats.skipped_ticks == 0, runner.stats
        timings = runner.trait_timings()
        for name in ("c_alice", "d_bob"):  # other agents' traits: never a lost tick
            assert timings[name]["lost"] == 0 and timings[name]["errors"] == 0, timings[name]
            assert timings[name]["calls"] > ticks
        assert timings["b_mallorys_own"]["errors"] == 0  # a tick or two lost to its mate, no blame
        assert rate >= 30, rate
    finally:
        await engine.close()
        await redis.flushdb()
        await redis.aclose()


async def test_a_trait_that_fails_to_load_live_is_quarantined_not_forgotten(settings):
    """It loaded in its sandbox test, so failing to load in the live host is its own doing: it
    is quarantined like a trait that fails at run time (and so reported, not silently skipped)."""
    own = settings.model_copy(update={"redis_url": redis_db_below(4)})
    redis = aioredis.from_url(own.redis_url)
    await redis.flushdb()
    broken = (
        "class Broken:\n    def __init__(self):\n        raise RuntimeError('not today')\n\n"
        "    async def execute(self, entity) -> None:\n        pass\n"
    )
    await registry.put_entry(
        redis,
        registry.RegistryEntry(
            trait_name="broken",
            version=1,
            mutation_id="mut_10ad00000001",
            class_name="Broken",
            code=broken,
            code_hash="1" * 64,
            agent_id="mallory",
        ),
    )
    runner = HostTraitRunner(own, redis)
    try:
        await runner.refresh()
        assert runner.active_traits() == [] and runner.stats.quarantined == ["broken"]
        await runner.refresh()  # not loaded again
        assert runner.stats.quarantined == ["broken"]
    finally:
        await runner.close()
        await redis.flushdb()
        await redis.aclose()
