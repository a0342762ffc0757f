"""The ``views`` form of the trait-host protocol (each carrier's view sent once, in binary
columns): traits run together give what each gives alone, in every encoding."""

from __future__ import annotations

import json

import docker
import pytest

from engine.core.state_digest import ConstantColumns, TextCodes
from engine.core.world import VIEW_FIELDS, World, decode_views
from genesis import entity_api
from genesis.trait_wire import MalformedIntents, decode_intent_groups, decode_intents
from sandbox.container import IsolationLimits, TraitHostContainer
from sandbox.traithost import wire as trait_host
from tests import trait_hosts

# Writes then reads back (the write is visible within the call), reads every kind of attribute.
STEERER = """import math

class BaseTrait:
    pass

class SteererTrait(BaseTrait):
    async def execute(self, entity) -> None:
        entity.direction = entity.direction + 0.1
        found = entity.nearest_resource()
        if found is not None and entity.neighbors >= 0:
            entity.move(found[0], found[1])
        entity.state = "s%d:%d:%s" % (entity.age % 10, len(entity.traits), entity.direction > 0)
        if entity.world_width < entity.x:
            entity.eat()
"""

# Sees the entity's own values, not the steerer's writes (each trait call has its own proxy).
COUNTER = """class BaseTrait:
    pass

class CounterTrait(BaseTrait):
    def __init__(self):
        self.calls = 0

    async def execute(self, entity) -> None:
        self.calls = self.calls + 1
        entity.speed = entity.speed * 0.5 + self.calls * 0.01
        entity.state = "c%d" % self.calls
        if entity.id % 7 == 0:
            entity.energy = 100.0
"""


def make_world() -> World:
    w = World(seed=21)
    ids = sorted(w.entities)
    for eid in ids[:25]:
        w.give_trait(eid, "counter")
    for eid in ids[10:35]:
        w.give_trait(eid, "steerer")
    for eid in ids[30:38]:
        w.give_trait(eid, "dormant")  # carried, but not run
    for _ in range(5):
        w.step()
    return w


def test_trait_views_decode_to_the_same_views_as_trait_batches():
    w = make_world()
    views = w.trait_views(["counter", "steerer"])
    assert json.loads(json.dumps(views, allow_nan=False)) == views  # JSON-safe (NaN only inside base64)
    assert views["run"] == ["counter", "steerer"]
    decoded = decode_views(views)
    batches = w.trait_batches()
    expected = {v["id"]: v for name in ("counter", "steerer") for v in batches[name]}
    assert [v["id"] for v in decoded] == sorted(expected)
    for v in decoded:
        assert v == expected[v["id"]]
        for key, (kind, _) in entity_api.READABLE_ATTRS.items():
            assert type(v[key]) is {"int": int, "float": float, "str": str, "list[str]": list}[kind], key
    # Only carriers of a trait to run are sent; every carried trait shows in ``traits``.
    assert all(set(v["traits"]) & {"counter", "steerer"} for v in decoded)
    assert any("dormant" in v["traits"] for v in decoded)
    assert w.trait_views([])["count"] == 0
    assert w.trait_views()["run"] == ["counter", "dormant", "steerer"]


def start_host(client: docker.DockerClient, agents: tuple[str, str] = ("a", "a")) -> TraitHostContainer:
    """A host with the steerer and the counter, of agents ``agents`` (one process, or two)."""
    h = trait_hosts.start(client, "test-views", IsolationLimits("64m", 32, 1.0))
    for (name, source), agent in zip((("steerer", STEERER), ("counter", COUNTER)), agents):
        assert trait_hosts.load(h, name, source, agent)["ok"]
    return h


@pytest.fixture(scope="module")
def client():
    return docker.from_env()


@pytest.fixture(scope="module")
def host(client):
    with start_host(client) as h:
        yield h


@pytest.fixture(scope="module")
def other_host(client):
    with start_host(client) as h:
        yield h


