"""The zygote and the workers: a worker runs one agent's traits (or one suspect, or one round
action) in a process of its own, forked from a pristine zygote, behind its limits. Standard
library only."""

import builtins
import gc
import mmap
import os
import signal
import socket
import struct
import sys
import time

from .actions import ActionProxy, NoEntryPoint, action_failure
from .limits import WATCHDOG, TraitTimeout, forbid_syscalls
from .wire import (
    MAX_REPORTED_ERRORS,
    NAN,
    STATUS_SLOTS,
    TRAIT_FILE_PREFIX,
    IntentColumns,
    TraitLimit,
    answer,
    decode_columns,
    describe,
    failed_result,
    plain,
    read_message,
)

# Never `from __future__ import annotations` here: compile() passes the future flags of its caller on to the code it
# compiles, so the traits' and actions' code would run under that flag too. So an annotation that names what only the
# type checker imports is a string (this block never runs: typing is not loaded), and so is every annotation of a
# function defined at run time (per call, per proxy class): a string costs nothing, a name is looked up every time.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence
    from types import CoroutineType, ModuleType
    from typing import Any, NoReturn, TypeAlias

    from .handles import Config
    from .wire import Handler, Message, Reply, Result

    EntityClass: TypeAlias = "Callable[[int, IntentColumns], IntentMethods]"  # a proxy of one row: (row, intents)
    Bind: TypeAlias = "Callable[[list[Sequence[Any]] | None, Sequence[tuple[str, ...]]], None]"  # (columns, trait_sets)


def start_zygote(config: "Config") -> socket.socket:
    """Fork the zygote: it imports the allowed modules once, so every worker starts warm."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    pid = os.fork()
    if pid == 0:
        ours.close()
        try:
            zygote_main(theirs, config)
        finally:
            os._exit(0)
    theirs.close()
    return ours


def zygote_main(control: socket.socket, config: "Config") -> None:
    keep_only_fds([control.fileno(), 2])
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # workers are reaped by the kernel
    for name in sorted(config.allowed_imports):
        try:
            __import__(name)
        except ImportError:
            pass
    gc.collect()
    gc.freeze()  # what is here now is never written by a collection: forks stay shared
    while control.recv(1) == b"F":
        worker_end, supervisor_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        status_fd = os.memfd_create("status", os.MFD_CLOEXEC)
        os.ftruncate(status_fd, 8 * STATUS_SLOTS)
        pid = os.fork()
        if pid == 0:
            supervisor_end.close()
            control.close()
            try:
                worker_main(worker_end, status_fd, config)
            finally:
                os._exit(0)
        worker_end.close()
        socket.send_fds(control, [struct.pack("=q", pid)], [supervisor_end.fileno(), status_fd])
        supervisor_end.close()
        os.close(status_fd)


def keep_only_fds(keep: list[int]) -> None:
    """Close every descriptor but ``keep`` (stdin, stdout and stderr point at /dev/null unless kept)."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        if fd not in keep:
            os.dup2(null, fd)
    os.close(null)
    for fd in sorted(int(name) for name in os.listdir("/proc/self/fd")):
        if fd > 2 and fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass


def worker_main(sock: socket.socket, status_fd: int, config: "Config") -> None:
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    keep_only_fds([sock.fileno(), status_fd, 2])
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (config.worker_memory, config.worker_memory))
    except (ImportError, ValueError, OSError):
        pass
    try:
        with open("/proc/self/oom_score_adj", "w") as f:  # under memory pressure a worker goes first
            f.write("1000")
    except OSError:
        pass
    try:
        os.nice(5)  # when CPUs are scarce the supervisor runs first: it answers for every agent in time
    except OSError:
        pass
    if not forbid_syscalls():
        sys.stderr.write("trait host: a worker runs without its seccomp filter\n")
    # From here on trait code may run: what it writes goes nowhere (not into the container's log).
    keep_only_fds([sock.fileno(), status_fd])
    status_map = mmap.mmap(status_fd, 8 * STATUS_SLOTS)
    os.close(status_fd)
    worker = Worker(config, memoryview(status_map).cast("Q"))
    signal.signal(signal.SIGVTALRM, WATCHDOG.on_alarm)
    stream = sock.makefile("rb")
    out = sock.makefile("wb")
    handlers: dict[object, Handler] = {"load": worker.load, "views": worker.views, "act": worker.act}  # by "op"
    while True:
        try:
            msg, attachment = read_message(stream)
        except (ValueError, OSError):
            return
        if msg is None:
            return
        out.write(answer(handlers.get(msg.get("op")), msg, attachment))
        out.flush()


