"""The world's inputs of one tick, as the journal records them and as replay applies them.

The world core is deterministic; what it cannot know comes from outside, once per tick:

- ``traits``: a change of the live trait set (which traits exist, which mutation's version of
  each runs, and why one left: rolled back, quarantined, replaced);
- ``params``: new world parameters (an evolution cycle's ``adjust_params``);
- ``host`` and ``intents``: what the trait host returned — its intents, or that it had none to
  give (no trait ran, it missed its deadline, it was restarting, its reply was unusable);
- ``round``: a settled round of agents' actions (``engine.core.round_rules``): the members to embody
  and every accepted submission's recorded actions, applied before the step.

:func:`apply_changes` and :func:`step` are the one apply path: the live engine calls them (the
changes before it asks the host, the step after), and replay calls them with the decoded record,
so a replay starts no trait host. Intents are recorded as the columns the host's reply decoded to
(numbers as little-endian bytes, so NaNs an untrusted host sent survive canonical CBOR unchanged,
and the world rejects them again on replay exactly as it did live); a value that did not travel
as a float is kept as its JSON text, which reads back to the same value.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from genesis.trait_wire import IntentColumns

from .model import TickReport, WorldParams
from .round_rules import BadRound, RoundInputs, settle
from .world import World

# The host's outcome for a tick.
HOST_IDLE = "idle"  # no live trait had a carrier: nothing was asked
HOST_OK = "ok"
HOST_SKIPPED = "skipped"  # the host was (re)starting: the tick ran on instinct
HOST_MISSED = "missed"  # it missed its deadline or died: killed, restarted, the tick ran on instinct
HOST_REFUSED = "refused"  # its reply was unusable
HOST_ERROR = "error"  # the runner failed on our side
HOST_OUTCOMES = (HOST_IDLE, HOST_OK, HOST_SKIPPED, HOST_MISSED, HOST_REFUSED, HOST_ERROR)


class BadInputs(ValueError):
    """A journal record's inputs that do not decode."""


@dataclass
class TraitSetChange:
    active: list[str]  # the live traits after the change, sorted
    versions: dict[str, str]  # live trait -> the mutation id whose version runs
    left: dict[str, str] = field(default_factory=dict)  # trait -> why it left: deregistered, quarantined
    replaced: dict[str, str] = field(default_factory=dict)  # trait -> the mutation id it replaced
    agents: dict[str, str] = field(default_factory=dict)  # live trait -> the agent whose version runs
    arrived: dict[str, str] = field(default_factory=dict)  # trait -> the mutation id of a version new here
    left_versions: dict[str, str] = field(default_factory=dict)  # trait that left -> its mutation id

    def to_data(self) -> dict[str, Any]:
        return {
            "active": list(self.active),
            "versions": dict(self.versions),
            "left": dict(self.left),
            "replaced": dict(self.replaced),
            "agents": dict(self.agents),
            "arrived": dict(self.arrived),
            "left_versions": dict(self.left_versions),
        }

    @classmethod
    def from_data(cls, d: Mapping[str, Any]) -> TraitSetChange:
        active = d.get("active")
        if type(active) is not list or any(type(n) is not str for n in active):
            raise BadInputs("traits.active must be a list of names")
        maps = ("versions", "left", "replaced", "agents", "arrived", "left_versions")
        return cls(active, *(_str_map(d, key) for key in maps))


def _str_map(d: Mapping[str, Any], key: str) -> dict[str, str]:
    value = d.get(key, {})
    if type(value) is not dict or any(type(k) is not str or type(v) is not str for k, v in value.items()):
        raise BadInputs(f"traits.{key} must map names to strings")
    return value


@dataclass
class TickInputs:
    tick: int
    host: str = HOST_IDLE
    host_detail: str = ""
    intents: IntentColumns | Mapping[int, Sequence[Sequence[Any]]] | None = None
    traits: TraitSetChange | None = None
    params: WorldParams | None = None
    round: RoundInputs | None = None

    def to_data(self) -> dict[str, Any]:
        data: dict[str, Any] = {"tick": self.tick, "host": self.host}
        if self.host_detail:
            data["host_detail"] = self.host_detail[:500]
        if self.intents is not None and intent_count(self.intents):
            data["intents"] = encode_intents(self.intents)
        if self.traits is not None:
            data["traits"] = self.traits.to_data()
        if self.params is not None:
            data["params"] = dataclasses.asdict(self.params)
        if self.round is not None:
            data["round"] = self.round.to_data()
        return data

    @classmethod
    def from_data(cls, d: Mapping[str, Any]) -> TickInputs:
        if type(d) is not dict or type(d.get("tick")) is not int or d.get("host") not in HOST_OUTCOMES:
            raise BadInputs("a tick's inputs need an int tick and a known host outcome")
        params = None
        if "params" in d:
            try:
                params = WorldParams(**d["params"])
            except (TypeError, ValueError) as exc:
                raise BadInputs(f"params: {exc}") from None
        return cls(
            tick=d["tick"],
            host=d["host"],
            host_detail=str(d.get("host_detail", "")),
            intents=decode_intents(d["intents"]) if "intents" in d else None,
            traits=TraitSetChange.from_data(d["traits"]) if "traits" in d else None,
            params=params,
            round=_round(d["round"]) if "round" in d else None,
        )