@pytest.mark.parametrize("agents", [("a", "a"), ("a", "b")])
def test_traits_run_together_give_the_intents_of_each_run_alone(client, agents):
    """An entity's intents are its traits' in ``run`` order, whether the traits share a process
    (one agent) or not (two agents: two intent groups, merged by entity id)."""
    with start_host(client, agents) as together, start_host(client, agents) as apart:
        worlds = {"together": make_world(), "apart": make_world()}
        run = ["counter", "steerer"]
        for _ in range(5):
            new = trait_hosts.tick(together, worlds["together"], run)
            assert len(new["intent_groups"]) == len(run)  # a group per trait
            alone = [trait_hosts.tick(apart, worlds["apart"], [name]) for name in run]
            expected: dict[int, list] = {}
            for reply in alone:
                for entity_id, intents in reply["intents"].items():
                    expected.setdefault(entity_id, []).extend(intents)
            assert new["intents"] == dict(sorted(expected.items()))
            for name, reply in zip(run, alone):
                for key in ("calls", "error_count", "timeouts"):
                    assert new["results"][name][key] == reply["results"][name][key], (name, key)
            counter_errors = new["results"]["counter"]["errors"]
            assert counter_errors and all("read-only" in e["error"] for e in counter_errors)
            for w in worlds.values():
                w.step(expected)
            assert worlds["together"].state_hash() == worlds["apart"].state_hash()


def test_views_form_reports_a_trait_that_is_not_loaded(host):
    w = make_world()
    reply = host.request({"op": "views", "tick": 0, **w.trait_views(["dormant", "steerer"])}, 10)
    assert reply["ok"]
    assert reply["results"]["dormant"]["errors"][0]["error"] == "trait not loaded"
    assert reply["results"]["steerer"]["calls"] == 25


def test_views_form_rejects_malformed_columns(host):
    w = make_world()
    views = w.trait_views(["steerer"])
    views["columns"][1] = {"f8": "AAAA"}  # fewer values than the other columns
    reply = host.request({"op": "views", "tick": 0, **views}, 10)
    assert reply["ok"] and "bad request" in reply["results"]["steerer"]["errors"][0]["error"]
    # The host still answers afterwards.
    assert host.request({"op": "views", "tick": 0, **w.trait_views(["steerer"])}, 10)["ok"]


def test_raw_views_and_the_binary_reply_mean_the_same_as_base64(host, other_host):
    # The live engine's form: arrays as the request's attachment, intents in the reply's.
    worlds = {"raw": make_world(), "base64": make_world()}
    run = ["counter", "steerer"]
    for w in worlds.values():  # states that differ (and one non-ASCII) cross as one text column
        w.step({eid: [["set", "state", f"s{eid % 3}é" if eid % 2 else ""]] for eid in sorted(w.entities)})
    assert "text" in worlds["raw"].trait_views(run, raw=True)["columns"][VIEW_FIELDS.index("state")]
    for _ in range(5):
        b64 = other_host.request({"op": "views", "tick": 0, **worlds["base64"].trait_views(run), "run": run}, 10)
        raw = host.request({"op": "views", "tick": 0, **worlds["raw"].trait_views(run, raw=True), "run": run}, 10)
        assert isinstance(raw["attachment"], bytes) and "attachment" not in b64
        assert len(raw["intent_groups"]) == len(run)  # a group per trait
        assert all(
            isinstance(group[k], dict) and isinstance(next(iter(group[k].values())), list)
            for group in raw["intent_groups"]
            for k in ("entity", "attr", "a", "b")
        )
        expected = decode_intent_groups(b64["intent_groups"])
        assert expected and decode_intent_groups(raw["intent_groups"], raw["attachment"]) == expected
        assert decode_views(worlds["raw"].trait_views(run, raw=True)) == decode_views(worlds["base64"].trait_views(run))
        for w in worlds.values():
            w.step(dict(expected))
        assert worlds["raw"].state_hash() == worlds["base64"].state_hash()


