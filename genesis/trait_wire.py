"""The trusted side of the trait host's wire protocol: intents in columns.

The host (sandbox/traithost/, standard library only, untrusted) records each trait's
intents as columns (``IntentColumns.encode`` there) and answers a tick with a group of them per
trait. :func:`decode_intent_groups` turns those groups back into one :class:`IntentColumns`,
after checking their shape, for ``World.step`` to check and apply in bulk. The host runs
untrusted code, so its reply is data to check, never to trust: anything malformed raises
:class:`MalformedIntents` (the caller treats the tick as having no intents). The engine and the
sandbox test both use this module, so neither imports the other.

:class:`IntentColumns` is also a read-only ``Mapping`` of the ``{entity_id: [intent, ...]}``
form (built on first use), so any consumer of the plain form keeps working; World.step reads the
columns directly and goes through the per-intent checks only for entities with an unusual intent.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

KIND_SET = ord("s")
KIND_MOVE = ord("m")
KIND_TOWARDS = ord("t")
KIND_EAT = ord("e")
_KIND_NAMES = {KIND_MOVE: "move", KIND_TOWARDS: "move_towards"}


class IntentColumns(Mapping):
    """One intent per index: ``entity`` (int64), ``kind`` (uint32 letter codes: s, m, t, e),
    ``attr`` (int64 index into ``names``, meaningful for sets), ``a``/``b`` (float64 first and
    second argument), and ``over_a``/``over_b``: index -> the argument that replaces the float
    (a value the host could not send as a finite float: int, str, bool, ...)."""

    __slots__ = ("entity", "kind", "attr", "a", "b", "names", "over_a", "over_b", "foreign", "_dict")

    def __init__(
        self,
        entity: np.ndarray,
        kind: np.ndarray,
        attr: np.ndarray,
        a: np.ndarray,
        b: np.ndarray,
        names: list[str],
        over_a: dict[int, Any],
        over_b: dict[int, Any],
    ) -> None:
        self.entity = entity
        self.kind = kind
        self.attr = attr
        self.a = a
        self.b = b
        self.names = names
        self.over_a = over_a
        self.over_b = over_b
        self.foreign = 0  # intents dropped: their entity carried no trait of the agent that sent them
        self._dict: dict[int, list[list]] | None = None

    def __len__(self) -> int:
        return len(self.as_dict())

    def __iter__(self) -> Iterator[int]:
        return iter(self.as_dict())

    def __getitem__(self, entity_id: int) -> list[list]:
        return self.as_dict()[entity_id]

    def intent(self, i: int, kind: int, first: float, second: float) -> list:
        """Intent ``i`` in the plain list form (``first``/``second``: its float arguments)."""
        if kind == KIND_SET:
            return ["set", self.names[int(self.attr[i])], self.over_a.get(i, first)]
        if kind == KIND_EAT:
            return ["eat"]
        return [_KIND_NAMES[kind], self.over_a.get(i, first), self.over_b.get(i, second)]

    def lists_of(self, indices: np.ndarray) -> list[list]:
        """The intents at ``indices`` (ascending) in the plain form."""
        idx = indices.tolist()
        return [
            self.intent(i, k, f, s)
            for i, k, f, s in zip(idx, self.kind[indices].tolist(), self.a[indices].tolist(), self.b[indices].tolist())
        ]

    def as_dict(self) -> dict[int, list[list]]:
        """``{entity_id: [intent, ...]}``, each entity's intents in the order the host sent them."""
        if self._dict is None:
            out: dict[int, list[list]] = {}
            intent = self.intent
            for i, (eid, k, f, s) in enumerate(
                zip(self.entity.tolist(), self.kind.tolist(), self.a.tolist(), self.b.tolist())
            ):
                have = out.get(eid)
                if have is None:
                    out[eid] = [intent(i, k, f, s)]
                else:
                    have.append(intent(i, k, f, s))
            self._dict = out
        return self._dict


MAX_NAMES = 64


class MalformedIntents(ValueError):
    """The host's intent columns do not decode."""


_ITEM_SIZES = {"f8": 8, "i8": 8, "i4": 4}


