"""Unit tests for the pure world core (engine.core.world): determinism, intent checking, life cycle."""

from __future__ import annotations

import json
import math
import random
from dataclasses import replace

import pytest

from engine.core.spatial import SpatialGrid
from engine.core.world import DEATH_CAUSES, REJECT_REASONS, TickReport, World, WorldParams
from genesis import entity_api

# A still world: nothing happens unless a test makes it happen.
QUIET = WorldParams(
    initial_population=0,
    initial_resources=0,
    max_resources=0,
    resource_spawn_chance=0.0,
    base_metabolism=0.0,
    move_cost=0.0,
    collision_damage=0.0,
    max_age_jitter=0.0,
)


def forager_intents(world: World) -> dict[int, list[list]]:
    """What a simple 'forager' trait would send: head for the nearest sensed resource."""
    out: dict[int, list[list]] = {}
    for view in world.trait_batches().get("forager", []):
        near = view["nearest_resource"]
        if near is None:
            out[view["id"]] = [["set", "state", "searching"]]
        else:
            out[view["id"]] = [
                ["set", "state", "hunting"],
                ["move_towards", view["x"] + near[0], view["y"] + near[1]],
                ["eat"],
            ]
    return out


def run_scripted(seed: int, ticks: int = 200) -> World:
    w = World(seed=seed)
    for eid in sorted(w.entities)[::2]:
        w.give_trait(eid, "forager")
    for _ in range(ticks):
        w.step(forager_intents(w))
    return w


def reasons(report: TickReport) -> list[str]:
    return [reason for _, reason in report.rejected_intents]


# -- determinism ----------------------------------------------------------------------------


def test_same_seed_same_intents_same_hash():
    a = run_scripted(7)
    b = run_scripted(7)
    assert a.tick == b.tick == 200
    assert a.state_hash() == b.state_hash()
    assert a.stats() == b.stats()


def test_different_seed_different_hash():
    assert run_scripted(7, 50).state_hash() != run_scripted(8, 50).state_hash()
    assert World(seed=1).state_hash() != World(seed=2).state_hash()


def test_hash_changes_with_tick_and_intents():
    a = World(seed=3)
    b = World(seed=3)
    assert a.state_hash() == b.state_hash()
    a.step()
    assert a.state_hash() != b.state_hash()
    b.step({1: [["set", "speed", 0.0]]})
    assert a.state_hash() != b.state_hash()


def test_snapshot_resume_reproduces_hash():
    w = run_scripted(11, 60)
    snap = json.loads(json.dumps(w.snapshot()))  # must survive JSON
    restored = World.from_snapshot(snap)
    assert restored.state_hash() == w.state_hash()
    assert restored.stats() == w.stats()
    for _ in range(80):
        w.step(forager_intents(w))
        restored.step(forager_intents(restored))
    assert restored.state_hash() == w.state_hash()
    assert restored.stats() == w.stats()


def test_world_without_intents_runs_long_and_stays_consistent():
    w = World(seed=5)
    for _ in range(1500):
        report = w.step()
        assert report.rejected_intents == []
    st = w.stats()
    assert st["tick"] == 1500
    assert st["population"] == len(w.entities)
    assert list(w.entities) == sorted(w.entities)
    assert st["births"] > 0
    for e in w.entities.values():
        assert 0.0 <= e.x < w.params.width and 0.0 <= e.y < w.params.height
        assert -math.pi <= e.direction <= math.pi
        assert 0.0 < e.energy <= e.max_energy
    assert len(w.resources) <= w.params.max_resources


# -- intents: energy and bounds -----------------------------------------------------------


def test_energy_cannot_be_set():
    w = World(QUIET)
    e = w.add_entity(100, 100, energy=30.0)
    report = w.step({e.id: [["set", "energy", 100.0], ["set", "max_energy", 1e6]]})
    assert e.energy == 30.0
    assert e.max_energy == QUIET.max_energy
    assert reasons(report) == ["read_only_attr", "read_only_attr"]
    assert w.stats()["rejected_intents"] == {"read_only_attr": 2}


def test_energy_never_increases_without_eating():
    params = replace(WorldParams(), initial_resources=0, max_resources=0)
    w = World(params, seed=2)
    w.give_trait_to_all("greedy")
    rng = random.Random(0)
    prev = {eid: e.energy for eid, e in w.entities.items()}
    for _ in range(150):
        intents = {}
        for view in w.trait_batches().get("greedy", []):
            intents[view["id"]] = [
                ["set", "energy", 1e9],
                ["set", "energy_consumption_rate", rng.choice([-5, 0.0, 0.5, 1.0])],
                ["eat"],
                ["move", rng.uniform(-1, 1), rng.uniform(-1, 1)],
            ]
        w.step(intents)
        for eid, e in w.entities.items():
            if eid in prev:
                assert e.energy < prev[eid]
        prev = {eid: e.energy for eid, e in w.entities.items()}
    assert w.stats()["rejected_intents"]["read_only_attr"] > 0


