"""The trait host's reply decoded: a group of intent columns per trait, merged into one
(genesis.trait_wire), checked against the plain ``{entity_id: [intent, ...]}`` form the host
encoded (sandbox/traithost/wire.py's encoder, the one the host itself uses)."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from genesis.trait_wire import Carriers, MalformedIntents, decode_intent_groups
from sandbox.traithost import wire as trait_host

NAMES = ["speed", "direction", "state", "energy_consumption_rate"]
VALUES = [0.5, -0.0, 7, 2.5e300, "saving", True]


def random_intent(rnd: random.Random) -> list:
    roll = rnd.random()
    if roll < 0.4:
        return ["set", rnd.choice(NAMES), rnd.choice(VALUES)]
    if roll < 0.8:
        return [rnd.choice(["move", "move_towards"]), rnd.choice(VALUES), rnd.choice(VALUES)]
    return ["eat"]


def random_groups(rnd: random.Random, count: int) -> list[dict[int, list[list]]]:
    """Each group one trait's intents: some of the same entities, names set in its own order."""
    return [
        {
            eid: [random_intent(rnd) for _ in range(rnd.randint(1, 3))]
            for eid in rnd.sample([1, 2, 3, 5, 8, 13, 21, 2**40], rnd.randint(0, 6))
        }
        for _ in range(count)
    ]


def on_the_wire(groups: list[dict[int, list[list]]], raw: bool) -> tuple[list[dict], bytes | None]:
    blob = bytearray() if raw else None
    encoded = [trait_host.encode_intents(group, blob) for group in groups]
    return json.loads(json.dumps(encoded)), (bytes(blob) if raw else None)


@pytest.mark.parametrize("raw", [False, True], ids=["base64", "attachment"])
@pytest.mark.parametrize("seed", range(20))
def test_groups_merge_in_group_order_per_entity(seed, raw):
    rnd = random.Random(seed)
    groups = random_groups(rnd, rnd.choice([2, 3, 10, 40]))
    wire, attachment = on_the_wire(groups, raw)
    decoded = decode_intent_groups(wire, attachment)
    expected: dict[int, list[list]] = {}
    for group in groups:  # an entity's intents: group by group, each group's in its order
        for eid in sorted(group):
            expected.setdefault(eid, []).extend(group[eid])
    # repr: an int stays an int, -0.0 stays -0.0, True stays True
    assert repr(dict(sorted(decoded.items()))) == repr(dict(sorted(expected.items())))
    assert np.all(np.diff(decoded.entity) >= 0)
    assert len(set(decoded.names)) == len(decoded.names)  # one list of names for every group


def test_one_group_decodes_as_it_was_sent():
    rnd = random.Random(7)
    [group] = random_groups(rnd, 1)
    wire, _ = on_the_wire([group], raw=False)
    assert repr(dict(decode_intent_groups(wire))) == repr({eid: group[eid] for eid in sorted(group)})


@pytest.mark.parametrize(
    "corrupt, why",
    [
        (lambda g: g.update(kind="x" * len(g["kind"])), "unknown intent kind"),
        (lambda g: g.update(count=g["count"] + 1), "kind must be"),
        (lambda g: g.update(attr={"i8": trait_host.pack("q", [9] * g["count"])["i8"]}), "set intent"),
        (lambda g: g.update(other=[[99, 0, 1.0]]), "other entries"),
        (lambda g: g.update(names="direction"), "names"),
        (lambda g: g.update(a={"f8": [0, 10**9]}), "outside the attachment"),
    ],
)
def test_one_malformed_group_among_good_ones_refuses_the_reply(corrupt, why):
    groups = [{1: [["set", "speed", 1.0]], 2: [["eat"]]}, {1: [["set", "direction", 0.5], ["move", 1.0, 2.0]]}]
    wire, _ = on_the_wire(groups * 3, raw=False)
    corrupt(wire[4])
    with pytest.raises(MalformedIntents, match=why):
        decode_intent_groups(wire)


def test_no_groups_and_too_many_groups():
    assert len(decode_intent_groups([])) == 0
    with pytest.raises(MalformedIntents, match="must be a list"):
        decode_intent_groups([{}] * 5000)
    with pytest.raises(MalformedIntents, match="must be a list"):
        decode_intent_groups({"not": "a list"})


def carriers_of(carried: dict[int, list[str]], agent_of: dict[str, str]) -> Carriers:
    """Carriers of a views request (packed as the engine packs it) of ``carried``: id -> traits."""
    sets = sorted({tuple(sorted(t)) for t in carried.values()})
    ids = sorted(carried)
    views = {
        "fields": ["id", "traits"],
        "count": len(ids),
        "columns": [
            {"i8": np.array(ids, dtype="<i8").tobytes()},
            {"i4": np.array([sets.index(tuple(sorted(carried[i]))) for i in ids], dtype="<i4").tobytes()},
        ],
        "trait_sets": [list(s) for s in sets],
    }
    return Carriers.of(views, agent_of)


@pytest.mark.parametrize("raw", [False, True], ids=["base64", "attachment"])
@pytest.mark.parametrize("seed", range(20))
def test_intents_for_entities_of_another_agent_are_dropped(seed, raw):
    """Each group keeps exactly the intents of entities carrying a trait of its agent, in order,
    values (ints, strings, markers) untouched; the count of the others is reported."""
    rnd = random.Random(seed)
    groups = random_groups(rnd, rnd.choice([2, 3, 10]))
    agents = [rnd.choice(["alice", "bob", "mallory"]) for _ in groups]
    agent_of = {"t_alice": "alice", "t_bob": "bob", "t_mallory": "mallory"}
    carried = {eid: rnd.sample(sorted(agent_of), rnd.randint(1, 2)) for eid in [1, 2, 3, 5, 8, 13, 21, 2**40]}
    wire, attachment = on_the_wire(groups, raw)
    decoded = decode_intent_groups(wire, attachment, agents, carriers_of(carried, agent_of))
    expected: dict[int, list[list]] = {}
    dropped = 0
    for group, agent in zip(groups, agents):
        for eid in sorted(group):
            if any(agent_of[t] == agent for t in carried[eid]):
                expected.setdefault(eid, []).extend(group[eid])
            else:
                dropped += len(group[eid])
    assert repr(dict(sorted(decoded.items()))) == repr(dict(sorted(expected.items())))
    assert decoded.foreign == dropped


def test_an_unknown_agent_or_a_missing_owner_list_refuses_everything():
    groups = [{1: [["eat"]], 2: [["move", 1.0, 2.0]]}]
    wire, _ = on_the_wire(groups, raw=False)
    carriers = carriers_of({1: ["t_alice"], 2: ["t_alice"]}, {"t_alice": "alice"})
    assert decode_intent_groups(wire, None, ["stranger"], carriers).foreign == 2
    assert dict(decode_intent_groups(wire, None, ["alice"], carriers)) == {1: [["eat"]], 2: [["move", 1.0, 2.0]]}
    with pytest.raises(MalformedIntents, match="group_agents"):
        decode_intent_groups(wire, None, None, carriers)
    with pytest.raises(MalformedIntents, match="group_agents"):
        decode_intent_groups(wire, None, ["alice", "alice"], carriers)