def test_binary_intent_columns_outside_their_attachment_are_refused():
    blob = bytearray()
    columns = trait_host.encode_intents({4: [["set", "direction", 1.0], ["eat"]]}, blob)
    assert decode_intents(columns, bytes(blob))[4] == [["set", "direction", 1.0], ["eat"]]
    with pytest.raises(MalformedIntents, match="outside the attachment"):
        decode_intents(columns, bytes(blob)[:-1])
    with pytest.raises(MalformedIntents, match="outside the attachment"):
        decode_intents(columns)  # no attachment at all
    columns["a"] = {"f8": [0, -8]}
    with pytest.raises(MalformedIntents, match="outside the attachment"):
        decode_intents(columns, bytes(blob))


def test_intent_columns_round_trip_every_value_kind():
    merged = {
        3: [["set", "direction", 1.5], ["move", 2.0, -3.25], ["eat"], ["set", "state", "saving"]],
        1: [["move_towards", 7, 1e308], ["set", "energy_consumption_rate", True], ["set", "speed", "<non-finite>"]],
        9: [["set", "direction", -0.0], ["move", "<list>", 0.5]],
    }
    encoded = json.loads(json.dumps(trait_host.encode_intents(merged), allow_nan=False))
    decoded = decode_intents(encoded)
    assert decoded == merged
    assert [type(v) for v in decoded[1][0]] == [str, int, float] and decoded[1][1][2] is True
    assert "i4" in encoded["entity"]  # small ids cross as int32; an id beyond that as int64
    big = {2**40: [["eat"], ["set", "speed", 1.0]]}
    wide = json.loads(json.dumps(trait_host.encode_intents(big)))
    assert "i8" in wide["entity"] and decode_intents(wide) == big


@pytest.mark.parametrize(
    "corrupt, why",
    [
        (lambda c: c.update(count=-1), "count"),
        (lambda c: c.update(kind=c["kind"][:-1]), "kind"),
        (lambda c: c.update(kind="x" + c["kind"][1:]), "unknown intent kind"),
        (lambda c: c.update(entity={"i8": "AAAA"}), "column"),
        (lambda c: c.update(a={"f8": "not base64!"}), "bad f8"),
        (lambda c: c.update(attr={"i8": trait_host.pack("q", [5, -1, -1])["i8"]}), "set intent"),
        (lambda c: c.update(other=[[99, 0, 1.0]]), "other entries"),
        (lambda c: c.update(names="direction"), "names"),
        (lambda c: c.update(a=trait_host.pack("d", [float("nan")] * 3)), "set intent"),
    ],
)
def test_malformed_intent_columns_are_refused(corrupt, why):
    columns = trait_host.encode_intents({4: [["set", "direction", 1.0], ["move", 1.0, 2.0], ["eat"]]})
    corrupt(columns)
    with pytest.raises(MalformedIntents, match=why):
        decode_intents(columns)
    with pytest.raises(MalformedIntents):
        decode_intents(["not", "an", "object"])


def _hostile_intents(rnd, w: World, dead: list[int]) -> dict[int, list[list]]:
    """Intents as a trait host may send them: mostly plain, some of every kind of wrong."""
    values = [0.5, 7, 1e308, "<non-finite>", True, "s", "x" * 40, "bad\n", -0.0, 2**1100, 99.0]
    out: dict[int, list[list]] = {}
    for eid in sorted(w.entities) + [10**6] + dead[-2:]:
        lst: list[list] = []
        for _ in range(rnd.choice([1, 2, 3])):
            k = rnd.random()
            if k < 0.3:
                lst.append(["set", "direction", rnd.uniform(-4.0, 4.0) if k < 0.25 else rnd.choice(values)])
            elif k < 0.45:
                attr = rnd.choice(["speed", "energy_consumption_rate", "state", "energy", "nope"])
                lst.append(["set", attr, rnd.choice(values) if k < 0.38 else rnd.uniform(-1.0, 6.0)])
            elif k < 0.55:
                lst.append(["set", "state", rnd.choice(["saving", "", "x" * 33, "a\tb"])])
            elif k < 0.75:
                lst.append(["move", rnd.uniform(-5, 5), rnd.uniform(-5, 5) if k < 0.72 else rnd.choice(values)])
            elif k < 0.85:
                lst.append(["move_towards", rnd.uniform(-10, 900), rnd.uniform(0, 700)])
            else:
                lst.append(["eat"])
        out[eid] = lst * (20 if rnd.random() < 0.03 else 1)  # sometimes too many
    return out


