"""An escape inside one worker stays inside that agent.

Each trait here got past every Python-level rule (loaded into the host directly, as a gatekeeper
bypass would): it reaches ``os``, ``sys`` and ``resource`` through the re-exports the gatekeeper
refuses (``random._os``, ``collections._sys``), the entity proxy's own intent recorder, and the
worker's frames. From there it tries to act on another agent's Molbots, limit, re-prioritise and
pin another agent's worker, fill the container's log, and break the supervisor with garbage.
Everything runs on a real trait-host container; the Molbots' test goes through the live
engine's runner."""

from __future__ import annotations

import asyncio
import time

import docker
import pytest
import redis.asyncio as aioredis

from engine.core.world import World, WorldParams
from engine.process.live_traits import HostTraitRunner
from engine.process.loop import Engine
from genesis.dto import SandboxProfile
from pipeline import registry
from sandbox.host_client import DRIFT_WINDOW_TICKS
from tests import trait_hosts
from tests.own_stack import redis_db_below

# Records a move for every entity id up to 64, whoever carries what: the proxy's recorder is
# told each id in turn (an escape: '_intents' is a private attribute).
HIJACKER = """class Hijacker:
    async def execute(self, entity) -> None:
        recorder = entity._intents
        mine = recorder.entity_id
        for other in range(1, 65):
            if other != mine:
                recorder.entity_id = other
                recorder.in_call = 0
                entity.move(-7.0, -7.0)
                entity.state = "hijacked"
        recorder.entity_id = mine
"""

BENIGN = """class Benign:
    async def execute(self, entity) -> None:
        entity.direction = 0.5
"""

# Tries to limit, re-prioritise and pin every other process it can see, then itself (pid 0).
MEDDLER = """import collections
import random

class Meddler:
    async def execute(self, entity) -> None:
        os = random._os
        resource = collections._sys.modules["resource"]
        me = os.getpid()
        others = [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != me]
        seen = []
        for pid in others + [me]:
            for name, act in (
                ("prlimit", lambda: resource.prlimit(pid, resource.RLIMIT_CPU, (1, 1))),
                ("setpriority", lambda: os.setpriority(os.PRIO_PROCESS, pid, 19)),
                ("affinity", lambda: os.sched_setaffinity(pid, {0})),
                ("scheduler", lambda: os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0))),
            ):
                try:
                    act()
                    seen.append(name + ":ok")
                except OSError as exc:
                    seen.append(name + ":" + str(exc.errno))
        try:
            resource.prlimit(0, resource.RLIMIT_CPU)
            seen.append("own:ok")
        except OSError as exc:
            seen.append("own:" + str(exc.errno))
        entity.state = ",".join(sorted(set(seen)))[:250]
"""

# Writes to the worker's stderr in every way it can.
SHOUTER = """import collections
import random

class Shouter:
    async def execute(self, entity) -> None:
        collections._sys.stderr.write("SHOUTED-BY-A-TRAIT " * 1000)
        collections._sys.stderr.flush()
        random._os.write(2, b"SHOUTED-BY-A-TRAIT " * 1000)
        entity.state = "shouted"
"""

# Writes a line of JSON nested 100,000 deep straight into the worker's reply stream.
GARBLER = """import collections

class Garbler:
    async def execute(self, entity) -> None:
        frame = collections._sys._getframe()
        while frame is not None and frame.f_code.co_name != "worker_main":
            frame = frame.f_back
        out = frame.f_locals["out"]
        out.write(b"[" * 100000 + b"\\n")
        out.flush()
"""


@pytest.fixture(scope="module")
def client():
    return docker.from_env()


