"""An escape inside one worker stays inside that agent.

Each trait here got past every Python-level rule (loaded into the host directly, as a gatekeeper
bypass would): it reaches ``os``, ``sys`` and ``resource`` through the re-exports the gatekeeper
refuses (``random._os``, ``collections._sys``), the entity proxy's own intent recorder, and the
worker's frames. From there it tries to act on another agent's Molbots, limit, re-prioritise and
pin another agent's worker, fill the container's log, and break the supervisor with garbage.
Everything runs on a real trait-host container; the Molbots' test goes through the live
engine's runner."""

from __future__ import annotations

import docker
import pytest
import redis.asyncio as aioredis

from engine.live_traits import HostTraitRunner
from engine.world import World, WorldParams
from pipeline import registry
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
        intents = await runner.run_tick_views(world.tick, world.trait_views(runner.active_traits(), raw=True))
        assert runner.last_outcome[0] == "ok", runner.last_outcome
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