def test_out_of_bounds_writes_are_clamped():
    w = World(QUIET)
    a = w.add_entity(100, 100)
    b = w.add_entity(200, 200)
    report = w.step(
        {
            a.id: [
                ["set", "speed", 100.0],
                ["set", "energy_consumption_rate", 99],
                ["set", "direction", 10.0],
            ],
            b.id: [
                ["set", "speed", -3],
                ["set", "energy_consumption_rate", -1e300],
                ["set", "direction", -7.5],
            ],
        }
    )
    assert report.rejected_intents == []
    assert a.speed == entity_api.MAX_SPEED
    assert a.energy_consumption_rate == entity_api.MAX_CONSUMPTION_RATE
    assert b.speed == 0.0
    assert b.energy_consumption_rate == entity_api.MIN_CONSUMPTION_RATE
    # directions wrap into -pi..pi; the entity then wandered one tick with a random turn
    for e in (a, b):
        assert -math.pi <= e.direction <= math.pi
    assert type(a.speed) is float and type(b.energy_consumption_rate) is float


def test_direction_wraps_exactly():
    w = World(QUIET)
    e = w.add_entity(100, 100, speed=1.0)
    w.step({e.id: [["set", "direction", 3 * math.pi / 2], ["move", 0, 0]]})
    assert e.direction == pytest.approx(-math.pi / 2)
    w.step({e.id: [["set", "direction", 1e300], ["move", 0, 0]]})
    assert -math.pi <= e.direction <= math.pi


def test_ints_are_accepted_for_floats_and_huge_ints_clamped():
    w = World(QUIET)
    e = w.add_entity(100, 100)
    report = w.step({e.id: [["set", "speed", 10**30], ["set", "energy_consumption_rate", 1]]})
    assert report.rejected_intents == []
    assert e.speed == entity_api.MAX_SPEED
    assert e.energy_consumption_rate == 1.0


@pytest.mark.parametrize(
    "value, reason",
    [
        (True, "bad_type"),
        (False, "bad_type"),
        ("2.0", "bad_type"),
        ([1.0], "bad_type"),
        ({"v": 1}, "bad_type"),
        (None, "bad_type"),
        (float("nan"), "not_finite"),
        (float("inf"), "not_finite"),
        (float("-inf"), "not_finite"),
        (10**400, "not_finite"),
    ],
)
def test_wrong_number_types_are_rejected(value, reason):
    w = World(QUIET)
    e = w.add_entity(100, 100, speed=1.5)
    before = (e.speed, e.direction, e.energy_consumption_rate, e.x, e.y)
    report = w.step(
        {
            e.id: [
                ["set", "speed", value],
                ["set", "direction", value],
                ["set", "energy_consumption_rate", value],
                ["move", value, 1.0],
                ["move_towards", 1.0, value],
            ]
        }
    )
    assert reasons(report) == [reason] * 5
    # nothing was applied: the entity wandered by instinct with its old speed
    assert e.speed == before[0]
    assert e.energy_consumption_rate == before[2]
    assert math.hypot(e.x - before[3], e.y - before[4]) == pytest.approx(1.5)
    assert w.stats()["rejected_intents"] == {reason: 5}


def test_state_checks():
    w = World(QUIET)
    e = w.add_entity(100, 100)
    max_len = entity_api.MAX_STATE_LENGTH
    report = w.step({e.id: [["set", "state", "x" * max_len]]})
    assert report.rejected_intents == [] and e.state == "x" * max_len
    report = w.step(
        {
            e.id: [
                ["set", "state", "x" * (max_len + 1)],
                ["set", "state", "line\nbreak"],
                ["set", "state", "nul\x00"],
                ["set", "state", 5],
                ["set", "state", None],
                ["set", "state", ["a"]],
            ]
        }
    )
    assert reasons(report) == ["bad_state"] * 3 + ["bad_type"] * 3
    assert e.state == "x" * max_len
    w.step({e.id: [["set", "state", "hunting"], ["set", "state", ""]]})
    assert e.state == ""


def test_malformed_intents_are_rejected_and_counted():
    w = World(QUIET)
    e = w.add_entity(100, 100)
    report = w.step(
        {
            e.id: [
                "eat",
                [],
                [5, 1, 2],
                ["fly", 1, 2],
                ["eat", 1],
                ["move", 1],
                ["move_towards", 1, 2, 3],
                ["set", "speed"],
                ["set", 3, 1.0],
                ["set", "x", 10.0],
                ["set", "age", 0],
                ["set", "id", 99],
                ["set", "traits", []],
                ["set", "__class__", 1],
                None,
                {"kind": "eat"},
            ]
        }
    )
    assert reasons(report) == [
        "malformed_intent",
        "malformed_intent",
        "malformed_intent",
        "unknown_kind",
        "bad_arity",
        "bad_arity",
        "bad_arity",
        "bad_arity",
        "malformed_intent",
        "read_only_attr",
        "read_only_attr",
        "read_only_attr",
        "read_only_attr",
        "unknown_attr",
        "malformed_intent",
        "malformed_intent",
    ]
    assert all(eid == e.id for eid, _ in report.rejected_intents)
    assert set(reasons(report)) <= set(REJECT_REASONS)
    assert e.id in w.entities and e.traits == ()


