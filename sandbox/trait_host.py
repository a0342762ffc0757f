"""Trait host: runs untrusted trait code inside a sandbox container. Standard library only.

It speaks JSON lines with the trusted side (the sandbox activity in the worker, the live
engine) over stdin/stdout, or, when GENESIS_HOST_SOCKET names one, over a Unix socket it
connects to (the live engine's private channel, see sandbox/container.py). Each tick it receives plain entity views for the carriers of
each trait, runs ``execute(entity)`` for each through an entity proxy that *records intents*,
and returns the intents, per-call timings and errors. The trusted side checks every intent.

Requests (one JSON object per line) and replies:
  {"op": "hello", "entity_api": {...}, "allowed_imports": [...], "call_timeout_ms": 5}
      -> {"ok": true, "op": "hello", "python": "3.11.2"}
  {"op": "load", "trait": NAME, "source": CODE, "class_name": CLS}
      -> {"ok": true, "op": "load", "trait": NAME} | {"ok": false, "op": "load", "error": ...}
  {"op": "unload", "trait": NAME}                  -> {"ok": true, "op": "unload"}
  {"op": "tick", "tick": N, "batches": {NAME: [view, ...]}}
      -> {"ok": true, "op": "tick", "tick": N, "results": {NAME: {"intents": [[id, [...]], ...],
          "calls": n, "total_us": t, "max_us": m, "errors": [...], "error_count": k,
          "timeouts": [ids]}}}
  {"op": "views", "tick": N, "fields": [NAME, ...], "world": {NAME: value, ...},
   "trait_sets": [[TRAIT, ...], ...], "run": [TRAIT, ...], "rows": [[value, ...], ...]}
      The compact form (the live engine's): every carrier's view is sent once, as a row of the
      values of ``fields`` (its "traits" value is an index into ``trait_sets``); ``world`` holds
      the values shared by every entity. Instead of "rows" the request may carry "columns", one
      per field: a JSON list, {"f8"|"i8"|"i4": base64 of a little-endian float64/int64/int32
      array}, or {"same": value} for a column whose every row (of "count") holds that value; a
      NaN ``nearest_dx`` column value means no resource in range. Each trait of ``run`` runs, in that order, on the rows
      whose trait set contains it (rows in the order sent).
      -> {"ok": true, "op": "views", "tick": N, "intents": [[id, [...]], ...],
          "results": {TRAIT: {"calls": n, "total_us": t, "max_us": m, "errors": [...],
          "error_count": k, "timeouts": [ids]}}}
      where an entity's intents are those of its traits concatenated in ``run`` order. With
      "reply": "columns" in the request, "intent_columns" (see ``encode_intents``) replaces
      "intents".
Attachments: a request line with "attachment": N is followed by N raw bytes, and a column
value [offset, length] (instead of a base64 string) names its bytes there; a string column may
be {"text": [offset, length]}: UTF-8 strings joined by "\x1f". A ``views`` request
that came with an attachment is answered in kind: its intent columns are [offset, length] into
the reply's attachment ("attachment": N on the reply line, N bytes after it). Arrays so cross
without base64 or JSON escaping (the live engine's form; see sandbox/container.py).
The host exits when stdin (or the socket) closes.
"""

import array
import binascii
import builtins
import gc
import json
import math
import os
import signal
import socket
import sys
import time
import traceback

TRAIT_FILE_PREFIX = "<trait "


class TraitTimeout(BaseException):
    """Raised by the CPU-time alarm inside a trait call that overran its budget.

    A BaseException so a trait's ``except Exception`` cannot swallow it."""


