"""Intents in columns: the trait host's decoded reply, in the form World.step applies in bulk.

``sandbox/intents.py`` builds an :class:`IntentColumns` from the host's ``intent_columns`` after
checking its shape; the values are still untrusted (World.step checks them exactly as it checks
``{entity_id: [intent, ...]}``). It is a read-only ``Mapping`` of that dict form too (built on
first use), so any consumer of the plain form keeps working; World.step reads the columns
directly and goes through the per-intent checks only for entities with an unusual intent.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
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

    __slots__ = ("entity", "kind", "attr", "a", "b", "names", "over_a", "over_b", "_dict")

    def __init__(self, entity: np.ndarray, kind: np.ndarray, attr: np.ndarray, a: np.ndarray, b: np.ndarray,
                 names: list[str], over_a: dict[int, Any], over_b: dict[int, Any]) -> None:
        self.entity = entity
        self.kind = kind
        self.attr = attr
        self.a = a
        self.b = b
        self.names = names
        self.over_a = over_a
        self.over_b = over_b
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
        return [self.intent(i, k, f, s) for i, k, f, s in
                zip(idx, self.kind[indices].tolist(), self.a[indices].tolist(), self.b[indices].tolist())]

    def as_dict(self) -> dict[int, list[list]]:
        """``{entity_id: [intent, ...]}``, each entity's intents in the order the host sent them."""
        if self._dict is None:
            out: dict[int, list[list]] = {}
            intent = self.intent
            for i, (eid, k, f, s) in enumerate(zip(self.entity.tolist(), self.kind.tolist(),
                                                   self.a.tolist(), self.b.tolist())):
                have = out.get(eid)
                if have is None:
                    out[eid] = [intent(i, k, f, s)]
                else:
                    have.append(intent(i, k, f, s))
            self._dict = out
        return self._dict