def test_bad_containers_never_raise():
    w = World(QUIET)
    e = w.add_entity(100, 100)
    assert reasons(w.step([[e.id, ["eat"]]])) == ["bad_intents"]
    assert reasons(w.step("nonsense")) == ["bad_intents"]
    assert reasons(w.step({e.id: "eat"})) == ["bad_intent_list"]
    assert reasons(w.step({e.id: {"eat": 1}})) == ["bad_intent_list"]
    assert reasons(w.step({e.id: None})) == ["bad_intent_list"]
    tuples = w.step({e.id: (("set", "state", "ok"),)})
    assert tuples.rejected_intents == [] and e.state == "ok"


def test_too_many_intents_are_dropped():
    w = World(QUIET)
    e = w.add_entity(100, 100)
    limit = QUIET.max_intents_per_entity
    intents = [["set", "state", f"s{i}"] for i in range(limit + 10)]
    report = w.step({e.id: intents})
    assert reasons(report) == ["too_many_intents"]
    assert e.state == f"s{limit - 1}"


def test_intents_for_unknown_and_dead_entities_are_rejected():
    params = replace(QUIET, max_age=3)
    w = World(params)
    short = w.add_entity(100, 100, max_age=1)
    alive = w.add_entity(300, 300)
    report = w.step()
    assert report.deaths == [(short.id, "age")]
    report = w.step(
        {
            short.id: [["set", "speed", 1.0]],
            10**9: [["eat"]],
            -1: [["eat"]],
            "2": [["eat"]],
            2.5: [["eat"]],
            None: [["eat"]],
            alive.id: [["set", "state", "fine"]],
        }
    )
    assert report.rejected_intents == [
        (short.id, "dead_entity"),
        (10**9, "unknown_entity"),
        (-1, "unknown_entity"),
        (-1, "bad_entity_id"),
        (-1, "bad_entity_id"),
        (-1, "bad_entity_id"),
    ]
    assert alive.state == "fine"
    # JSON object keys are strings and True == 1: neither is accepted as an entity id
    assert reasons(w.step({True: [["set", "state", "bool"]]})) == ["bad_entity_id"]
    assert reasons(w.step({str(alive.id): [["set", "state", "str"]]})) == ["bad_entity_id"]
    assert alive.state == "fine"


def test_garbage_intents_never_raise():
    w = World(seed=4)
    rng = random.Random(1)
    junk = [
        None,
        True,
        1,
        -1.5,
        float("nan"),
        float("inf"),
        10**400,
        "",
        "x" * 1000,
        "set",
        "move",
        "eat",
        "speed",
        "direction",
        "state",
        "energy",
        [],
        {},
        [1, 2],
        ("a",),
        object(),
    ]
    for _ in range(100):
        intents = {}
        ids = sorted(w.entities) + [0, -3, 10**6]
        for _ in range(20):
            kind = rng.choice(["set", "move", "move_towards", "eat", rng.choice(junk)])
            intent = [kind] + [rng.choice(junk) for _ in range(rng.randrange(4))]
            intents.setdefault(rng.choice(ids), []).append(rng.choice([intent, rng.choice(junk)]))
        w.step(intents)
    for e in w.entities.values():
        assert 0.0 <= e.x < w.params.width and 0.0 <= e.y < w.params.height
        assert 0.0 <= e.speed <= entity_api.MAX_SPEED
        assert len(e.state) <= entity_api.MAX_STATE_LENGTH
    assert sum(w.stats()["rejected_intents"].values()) > 0


# -- movement -----------------------------------------------------------------------------


def test_moves_are_capped_at_speed():
    w = World(QUIET)
    e = w.add_entity(400, 300, speed=2.5)
    w.step({e.id: [["move", 1e9, 0]]})
    assert (e.x, e.y) == pytest.approx((402.5, 300.0))
    assert e.direction == pytest.approx(0.0)
    w.step({e.id: [["move", -3, 4]]})
    assert (e.x, e.y) == pytest.approx((402.5 - 1.5, 302.0))
    w.step({e.id: [["move_towards", 1e9, 1e9]]})
    assert math.hypot(e.x - 401.0, e.y - 302.0) == pytest.approx(2.5)


def test_move_towards_does_not_overshoot():
    w = World(QUIET)
    e = w.add_entity(400, 300, speed=4.0)
    w.step({e.id: [["move_towards", 400.5, 300.0]]})
    assert (e.x, e.y) == (400.5, 300.0)
    w.step({e.id: [["move_towards", 400.5, 300.0]]})  # already there: stays
    assert (e.x, e.y) == (400.5, 300.0)


def test_speed_cap_scales_with_consumption_rate():
    w = World(QUIET)
    e = w.add_entity(400, 300, speed=4.0)
    w.step({e.id: [["set", "energy_consumption_rate", 0.5], ["move", 1, 0]]})
    assert e.x == pytest.approx(400 + entity_api.MAX_SPEED * 0.5)
    assert e.speed == 4.0  # the attribute keeps its value; the cap applies to movement


def test_last_move_intent_wins():
    w = World(QUIET)
    e = w.add_entity(400, 300, speed=1.0)
    w.step({e.id: [["move", 1, 0], ["move_towards", 0, 0], ["move", 0, 1]]})
    assert (e.x, e.y) == pytest.approx((400.0, 301.0))


def test_zero_move_stays_put():
    w = World(QUIET)
    e = w.add_entity(400, 300, speed=3.0)
    w.step({e.id: [["move", 0, 0.0]]})
    assert (e.x, e.y) == (400.0, 300.0)


