"""Canonical CBOR: one byte string for one value, so that digests and signatures of the world's
journal, its snapshots and receipts are reproducible anywhere.

The encoding is cbor2's canonical form (RFC 8949 core deterministic encoding: shortest integer and
length heads, map keys sorted by their encoded bytes, floats in the shortest width that keeps the
value exactly) over a small set of types: None, bool, int, finite float, str, bytes, lists (tuples
encode as lists) and maps with str or int keys. NaN and the infinities are refused: they have
several encodings and no place in a record (a value that may be non-finite travels as the 8 bytes
of its IEEE-754 pattern, in a byte string). :func:`decode` is strict the other way round: it
accepts only what :func:`encode` would have written, so two encodings of one value never both
verify.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

import cbor2

__all__ = ["NonCanonical", "decode", "digest", "encode"]


_SCALARS = frozenset({type(None), bool, int, str, bytes})


class NonCanonical(ValueError):
    """A value that has no canonical encoding here, or bytes that are not one."""


def _check(value: Any, path: str) -> None:
    kind = type(value)
    if value is None or kind in (bool, int, str, bytes):
        return
    if kind is float:
        if not math.isfinite(value):
            raise NonCanonical(f"{path or 'value'}: {value!r} is not a finite float")
        return
    if kind in (list, tuple):
        for i, item in enumerate(value):
            if type(item) not in _SCALARS:  # (the common case checked without a call)
                _check(item, f"{path}[{i}]")
        return
    if kind is dict:
        for key, item in value.items():
            if type(key) not in (str, int):
                raise NonCanonical(f"{path or 'value'}: map key {key!r} is not a str or an int")
            if type(item) not in _SCALARS:
                _check(item, f"{path}.{key}" if path else str(key))
        return
    raise NonCanonical(f"{path or 'value'}: {kind.__name__} has no canonical encoding")


def encode(value: Any) -> bytes:
    """The canonical CBOR bytes of ``value``; NonCanonical names the first part that has none."""
    _check(value, "")
    return cbor2.dumps(value, canonical=True)


def decode(data: bytes) -> Any:
    """The value of canonical CBOR bytes; NonCanonical when they are not exactly what
    :func:`encode` writes for that value (other head widths, key order, tags, NaN, trailing
    bytes)."""
    if type(data) is not bytes:
        raise NonCanonical("canonical CBOR must be bytes")
    try:
        value = cbor2.loads(data)
    except (cbor2.CBORDecodeError, ValueError, TypeError, RecursionError) as exc:
        raise NonCanonical(f"not CBOR: {exc}") from None
    try:
        again = encode(value)
    except NonCanonical as exc:
        raise NonCanonical(f"not canonical: {exc}") from None
    if again != data:
        raise NonCanonical("not canonical: the value encodes differently")
    return value


def digest(value: Any) -> bytes:
    """sha256 of the canonical encoding (32 bytes)."""
    return hashlib.sha256(encode(value)).digest()
