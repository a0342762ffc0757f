"""Agents' members in the world and how a settled round's actions change it (pure: no I/O).

A registered agent controls a *member*: a Molbot of the world it acts through. ``World.members``
maps each member id (a number the API hands out at the agent's first action, never reused) to
the Molbot that is its body now; a member whose body died gets a new one (a fresh Molbot) when the
next round settles.

A round's inputs (:class:`RoundInputs`, journaled with the tick they settle in) are the members
to embody and every accepted submission's recorded actions, ordered by agent id and then by
submission order: the order of arrival never matters. :func:`settle` checks each action against
the world as the tick starts and applies it (sharing energy, attacks), or hands it to the tick's
movement and eating (``move``, ``move_towards``, ``eat`` override what the member's traits asked
for this tick); each action gets an outcome, applied or refused with its reason. The live engine
and replay call it through ``engine.core.inputs`` on the same data, so replay executes no agent code.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from .world import World

ACTION_ARITY = {"move": 2, "move_towards": 2, "eat": 0, "share": 2, "attack": 1, "message": 2}
ATTACK_DAMAGE = 10.0  # energy an attack takes from its target
ATTACK_COST = 1.0  # energy an attack costs the attacker
MAX_MESSAGE_CHARS = 280


class BadRound(ValueError):
    """Round inputs that do not decode (a journal record that is not ours)."""


@dataclass
class Submission:
    id: str
    agent_id: str
    member_id: int
    actions: list[list[Any]]  # as its code recorded them: [kind, args...]

    def to_data(self) -> list[Any]:
        return [self.id, self.agent_id, self.member_id, [list(a) for a in self.actions]]


@dataclass
class RoundInputs:
    round_id: int
    embody: list[int] = field(default_factory=list)  # member ids that need a body
    submissions: list[Submission] = field(default_factory=list)

    def to_data(self) -> dict[str, Any]:
        return {
            "round_id": self.round_id,
            "embody": sorted(self.embody),
            "submissions": [s.to_data() for s in ordered(self.submissions)],
        }

    @classmethod
    def from_data(cls, d: Any) -> RoundInputs:
        try:
            if type(d) is not dict or type(d["round_id"]) is not int:
                raise BadRound("a round needs an int round_id")
            embody = [int(m) for m in d.get("embody", [])]
            subs = [Submission(str(i), str(a), int(m), [list(x) for x in acts]) for i, a, m, acts in d["submissions"]]
        except (KeyError, TypeError, ValueError) as exc:
            raise BadRound(f"round inputs do not decode: {exc}") from None
        return cls(d["round_id"], embody, subs)


def ordered(submissions: list[Submission]) -> list[Submission]:
    """Agent id, then the order each agent submitted in (a stable sort keeps it)."""
    return sorted(submissions, key=lambda s: s.agent_id)


@dataclass
class Settled:
    forced: dict[int, list[list[Any]]]  # entity id -> the movement/eating intents the round decides
    outcomes: dict[str, list[dict[str, Any]]]  # submission id -> each action's outcome, in order
    bodies: dict[int, int]  # member id -> its body after the round's embodiments


def _number(v: Any) -> bool:
    return type(v) in (int, float) and math.isfinite(v)


def settle(world: World, inputs: RoundInputs) -> Settled:
    """Apply a round to ``world`` before the tick's step (see the module doc)."""
    for member_id in sorted(set(inputs.embody)):
        world.embody(member_id)
    state = _RoundState(world)
    outcomes: dict[str, list[dict[str, Any]]] = {}
    for sub in ordered(inputs.submissions):
        results = outcomes.setdefault(sub.id, [])
        body = world.members.get(sub.member_id)
        for action in sub.actions:
            reason = state.apply(body, action)
            results.append({"action": action, "applied": reason is None, "reason": reason})
    if state.energy:
        world.set_energies(state.energy)
    return Settled(state.forced, outcomes, dict(world.members))