def test_huge_moves_stay_inside_world():
    w = World(QUIET)
    corners = [w.add_entity(x, y, speed=4.0) for x, y in [(0, 0), (799, 599), (1, 598), (798, 2)]]
    for i in range(300):
        intents = {}
        for j, e in enumerate(corners):
            big = 1e9 if (i + j) % 2 else -1e9
            intents[e.id] = [["move", big, -big]] if j % 2 else [["move_towards", big, big * 3]]
        w.step(intents)
        for e in corners:
            assert 0.0 <= e.x < 800.0 and 0.0 <= e.y < 600.0
    edge = w.add_entity(1e12, -1e12)
    assert 0.0 <= edge.x < 800.0 and edge.y == 0.0


def test_wandering_stays_inside_world_and_moves_at_speed():
    params = replace(QUIET, width=50.0, height=40.0, sense_radius=10.0)
    w = World(params, seed=9)
    ents = [w.add_entity(25, 20, speed=s, direction=s) for s in (0.0, 1.0, 4.0)]
    for _ in range(500):
        before = [(e.x, e.y) for e in ents]
        w.step()
        for e, (x, y) in zip(ents, before):
            assert 0.0 <= e.x < 50.0 and 0.0 <= e.y < 40.0
            assert math.hypot(e.x - x, e.y - y) <= e.speed + 1e-9
    assert (ents[0].x, ents[0].y) == (25.0, 20.0)


# -- eating -------------------------------------------------------------------------------


def test_hungry_entities_eat_by_instinct_and_sated_ones_do_not():
    w = World(QUIET)
    hungry = w.add_entity(100, 100, energy=50.0, speed=0.0)
    sated = w.add_entity(300, 300, energy=80.0, speed=0.0)
    r1 = w.add_resource(103, 100, energy=25.0)
    r2 = w.add_resource(300, 304, energy=25.0)
    w.step()
    assert hungry.energy == 75.0
    assert sated.energy == 80.0
    assert r1.id not in w.resources and r2.id in w.resources


def test_eat_intent_eats_and_caps_at_max_energy():
    w = World(QUIET)
    e = w.add_entity(300, 300, energy=90.0, speed=0.0)
    far = w.add_resource(300, 307)  # outside eat_radius 6
    near = w.add_resource(300, 305)
    w.step({e.id: [["eat"]]})
    assert e.energy == e.max_energy == 100.0
    assert near.id not in w.resources and far.id in w.resources


def test_each_resource_is_eaten_once_lowest_id_first():
    w = World(QUIET)
    first = w.add_entity(100, 100, energy=10.0, speed=0.0)
    second = w.add_entity(104, 100, energy=10.0, speed=0.0)
    w.add_resource(102, 100)
    w.step()
    assert first.energy == 35.0
    assert second.energy == 10.0
    assert not w.resources


def test_nearest_resource_is_eaten_ties_by_id():
    w = World(QUIET)
    w.add_entity(100, 100, energy=10.0, speed=0.0)
    a = w.add_resource(104, 100)
    b = w.add_resource(96, 100)
    c = w.add_resource(102, 100)
    w.step()
    assert sorted(w.resources) == [a.id, b.id]
    w.step()
    assert sorted(w.resources) == [b.id]
    assert c.id not in w.resources


def test_eating_across_grid_cell_borders():
    w = World(QUIET)  # cells are sense_radius = 80 wide
    e = w.add_entity(78, 158, energy=10.0, speed=0.0)
    r = w.add_resource(82, 161)
    w.step()
    assert r.id not in w.resources and e.energy == 35.0


# -- life and death -----------------------------------------------------------------------


def test_starvation_deaths_without_food():
    params = replace(
        WorldParams(),
        initial_resources=0,
        max_resources=0,
        initial_energy=5.0,
        base_metabolism=0.5,
        collision_damage=0.0,
    )
    w = World(params, seed=1)
    n = len(w.entities)
    assert n == params.initial_population
    deaths = []
    for _ in range(200):
        deaths += w.step().deaths
        if not w.entities:
            break
    assert not w.entities
    assert sorted(eid for eid, _ in deaths) == list(range(1, n + 1))
    assert {cause for _, cause in deaths} == {"starvation"}
    st = w.stats()
    assert st["deaths"] == {"starvation": n, "age": 0, "collision": 0}
    assert st["population"] == 0 and st["avg_energy"] == 0.0


def test_age_deaths_with_small_max_age():
    params = replace(WorldParams(), max_age=20, max_age_jitter=0.0, collision_damage=0.0)
    w = World(params, seed=1)
    n = len(w.entities)
    for _ in range(19):
        assert w.step().deaths == []
    report = w.step()
    assert len(report.deaths) == n and {c for _, c in report.deaths} == {"age"}
    assert w.stats()["deaths"]["age"] == n


def test_max_age_jitter_spreads_lifetimes():
    w = World(replace(WorldParams(), max_age=1000, max_age_jitter=0.2), seed=2)
    ages = [e.max_age for e in w.entities.values()]
    assert len(set(ages)) > 10
    assert all(800 <= a <= 1200 for a in ages)