async def test_an_escaped_worker_cannot_move_another_agents_molbots(settings):
    """Mallory's escaped trait records moves for every id; the live runner keeps only those for
    Molbots that carry one of Mallory's traits, and Alice's Molbots get only her trait's intents."""
    own = settings.override(redis_url=redis_db_below(7))
    redis = aioredis.from_url(own.redis_url)
    await redis.flushdb()
    await registry.put_entry(redis, trait_hosts.registry_entry("hijacker", HIJACKER, "mallory", 1))
    await registry.put_entry(redis, trait_hosts.registry_entry("benign", BENIGN, "alice", 2))
    world = World(WorldParams(initial_population=40, min_population=0), seed=11)
    world.set_available_traits(["benign", "hijacker"])
    ids = sorted(world.entities)
    mallorys, alices = ids[::2], ids[1::2]
    for entity_id in mallorys:
        world.give_trait(entity_id, "hijacker")
    for entity_id in alices:
        world.give_trait(entity_id, "benign")
    runner = HostTraitRunner(own, redis)
    try:
        await runner.refresh()
        assert runner.active_traits() == ["benign", "hijacker"]
        for _ in range(200):  # the traits load in the background: until both ran in one tick
            lost_before = runner.stats.lost_results
            intents = await runner.run_tick_views(world.tick, world.trait_views(runner.active_traits(), raw=True))
            assert runner.last_outcome[0] == "ok", runner.last_outcome
            if runner.stats.lost_results == lost_before:
                break
            await asyncio.sleep(0.01)
        got = dict(intents)
        for entity_id in alices:
            assert got[entity_id] == [["set", "direction", 0.5]], (entity_id, got[entity_id])
        assert any(["move", -7.0, -7.0] in got[entity_id] for entity_id in mallorys)  # within its own agent
        assert runner.stats.foreign_intents >= 2 * len(alices), runner.stats
        assert runner.stats.restarts == 0 and not runner.stats.quarantined
    finally:
        await runner.close()
        await redis.flushdb()
        await redis.aclose()


def test_an_escaped_worker_cannot_limit_reprioritise_or_pin_other_processes(client):
    """prlimit, setpriority, sched_setaffinity and sched_setscheduler on any other process (and,
    for setpriority, on any at all) fail with EPERM; the worker's own limits stay readable."""
    with trait_hosts.start(client, "test-contain-meddle") as host:
        assert trait_hosts.load(host, "a_meddler", MEDDLER, agent="mallory")["ok"]
        assert trait_hosts.load(host, "b_victim", BENIGN, agent="alice")["ok"]
        w = trait_hosts.world(["a_meddler", "b_victim"], population=2)
        reply = trait_hosts.tick(host, w, ["a_meddler", "b_victim"])
        assert reply["results"]["a_meddler"]["error_count"] == 0, reply["results"]["a_meddler"]
        states = {i[2] for intents in reply["intents"].values() for i in intents if i[:2] == ["set", "state"]}
        assert len(states) == 1, states
        outcomes = set(states.pop().split(","))
        assert outcomes == {"prlimit:1", "setpriority:1", "affinity:1", "scheduler:1", "own:ok"}, outcomes
        second = trait_hosts.tick(host, w, ["a_meddler", "b_victim"])["results"]["b_victim"]
        assert second["error_count"] == 0 and not second.get("lost"), second


def test_a_trait_cannot_write_into_the_containers_log(client):
    with trait_hosts.start(client, "test-contain-shout", private_socket=True) as host:
        assert trait_hosts.load(host, "shouter", SHOUTER, agent="mallory")["ok"]
        w = trait_hosts.world(["shouter"], population=3)
        reply = trait_hosts.tick(host, w, ["shouter"])
        assert reply["results"]["shouter"]["error_count"] == 0, reply["results"]
        logs = client.containers.get(host.id).logs(stdout=True, stderr=True)
        assert b"SHOUTED" not in logs, logs[:200]
        attrs = client.api.inspect_container(host.id)
        assert attrs["HostConfig"]["LogConfig"]["Config"] == {"max-size": "1m", "max-file": "1"}


def test_garbage_from_a_worker_is_blamed_on_what_it_ran(client):
    """A reply nested too deeply to parse kills the worker: its traits become suspects, each alone;
    the garbler, alone, is confirmed at its next tick. The supervisor keeps answering, and
    another agent's trait never loses a tick."""
    with trait_hosts.start(client, "test-contain-garble") as host:
        assert trait_hosts.load(host, "a_garbler", GARBLER, agent="mallory")["ok"]
        assert trait_hosts.load(host, "b_mate", BENIGN.replace("class Benign", "class Mate"), agent="mallory")["ok"]
        assert trait_hosts.load(host, "c_other", BENIGN, agent="alice")["ok"]
        run = ["a_garbler", "b_mate", "c_other"]
        w = trait_hosts.world(run, population=6)
        first = trait_hosts.tick(host, w, run)["results"]
        assert first["a_garbler"].get("killed") and first["a_garbler"]["confirmed"] is False, first
        assert first["c_other"]["calls"] == 6 and not first["c_other"].get("lost"), first
        second = trait_hosts.tick(host, w, run)["results"]
        assert second["a_garbler"].get("killed") and second["a_garbler"]["confirmed"] is True, second
        assert second["b_mate"]["calls"] == 6 and second["b_mate"]["error_count"] == 0, second
        assert second["c_other"]["calls"] == 6 and not second["c_other"].get("lost"), second
        third = trait_hosts.tick(host, w, run)["results"]
        assert third["a_garbler"]["errors"][0]["error"] == "trait not loaded"
        assert third["b_mate"]["calls"] == 6 and third["c_other"]["calls"] == 6