class _RoundState:
    """The world as a round's actions find it, and what they have done to it so far."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.ents = world.entities  # every number written back
        reach = world.params.sense_radius
        self.reach2 = reach * reach
        self.energy: dict[int, float] = {}
        self.forced: dict[int, list[list[Any]]] = {}

    def current(self, eid: int) -> float:
        return self.energy.get(eid, self.ents[eid].energy)

    def near(self, a: int, b: int) -> bool:
        ea, eb = self.ents[a], self.ents[b]
        return (ea.x - eb.x) ** 2 + (ea.y - eb.y) ** 2 <= self.reach2

    def neighbour(self, body: int, target: Any) -> str | None:
        if type(target) is not int or target not in self.ents or target == body:
            return "no such neighbour"
        return None if self.near(body, target) else "the target is out of reach"

    def apply(self, body: int | None, action: list[Any]) -> str | None:
        """Apply one action of the member whose body is ``body``: None, or why not."""
        kind = action[0] if action else None
        args = action[1:]
        if kind not in ACTION_ARITY or len(args) != ACTION_ARITY[kind]:
            return "not an action of a known kind and arity"
        if body is None or body not in self.ents:
            return "the member has no body"
        if kind == "message":
            to, text = args
            if type(to) is not int or to not in self.world.members:
                return "no such member"
            if type(text) is not str or len(text) > MAX_MESSAGE_CHARS:
                return f"a message is a text of at most {MAX_MESSAGE_CHARS} characters"
            return None
        if kind in ("move", "move_towards", "eat"):
            if not all(_number(a) for a in args):
                return "coordinates must be finite numbers"
            self.forced.setdefault(body, []).append([kind, *args])  # the last move wins
            return None
        why = self.neighbour(body, args[0])
        if why is not None:
            return why
        target = args[0]
        if kind == "share":
            amount = args[1]
            if not _number(amount) or amount <= 0:
                return "the amount must be a positive number"
            given = min(float(amount), self.current(body), self.ents[target].max_energy - self.current(target))
            if given <= 0:
                return "nothing to give or no room to take it"
            self.energy[body] = self.current(body) - given
            self.energy[target] = self.current(target) + given
            return None
        if self.current(body) < ATTACK_COST:  # attack
            return "not enough energy to attack"
        self.energy[body] = self.current(body) - ATTACK_COST
        self.energy[target] = max(0.0, self.current(target) - ATTACK_DAMAGE)
        return None


def member_state(
    world: World,
    member_id: int,
    round_id: int,
    max_neighbours: int = 32,
    inbox: list[dict[str, Any]] | None = None,
) -> dict[str, Any] | None:
    """What a member sees, as its action code gets it (None: it has no body)."""
    ents = world.entities
    body = world.members.get(member_id)
    if body is None or body not in ents:
        return None
    me = ents[body]
    p = world.params
    reach2 = p.sense_radius * p.sense_radius
    member_of = {eid: m for m, eid in world.members.items()}
    around = sorted(
        (((e.x - me.x) ** 2 + (e.y - me.y) ** 2, e.id) for e in ents.values() if e.id != body),
    )
    neighbours = [
        {"id": eid, "x": ents[eid].x, "y": ents[eid].y, "energy": ents[eid].energy, "member_id": member_of.get(eid)}
        for d2, eid in around[:max_neighbours]
        if d2 <= reach2
    ]
    food = sorted(((r.x - me.x) ** 2 + (r.y - me.y) ** 2, r.id) for r in world.resources.values())
    resources = [
        {"x": world.resources[rid].x, "y": world.resources[rid].y, "energy": world.resources[rid].energy}
        for d2, rid in food[:max_neighbours]
        if d2 <= reach2
    ]
    return {
        "member_id": member_id,
        "round_id": round_id,
        "member": {
            "id": me.id,
            "x": me.x,
            "y": me.y,
            "energy": me.energy,
            "max_energy": me.max_energy,
            "age": me.age,
            "state": me.state,
            "traits": list(me.traits),
        },
        "neighbours": neighbours,
        "resources": resources,
        "world": {"width": p.width, "height": p.height, "tick": world.tick},
        "inbox": list(inbox or ()),
    }