def test_collision_deaths_in_a_crowded_tiny_world():
    params = replace(
        WorldParams(),
        width=6.0,
        height=6.0,
        sense_radius=3.0,
        initial_population=30,
        initial_resources=0,
        max_resources=0,
        collision_radius=2.0,
        collision_damage=10.0,
        base_metabolism=0.0,
        move_cost=0.0,
    )
    w = World(params, seed=3)
    deaths = []
    for _ in range(20):
        deaths += w.step().deaths
    assert deaths and {c for _, c in deaths} == {"collision"}
    assert w.stats()["deaths"]["collision"] == len(deaths) > 0
    assert w.stats()["collisions"] > 0


def test_collision_pair_damage_and_cause():
    w = World(replace(QUIET, collision_damage=5.0))
    a = w.add_entity(100, 100, energy=4.0, speed=0.0)
    b = w.add_entity(101, 100, energy=50.0, speed=0.0)
    c = w.add_entity(300, 300, energy=50.0, speed=0.0)
    report = w.step()
    assert report.deaths == [(a.id, "collision")]
    assert b.energy == 45.0 and c.energy == 50.0


def test_collisions_across_cell_border():
    w = World(replace(QUIET, collision_damage=5.0))
    a = w.add_entity(79.5, 100, energy=50.0, speed=0.0)
    b = w.add_entity(80.5, 100, energy=50.0, speed=0.0)
    w.step()
    assert a.energy == b.energy == 45.0


def test_starved_entity_in_collision_is_a_starvation_death():
    w = World(replace(QUIET, collision_damage=5.0, base_metabolism=1.0))
    a = w.add_entity(100, 100, energy=0.5, speed=0.0)
    w.add_entity(101, 100, energy=50.0, speed=0.0)
    assert w.step().deaths == [(a.id, "starvation")]


def test_births_inherit_traits():
    params = replace(
        QUIET,
        maturity_age=2,
        reproduction_threshold=80.0,
        reproduction_cost=40.0,
        birth_energy_fraction=0.75,
    )
    w = World(params, seed=1)
    parent = w.add_entity(400, 300, energy=90.0, speed=0.0, generation=2)
    w.give_trait(parent.id, "forager")
    w.give_trait(parent.id, "swimmer")
    young = w.add_entity(100, 100, energy=90.0, speed=0.0)
    assert w.step().births == []  # age 1 < maturity
    report = w.step()
    assert len(report.births) == 2  # both parent and young are mature now
    child, other = (w.entities[b] for b in report.births)
    assert child.parent_id == parent.id and other.parent_id == young.id
    assert other.traits == () and other.generation == 1
    assert child.generation == 3
    assert child.traits == ("forager", "swimmer")
    assert child.age == 0 and child.state == ""
    assert child.energy == 30.0
    assert parent.energy == 50.0
    assert math.hypot(child.x - parent.x, child.y - parent.y) > params.collision_radius
    assert young.energy == 50.0
    assert w.stats()["births"] == 2
    assert w.stats()["trait_usage"] == {"forager": 2, "swimmer": 2}


def test_births_happen_in_the_default_world():
    w = World(seed=6)
    w.give_trait_to_all("t1")
    births = []
    for _ in range(1200):
        births += w.step().births
    assert births
    newborns = [w.entities[b] for b in births if b in w.entities]
    assert newborns and all(e.traits == ("t1",) and e.generation >= 1 for e in newborns)


def test_max_population_stops_births():
    params = replace(QUIET, maturity_age=0, reproduction_threshold=10.0, max_population=3)
    w = World(params)
    for i in range(2):
        w.add_entity(100 + 50 * i, 100, energy=90.0, speed=0.0)
    for _ in range(5):
        w.step()
    assert len(w.entities) == 3


def test_min_population_respawns():
    params = replace(QUIET, initial_population=5, min_population=5, max_age=3)
    w = World(params, seed=2)
    report = None
    for _ in range(3):
        report = w.step()
    assert len(report.deaths) == 5 and len(report.respawned) == 5
    assert len(w.entities) == 5
    assert all(eid > 5 for eid in w.entities)
    assert w.stats()["respawns"] == 5


def test_resources_respawn_up_to_max():
    params = replace(QUIET, max_resources=10, resource_spawn_chance=1.0)
    w = World(params)
    for _ in range(30):
        w.step()
    assert len(w.resources) == 10


# -- traits and views ---------------------------------------------------------------------


def test_give_trait_respects_max():
    w = World(seed=1)
    eid = min(w.entities)
    for i in range(8):
        w.give_trait(eid, f"t{i}")
    w.give_trait(eid, "t0")
    assert w.entities[eid].traits == ("t0", "t1", "t2", "t3", "t4")
    assert len(w.entities[eid].traits) == w.params.max_traits_per_entity == 5
    w.give_trait(10**9, "t0")  # gone: no-op
    with pytest.raises(ValueError):
        w.give_trait(eid, "")


def test_give_trait_to_all_and_remove_trait():
    w = World(seed=1)
    w.give_trait(1, "a")
    w.give_trait_to_all("b")
    w.give_trait_to_all("b")
    n = len(w.entities)
    assert w.stats()["trait_usage"] == {"a": 1, "b": n}
    w.remove_trait("b")
    assert w.stats()["trait_usage"] == {"a": 1}
    assert w.entities[1].traits == ("a",)
    assert set(w.trait_batches()) == {"a"}
    w.remove_trait("a")
    assert w.trait_batches() == {}
    assert w.stats()["trait_usage"] == {}