class Watchdog:
    """CPU-time limit of trait calls with one periodic timer per batch, not two syscalls per call.

    ITIMER_VIRTUAL (time on the CPU, so a busy machine does not make an honest trait look slow)
    fires every budget while a batch runs. Each call bumps ``calls``; a firing that finds the
    same call still running as at the previous firing raises TraitTimeout in it. So a call is
    stopped after between one and two budgets of CPU time, and a trait that swallows the first
    TraitTimeout (in a ``finally``) gets another one a budget later. Firings between calls, in
    the host's own code (``in_call`` false), never raise."""

    def __init__(self):
        self.calls = 0
        self.seen = -1
        self.in_call = False

    def on_alarm(self, signum, frame):
        if self.in_call and self.calls == self.seen:
            raise TraitTimeout()
        self.seen = self.calls

    def arm(self, budget_s):
        self.seen = -1
        signal.setitimer(signal.ITIMER_VIRTUAL, budget_s, budget_s)

    def disarm(self):
        signal.setitimer(signal.ITIMER_VIRTUAL, 0)


WATCHDOG = Watchdog()


class Host:
    def __init__(self):
        self.readable = frozenset()
        self.writable = {}
        self.allowed_imports = frozenset()
        self.call_timeout_s = 0.005
        self.classes = {}  # trait -> class
        self.instances = {}  # trait -> {entity_id: instance}
        self.proxy_class = None
        self.row_proxies = {}  # (fields, world) -> proxy class of the ``views`` form

    # -- requests --------------------------------------------------------------------------
    def hello(self, msg):
        api = msg["entity_api"]
        self.readable = frozenset(api["readable"])
        self.writable = api["writable"]
        self.allowed_imports = frozenset(msg.get("allowed_imports", ()))
        self.call_timeout_s = float(msg.get("call_timeout_ms", 5)) / 1000.0
        self.proxy_class = make_proxy_class(self.readable, self.writable)
        self.row_proxies = {}
        missing = [m for m in api["methods"] if not hasattr(self.proxy_class, m)]
        if missing:
            return {"ok": False, "op": "hello", "error": "host lacks entity methods: %s" % missing}
        return {"ok": True, "op": "hello", "python": sys.version.split()[0], "implementation": sys.implementation.name}

    def load(self, msg):
        name, source, class_name = msg["trait"], msg["source"], msg["class_name"]
        namespace = {"__builtins__": self.safe_builtins(), "__name__": "trait_" + name}
        try:
            self.with_cpu_alarm(
                lambda: exec(compile(source, TRAIT_FILE_PREFIX + name + ">", "exec"), namespace)
            )
            cls = namespace[class_name]
            self.with_cpu_alarm(cls)  # the trait must be constructible without arguments
        except TraitTimeout:
            return {"ok": False, "op": "load", "trait": name, "error": "loading the trait took too long"}
        except BaseException as exc:  # report anything, including SystemExit, as a load error
            return {"ok": False, "op": "load", "trait": name, "error": describe(exc)}
        self.classes[name] = cls
        self.instances[name] = {}
        return {"ok": True, "op": "load", "trait": name}

    def unload(self, msg):
        self.classes.pop(msg["trait"], None)
        self.instances.pop(msg["trait"], None)
        return {"ok": True, "op": "unload", "trait": msg["trait"]}

    def tick(self, msg):
        results = {}
        for name, views in msg["batches"].items():
            if name in self.classes:
                results[name] = self.run_trait(name, views)
            else:
                results[name] = {"intents": [], "calls": 0, "total_us": 0,
                                 "errors": [{"entity_id": None, "error": "trait not loaded"}],
                                 "timeouts": []}
        return {"ok": True, "op": "tick", "tick": msg.get("tick"), "results": results}

    def views(self, msg):
        fields = msg["fields"]
        if "rows" in msg:
            rows = msg["rows"]
            if len({len(row) for row in rows} | {len(fields)}) > 1:
                raise ValueError("every row must hold one value per field")
            columns = [list(col) for col in zip(*rows)] if rows else [[] for _ in fields]
        else:
            columns = decode_columns(msg["columns"], msg.get("count"), msg.get("attachment"))
        if len(columns) != len(fields):
            raise ValueError("one column per field is needed")
        sets = [tuple(names) for names in msg["trait_sets"]]
        proxy_class = self.column_proxy_class(tuple(fields), msg.get("world") or {})
        proxy_class.bind(columns, sets)
        merged = {}
        results = {}
        # No cyclic GC pass inside a timed trait call (at thousands of rows a full pass takes
        # milliseconds of CPU and would be charged to whichever call it interrupted).
        gc_was_on = gc.isenabled()
        gc.disable()
        try:
            self.run_views(msg["run"], sets, columns[fields.index("traits")], columns[fields.index("id")],
                           proxy_class, merged, results)
        finally:
            if gc_was_on:
                gc.enable()
            proxy_class.bind(None, ())
        reply = {"ok": True, "op": "views", "tick": msg.get("tick"), "results": results}
        if msg.get("reply") == "columns" and "attachment" in msg:  # answered in kind: raw bytes
            blob = bytearray()
            reply["intent_columns"] = encode_intents(merged, blob)
            reply["attachment"] = bytes(blob)
        elif msg.get("reply") == "columns":
            reply["intent_columns"] = encode_intents(merged)
        else:
            reply["intents"] = [[entity_id, intents] for entity_id, intents in merged.items()]
        return reply

    def run_views(self, run, sets, set_column, id_column, proxy_class, merged, results):
        """Each trait of ``run`` on the rows whose trait set holds it; a proxy is a row index."""
        everyone = range(len(id_column))
        for name in run:
            if name not in self.classes:
                results[name] = {"calls": 0, "total_us": 0, "error_count": 1,
                                 "errors": [{"entity_id": None, "error": "trait not loaded"}],
                                 "timeouts": []}
                continue
            member = [name in names for names in sets]
            if all(member):
                rows, ids = everyone, id_column
            else:
                rows = [i for i in everyone if member[set_column[i]]]
                ids = [id_column[i] for i in rows]
            results[name] = self.run_calls(name, ids, rows, proxy_class, merged)

    def column_proxy_class(self, fields, world):
        key = (fields, tuple(sorted(world.items())))
        cls = self.row_proxies.get(key)
        if cls is None:
            cls = self.row_proxies[key] = make_column_proxy_class(self.readable, self.writable, fields, world)
        return cls

    # -- running traits ----------------------------------------------------------------------
    def run_trait(self, name, views):
        """Run one trait on dict views (the ``tick`` form)."""
        merged = {}
        result = self.run_calls(name, [view["id"] for view in views], views, self.proxy_class, merged)
        result["intents"] = [[entity_id, intents] for entity_id, intents in merged.items()]
        return result

    def run_calls(self, name, ids, items, proxy_class, merged):
        """``execute(proxy_class(item, intents))`` of trait ``name`` for each entity, under the
        CPU watchdog; intents are merged into ``merged`` by entity id. One clock read per call
        (each call's time runs from the previous read, so it includes the loop's own share)."""
        cls = self.classes[name]
        instances = self.instances[name]
        kept = {}
        errors, timeouts = [], []
        watchdog = WATCHDOG
        clock = time.perf_counter
        max_s = 0.0
        watchdog.arm(self.call_timeout_s)
        started = last = clock()
        try:
            for entity_id, item in zip(ids, items):
                recorded = []
                watchdog.calls += 1
                try:
                    watchdog.in_call = True
                    instance = instances.get(entity_id)
                    if instance is None:
                        instance = cls()
                    kept[entity_id] = instance
                    drive(instance.execute(proxy_class(item, recorded)))
                    watchdog.in_call = False
                except TraitTimeout:
                    watchdog.in_call = False
                    timeouts.append(entity_id)
                except BaseException as exc:
                    watchdog.in_call = False
                    errors.append({"entity_id": entity_id, "error": describe(exc)})
                if recorded:
                    have = merged.get(entity_id)
                    if have is None:
                        merged[entity_id] = recorded
                    else:
                        have.extend(recorded)
                now = clock()
                if now - last > max_s:
                    max_s = now - last
                last = now
        finally:
            watchdog.disarm()
        total_us = (last - started) * 1e6
        self.instances[name] = kept  # entities that died or lost the trait are forgotten
        return {"calls": len(ids), "total_us": round(total_us, 1), "max_us": round(max_s * 1e6, 1), "errors": errors[:20],
                "error_count": len(errors), "timeouts": timeouts}

    def with_cpu_alarm(self, fn):
        """Run host-side trait code outside a batch (module body, constructor) under the watchdog."""
        watchdog = WATCHDOG
        watchdog.arm(self.call_timeout_s)
        watchdog.calls += 1
        try:
            watchdog.in_call = True
            return fn()
        finally:
            watchdog.in_call = False
            watchdog.disarm()

    def safe_builtins(self):
        allowed = self.allowed_imports

        def guarded_import(name, globals=None, locals=None, fromlist=(), level=0):
            if level != 0 or name.split(".")[0] not in allowed:
                raise ImportError("import of %r is not allowed in a trait" % name)
            return __import__(name, globals, locals, fromlist, level)

        names = dict(vars(builtins))
        for banned in ("open", "exec", "eval", "compile", "input", "breakpoint", "globals",
                       "locals", "vars", "help", "exit", "quit", "print", "memoryview"):
            names.pop(banned, None)
        names["__import__"] = guarded_import
        return names