class Worker:
    """Runs one agent's traits (or one suspect) in a process of its own."""

    def __init__(self, config: "Config", status: memoryview) -> None:
        self.config = config
        self.status = status
        self.classes: dict[str, Any] = {}  # trait -> class (what the trait's code defined: anything)
        self.index: dict[str, int] = {}  # trait -> the index the supervisor knows it by in this worker's status
        self.instances: dict[str, dict[int, Any]] = {}  # trait -> {entity_id: instance}
        # fields -> (proxy class, bind)
        self.row_proxies: dict[tuple[tuple[str, ...], tuple[tuple[str, Any], ...]], tuple[EntityClass, Bind]] = {}

    def load(self, msg: "Message", _attachment: bytes | None) -> "Message":
        name, source, class_name = msg["trait"], msg["source"], msg["class_name"]
        namespace = {"__builtins__": safe_builtins(self.config.allowed_imports), "__name__": "trait_" + name}
        index = msg["index"]
        self.status[1] = index
        try:
            self.with_cpu_alarm(lambda: exec(compile(source, TRAIT_FILE_PREFIX + name + ">", "exec"), namespace))
            cls = namespace[class_name]
            self.with_cpu_alarm(cls)  # the trait must be constructible without arguments
        except TraitTimeout:
            return {"ok": False, "op": "load", "trait": name, "error": "loading the trait took too long"}
        except BaseException as exc:  # report anything, including SystemExit, as a load error
            return {"ok": False, "op": "load", "trait": name, "error": describe(exc)}
        finally:
            self.status[1] = 0
        self.classes[name] = cls
        self.index[name] = index
        self.instances[name] = {}
        return {"ok": True, "op": "load", "trait": name}

    def views(self, msg: "Message", attachment: bytes | None) -> "Reply":
        fields = msg["fields"]
        columns = decode_columns(msg["columns"], msg.get("count"), attachment)
        if len(columns) != len(fields):
            raise ValueError("one column per field is needed")
        sets = [tuple(names) for names in msg["trait_sets"]]
        world = msg.get("world") or {}
        key = (tuple(fields), tuple(sorted(world.items())))
        made = self.row_proxies.get(key)
        if made is None:
            made = self.row_proxies[key] = make_column_proxy_class(
                self.config.readable, self.config.writable, tuple(fields), world
            )
        proxy_class, bind = made
        bind(columns, sets)
        intents: dict[str, IntentColumns]
        results: dict[str, Result]
        intents, results = {}, {}
        # No cyclic GC pass inside a timed trait call (at thousands of rows a full pass takes
        # milliseconds of CPU and would be charged to whichever call it interrupted).
        gc_was_on = gc.isenabled()
        gc.disable()
        try:
            self.run_views(
                msg["run"],
                sets,
                columns[fields.index("traits")],
                columns[fields.index("id")],
                proxy_class,
                intents,
                results,
            )
        finally:
            if gc_was_on:
                gc.enable()
            bind(None, ())
        if msg.get("count_blocks") is True:  # ~80 us: only the sandbox test, which judges memory growth
            blocks = sys.getallocatedblocks()
            for result in results.values():
                result["blocks"] = blocks
        reply = {"ok": True, "op": "views", "results": results}
        blob = bytearray() if attachment is not None else None  # answered in kind: raw bytes
        reply["intent_groups"] = [columns.encode(blob) for columns in intents.values()]
        return (reply, bytes(blob)) if blob is not None else reply

    def run_views(
        self,
        run: list[str],
        sets: list[tuple[str, ...]],
        set_column: "Sequence[int]",
        id_column: "Sequence[int]",
        proxy_class: "EntityClass",
        intents: dict[str, IntentColumns],
        results: "dict[str, Result]",
    ) -> None:
        """Each trait of ``run`` on the rows whose trait set holds it; a proxy is a row index."""
        everyone = range(len(id_column))
        rows: Sequence[int]
        ids: Sequence[int]
        for name in run:
            if name not in self.classes:
                results[name] = failed_result("trait not loaded")
                continue
            member = [name in names for names in sets]
            if all(member):
                rows, ids = everyone, id_column
            else:
                rows = [i for i in everyone if member[set_column[i]]]
                ids = [id_column[i] for i in rows]
            self.status[1] = self.index[name]
            try:
                intents[name] = IntentColumns(self.config.max_intents_per_call)
                results[name] = self.run_calls(name, ids, rows, proxy_class, intents[name])
                results[name]["intents"] = len(intents[name].kinds)
            finally:
                self.status[1] = 0

    def run_calls(
        self,
        name: str,
        ids: "Sequence[int]",
        items: "Sequence[int]",
        proxy_class: "EntityClass",
        intents: IntentColumns,
    ) -> "Result":
        """``execute(proxy_class(item, intents))`` of trait ``name`` for each entity, under the
        CPU watchdog; its intents go into ``intents`` (an IntentColumns) as they are made. One
        clock read per call (each call's time runs from the previous read, so it includes the
        loop's own share)."""
        cls = self.classes[name]
        instances = self.instances[name]
        status = self.status
        kept: dict[int, Any] = {}
        errors: list[dict[str, Any]]
        timeouts: list[int]
        errors, timeouts = [], []
        error_count = 0
        watchdog = WATCHDOG
        clock = time.perf_counter
        max_s = 0.0
        watchdog.arm(self.config.call_timeout_s)
        started = last = clock()
        try:
            for entity_id, item in zip(ids, items):
                intents.entity_id = entity_id
                intents.in_call = 0
                watchdog.calls += 1
                status[0] = watchdog.calls  # the supervisor times each call from outside
                try:
                    watchdog.in_call = True
                    instance = instances.get(entity_id)
                    if instance is None:
                        instance = cls()
                    kept[entity_id] = instance
                    drive(instance.execute(proxy_class(item, intents)))
                    watchdog.in_call = False
                except TraitTimeout:
                    watchdog.in_call = False
                    timeouts.append(entity_id)
                except BaseException as exc:
                    watchdog.in_call = False
                    error_count += 1
                    if len(errors) < MAX_REPORTED_ERRORS:
                        errors.append({"entity_id": entity_id, "error": describe(exc)})
                now = clock()
                if now - last > max_s:
                    max_s = now - last
                last = now
                if timeouts:  # one overrun is enough: its other carriers go without it this tick
                    for other in ids:
                        if other not in kept and other in instances:
                            kept[other] = instances[other]
                    break
        finally:
            watchdog.disarm()
        total_us = (last - started) * 1e6
        self.instances[name] = kept  # entities that died or lost the trait are forgotten
        return {
            "calls": len(ids),
            "total_us": round(total_us, 1),
            "max_us": round(max_s * 1e6, 1),
            "errors": errors,
            "error_count": error_count,
            "timeouts": timeouts,
        }

    def act(self, msg: "Message", _attachment: bytes | None) -> "Message":
        """One agent's round action: compile, find ``agent_action``, call it once against the
        proxy under a CPU budget; the recorded actions or a structured error."""
        budget_s = float(msg.get("cpu_ms", 200)) / 1000.0
        recorder = ActionProxy(msg["state"])
        namespace = {"__builtins__": safe_builtins(self.config.allowed_imports), "__name__": "agent_action"}
        try:
            compiled = compile(msg["code"], TRAIT_FILE_PREFIX + "action>", "exec")
        except SyntaxError as exc:
            return action_failure("syntax_error", "line %s: %s" % (exc.lineno, exc.msg))
        except (ValueError, MemoryError, RecursionError) as exc:
            return action_failure("syntax_error", describe(exc))

        def run() -> None:
            exec(compiled, namespace)
            entry = namespace.get("agent_action")
            if not callable(entry):
                raise NoEntryPoint()
            result = entry(recorder, recorder.member_id)
            if type(result) is COROUTINE:
                drive(result)

        watchdog = WATCHDOG
        watchdog.arm(budget_s)
        watchdog.calls += 1
        self.status[0] = watchdog.calls
        try:
            watchdog.in_call = True
            run()
        except TraitTimeout:
            return action_failure("timeout", "it ran past its %.0f ms of CPU" % (budget_s * 1000))
        except NoEntryPoint:
            return action_failure("no_entry_point", "define agent_action(engine, member_id) at the top level")
        except TraitLimit as exc:
            return action_failure("too_many_actions", str(exc))
        except MemoryError:
            return action_failure("memory", "it ran out of its %d MB" % (self.config.worker_memory // 2**20))
        except BaseException as exc:  # anything, SystemExit included, is the action's error
            return action_failure("error", describe(exc))
        finally:
            watchdog.in_call = False
            watchdog.disarm()
        return {"ok": True, "op": "act", "actions": [list(a) for a in recorder._recorded]}

    def with_cpu_alarm(self, fn: "Callable[[], object]") -> object:
        """Run trait code outside a batch (module body, constructor) under the watchdog."""
        watchdog = WATCHDOG
        watchdog.arm(self.config.call_timeout_s)
        watchdog.calls += 1
        self.status[0] = watchdog.calls
        try:
            watchdog.in_call = True
            return fn()
        finally:
            watchdog.in_call = False
            watchdog.disarm()


def safe_builtins(allowed: "Iterable[str]") -> "dict[str, Any]":
    def guarded_import(
        name: "str",
        globals: "Mapping[str, object] | None" = None,
        locals: "Mapping[str, object] | None" = None,
        fromlist: "Sequence[str]" = (),
        level: "int" = 0,
    ) -> "ModuleType":
        if level != 0 or name.split(".")[0] not in allowed:
            raise ImportError("import of %r is not allowed in a trait" % name)
        return __import__(name, globals, locals, fromlist, level)

    names = dict(vars(builtins))
    for banned in (
        "open",
        "exec",
        "eval",
        "compile",
        "input",
        "breakpoint",
        "globals",
        "locals",
        "vars",
        "help",
        "exit",
        "quit",
        "print",
        "memoryview",
    ):
        names.pop(banned, None)
    names["__import__"] = guarded_import
    return names


async def _coroutine() -> None:
    pass


_sample = _coroutine()


# types.CoroutineType (mypy types an async def's call as the Coroutine ABC, which has no cr_frame)
COROUTINE: "type[CoroutineType[Any, Any, None]]" = type(_sample)  # type: ignore[assignment]


_sample.close()


def drive(coro: object) -> None:
    """Run a coroutine that never suspends, with no event loop: one step of its awaitable
    finishes it. (``next`` with a default ends it without raising StopIteration, which
    costs ~0.7 µs a call.) A coroutine whose frame is still there after the step suspended."""
    if type(coro) is not COROUTINE:
        raise TypeError("execute() must be declared 'async def'")
    next(coro.__await__(), None)
    if coro.cr_frame is not None:
        coro.close()
        raise RuntimeError("execute() awaited something that suspends; traits must not block")


class IntentMethods:
    """The entity methods that become intents (recorded straight into the trait's columns)."""

    __slots__ = ()
    if TYPE_CHECKING:  # a slot of the proxy class (make_column_proxy_class)
        _intents: IntentColumns

    def move(self, dx: object, dy: object) -> None:
        self._intents.add("m", -1, plain(dx), plain(dy))

    def move_towards(self, x: object, y: object) -> None:
        self._intents.add("t", -1, plain(x), plain(y))

    def eat(self) -> None:
        self._intents.add("e", -1, NAN, NAN)


def make_column_proxy_class(
    readable: "Iterable[str]", writable: "Mapping[str, object]", fields: tuple[str, ...], world: "dict[str, Any]"
) -> "tuple[EntityClass, Bind]":
    """(The entity proxy class, its ``bind(columns, trait_sets)``.) A proxy is a row index, and
    reads index the tick's columns (one property per readable attribute, built once per field
    layout). Writes become intents and are seen by later reads of the same call only (each call
    has its own proxy). The tick's columns live in this closure: nothing a trait can reach
    rebinds them."""
    index = {name: i for i, name in enumerate(fields)}
    cols: list[Any] = [None] * len(fields)  # this tick's columns, filled in place by bind() (None between ticks)
    trait_sets: list[Sequence[tuple[str, ...]]] = [()]

    def bind(columns: "list[Sequence[Any]] | None", sets: "Sequence[tuple[str, ...]]") -> None:
        cols[:] = columns if columns is not None else [None] * len(fields)
        trait_sets[0] = sets

    class Entity(IntentMethods):
        """What a trait sees as ``entity``: reads come from the view, writes become intents."""

        __slots__ = ("_row", "_intents", "_writes")
        if TYPE_CHECKING:  # the slots (set through their descriptors: __setattr__ is the trait's)
            _row: int
            _writes: dict[str, object] | None

        def __init__(self, row: "int", intents: "IntentColumns") -> None:
            set_row(self, row)  # the slots' own setters: __setattr__ is the trait's
            set_intents(self, intents)
            set_writes(self, None)

        def __getattr__(self, name: "str") -> "NoReturn":  # only reached for names that are not readable
            raise AttributeError("entity has no attribute %r in Entity API v1" % name)

        def __setattr__(self, name: "str", value: "object") -> None:
            if name not in writable:
                raise AttributeError("entity.%s is read-only (writable: %s)" % (name, ", ".join(sorted(writable))))
            self._intents.add_set(name, plain(value))
            writes = self._writes
            if writes is None:
                writes = {}
                set_writes(self, writes)
            writes[name] = value  # later reads in the same call see the write

        if "nearest_dx" in index:

            def nearest_resource(
                self,
                _at: "tuple[int, int | None, int | None]" = (
                    index["nearest_dx"],
                    index.get("nearest_dy"),
                    index.get("nearest_dist"),
                ),
            ) -> "tuple[Any, ...] | None":
                i = self._row
                dx = cols[_at[0]][i]
                if dx != dx:  # NaN: nothing in range
                    return None
                # the view has nearest_dy and nearest_dist with nearest_dx (else the TypeError is the call's error)
                return (dx, cols[_at[1]][i], cols[_at[2]][i])  # type: ignore[index]
        else:
            # each variant binds the columns it reads (of this class's layout) as the default of _at
            def nearest_resource(  # type: ignore[misc]
                self, _at: "int | None" = index.get("nearest_resource")
            ) -> "tuple[Any, ...] | None":
                found = None if _at is None else cols[_at][self._row]
                return tuple(found) if found else None

    # The slots' own descriptors (mypy takes these class attributes for the values the slots hold).
    set_row, set_intents, set_writes = (
        Entity._row.__set__,  # type: ignore[attr-defined, misc]
        Entity._intents.__set__,  # type: ignore[attr-defined, misc]
        Entity._writes.__set__,  # type: ignore[misc, union-attr]
    )

    def reader(name: "str") -> "property":
        at = index.get(name)
        if name == "traits" and at is not None:

            def get(self: "Entity") -> "Any":
                return list(trait_sets[0][cols[at][self._row]])
        elif at is not None and name in writable:

            def get(self: "Entity") -> "Any":
                writes = self._writes
                if writes is not None and name in writes:
                    return writes[name]
                return cols[at][self._row]
        elif at is not None:

            def get(self: "Entity") -> "Any":
                value = cols[at][self._row]
                return list(value) if type(value) is list else value
        else:
            constant = world.get(name)

            def get(self: "Entity") -> "Any":
                writes = self._writes
                if writes is not None and name in writes:
                    return writes[name]
                return list(constant) if type(constant) is list else constant

        return property(get)

    for name in readable:
        if name not in ("move", "move_towards", "eat", "nearest_resource"):
            setattr(Entity, name, reader(name))
    return Entity, bind