def test_trait_batches_views_are_complete_and_json_safe():
    w = World(seed=4)
    ids = sorted(w.entities)
    for eid in ids[:10]:
        w.give_trait(eid, "alpha")
    for eid in ids[5:15]:
        w.give_trait(eid, "beta")
    for _ in range(30):
        w.step()
    batches = w.trait_batches()
    assert list(batches) == ["alpha", "beta"]
    assert json.loads(json.dumps(batches, allow_nan=False)) == batches
    expected_keys = set(entity_api.READABLE_ATTRS) | {"nearest_resource"}
    for name, views in batches.items():
        assert [v["id"] for v in views] == sorted(v["id"] for v in views)
        for v in views:
            assert set(v) == expected_keys
            assert name in v["traits"] and isinstance(v["traits"], list)
            e = w.entities[v["id"]]
            for key, (kind, _) in entity_api.READABLE_ATTRS.items():
                py = {"int": int, "float": float, "str": str, "list[str]": list}[kind]
                assert type(v[key]) is py, key
            assert (v["x"], v["y"], v["energy"]) == (e.x, e.y, e.energy)
            assert v["world_width"] == 800.0 and v["world_height"] == 600.0


def test_views_neighbors_and_nearest_resource_match_brute_force():
    params = replace(WorldParams(), initial_population=150, initial_resources=100, max_resources=200)
    w = World(params, seed=12)
    for _ in range(5):
        w.step()
    w.give_trait_to_all("probe")
    r = params.sense_radius
    views = w.trait_batches()["probe"]
    assert len(views) == len(w.entities)
    for v in views:
        x, y = v["x"], v["y"]
        n = sum(1 for o in w.entities.values() if o.id != v["id"] and math.hypot(o.x - x, o.y - y) <= r)
        assert v["neighbors"] == n
        best = min(
            ((math.hypot(res.x - x, res.y - y), res.id, res) for res in w.resources.values()),
            default=None,
        )
        if best is None or best[0] > r:
            assert v["nearest_resource"] is None
        else:
            res = best[2]
            dx, dy, dist = v["nearest_resource"]
            assert (dx, dy) == pytest.approx((res.x - x, res.y - y))
            assert dist == pytest.approx(best[0])


def scalar_sense(w, e):
    """The sensing rule, one entity at a time, with the same float operations as the engine."""
    r2 = w.params.sense_radius * w.params.sense_radius
    n = 0
    for o in w.entities.values():
        dx = o.x - e.x
        dy = o.y - e.y
        if o.id != e.id and dx * dx + dy * dy <= r2:
            n += 1
    best = None
    for res in w.resources.values():
        dx = res.x - e.x
        dy = res.y - e.y
        d2 = dx * dx + dy * dy
        if d2 <= r2 and (best is None or (d2, res.id) < (best[0], best[1])):
            best = (d2, res.id, dx, dy)
    return n, None if best is None else [best[2], best[3], math.sqrt(best[0])]


@pytest.mark.parametrize("seed, population", [(3, 40), (4, 400), (5, 1200)])
def test_vectorised_sensing_is_bit_identical_to_the_scalar_rule(seed, population):
    scale = math.sqrt(population / 200)
    params = replace(
        WorldParams(),
        width=800 * scale,
        height=600 * scale,
        initial_population=population,
        initial_resources=population,
        max_resources=population,
    )
    w = World(params, seed=seed)
    for tick in range(30):
        w.step()
        if tick % 10 == 9:
            ents = [w.entities[i] for i in sorted(w.entities)]
            sensed = w._sensed_by_id(ents)
            assert sensed == {e.id: scalar_sense(w, e) for e in ents}


@pytest.mark.parametrize("queries, points", [(2000, 2000), (2000, 40), (30, 60)])
def test_nearest_gives_the_same_answer_in_one_step_or_two(queries, points):
    """nearest()'s two-step search (``near``, used where it pays) and the one-step search agree
    exactly: ids, and dx/dy bit for bit (NaN where nothing is in range)."""
    import numpy as np

    from engine.core.sensing import Grid, Layout, nearest, two_steps_pay

    rnd = random.Random(queries * 7 + points)
    width, height, radius = 1600.0, 1200.0, 80.0
    qx = np.array([rnd.uniform(0, width) for _ in range(queries)])
    qy = np.array([rnd.uniform(0, height) for _ in range(queries)])
    # some points exactly on a query or at the same distance, to exercise the ties
    px = np.array([rnd.uniform(0, width) if i % 5 else float(qx[i % queries]) for i in range(points)])
    py = np.array([rnd.uniform(0, height) if i % 5 else float(qy[i % queries]) + 10.0 for i in range(points)])
    ids = np.arange(1, points + 1, dtype=np.int64)
    lay = Layout(Grid.over(width, height, radius), px, py, ids)
    near = Layout(Grid.over(width, height, radius / 2), px, py, ids)
    # the world passes ``near`` only where it pays: 2,000 queries among 2,000 points, not among 40
    assert two_steps_pay(queries, lay) == (points == 2000 and queries == 2000)
    one = nearest(qx, qy, lay, radius)
    two = nearest(qx, qy, lay, radius, near)
    assert np.array_equal(one[0], two[0])
    for a, b in zip(one[1:], two[1:]):
        assert np.array_equal(a.view(np.int64), b.view(np.int64))
    assert (one[0] >= 0).any()