def drive(coro):
    """Run a coroutine that never suspends: one send() finishes it (~100 ns, no event loop)."""
    if not hasattr(coro, "send"):
        raise TypeError("execute() must be declared 'async def'")
    try:
        coro.send(None)
    except StopIteration:
        return
    coro.close()
    raise RuntimeError("execute() awaited something that suspends; traits must not block")


class IntentMethods:
    """The entity methods that become intents; shared by both proxy forms."""

    __slots__ = ()

    def move(self, dx, dy):
        self._intents.append(["move", plain(dx), plain(dy)])

    def move_towards(self, x, y):
        self._intents.append(["move_towards", plain(x), plain(y)])

    def eat(self):
        self._intents.append(["eat"])


def make_proxy_class(readable, writable):
    class Entity(IntentMethods):
        """What a trait sees as ``entity``: reads come from the view, writes become intents."""

        __slots__ = ("_view", "_intents")

        def __init__(self, view, intents):
            object.__setattr__(self, "_view", view)
            object.__setattr__(self, "_intents", intents)

        def __getattr__(self, name):
            if name in readable:
                value = self._view.get(name)
                return list(value) if type(value) is list else value
            raise AttributeError("entity has no attribute %r in Entity API v1" % name)

        def __setattr__(self, name, value):
            if name not in writable:
                raise AttributeError("entity.%s is read-only (writable: %s)" % (name, ", ".join(sorted(writable))))
            self._intents.append(["set", name, plain(value)])
            self._view[name] = value  # later reads in the same call see the write

        def nearest_resource(self):
            found = self._view.get("nearest_resource")
            return tuple(found) if found else None

    return Entity