def _column_bytes(value: Any, keys: tuple[str, ...], count: int, attachment: bytes | None) -> tuple[str, bytes]:
    """A column {key: base64 of a little-endian array, or [offset, length] of its bytes in the
    reply's attachment}, key one of ``keys`` ("f8", "i8", "i4"), as (key, its ``count`` values'
    bytes). Called four times per trait per tick: written for speed."""
    if not isinstance(value, dict) or len(value) != 1:
        raise MalformedIntents(f"expected {{{'|'.join(map(repr, keys))}: base64}}")
    ((key, data),) = value.items()
    if key not in keys:
        raise MalformedIntents(f"expected {{{'|'.join(map(repr, keys))}: base64}}")
    size = _ITEM_SIZES[key]
    if type(data) is list:
        if attachment is None or len(data) != 2:
            raise MalformedIntents(f"bad {key} column: [offset, length] outside the attachment")
        start, length = data
        if type(start) is not int or type(length) is not int or not 0 <= start <= start + length <= len(attachment):
            raise MalformedIntents(f"bad {key} column: [offset, length] outside the attachment")
        raw: bytes = attachment[start : start + length]
    else:
        try:
            raw = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError, TypeError) as exc:
            raise MalformedIntents(f"bad {key} column: {exc}") from exc
    if len(raw) != count * size:
        if len(raw) % size:
            raise MalformedIntents(f"bad {key} column: bytes length not a multiple of item size")
        raise MalformedIntents(f"column of {len(raw) // size} values, expected {count}")
    return key, raw


def _joined(parts: list[tuple[str, bytes]]) -> np.ndarray:
    """The columns of several groups as one array (int64 or float64, native order): their bytes
    joined when they share a type (one numpy call however many groups), else each converted."""
    key = parts[0][0]
    as_type = np.float64 if key == "f8" else np.int64
    if all(k == key for k, _ in parts):  # the wire is little-endian; astype gives a writable array
        return np.frombuffer(b"".join(raw for _, raw in parts), dtype="<" + key).astype(as_type)
    return np.concatenate([np.frombuffer(raw, dtype="<" + k).astype(as_type) for k, raw in parts])


def _missing(values: np.ndarray, over: dict[int, Any]) -> np.ndarray:
    """Per intent: its argument is NaN (the float, or the value that replaces it)."""
    nan = np.isnan(values)
    for i, v in over.items():
        nan[i] = bool(v != v)
    return nan


MAX_GROUPS = 4096


@dataclass(frozen=True, slots=True)
class Carriers:
    """Who may receive whose intents in one tick: the carriers of a ``views`` request (ids
    ascending) and, for each, the agents whose traits it carries. A worker runs one agent's
    traits, so an intent from it for an entity that carries none of that agent's traits can only
    come from code that escaped its interpreter: the world refuses it."""

    ids: np.ndarray  # int64, ascending
    agents: np.ndarray  # bool [len(ids), len(agent_index)]: row carries a trait of that agent
    agent_index: dict[str, int]

    @classmethod
    def of(cls, views: Mapping[str, Any], agent_of: Mapping[str, str]) -> Carriers:
        """From a ``views`` request (as ``World.trait_views`` packs it) and trait -> agent."""
        fields = views["fields"]
        count = views["count"]
        ids = _int_column(views["columns"][fields.index("id")], count)
        sets = _int_column(views["columns"][fields.index("traits")], count)
        agent_index: dict[str, int] = {}
        for agent in agent_of.values():
            agent_index.setdefault(agent, len(agent_index))
        per_set = np.zeros((max(len(views["trait_sets"]), 1), max(len(agent_index), 1)), dtype=bool)
        for at, names in enumerate(views["trait_sets"]):
            for name in names:
                if name in agent_of:
                    per_set[at, agent_index[agent_of[name]]] = True
        return cls(ids, per_set[sets], agent_index)

    def may_act(self, owner: np.ndarray, entity: np.ndarray) -> np.ndarray:
        """Per intent: its entity carries a trait of its group's agent (``owner``: agent index,
        -1 for an agent with no carrier)."""
        if not len(self.ids):
            return np.zeros(len(entity), dtype=bool)
        row = np.searchsorted(self.ids, entity).clip(0, len(self.ids) - 1)
        return (self.ids[row] == entity) & (owner >= 0) & self.agents[row, owner.clip(0)]