def test_nearest_resource_none_when_out_of_range():
    w = World(QUIET)
    e = w.add_entity(100, 100, traits=("t",))
    w.add_resource(100, 100 + QUIET.sense_radius + 1)
    assert w.trait_batches()["t"][0]["nearest_resource"] is None
    w.add_resource(100, 150)
    assert w.view(e.id)["nearest_resource"] == [0.0, 50.0, 50.0]


# -- stats and params ---------------------------------------------------------------------


def test_stats_shape():
    w = World(seed=1)
    w.step({1: [["set", "energy", 5.0]], 999: [["eat"]]})
    st = w.stats()
    assert st["tick"] == 1
    assert st["population"] == 40
    assert set(st["deaths"]) == set(DEATH_CAUSES)
    assert st["rejected_intents"] == {"read_only_attr": 1, "unknown_entity": 1}
    assert st["resource_count"] == 60
    assert 0 < st["avg_energy"] <= 100
    assert json.loads(json.dumps(st)) == st


def test_params_are_validated():
    with pytest.raises(ValueError):
        WorldParams(width=0)
    with pytest.raises(ValueError):
        WorldParams(sense_radius=float("nan"))
    with pytest.raises(ValueError):
        WorldParams(base_metabolism=-1)
    with pytest.raises(ValueError):
        WorldParams(max_age=3000.0)
    assert WorldParams(width=100, eat_radius=3).width == 100
    with pytest.raises(TypeError):
        World(seed="1")


def test_spatial_grid_edges():
    g = SpatialGrid(800.0, 600.0, 80.0)

    class P:
        def __init__(self, i, x, y):
            self.id, self.x, self.y = i, x, y

    edge = P(1, math.nextafter(800.0, 0.0), math.nextafter(600.0, 0.0))
    g.insert(edge)
    assert edge in g.candidates(edge.x, edge.y, 2.0)
    assert edge in g.candidates(edge.x, edge.y, 0.0)
    assert g.nearest(799.0, 599.0, 5.0)[0] is edge
    assert g.count_within(799.0, 599.0, 5.0) == 1
    g.remove(edge)
    assert g.candidates(edge.x, edge.y, 2.0) == []


# -- DNA, available traits, trait statistics ------------------------------------------------

from engine.core.world import DNA_GENES, trait_gene  # noqa: E402

BREEDER = replace(
    QUIET,
    maturity_age=0,
    reproduction_threshold=80.0,
    reproduction_cost=40.0,
    trait_gain_chance=1.0,
)


def names_on_genes(a: int, b: int) -> tuple[str, str]:
    """Two trait names whose genes are ``a`` and ``b``."""
    found: dict[int, str] = {}
    i = 0
    while a not in found or b not in found:
        found.setdefault(trait_gene(f"trait_{i}"), f"trait_{i}")
        i += 1
    return found[a], found[b]


def test_trait_gene_is_stable_and_in_range():
    import zlib

    assert trait_gene("forager") == zlib.crc32(b"forager") % DNA_GENES
    assert {trait_gene(f"t{i}") for i in range(200)} == set(range(DNA_GENES))


def test_fresh_entities_have_random_dna_and_newborns_inherit_it_mutated():
    w = World(seed=3)
    dnas = [e.dna for e in w.entities.values()]
    assert all(len(d) == DNA_GENES and all(0.0 <= g <= 1.0 for g in d) for d in dnas)
    assert len(set(dnas)) == len(dnas)
    w2 = World(BREEDER, seed=1)
    parent = w2.add_entity(400, 300, energy=90.0, speed=0.0, dna=(0.5,) * DNA_GENES)
    child = w2.entities[w2.step().births[0]]
    assert child.parent_id == parent.id and child.dna != parent.dna
    assert all(abs(c - 0.5) < 0.3 and 0.0 <= c <= 1.0 for c in child.dna)
    with pytest.raises(ValueError):
        w2.add_entity(1, 1, dna=(2.0,) * DNA_GENES)


def test_set_available_traits():
    w = World(QUIET)
    w.set_available_traits(["b", "a", "b"])
    assert w.available_traits == ("a", "b")
    with pytest.raises(ValueError):
        w.set_available_traits(["ok", ""])
    with pytest.raises(TypeError):
        w.set_available_traits("abc")
    w.remove_trait("a")
    assert w.available_traits == ("b",)


def test_only_newborns_gain_available_traits():
    w = World(BREEDER, seed=1)
    parent = w.add_entity(400, 300, energy=90.0, speed=0.0, traits=("old",))
    bystander = w.add_entity(100, 100, energy=50.0, speed=0.0)
    w.set_available_traits(["fresh"])
    report = w.step()
    child = w.entities[report.births[0]]
    assert child.traits == ("old", "fresh")
    assert report.gained == [(child.id, "fresh")]
    assert parent.traits == ("old",) and bystander.traits == ()
    st = w.stats()["trait_stats"]
    assert st["fresh"]["gained"] == 1 and st["old"]["births"] == 1 and st["fresh"]["births"] == 0