ARRAY_CODES = {"f8": "d", "i8": "q", "i4": "i"}


def decode_columns(columns, count=None, attachment=None):
    """Lists (one per column, of equal length) from columns: JSON lists, {"f8"|"i8"|"i4": base64 of a little-endian
    float64/int64/int32 array, or [offset, length] of those bytes in the request's attachment},
    {"text": [offset, length]} (strings joined by "\\x1f", UTF-8, in the attachment), or
    {"same": value} (every one of the ``count`` rows holds it)."""
    lists = []
    for col in columns:
        if type(col) is dict and "same" in col:
            if type(count) is not int or count < 0:
                raise ValueError("a 'same' column needs the request's count")
            col = [col["same"]] * count
        elif type(col) is dict and "text" in col:  # strings joined by the unit separator
            text = bytes(attached(attachment, col["text"])).decode("utf-8")
            col = text.split("\x1f") if count else []
        elif type(col) is dict:
            (key, data), = col.items()
            arr = array.array(ARRAY_CODES[key])
            if arr.itemsize != int(key[1]):
                raise ValueError("no %s array type on this platform" % key)
            if type(data) is list:
                arr.frombytes(attached(attachment, data))
            else:
                arr.frombytes(binascii.a2b_base64(data))
            if sys.byteorder != "little":
                arr.byteswap()
            col = arr  # PyPy indexes an array as fast as a list; no list of boxed values
        elif type(col) is not list:
            raise ValueError("a column must be a list or an encoded array")
        lists.append(col)
    if len({len(col) for col in lists}) > 1:
        raise ValueError("columns of different lengths")
    return lists


