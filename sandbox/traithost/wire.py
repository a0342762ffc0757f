"""The host's side of the wire: framing (a JSON line, then raw bytes), columns of views and of
intents, the plain values that may cross back to the trusted side, and the results a tick's
reply carries for each trait. Standard library only (this package runs inside the container)."""

import array
import binascii
import json
import math
import sys
import traceback

# The type checker's names: this block never runs, so the host does not load typing. Annotations that use them are
# strings, since no module of this package has `from __future__ import annotations` (see worker.py).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any, BinaryIO, TypeAlias

    Message: TypeAlias = dict[str, Any]  # a JSON object of the protocol (a request or a reply), as decoded
    Reply: TypeAlias = Message | tuple[Message, bytes]  # a handler's reply, with its attachment if it has one
    Handler: TypeAlias = Callable[[Message, bytes | None], Reply]  # a request's handler: (msg, attachment)
    Result: TypeAlias = dict[str, Any]  # one trait's result of a tick ("calls", "total_us", "errors", ...)
    Plain: TypeAlias = float | int | str | bool  # what plain() lets cross back to the trusted side

TRAIT_FILE_PREFIX = "<trait "


MAX_LINE = 16 * 2**20  # a worker's reply line (its intents travel in the attachment)


MAX_ATTACHMENT = 64 * 2**20


MAX_INTENTS_PER_CALL = 16


MAX_INT = 2**53  # ints beyond this are not plain data (and a huge one would not even encode)


MAX_REPORTED_ERRORS = 20


STATUS_SLOTS = 2  # a worker's status: [call sequence, running trait's index + 1 (0: host code)]


class TraitLimit(Exception):
    """A trait call exceeded a limit of what it may return (intents per call)."""


def encode_line(message: "Message", attachment: bytes | None = None) -> bytes:
    if attachment is not None:
        message = dict(message, attachment=len(attachment))
    line = json.dumps(message, allow_nan=False, separators=(",", ":")).encode("ascii") + b"\n"
    return line + bytes(attachment) if attachment else line


def read_message(stream: "BinaryIO") -> "tuple[Message | None, bytes | None]":
    """The next (message, attachment) from a buffered binary stream; (None, None) at EOF."""
    line = stream.readline(MAX_LINE + 1)
    if not line:
        return None, None
    if len(line) > MAX_LINE:
        raise ValueError("request line too long")
    msg = json.loads(line)
    if type(msg) is not dict:
        raise ValueError("a request must be a JSON object")
    attachment = None
    if "attachment" in msg:
        size = msg.pop("attachment")
        if type(size) is not int or not 0 <= size <= MAX_ATTACHMENT:
            raise ValueError("bad attachment size")
        attachment = stream.read(size)
        if len(attachment) != size:
            raise ValueError("the attachment is shorter than announced")
    return msg, attachment