def _int_column(column: Any, count: int) -> np.ndarray:
    """An int column of a ``views`` request ({"same": v}, {"i4"|"i8": bytes or base64})."""
    if "same" in column:
        return np.full(count, column["same"], dtype=np.int64)
    ((key, data),) = column.items()
    raw = data if isinstance(data, bytes) else base64.b64decode(data)
    return np.frombuffer(raw, dtype="<" + key).astype(np.int64)


def decode_intent_groups(
    groups: Any,
    attachment: bytes | None = None,
    group_agents: Any = None,
    carriers: Carriers | None = None,
) -> IntentColumns:
    """The intents of a host's reply: one group of intent columns per trait that ran (each
    entity-sorted), merged into one :class:`IntentColumns` sorted by entity id, an entity's
    intents in group order (the host's), then in the order its group holds them.

    With ``carriers``, ``group_agents`` (the reply's, one agent per group) says whose worker sent
    each group, and an intent for an entity that carries no trait of that agent is dropped
    (counted in the result's ``foreign``).

    Each group's shape is checked on its own; its numbers are checked and converted together
    with every other group's, so a reply costs a fixed number of numpy calls however many traits
    ran (a hundred groups cost ~30 per group otherwise)."""
    if not isinstance(groups, list) or len(groups) > MAX_GROUPS:
        raise MalformedIntents("intent_groups must be a list")
    if not groups:
        ints = np.empty(0, dtype=np.int64)
        return IntentColumns(ints, np.empty(0, dtype=np.uint32), ints, np.empty(0), np.empty(0), [], {}, {})
    parsed = [_Group.of(group, attachment) for group in groups]
    foreign = 0
    if carriers is not None:
        if type(group_agents) is not list or len(group_agents) != len(parsed):
            raise MalformedIntents("group_agents must name the agent of every group")
        owners = np.array([carriers.agent_index.get(a, -1) if type(a) is str else -1 for a in group_agents])
        owner = np.repeat(owners, [g.count for g in parsed])
        keep = carriers.may_act(owner, _joined([g.entity for g in parsed]))
        if not keep.all():
            foreign = int(len(keep) - keep.sum())
            parsed = _kept(parsed, keep)
    merged = _decode(parsed)
    merged.foreign = foreign
    return merged


def _kept(groups: list[_Group], keep: np.ndarray) -> list[_Group]:
    """``groups`` without the intents ``keep`` (over all groups, in order) says to drop."""
    out = []
    base = 0
    for g in groups:
        mine = keep[base : base + g.count]
        base += g.count
        if mine.all():
            out.append(g)
            continue
        at = np.flatnonzero(mine)
        moved = {int(old): new for new, old in enumerate(at.tolist())}

        def cut(column: tuple[str, bytes], at: np.ndarray = at) -> tuple[str, bytes]:
            return column[0], np.frombuffer(column[1], dtype="<" + column[0])[at].tobytes()

        out.append(
            _Group(
                len(at),
                "".join(g.kinds[i] for i in at.tolist()),
                g.names,
                cut(g.entity),
                cut(g.attr),
                cut(g.a),
                cut(g.b),
                {moved[i]: v for i, v in g.over_a.items() if i in moved},
                {moved[i]: v for i, v in g.over_b.items() if i in moved},
            )
        )
    return out


def _name_index(names: list[str], name: str) -> int:
    if name not in names:
        names.append(name)
    return names.index(name)


def decode_intents(columns: Any, attachment: bytes | None = None) -> IntentColumns:
    """The intents of one group as :class:`IntentColumns` (a ``Mapping`` ``{entity_id: [intent,
    ...]}``, each entity's intents in the order the host sent them, which ``World.step`` applies
    in bulk)."""
    return _decode([_Group.of(columns, attachment)])