# Costs ~20 ms of C work for its first instance in a process (the load's own): harmless, well
# within the load's CPU limit (40 ms), but a worker with ten of them takes ~200 ms to load again.
HEAVY = """class Heavy:
    table = []

    def __init__(self):
        if not self.table:
            self.table.append(sum(range(1500000)))

    async def execute(self, entity) -> None:
        entity.direction = 0.25
"""

# Behaves for its carriers' first 20 ticks of age, then hangs in C code.
GATED_HANG = """class GatedHang:
    async def execute(self, entity) -> None:
        if entity.age > 20:
            entity.state = "n%d" % sum(range(10 ** 12))
"""


async def test_a_gated_hang_beside_heavy_mates_is_quarantined_without_a_host_restart(settings):
    """The hang kills its agent's worker; that worker is forked and its heavy mates loaded again
    in the background while the world ticks on, so the host never misses its deadline; the hang,
    alone from then on, is confirmed at its next kill. Other agents' traits lose no tick."""
    own = settings.override(redis_url=redis_db_below(7), engine_snapshot_interval=10**9, engine_trait_gain_chance=0.0)
    redis = aioredis.from_url(own.redis_url)
    await redis.flushdb()
    traits = {
        "a_hang": (GATED_HANG, "mallory"),
        **{f"b_heavy{i}": (HEAVY.replace("class Heavy", f"class Heavy{i}"), "mallory") for i in range(10)},
        "c_alice": (BENIGN, "alice"),
        "d_bob": (BENIGN.replace("class Benign", "class Bob"), "bob"),
    }
    await trait_hosts.register(redis, traits, 100)
    world = trait_hosts.crowd(list(traits), 200, seed=7, born_together=True)
    runner = HostTraitRunner(own, redis)
    engine = Engine(own, runner, world=world)
    try:
        await engine.start()
        started = time.perf_counter()
        while time.perf_counter() - started < 5.0 and "a_hang" not in runner.stats.quarantined:
            await engine.tick_once()
            await asyncio.sleep(0)
        for _ in range(30):  # a little longer: nothing else happens
            await engine.tick_once()
            await asyncio.sleep(0)
        assert runner.stats.quarantined == ["a_hang"], runner.stats
        assert runner.stats.restarts == 0 and runner.stats.deadline_misses == 0, runner.stats
        assert runner.stats.skipped_ticks == 0, runner.stats
        timings = runner.trait_timings()
        for name in ("c_alice", "d_bob"):
            assert timings[name]["calls"] > 0 and timings[name]["errors"] == 0, (timings, engine.world.tick)
        for name in ("c_alice", "d_bob"):  # lost only while their own worker first loaded
            assert timings[name]["lost"] <= 2, timings[name]
        assert all(timings[f"b_heavy{i}"]["errors"] == 0 for i in range(10)), timings
    finally:
        await engine.close()
        await redis.flushdb()
        await redis.aclose()


# Hangs once: at the tick its carriers (all born together) turn 21.
HANG_ONCE = """class HangOnce:
    async def execute(self, entity) -> None:
        if entity.age == 21:
            entity.state = "n%d" % sum(range(10 ** 12))
"""