def attached(attachment, span):
    """The bytes ``[offset, length]`` names in the request's attachment (a view, not a copy)."""
    start, size = span
    if attachment is None or not 0 <= start <= start + size <= len(attachment):
        raise ValueError("a column outside the attachment")
    return memoryview(attachment)[start:start + size]


def make_column_proxy_class(readable, writable, fields, world):
    """The entity proxy of the ``views`` form: a proxy is a row index, and reads index the
    tick's columns (one property per readable attribute, built once per field layout; no
    per-row tuple is ever built). Writes become intents and are seen by later reads of the
    same call (never by other traits: each call has its own proxy)."""
    index = {name: i for i, name in enumerate(fields)}
    cols = [None] * len(fields)  # this tick's columns, filled in place by bind()

    class Entity(IntentMethods):
        """What a trait sees as ``entity``: reads come from the view, writes become intents."""

        __slots__ = ("_row", "_intents", "_writes")
        trait_sets = ()

        def __init__(self, row, intents):
            object.__setattr__(self, "_row", row)
            object.__setattr__(self, "_intents", intents)
            object.__setattr__(self, "_writes", None)

        @classmethod
        def bind(cls, columns, trait_sets):
            cols[:] = columns if columns is not None else [None] * len(fields)
            cls.trait_sets = trait_sets

        def __getattr__(self, name):  # only reached for names that are not readable
            raise AttributeError("entity has no attribute %r in Entity API v1" % name)

        def __setattr__(self, name, value):
            if name not in writable:
                raise AttributeError("entity.%s is read-only (writable: %s)" % (name, ", ".join(sorted(writable))))
            self._intents.append(["set", name, plain(value)])
            writes = self._writes
            if writes is None:
                writes = {}
                object.__setattr__(self, "_writes", writes)
            writes[name] = value  # later reads in the same call see the write

        if "nearest_dx" in index:
            def nearest_resource(self, _at=(index["nearest_dx"], index.get("nearest_dy"), index.get("nearest_dist"))):
                i = self._row
                dx = cols[_at[0]][i]
                if dx != dx:  # NaN: nothing in range
                    return None
                return (dx, cols[_at[1]][i], cols[_at[2]][i])
        else:
            def nearest_resource(self):
                at = index.get("nearest_resource")
                found = None if at is None else cols[at][self._row]
                return tuple(found) if found else None

    def reader(name):
        at = index.get(name)
        if name == "traits" and at is not None:
            def get(self):
                return list(self.trait_sets[cols[at][self._row]])
        elif at is not None and name in writable:
            def get(self):
                writes = self._writes
                if writes is not None and name in writes:
                    return writes[name]
                return cols[at][self._row]
        elif at is not None:
            def get(self):
                value = cols[at][self._row]
                return list(value) if type(value) is list else value
        else:
            constant = world.get(name)

            def get(self):
                writes = self._writes
                if writes is not None and name in writes:
                    return writes[name]
                return list(constant) if type(constant) is list else constant
        return property(get)

    for name in readable:
        if name not in ("move", "move_towards", "eat", "nearest_resource"):
            setattr(Entity, name, reader(name))
    return Entity


INTENT_KINDS = {"set": "s", "move": "m", "move_towards": "t", "eat": "e"}