class Inbox:
    """Incremental reader of one framed message from a non-blocking socket."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.msg: Message | None = None
        self.need: int | None = None  # the attachment's size, read with ``msg``

    def feed(self, data: bytes) -> "tuple[Message, bytes] | None":
        """Returns (message, attachment) once complete, else None. Raises ValueError on garbage."""
        self.buf += data
        if self.msg is None:
            end = self.buf.find(b"\n")
            if end < 0:
                if len(self.buf) > MAX_LINE:
                    raise ValueError("reply line too long")
                return None
            msg = json.loads(bytes(self.buf[:end]))
            if type(msg) is not dict:
                raise ValueError("a reply must be a JSON object")
            del self.buf[: end + 1]
            size = msg.pop("attachment", 0)
            if type(size) is not int or not 0 <= size <= MAX_ATTACHMENT:
                raise ValueError("bad attachment size")
            self.msg, self.need = msg, size
        assert self.msg is not None and self.need is not None  # both read from the line, above or in an earlier feed
        if len(self.buf) < self.need:
            return None
        attachment = bytes(self.buf[: self.need])
        msg = self.msg
        self.buf, self.msg, self.need = bytearray(), None, None
        return msg, attachment


def failed_result(why: str) -> "Result":
    return {
        "calls": 0,
        "total_us": 0.0,
        "max_us": 0.0,
        "error_count": 1,
        "errors": [{"entity_id": None, "error": why}],
        "timeouts": [],
    }


def lost_result(why: str) -> "Result":
    return {"calls": 0, "total_us": 0.0, "max_us": 0.0, "error_count": 0, "errors": [], "timeouts": [], "lost": why}


NAN = math.nan


class IntentColumns:
    """One trait's intents of one tick as columns, in the order they are made (entity by entity,
    ascending, as the rows come): ``entity``, ``kind`` (one letter each: s set, m move,
    t move_towards, e eat), ``attr`` (index into ``names``, -1 if not a set), ``a``/``b`` (the
    float arguments, NaN if none) and ``other``: [index, slot, value] for each argument that is
    not a finite float (ints, strings, markers), so nothing is coerced here. ``entity_id`` is
    the entity of the call running now; ``in_call`` counts its intents."""

    __slots__ = ("entity_id", "in_call", "limit", "entity", "kinds", "attr", "a", "b", "other", "names")

    # the columns, set in __init__
    entity: list[int]
    kinds: list[str]
    attr: list[int]
    a: list[float]
    b: list[float]
    other: list[list[object]]

    def __init__(self, limit: float | None = None) -> None:
        self.entity_id = 0
        self.in_call = 0
        self.limit = MAX_INTENTS_PER_CALL if limit is None else limit
        self.entity, self.kinds, self.attr, self.a, self.b, self.other = [], [], [], [], [], []
        self.names: dict[str, int] = {}  # attribute name -> its index in "names"

    def add(self, kind: str, attr: int, first: object, second: object) -> None:
        if self.in_call >= self.limit:
            raise TraitLimit("more than %d intents in one call" % self.limit)
        self.in_call += 1
        i = len(self.kinds)
        self.entity.append(self.entity_id)
        self.kinds.append(kind)
        self.attr.append(attr)
        if type(first) is float and first - first == 0.0:
            self.a.append(first)
        else:
            self.a.append(NAN)
            if kind != "e":
                self.other.append([i, 0, first])
        if type(second) is float and second - second == 0.0:
            self.b.append(second)
        else:
            self.b.append(NAN)
            if kind == "m" or kind == "t":
                self.other.append([i, 1, second])

    def add_set(self, name: str, value: object) -> None:
        at = self.names.get(name)
        if at is None:
            at = self.names[name] = len(self.names)
        self.add("s", at, value, NAN)

    def encode(self, blob: bytearray | None = None) -> "Message":
        """The columns on the wire: arrays packed (raw bytes appended to ``blob``, or base64)."""
        return {
            "count": len(self.kinds),
            "entity": pack_ints(self.entity, blob),
            "kind": "".join(self.kinds),
            "attr": pack_ints(self.attr, blob),
            "names": list(self.names),
            "a": pack("d", self.a, blob),
            "b": pack("d", self.b, blob),
            "other": self.other,
        }


ARRAY_CODES = {"f8": "d", "i8": "q", "i4": "i"}


def decode_columns(
    columns: "list[Any]", count: int | None = None, attachment: bytes | None = None
) -> "list[Sequence[Any]]":
    """Lists (one per column, of equal length) from columns: JSON lists, {"f8"|"i8"|"i4": base64 of a little-endian
    float64/int64/int32 array, or [offset, length] of those bytes in the request's attachment},
    {"text": [offset, length]} (strings joined by "\\x1f", UTF-8, in the attachment), or
    {"same": value} (every one of the ``count`` rows holds it)."""
    lists: list[Sequence[Any]] = []
    for col in columns:
        if type(col) is dict and "same" in col:
            if type(count) is not int or count < 0:
                raise ValueError("a 'same' column needs the request's count")
            col = [col["same"]] * count
        elif type(col) is dict and "text" in col:  # strings joined by the unit separator
            text = bytes(attached(attachment, col["text"])).decode("utf-8")
            col = text.split("\x1f") if count else []
        elif type(col) is dict:
            ((key, data),) = col.items()
            arr = array.array(ARRAY_CODES[key])
            if arr.itemsize != int(key[1]):
                raise ValueError("no %s array type on this platform" % key)
            if type(data) is list:
                arr.frombytes(attached(attachment, data))
            else:
                arr.frombytes(binascii.a2b_base64(data))
            if sys.byteorder != "little":
                arr.byteswap()
            col = arr
        elif type(col) is not list:
            raise ValueError("a column must be a list or an encoded array")
        lists.append(col)
    if len({len(col) for col in lists}) > 1:
        raise ValueError("columns of different lengths")
    return lists


def attached(attachment: bytes | None, span: "Sequence[int]") -> memoryview:
    """The bytes ``[offset, length]`` names in the request's attachment (a view, not a copy)."""
    start, size = span
    if attachment is None or not 0 <= start <= start + size <= len(attachment):
        raise ValueError("a column outside the attachment")
    return memoryview(attachment)[start : start + size]


INTENT_KINDS = {"set": "s", "move": "m", "move_towards": "t", "eat": "e"}


def encode_intents(merged: "dict[int, list[list[Any]]]", blob: bytearray | None = None) -> "Message":
    """``{entity_id: [intent, ...]}`` (intents as lists: ["set", name, value], ["move", dx, dy],
    ["move_towards", x, y], ["eat"]) as the columns of :class:`IntentColumns`, entities ascending."""
    columns = IntentColumns(limit=math.inf)
    for entity_id in sorted(merged):
        columns.entity_id = entity_id
        for intent in merged[entity_id]:
            kind = INTENT_KINDS[intent[0]]
            if kind == "s":
                columns.add_set(intent[1], intent[2])
            elif kind == "e":
                columns.add("e", -1, NAN, NAN)
            else:
                columns.add(kind, -1, intent[1], intent[2])
    return columns.encode(blob)


def pack(code: str, values: "Sequence[float]", blob: bytearray | None = None) -> "dict[str, list[int] | str]":
    """{"f8"|"i8"|"i4": base64 of a little-endian float64/int64/int32 array} (as in requests), or
    with ``blob`` (a bytearray: the reply's attachment) the array appended to it as
    {key: [offset, length]}."""
    arr = array.array(code, values)
    if sys.byteorder != "little":
        arr.byteswap()
    key = {"d": "f8", "q": "i8", "i": "i4"}[code]
    if blob is not None:
        start = len(blob)
        blob += arr.tobytes()
        return {key: [start, len(blob) - start]}
    return {key: binascii.b2a_base64(arr.tobytes(), newline=False).decode("ascii")}


def pack_ints(values: "Sequence[int]", blob: bytearray | None = None) -> "dict[str, list[int] | str]":
    """:func:`pack` of ints: as "i4" when every value fits in 32 bits (half the bytes), else "i8"."""
    if not values or (min(values) >= -(2**31) and max(values) < 2**31):
        return pack("i", values, blob)
    return pack("q", values, blob)


def plain(value: "Any") -> "Plain":
    """Only plain, finite, bounded scalars cross back to the trusted side; anything else is marked."""
    kind = type(value)
    if kind is float:
        return value if math.isfinite(value) else "<non-finite>"
    if kind is int:
        return value if -MAX_INT <= value <= MAX_INT else "<int out of range>"
    if kind is str:
        return value[:256]
    if kind is bool:
        return value
    return "<%s>" % kind.__name__


def describe(exc: BaseException) -> str:
    """'ZeroDivisionError: division by zero (line 7)' with the line inside the trait source."""
    line = None
    try:
        for frame in traceback.extract_tb(exc.__traceback__):
            if frame.filename.startswith(TRAIT_FILE_PREFIX):
                line = frame.lineno
        text = "%s: %s" % (type(exc).__name__, exc)
    except BaseException:  # a message that cannot be rendered (str() raising, a huge int...)
        text = type(exc).__name__
    if line is not None:
        text += " (line %d)" % line
    return text[:500]


def answer(handler: "Handler | None", msg: "Message", attachment: bytes | None) -> bytes:
    """The encoded reply of ``handler`` (None: an unknown request, or one before the hello) to a
    request; whatever fails, including the reply's encoding, becomes an error reply."""
    try:
        if handler is None:
            raise ValueError("unknown op %r (say hello first)" % str(msg.get("op"))[:40])
        reply = handler(msg, attachment)
    except Exception as exc:
        reply = {"ok": False, "error": "bad request: %s" % describe(exc)}
    blob: bytes | None = None
    if type(reply) is tuple:
        reply, blob = reply
    try:
        return encode_line(reply, blob)  # type: ignore[arg-type]  # not a tuple now (mypy cannot tell)
    except Exception as exc:
        return encode_line({"ok": False, "error": "the reply could not be encoded: %s" % describe(exc)})


def checked_result(result: object) -> "Result":
    """A worker's result for one trait, rebuilt from plain values of the expected types (a worker
    runs untrusted code: nothing it sends is passed on as is)."""
    if type(result) is not dict:
        return failed_result("its process sent no result for it")

    def number(key: "str", kind: "type[float]") -> "float":  # kind: int or float
        value = result.get(key)
        return value if type(value) is kind and (kind is int or math.isfinite(value)) else kind(0)

    errors = []
    for error in result.get("errors", [])[:MAX_REPORTED_ERRORS] if type(result.get("errors")) is list else ():
        if type(error) is dict:
            entity_id = error.get("entity_id")
            errors.append(
                {
                    "entity_id": entity_id if type(entity_id) is int and abs(entity_id) < MAX_INT else None,
                    "error": str(error.get("error"))[:500],
                }
            )
    timeouts = result.get("timeouts")
    timeouts = [t for t in timeouts[:10000] if type(t) is int and abs(t) < MAX_INT] if type(timeouts) is list else []
    return {
        "calls": number("calls", int),
        "total_us": number("total_us", float),
        "max_us": number("max_us", float),
        "error_count": max(number("error_count", int), len(errors)),
        "errors": errors,
        "timeouts": timeouts,
        "blocks": number("blocks", int),
        "intents": number("intents", int),
    }


def checked_group(columns: object, base: int, size: int) -> "Message | None":
    """A worker's intent columns with their attachment spans moved by ``base`` (where its bytes
    go in the merged reply), or None if the spans are not well formed. The trusted side checks
    every value again."""
    if type(columns) is not dict:
        return None
    group = dict(columns)
    for key in ("entity", "attr", "a", "b"):
        col = columns.get(key)
        if type(col) is not dict or len(col) != 1:
            return None
        ((kind, span),) = col.items()
        if type(span) is list:
            if len(span) != 2 or any(type(v) is not int for v in span) or not 0 <= span[0] <= span[0] + span[1] <= size:
                return None
            group[key] = {kind: [span[0] + base, span[1]]}
    try:
        json.dumps(group, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return None
    return group