@dataclass(slots=True)
class _Group:
    """One group's columns, their shape checked: the numbers still as (key, bytes)."""

    count: int
    kinds: str
    names: list[str]
    entity: tuple[str, bytes]
    attr: tuple[str, bytes]
    a: tuple[str, bytes]
    b: tuple[str, bytes]
    over_a: dict[int, Any]
    over_b: dict[int, Any]

    @classmethod
    def of(cls, columns: Any, attachment: bytes | None) -> _Group:
        if not isinstance(columns, dict):
            raise MalformedIntents("intent_columns must be an object")
        count = columns.get("count")
        if type(count) is not int or count < 0:
            raise MalformedIntents("count must be a non-negative int")
        kinds = columns.get("kind")
        names = columns.get("names")
        other = columns.get("other")
        if type(kinds) is not str or len(kinds) != count:
            raise MalformedIntents("kind must be a string of one letter per intent")
        if type(names) is not list or len(names) > MAX_NAMES or any(type(n) is not str for n in names):
            raise MalformedIntents("names must be a short list of strings")
        if type(other) is not list:
            raise MalformedIntents("other must be a list")
        entity = _column_bytes(columns.get("entity"), ("i8", "i4"), count, attachment)
        attr = _column_bytes(columns.get("attr"), ("i8", "i4"), count, attachment)
        a = _column_bytes(columns.get("a"), ("f8",), count, attachment)
        b = _column_bytes(columns.get("b"), ("f8",), count, attachment)
        over_a: dict[int, Any] = {}
        over_b: dict[int, Any] = {}
        for item in other:
            if (
                type(item) is not list
                or len(item) != 3
                or type(item[0]) is not int
                or not 0 <= item[0] < count
                or item[1] not in (0, 1)
            ):
                raise MalformedIntents("other entries must be [index, 0|1, value]")
            (over_a if item[1] == 0 else over_b)[item[0]] = item[2]
        return cls(count, kinds, names, entity, attr, a, b, over_a, over_b)


def _decode(groups: list[_Group]) -> IntentColumns:
    """The groups' intents, checked and merged (one group: as it is, in its own order)."""
    counts = [g.count for g in groups]
    entity = _joined([g.entity for g in groups])
    attr = _joined([g.attr for g in groups])
    a = _joined([g.a for g in groups])
    b = _joined([g.b for g in groups])
    kinds = "".join(g.kinds for g in groups)
    over_a: dict[int, Any] = {}
    over_b: dict[int, Any] = {}
    base = 0
    for g in groups:
        over_a.update({base + i: v for i, v in g.over_a.items()})
        over_b.update({base + i: v for i, v in g.over_b.items()})
        base += g.count
    # each intent's group's number of attribute names (a set's attr indexes its group's names)
    name_counts = [len(g.names) for g in groups]
    names_of = np.repeat(np.array(name_counts, dtype=np.int64), counts)
    kind = np.frombuffer(kinds.encode("utf-32-le", "surrogatepass"), dtype="<u4").astype(np.uint32)
    is_set = kind == KIND_SET
    is_move = (kind == KIND_MOVE) | (kind == KIND_TOWARDS)
    nan_a = _missing(a, over_a)
    bad_move = is_move & (nan_a | _missing(b, over_b))  # NaN: an argument is missing
    bad_set = is_set & ((attr < 0) | (attr >= names_of) | nan_a)
    unknown = ~(is_set | is_move | (kind == KIND_EAT))
    wrong = bad_move | bad_set | unknown
    if wrong.any():  # the first wrong intent names the problem
        i = int(np.argmax(wrong))
        if unknown[i]:
            raise MalformedIntents(f"unknown intent kind {kinds[i]!r}")
        if bad_set[i]:
            raise MalformedIntents("a set intent lacks its attribute or value")
        raise MalformedIntents("a move intent lacks an argument")
    if len(groups) == 1:
        return IntentColumns(entity, kind, attr, a, b, list(groups[0].names), over_a, over_b)
    # One list of names (in order of first appearance); each group's attr indexes moved onto it.
    names: list[str] = []
    remaps: list[int] = []
    for g in groups:
        remaps.extend([_name_index(names, name) for name in g.names] or [0])
    if len(names) > MAX_NAMES:
        raise MalformedIntents("too many attribute names")
    widths = np.maximum(np.array(name_counts, dtype=np.int64), 1)
    first = np.repeat(np.cumsum(widths) - widths, counts)  # where each intent's group's remap starts
    local = np.minimum(np.maximum(attr, 0), np.repeat(widths, counts) - 1)
    attr = np.where(is_set, np.array(remaps, dtype=np.int64)[first + local], attr)
    order = np.argsort(entity, kind="stable")  # by entity; within one, group order is kept
    position = np.empty_like(order)
    position[order] = np.arange(len(order))
    return IntentColumns(
        entity[order],
        kind[order],
        attr[order],
        a[order],
        b[order],
        names,
        {int(position[i]): v for i, v in over_a.items()},
        {int(position[i]): v for i, v in over_b.items()},
    )
