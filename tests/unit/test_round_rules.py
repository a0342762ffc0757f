"""Members and settled rounds in the pure world (engine/core/round_rules.py, through engine.core.inputs as
the engine and replay apply them): each action applied or refused with its reason, one state
hash whatever the order submissions arrived in, bodies that die and come back, and a round that
survives the journal's encoding and a snapshot."""

from __future__ import annotations

import random

import pytest

from engine.core import inputs as tick_inputs
from engine.core.inputs import TickInputs
from engine.core.round_rules import ATTACK_DAMAGE, RoundInputs, Submission, member_state
from engine.core.world import World, WorldParams
from genesis import canonical

pytestmark = pytest.mark.unit


def world_with_members(*members: int) -> World:
    w = World(WorldParams(initial_population=20, min_population=0, max_population=500), seed=5)
    tick_inputs.apply(w, TickInputs(tick=0, round=RoundInputs(0, embody=list(members))))
    return w


def settle(w: World, *subs: Submission, round_id: int = 1):
    report = tick_inputs.apply(w, TickInputs(tick=w.tick, round=RoundInputs(round_id, submissions=list(subs))))
    return report.round


def place(w: World, member: int, x: float, y: float) -> int:
    body = w.members[member]
    e = w.entities[body]
    e.x, e.y = x, y
    w.set_energies({})
    return body


def test_embodied_members_have_bodies_and_see_their_neighbourhood():
    w = world_with_members(1, 2)
    assert sorted(w.members) == [1, 2] and len(set(w.members.values())) == 2
    place(w, 1, 100.0, 100.0)
    place(w, 2, 110.0, 100.0)
    seen = member_state(w, 1, round_id=4)
    assert seen["member"]["id"] == w.members[1] and seen["round_id"] == 4
    (other,) = [n for n in seen["neighbours"] if n["id"] == w.members[2]]
    assert other["member_id"] == 2
    assert member_state(w, 9, round_id=4) is None


def test_share_attack_move_eat_message_and_their_refusals():
    w = world_with_members(1, 2, 3)
    a = place(w, 1, 200.0, 200.0)
    b = place(w, 2, 205.0, 200.0)
    place(w, 3, 700.0, 500.0)  # far away
    w.set_energies({a: 50.0, b: 20.0})
    settled = settle(
        w,
        Submission(
            "s-a", "agt_a", 1, [["share", b, 10.0], ["attack", b], ["message", 3, "hi"], ["move_towards", 300.0, 200.0]]
        ),
        Submission("s-c", "agt_c", 3, [["share", a, 5.0], ["attack", 424242], ["message", 99, "x"], ["eat"], ["fly"]]),
    )
    applied = {sid: [(o["action"][0], o["applied"], o["reason"]) for o in out] for sid, out in settled.outcomes.items()}
    assert applied["s-a"] == [
        ("share", True, None),
        ("attack", True, None),
        ("message", True, None),
        ("move_towards", True, None),
    ]
    assert applied["s-c"] == [
        ("share", False, "the target is out of reach"),
        ("attack", False, "no such neighbour"),
        ("message", False, "no such member"),
        ("eat", True, None),
        ("fly", False, "not an action of a known kind and arity"),
    ]
    assert settled.forced[a] == [["move_towards", 300.0, 200.0]]
    ents = w.entities
    # b got 10 and lost ATTACK_DAMAGE before its own tick's metabolism
    assert ents[b].energy == pytest.approx(20.0 + 10.0 - ATTACK_DAMAGE, abs=0.5)
    assert ents[a].x > 200.0  # it moved towards its target, not where its instinct would take it


def test_the_order_of_arrival_never_changes_the_world():
    """Submissions of several agents in 100 arrival orders: one state hash."""
    base = world_with_members(1, 2, 3, 4)
    for m, (x, y) in zip(range(1, 5), [(300, 300), (305, 300), (300, 305), (310, 305)], strict=True):
        place(base, m, float(x), float(y))
    bodies = dict(base.members)
    subs = [
        Submission("s1", "agt_d", 1, [["share", bodies[2], 7.5], ["move", 1.0, 0.0]]),
        Submission("s2", "agt_b", 2, [["attack", bodies[1]], ["share", bodies[1], 3.0]]),
        Submission("s3", "agt_c", 3, [["attack", bodies[2]], ["eat"]]),
        Submission("s4", "agt_a", 4, [["share", bodies[3], 100.0], ["move_towards", 0.0, 0.0]]),
    ]
    snap = base.snapshot()
    hashes = set()
    rng = random.Random(11)
    for _ in range(100):
        w = World.from_snapshot(snap)
        settle(w, *rng.sample(subs, len(subs)))
        hashes.add(w.state_hash())
    assert len(hashes) == 1


def test_a_round_replays_from_its_journal_encoding_and_a_snapshot_keeps_the_members():
    live = world_with_members(1, 2)
    a, b = place(live, 1, 50.0, 50.0), place(live, 2, 55.0, 50.0)
    snap = live.snapshot()
    inputs = TickInputs(
        tick=live.tick,
        round=RoundInputs(3, embody=[5], submissions=[Submission("s", "agt_x", 1, [["share", b, 4.0], ["attack", b]])]),
    )
    tick_inputs.apply(live, inputs)
    recorded = canonical.decode(canonical.encode(inputs.to_data()))
    again = World.from_snapshot(snap)
    tick_inputs.apply(again, TickInputs.from_data(recorded))
    assert again.state_hash() == live.state_hash() and again.members == live.members and 5 in live.members
    assert World.from_snapshot(live.snapshot()).state_hash() == live.state_hash()
    assert a in live.entities


def test_a_body_that_dies_is_replaced_when_the_next_round_embodies_it():
    w = world_with_members(1)
    body = w.members[1]
    w.set_energies({body: 0.0})
    tick_inputs.apply(w, TickInputs(tick=w.tick))
    assert 1 not in w.members and body not in w.entities
    tick_inputs.apply(w, TickInputs(tick=w.tick, round=RoundInputs(2, embody=[1])))
    assert w.members[1] != body and w.members[1] in w.entities


def test_round_inputs_that_do_not_decode_are_refused():
    with pytest.raises(tick_inputs.BadInputs, match="round"):
        TickInputs.from_data({"tick": 0, "host": "idle", "round": {"round_id": "x"}})