def test_prepare_step_while_the_host_computes_changes_nothing():
    # The engine calls World.prepare_step while the trait host computes the tick's intents, and
    # steps lazily: a step starts from the world's columns, whose numbers the entities may not
    # hold yet, and takes what the intents set on the entities again. With hostile intents
    # (speed, direction and rate set in bulk and one by one, rejections, dead and unknown ids),
    # births, deaths and collisions, every tick's state must equal that of a plain step.
    import random
    from dataclasses import replace

    params = replace(
        World().params,
        initial_population=120,
        min_population=60,
        initial_energy=8.0,
        collision_radius=6.0,
        resource_spawn_chance=1.0,
    )
    # plain, plain prepared, columns, columns prepared; then as the engine steps (columns,
    # prepared, lazily), lazily without prepare_step; and as replay
    # steps (columns, lazily, never asked for views: only its digest reads it between steps)
    worlds = [World(params, seed=9) for _ in range(7)]
    replayed = worlds[6]
    constants, text_codes = ConstantColumns(), TextCodes()
    rnd = random.Random(9)
    dead: list[int] = []
    for tick in range(40):
        encoded = json.loads(
            json.dumps(trait_host.encode_intents(_hostile_intents(rnd, worlds[0], dead)), allow_nan=False)
        )
        columns = decode_intents(encoded)
        reports = []
        views = []
        for i, w in enumerate(worlds):
            if w is not replayed:
                views.append(w.trait_views())
            if i in (1, 3, 4):
                w.prepare_step()
            reports.append(w.step(columns if i >= 2 else dict(columns.items()), lazy_write_back=i >= 4))
        assert all(v == views[0] for v in views), f"tick {tick}"
        assert len({(r.rejected_intents.__repr__(), r.deaths.__repr__(), r.births.__repr__()) for r in reports}) == 1
        # the lazy worlds are read (so written back) only now and then: most of their ticks
        # start from entities that still hold the tick before's numbers
        checked = worlds[:6] if tick % 5 == 4 else worlds[:4]
        assert replayed.state_digest(constants, text_codes).hex == worlds[0].state_hash(), f"tick {tick}"
        assert len({w.state_hash() for w in checked}) == 1, f"tick {tick}"
        dead += [eid for eid, _ in reports[0].deaths]
    lazy = worlds[5]
    lazy.trait_views()
    held = next(iter(lazy._entities.values()))
    before = (held.x, held.y, held.age)
    lazy.step(lazy_write_back=True)
    assert (held.x, held.y, held.age) == before  # not yet stored: the object is stale ...
    assert lazy.entities[held.id] is held and held.age == before[2] + 1  # ... until the world is read
    # an entity added after prepare_step takes part in the step
    w = worlds[1]
    w.prepare_step()
    w.add_entity(10.0, 10.0, speed=2.0)
    w.step()
    worlds[0].add_entity(10.0, 10.0, speed=2.0)
    worlds[0].step()
    assert w.state_hash() == worlds[0].state_hash()
    assert len({w.stats().__repr__() for w in worlds[2:5]}) == 1