def test_no_new_trait_when_full_or_nothing_new():
    full = tuple(f"t{i}" for i in range(BREEDER.max_traits_per_entity))
    w = World(BREEDER, seed=1)
    w.add_entity(400, 300, energy=90.0, speed=0.0, traits=full)
    w.add_entity(100, 100, energy=90.0, speed=0.0, traits=("only",))
    w.set_available_traits(["only", "extra"])
    report = w.step()
    kids = [w.entities[b] for b in report.births]
    assert kids[0].traits == full
    assert kids[1].traits == ("only", "extra")


def test_new_trait_choice_is_weighted_by_dna():
    liked, disliked = names_on_genes(0, 1)
    dna = (1.0, 0.0) + (0.5,) * (DNA_GENES - 2)
    counts = {liked: 0, disliked: 0}
    for seed in range(40):
        params = replace(BREEDER, max_population=10_000, dna_mutation=0.0)
        w = World(params, seed=seed)
        for i in range(10):
            w.add_entity(20 + 70 * i, 300, energy=90.0, speed=0.0, dna=dna)
        w.set_available_traits([liked, disliked])
        for cid in w.step().births:
            counts[w.entities[cid].traits[0]] += 1
    assert sum(counts.values()) == 400
    # weights 1.05 : 0.05 -> about 95% of the newborns take the liked trait
    assert counts[liked] > 0.85 * 400 and counts[disliked] > 0


def test_trait_gain_chance_zero_and_determinism():
    w = World(replace(BREEDER, trait_gain_chance=0.0), seed=1)
    w.add_entity(400, 300, energy=90.0, speed=0.0)
    w.set_available_traits(["x"])
    assert w.entities[w.step().births[0]].traits == ()

    def grown(seed: int) -> World:
        v = World(replace(WorldParams(), trait_gain_chance=0.5), seed=seed)
        v.set_available_traits(["a", "b", "c"])
        for _ in range(1200):
            v.step()
        return v

    a, b = grown(4), grown(4)
    assert a.state_hash() == b.state_hash() and a.stats() == b.stats()
    assert sum(a.stats()["trait_usage"].values()) > 0


def test_min_population_respawns_may_gain_traits():
    params = replace(QUIET, initial_population=3, min_population=3, max_age=2, trait_gain_chance=1.0)
    w = World(params, seed=2)
    w.set_available_traits(["t"])
    assert all(e.traits == () for e in w.entities.values())
    report = w.step()
    report = w.step()
    assert len(report.respawned) == 3
    assert all(w.entities[i].traits == ("t",) for i in report.respawned)


def test_trait_stats_counts_carriers_energy_births_deaths():
    params = replace(BREEDER, max_age=1000, trait_gain_chance=0.0)
    w = World(params, seed=1)
    a = w.add_entity(100, 100, energy=90.0, speed=0.0, traits=("t",))
    w.add_entity(300, 300, energy=30.0, speed=0.0, traits=("t", "u"))
    w.add_entity(500, 300, energy=20.0, speed=0.0, max_age=1, traits=("u",))
    report = w.step()
    assert len(report.births) == 1 and report.deaths == [(3, "age")]
    st = w.stats()
    ts = st["trait_stats"]
    assert ts["t"]["carriers"] == 3  # a, the second, a's child
    assert ts["t"]["births"] == 1 and ts["u"]["births"] == 0
    assert ts["u"]["carriers"] == 1 and ts["u"]["deaths"] == {"starvation": 0, "age": 1, "collision": 0}
    assert ts["t"]["avg_energy"] == pytest.approx((a.energy + 30.0 + 30.0) / 3)
    assert json.loads(json.dumps(st)) == st
    w.remove_trait("u")
    assert w.stats()["trait_stats"]["u"]["carriers"] == 0  # cumulative counters stay


def test_snapshot_keeps_dna_available_traits_and_trait_counters():
    w = World(replace(WorldParams(), trait_gain_chance=0.5), seed=8)
    w.set_available_traits(["a", "b"])
    for _ in range(900):
        w.step()
    snap = json.loads(json.dumps(w.snapshot()))
    r = World.from_snapshot(snap)
    assert r.available_traits == ("a", "b")
    assert r.state_hash() == w.state_hash() and r.stats() == w.stats()
    for _ in range(300):
        w.step()
        r.step()
    assert r.state_hash() == w.state_hash() and r.stats() == w.stats()


def test_state_hash_covers_dna_and_available_traits_and_ignores_negative_zero():
    a = World(QUIET)
    b = World(QUIET)
    ea = a.add_entity(10, 10, direction=0.0)
    eb = b.add_entity(10, 10, direction=-0.0)
    assert a.state_hash() == b.state_hash()
    eb.direction = -1e-12  # exact, not rounded: any real difference shows
    assert a.state_hash() != b.state_hash()
    eb.direction = 0.0
    ea.dna = (0.25,) + ea.dna[1:]
    assert a.state_hash() != b.state_hash()
    eb.dna = ea.dna
    assert a.state_hash() == b.state_hash()
    a.set_available_traits(["x"])
    assert a.state_hash() != b.state_hash()
    eb.state = "caf\u00e9"
    assert len(b.state_hash()) == 64