def _round(d: Any) -> RoundInputs:
    try:
        return RoundInputs.from_data(d)
    except BadRound as exc:
        raise BadInputs(str(exc)) from None


# -- intents ------------------------------------------------------------------------------------


def intent_count(intents: IntentColumns | Mapping[int, Sequence[Sequence[Any]]]) -> int:
    """How many entities or intents there are (never builds the plain form of columns)."""
    return len(intents.entity) if isinstance(intents, IntentColumns) else len(intents)


def encode_intents(intents: IntentColumns | Mapping[int, Sequence[Sequence[Any]]]) -> dict[str, Any]:
    if isinstance(intents, IntentColumns):
        if len(intents.kind) and int(intents.kind.max()) > 0xFF:
            raise ValueError("intent kinds are one-byte letters")
        return {
            "entity": intents.entity.astype("<i8").tobytes(),
            "kind": intents.kind.astype("u1").tobytes(),
            "attr": intents.attr.astype("<i8").tobytes(),
            "a": intents.a.astype("<f8").tobytes(),
            "b": intents.b.astype("<f8").tobytes(),
            "names": list(intents.names),
            "over": [[i, 0, _json(v)] for i, v in sorted(intents.over_a.items())]
            + [[i, 1, _json(v)] for i, v in sorted(intents.over_b.items())],
        }
    # the plain form (a runner that returns {entity_id: [intent, ...]}): each entity's list as JSON
    return {"plain": [[int(eid), _json(list(intents[eid]))] for eid in sorted(intents)]}


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), allow_nan=True)


def _array(d: Mapping[str, Any], key: str, dtype: str, count: int | None) -> np.ndarray:
    raw = d.get(key)
    size = np.dtype(dtype).itemsize
    if type(raw) is not bytes or len(raw) % size or (count is not None and len(raw) // size != count):
        raise BadInputs(f"intents.{key} must be {dtype} bytes for every intent")
    return np.frombuffer(raw, dtype=dtype)


def decode_intents(d: Any) -> IntentColumns | dict[int, list]:
    if type(d) is not dict:
        raise BadInputs("intents must be a map")
    try:
        if "plain" in d:
            return {int(eid): json.loads(text) for eid, text in d["plain"]}
        entity = _array(d, "entity", "<i8", None).astype(np.int64)
        n = len(entity)
        over_a: dict[int, Any] = {}
        over_b: dict[int, Any] = {}
        for i, which, text in d["over"]:
            (over_a if which == 0 else over_b)[int(i)] = json.loads(text)
        names = d["names"]
        if type(names) is not list or any(type(x) is not str for x in names):
            raise BadInputs("intents.names must be a list of str")
        return IntentColumns(
            entity,
            _array(d, "kind", "u1", n).astype(np.uint32),
            _array(d, "attr", "<i8", n).astype(np.int64),
            _array(d, "a", "<f8", n).astype(np.float64),
            _array(d, "b", "<f8", n).astype(np.float64),
            names,
            over_a,
            over_b,
        )
    except BadInputs:
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise BadInputs(f"intents do not decode: {exc}") from None


# -- the apply path --------------------------------------------------------------------------


def apply_changes(world: World, inputs: TickInputs) -> None:
    """The tick's parameter and trait-set changes (before the host is asked, live)."""
    if inputs.params is not None:
        world.params = inputs.params
    if inputs.traits is not None:
        before = set(world.available_traits)
        world.set_available_traits(inputs.traits.active)
        for name in sorted(before - set(inputs.traits.active)):
            world.remove_trait(name)  # rollback / quarantine: carriers lose it


def step(world: World, inputs: TickInputs, lazy_write_back: bool = False) -> TickReport:
    """The tick itself, with the host's intents (none unless it answered) and a settled round's
    actions (the report carries their outcomes)."""
    if world.tick != inputs.tick:
        raise BadInputs(f"inputs of tick {inputs.tick} applied at tick {world.tick}")
    settled = settle(world, inputs.round) if inputs.round is not None else None
    report = world.step(
        inputs.intents if inputs.intents is not None else {},
        lazy_write_back=lazy_write_back,
        forced=settled.forced if settled is not None else None,
    )
    report.round = settled
    return report


def apply(world: World, inputs: TickInputs) -> TickReport:
    """Both halves, as replay applies a recorded tick (the entities' numbers are stored into them
    when next read, as the live engine leaves them)."""
    apply_changes(world, inputs)
    return step(world, inputs, lazy_write_back=True)