def test_columnar_intents_step_the_world_exactly_as_the_plain_form():
    # World.step applies decoded intent columns in bulk; the plain dict of the same intents
    # must give the same state, rejections (same order) and counts, tick after tick.
    import random
    from dataclasses import replace

    params = replace(
        World().params,
        initial_population=120,
        min_population=60,
        initial_energy=8.0,
        collision_radius=6.0,
        resource_spawn_chance=1.0,
    )
    plain_world, columns_world = World(params, seed=5), World(params, seed=5)
    rnd = random.Random(5)
    rejected, dead = 0, []
    for _ in range(40):
        encoded = json.loads(
            json.dumps(trait_host.encode_intents(_hostile_intents(rnd, plain_world, dead)), allow_nan=False)
        )
        columns = decode_intents(encoded)
        a = plain_world.step(dict(columns.items()))
        b = columns_world.step(columns)
        assert (a.rejected_intents, a.deaths, a.births) == (b.rejected_intents, b.deaths, b.births)
        assert plain_world.state_hash() == columns_world.state_hash()
        rejected += len(a.rejected_intents)
        dead += [eid for eid, _ in a.deaths]
    assert plain_world.stats() == columns_world.stats()
    assert rejected > 100 and set(plain_world.stats()["rejected_intents"]) >= {
        "bad_type",
        "not_finite",
        "bad_state",
        "read_only_attr",
        "unknown_attr",
        "too_many_intents",
        "unknown_entity",
        "dead_entity",
    }


async def test_a_trait_gives_the_same_intents_in_its_sandbox_test_and_in_the_engine(settings):
    """One runtime, one protocol: the sandbox test's host (base64 columns, a fresh container)
    and the live engine's (binary attachments over its private socket, a process per agent)
    answer the same views of the same world with the same intents, tick after tick."""
    import redis.asyncio as aioredis

    from activities.sandbox import ColdHosts
    from engine.process.live_traits import HostTraitRunner
    from pipeline import registry
    from tests.own_stack import redis_db_below

    own = settings.model_copy(update={"redis_url": redis_db_below(6)})
    redis = aioredis.from_url(own.redis_url)
    await redis.flushdb()
    run = ["counter", "steerer"]
    # the counter without its refused write: the engine would quarantine it after 3 ticks
    counter = COUNTER.replace("        if entity.id % 7 == 0:\n            entity.energy = 100.0\n", "")
    assert counter != COUNTER
    for i, (name, source) in enumerate((("counter", counter), ("steerer", STEERER))):
        await registry.put_entry(
            redis,
            registry.RegistryEntry(
                trait_name=name,
                version=1,
                mutation_id=f"mut_0ne9{i:08d}",
                class_name=trait_hosts.trait_class(source),
                code=source,
                code_hash=f"{i:064d}",
                agent_id=f"agent-{i}",
            ),
        )
    runner = HostTraitRunner(own, redis)
    sandbox_host = ColdHosts(docker.from_env(), own).new_host("test-one-protocol")
    try:
        await runner.refresh()
        assert runner.active_traits() == run
        for name, source in (("counter", counter), ("steerer", STEERER)):
            assert trait_hosts.load(sandbox_host, name, source)["ok"]
        worlds = {"sandbox": make_world(), "engine": make_world()}
        for _ in range(5):
            in_sandbox = trait_hosts.tick(sandbox_host, worlds["sandbox"], run)["intents"]
            in_engine = dict(
                await runner.run_tick_views(worlds["engine"].tick, worlds["engine"].trait_views(run, raw=True))
            )
            assert in_sandbox and in_engine == in_sandbox
            for w in worlds.values():
                w.step(in_sandbox)
            assert worlds["sandbox"].state_hash() == worlds["engine"].state_hash()
        assert runner.stats.restarts == 0 and runner.stats.lost_results == 0
    finally:
        sandbox_host.close()
        await runner.close()
        await redis.flushdb()
        await redis.aclose()