@pytest.mark.parametrize("ticks_between", [2, 40], ids=["right-after", "much-later"])
async def test_a_host_failure_after_a_kill_is_charged_and_suspects_survive_a_restart(settings, ticks_between):
    """A worker is killed for ``a_once``, which becomes a suspect; then the host container dies.
    Right after the kill, the failure is charged to the suspect (quarantined); much later it is
    nobody's, and the new host runs the suspect alone, as the old one did."""
    own = settings.override(redis_url=redis_db_below(7), engine_snapshot_interval=10**9, engine_trait_gain_chance=0.0)
    redis = aioredis.from_url(own.redis_url)
    await redis.flushdb()
    traits = {"a_once": (HANG_ONCE, "mallory"), "b_mate": (BENIGN.replace("class Benign", "class Mate"), "mallory")}
    await trait_hosts.register(redis, traits, 200)
    world = trait_hosts.crowd(list(traits), 50, seed=9, born_together=True)
    runner = HostTraitRunner(own, redis)
    engine = Engine(own, runner, world=world)
    try:
        await engine.start()
        while runner.stats.suspects == 0 and engine.world.tick < 200:
            await engine.tick_once()
        assert runner.stats.suspects == 1, runner.stats
        for _ in range(ticks_between):
            await engine.tick_once()
        client = docker.from_env()
        client.containers.get(runner._host.id).kill()  # the host dies, for whatever reason
        for _ in range(400):  # it fails at the next tick, then starts again in the background
            await engine.tick_once()
            await asyncio.sleep(0.005)
            if runner.stats.restarts and runner._host is not None and not runner._background:
                break
        assert runner.stats.restarts == 1, runner.stats
        if ticks_between <= 10:
            assert runner.stats.quarantined == ["a_once"] and runner.stats.restarts_caused == {"a_once": 1}
        else:
            assert runner.stats.quarantined == [] and runner.stats.restarts_caused == {}, runner.stats
            for _ in range(50):
                await engine.tick_once()
                stats = await runner.host_stats()
                workers = {tuple(w["traits"]): w["solo"] for w in stats["workers"]} if stats else {}
                if len(workers) == 2:
                    break
                await asyncio.sleep(0.01)
            assert workers == {("a_once",): True, ("b_mate",): False}, workers
    finally:
        await engine.close()
        await redis.flushdb()
        await redis.aclose()


# Blocks in a system call (it waits without using CPU) on every call.
SLEEPER = """import random

class Sleeper:
    async def execute(self, entity) -> None:
        random._os.read(random._os.pipe()[0], 1)
"""


def test_a_call_that_blocks_instead_of_running_is_blamed_at_the_deadline(client):
    """Waiting uses no CPU, so no CPU limit catches it; at the tick's deadline a worker whose
    trait is asleep (not starved: not runnable) is killed and the trait blamed, first as a
    suspect, then, alone, confirmed. Another agent's trait runs every tick."""
    with trait_hosts.start(client, "test-contain-sleep") as host:
        assert trait_hosts.load(host, "a_sleeper", SLEEPER, agent="mallory")["ok"]
        assert trait_hosts.load(host, "b_mate", BENIGN.replace("class Benign", "class Mate"), agent="mallory")["ok"]
        assert trait_hosts.load(host, "c_other", BENIGN, agent="alice")["ok"]
        run = ["a_sleeper", "b_mate", "c_other"]
        w = trait_hosts.world(run, population=3)
        first = trait_hosts.tick(host, w, run, workers_ms=500)["results"]
        assert "blocked" in str(first["a_sleeper"].get("killed")) and first["a_sleeper"]["confirmed"] is False, first
        assert first["c_other"]["calls"] == 3 and not first["c_other"].get("lost"), first
        second = trait_hosts.tick(host, w, run, workers_ms=500)["results"]
        assert second["a_sleeper"].get("confirmed") is True, second
        assert second["b_mate"]["calls"] == 3 and second["c_other"]["calls"] == 3, second


# ~3 ms of C work per call: ~30 ms a tick on ten Molbots, within every per-call and per-tick limit.
HOG = """class Hog:
    async def execute(self, entity) -> None:
        entity.state = "h%d" % (sum(range(250000)) % 7)
"""


