"""Trusted side of the trait host's columnar intents (``"reply": "columns"``).

The host (sandbox/trait_host.py, ``encode_intents``) sends intents as columns; this turns them
back into the ``{entity_id: [[kind, ...], ...]}`` form ``World.step`` checks and applies. The
host runs untrusted code, so its reply is data to check, never to trust: anything malformed
raises :class:`MalformedIntents` (the caller treats the tick as having no intents).
"""

from __future__ import annotations

import base64
import binascii
import sys
from array import array
from typing import Any

MAX_NAMES = 64
_BIG_ENDIAN = sys.byteorder == "big"


class MalformedIntents(ValueError):
    """The host's intent columns do not decode."""


def _column(value: Any, key: str, code: str, count: int) -> list:
    if not isinstance(value, dict) or set(value) != {key}:
        raise MalformedIntents(f"expected {{{key!r}: base64}}")
    try:
        arr = array(code, base64.b64decode(value[key], validate=True))
    except (binascii.Error, ValueError, TypeError) as exc:
        raise MalformedIntents(f"bad {key} column: {exc}") from exc
    if len(arr) != count:
        raise MalformedIntents(f"column of {len(arr)} values, expected {count}")
    if _BIG_ENDIAN:  # the wire is little-endian
        arr.byteswap()
    return arr.tolist()


def decode_intents(columns: Any) -> dict[int, list[list]]:
    """``{entity_id: [intent, ...]}``, each entity's intents in the order the host sent them."""
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
    entity = _column(columns.get("entity"), "i8", "q", count)
    attr = _column(columns.get("attr"), "i8", "q", count)
    a = _column(columns.get("a"), "f8", "d", count)
    b = _column(columns.get("b"), "f8", "d", count)
    for item in other:
        if (type(item) is not list or len(item) != 3 or type(item[0]) is not int
                or not 0 <= item[0] < count or item[1] not in (0, 1)):
            raise MalformedIntents("other entries must be [index, 0|1, value]")
        (a if item[1] == 0 else b)[item[0]] = item[2]
    out: dict[int, list[list]] = {}
    nnames = len(names)
    for i, letter in enumerate(kinds):
        first = a[i]
        if letter == "m" or letter == "t":
            second = b[i]
            if first != first or second != second:  # NaN: an argument is missing
                raise MalformedIntents("a move intent lacks an argument")
            intent = ["move" if letter == "m" else "move_towards", first, second]
        elif letter == "s":
            at = attr[i]
            if not 0 <= at < nnames or first != first:
                raise MalformedIntents("a set intent lacks its attribute or value")
            intent = ["set", names[at], first]
        elif letter == "e":
            intent = ["eat"]
        else:
            raise MalformedIntents(f"unknown intent kind {letter!r}")
        have = out.get(entity[i])
        if have is None:
            out[entity[i]] = [intent]
        else:
            have.append(intent)
    return out