def encode_intents(merged, blob=None):
    """The merged intents as columns (one entry per intent, entity by entity, each entity's
    intents in order): ``entity`` (i4, or i8 if an id needs it), ``kind`` (one letter each: s set,
    m move, t move_towards, e eat), ``attr`` (int index into ``names``, -1 if not a set; i4 or i8), ``a``/``b``
    (f8 first/second argument, NaN if none), and ``other``: [index, slot, value] for each
    argument that is not a finite float (ints, strings, markers), so nothing is coerced here.
    Floats cross as raw bytes: formatting thousands of them as JSON text costs more than
    running the traits."""
    entity, kinds, attr, a, b, other = [], [], [], [], [], []
    names = {}
    nan = math.nan
    i = 0
    for entity_id in sorted(merged):  # ids ascending: the engine groups them without sorting
        intents = merged[entity_id]
        for intent in intents:
            kind = intent[0]
            entity.append(entity_id)
            kinds.append(INTENT_KINDS[kind])
            if kind == "set":
                name = intent[1]
                at = names.get(name)
                if at is None:
                    at = names[name] = len(names)
                attr.append(at)
                first, second = intent[2], nan
            elif kind == "eat":
                attr.append(-1)
                first, second = nan, nan
            else:
                attr.append(-1)
                first, second = intent[1], intent[2]
            if type(first) is float and first - first == 0.0:
                a.append(first)
            else:
                a.append(nan)
                if kind != "eat":
                    other.append([i, 0, first])
            if type(second) is float and second - second == 0.0:
                b.append(second)
            else:
                b.append(nan)
                if kind == "move" or kind == "move_towards":
                    other.append([i, 1, second])
            i += 1
    return {"count": i, "entity": pack_ints(entity, blob), "kind": "".join(kinds), "attr": pack_ints(attr, blob),
            "names": list(names), "a": pack("d", a, blob), "b": pack("d", b, blob), "other": other}


def pack(code, values, blob=None):
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


def pack_ints(values, blob=None):
    """:func:`pack` of ints: as "i4" when every value fits in 32 bits (half the bytes), else "i8"."""
    if not values or (min(values) >= -2**31 and max(values) < 2**31):
        return pack("i", values, blob)
    return pack("q", values, blob)


def plain(value):
    """Only plain, finite scalars cross back to the trusted side; anything else is marked."""
    kind = type(value)
    if kind is float and not math.isfinite(value):
        return "<non-finite>"
    if kind in (int, float, str, bool):
        return value if kind is not str else value[:256]
    return "<%s>" % kind.__name__


def describe(exc):
    """'ZeroDivisionError: division by zero (line 7)' with the line inside the trait source."""
    line = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename.startswith(TRAIT_FILE_PREFIX):
            line = frame.lineno
    text = "%s: %s" % (type(exc).__name__, exc)
    if line is not None:
        text += " (line %d)" % line
    return text[:500]


def main():
    signal.signal(signal.SIGVTALRM, WATCHDOG.on_alarm)
    # Bytes in and out: the text layer's decoding of half-megabyte lines costs PyPy more than
    # running the traits (json reads UTF-8 bytes; it writes ASCII).
    out = sys.stdout.buffer
    requests = sys.stdin.buffer
    channel = os.environ.get("GENESIS_HOST_SOCKET")
    if channel:  # the engine's private Unix socket instead of stdin/stdout (sandbox/container.py)
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        for option in (socket.SO_SNDBUF, socket.SO_RCVBUF):  # a whole reply fits: no waiting to drain
            try:
                conn.setsockopt(socket.SOL_SOCKET, option, 4 * 2**20)
            except OSError:
                pass
        conn.connect(channel)
        requests = conn.makefile("rb")
        out = conn.makefile("wb")
    sys.stdout = sys.stderr  # nothing a trait does can write into the protocol stream
    host = Host()
    handlers = {"hello": host.hello, "load": host.load, "unload": host.unload, "tick": host.tick,
                "views": host.views}
    for line in iter(requests.readline, b""):
        try:
            msg = json.loads(line)
            if type(msg) is dict and "attachment" in msg:  # the request's raw bytes follow its line
                size = msg["attachment"]
                msg["attachment"] = requests.read(size) if type(size) is int and size >= 0 else b""
                if len(msg["attachment"]) != size:
                    raise ValueError("the attachment is shorter than announced")
            reply = handlers[msg["op"]](msg)
        except Exception as exc:
            reply = {"ok": False, "error": "bad request: %s" % describe(exc)}
        blob = reply.pop("attachment", None)
        if blob is not None:
            reply["attachment"] = len(blob)
        out.write(json.dumps(reply, allow_nan=False, separators=(",", ":")).encode("ascii") + b"\n")
        if blob:
            out.write(blob)
        out.flush()


if __name__ == "__main__":
    main()