def test_an_agent_over_its_share_of_cpu_is_throttled_then_its_heaviest_trait_reported(client):
    """The traits' budget (a share of the tick period) is split between the agents with traits in
    the tick. Mallory's hog uses several times the budget in every tick it runs: it sits out most
    ticks, and once it has done so on half of a window its heaviest trait is reported for
    quarantine. Alice's and Bob's traits, within their shares, run every tick."""
    with trait_hosts.start(client, "test-contain-fair") as host:
        assert trait_hosts.load(host, "a_hog", HOG, agent="mallory")["ok"]
        assert trait_hosts.load(host, "b_light", BENIGN.replace("class Benign", "class Light"), agent="mallory")["ok"]
        assert trait_hosts.load(host, "c_alice", BENIGN, agent="alice")["ok"]
        assert trait_hosts.load(host, "d_bob", BENIGN.replace("class Benign", "class Bob"), agent="bob")["ok"]
        run = ["a_hog", "b_light", "c_alice", "d_bob"]
        w = trait_hosts.world(run, population=10)
        ran = {name: 0 for name in run}
        reported = None
        for n in range(1, 400):
            results = trait_hosts.tick(host, w, run, complete=False)["results"]
            for name in ("c_alice", "d_bob"):
                assert results[name]["calls"] == 10 and not results[name].get("lost"), (n, results[name])
            for name in run:
                ran[name] += results[name]["calls"] > 0
            if results["a_hog"].get("over_share"):
                reported = (n, results["a_hog"]["over_share"])
                break
            if results["a_hog"].get("throttled"):
                assert results["b_light"].get("throttled"), results  # the agent sits out, not one trait
        assert reported is not None and 300 <= reported[0] < 400, (reported, ran)
        assert "fair share" in reported[1] and "heaviest" in reported[1]
        assert ran["a_hog"] < reported[0] / 2 and ran["c_alice"] == ran["d_bob"] == reported[0], ran


# Cheap for its carriers' first 30 ticks of age (as in its sandbox test), then ~0.45 ms of Python
# per call on this machine (2026-11-29): over twice the drift rule's 204 us, so a window of slow
# calls is judged a departure however the machine's speed varies (at 3,000 iterations, ~230 us,
# a window could fall below it).
SLOW_AFTER_A_WHILE = """import math

class SlowAfterAWhile:
    async def execute(self, entity) -> None:
        if entity.age > 30:
            total = 0.0
            for i in range(6000):
                total = total + math.sin(i)
            entity.direction = total % 6.28
"""


async def test_a_trait_that_departs_from_its_sandbox_profile_becomes_a_suspect(settings):
    """Its sandbox profile says a call costs a few microseconds; live, past a gate, its calls cost
    a hundred times that, within every limit. The engine moves it into a worker of its own (its
    mate stays in the agent's); nothing is quarantined."""
    own = settings.override(redis_url=redis_db_below(7), engine_snapshot_interval=10**9, engine_trait_gain_chance=0.0)
    redis = aioredis.from_url(own.redis_url)
    await redis.flushdb()
    profile = SandboxProfile(call_us_mean=4.0, errors_per_call=0.0, intents_per_call=1.0)
    traits = {
        "a_slow": (SLOW_AFTER_A_WHILE, "mallory"),
        "b_mate": (BENIGN.replace("class Benign", "class Mate"), "mallory"),
    }
    for i, (name, (source, agent)) in enumerate(traits.items()):
        entry = trait_hosts.registry_entry(name, source, agent, 300 + i).model_copy(update={"profile": profile})
        await registry.put_entry(redis, entry)
    # Ten carriers: 600 calls a window (the rule needs 500), ~4.5 ms a tick once slow, well within
    # the agent's share of the traits' CPU (it must not be throttled).
    world = trait_hosts.crowd(list(traits), 10, seed=3, born_together=True)
    runner = HostTraitRunner(own, redis)
    engine = Engine(own, runner, world=world)
    try:
        await engine.start()
        while runner.stats.drift_suspects == 0 and engine.world.tick < 400:
            await engine.tick_once()
        assert runner.stats.drift_suspects == 1 and not runner.stats.quarantined, runner.stats
        # Judged once a window is full: the first (ticks 1-60) holds 30 slow ticks, enough on a
        # busy machine (slow calls cost more), on an idle one only the second window tells.
        assert DRIFT_WINDOW_TICKS <= engine.world.tick <= 2 * DRIFT_WINDOW_TICKS + 5
        for _ in range(100):
            await engine.tick_once()
            stats = await runner.host_stats()
            workers = {tuple(w["traits"]): w["solo"] for w in stats["workers"]} if stats else {}
            if workers == {("a_slow",): True, ("b_mate",): False}:
                break
            await asyncio.sleep(0.01)
        assert workers == {("a_slow",): True, ("b_mate",): False}, workers
    finally:
        await engine.close()
        await redis.flushdb()
        await redis.aclose()
