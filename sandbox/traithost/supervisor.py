"""The supervisor: the host's first process. It speaks the protocol (see the package's doc) with
the trusted side, routes each trait to its agent's worker, enforces limits from outside, blames,
shares the CPU fairly and merges the replies; it never runs trait code. Standard library only."""

import json
import mmap
import os
import select
import selectors
import socket
import struct
import sys
import time

from .actions import ACT_PARALLEL_MAX, MAX_ACTION_CODE, MAX_ACTION_ITEMS, action_failure, checked_action_reply
from .handles import LOAD_DEADLINE_S, Config, WorkerHandle
from .limits import BLOCKED_STATES, Fairness, non_dumpable, process_state, rss_kb
from .wire import (
    STATUS_SLOTS,
    Inbox,
    answer,
    checked_group,
    checked_result,
    describe,
    encode_line,
    failed_result,
    lost_result,
    read_message,
)
from .worker import make_column_proxy_class, start_zygote

TYPE_CHECKING = False  # typing is the type checker's alone (see wire.py)
if TYPE_CHECKING:
    from typing import Any

    from _typeshed import FileDescriptorLike

    from .wire import Handler, Message, Reply, Result

PENDING = object()  # a load's outcome while its worker has not answered


class Supervisor:
    def __init__(self) -> None:
        self.config: Config | None = None  # the hello's
        self.zygote: socket.socket | None = None  # the control socket to the zygote
        self.handles: dict[str, WorkerHandle] = {}  # key -> WorkerHandle
        self.trait_handle: dict[str, WorkerHandle] = {}  # trait -> WorkerHandle
        self.sources: dict[str, tuple[str, str, str]] = {}  # trait -> (source, class_name, agent)
        # trait -> None (loaded) or why not (str), for a first load not yet answered for; PENDING until it ends
        self.outcomes: dict[str, object] = {}
        self.fairness: dict[str, Fairness] = {}  # agent -> Fairness
        self.background: set[str] = set()  # first loads whose outcome goes out with the next tick's reply

    # -- requests --------------------------------------------------------------------------
    def hello(self, msg: "Message", _attachment: bytes | None) -> "Message":
        config = Config(msg)
        proxy = make_column_proxy_class(config.readable, config.writable, ("id",), {})[0]
        missing = [m for m in config.methods if not hasattr(proxy, m)]
        if missing:  # refused: the host stays as before the hello (every other request refused)
            return {"ok": False, "op": "hello", "error": "host lacks entity methods: %s" % missing}
        self.config = config
        idle = False
        if msg.get("idle") is True and self.zygote is None:  # a host beside the world: every process idle-class
            try:
                os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
                idle = True
            except OSError:
                pass
        if self.zygote is None:
            self.zygote = start_zygote(self.config)
        return {
            "ok": True,
            "op": "hello",
            "python": sys.version.split()[0],
            "implementation": sys.implementation.name,
            "idle": idle,
        }

    def load(self, msg: "Message", _attachment: bytes | None) -> "Message":
        """Give a trait to its agent's worker (a suspect's: a worker of its own). With
        ``background`` the answer is at once and the outcome comes with a later tick's reply
        (``loads``): loading runs one trait's module body and constructor, whose CPU is the
        trait's to pay, and never holds up another agent's tick. Without it, the answer waits
        for the outcome (a sandbox test, a shadow)."""
        name, source, class_name = msg["trait"], msg["source"], msg["class_name"]
        if type(name) is not str or type(source) is not str or type(class_name) is not str:
            raise ValueError("trait, source and class_name must be strings")
        agent = msg.get("agent") or ("trait:" + name)  # no owner: a worker of its own
        if type(agent) is not str:
            raise ValueError("agent must be a string")
        self.unload({"trait": name}, None)
        key = ("suspect:" + name) if msg.get("suspect") is True else agent
        handle = self.handles.get(key)
        if handle is None:
            handle = self.handles[key] = WorkerHandle(key, agent, solo=key != agent)
        self.sources[name] = (source, class_name, agent)
        handle.traits.append(name)
        self.trait_handle[name] = handle
        self.outcomes[name] = PENDING
        if handle.alive:  # first in line: a load that is waited for waits for no one else's
            handle.queue.insert(0, name)
            self.pump(handle)
        else:
            self.start(handle, first=name)
        if msg.get("background") is True:
            self.background.add(name)
            return {"ok": True, "op": "load", "trait": name, "pending": True}
        started = time.monotonic()
        while self.outcomes.get(name) is PENDING and time.monotonic() - started < 4 * LOAD_DEADLINE_S:
            if not handle.alive:  # killed for a busy machine, not for its CPU: again
                self.start(handle)
            self.wait_for_loads([handle], LOAD_DEADLINE_S)
        error = self.outcomes.pop(name, "it was unloaded while loading")
        if error is PENDING:
            self.forget(name)
            error = "loading the trait took too long"
        if error is not None:
            return {"ok": False, "op": "load", "trait": name, "error": error}
        return {"ok": True, "op": "load", "trait": name}

    def unload(self, msg: "Message", _attachment: bytes | None) -> "Message":
        name = msg["trait"]
        handle = self.trait_handle.pop(name, None)
        self.sources.pop(name, None)
        self.outcomes.pop(name, None)
        self.background.discard(name)
        if handle is not None:
            handle.traits.remove(name)
            handle.load_errors.pop(name, None)
            handle.kill()  # recycled: the next tick forks it afresh with the agent's other traits
            if not handle.traits:
                self.drop(handle)
        return {"ok": True, "op": "unload", "trait": name}

    def maintain(self, requests: "FileDescriptorLike") -> None:
        """Between requests (the engine is stepping its world): fork again the workers that were
        killed or recycled and load their traits, so that the next tick finds them ready. Stops as
        soon as a request is readable on ``requests``: a request never waits for this."""
        while not select.select([requests], [], [], 0)[0]:
            for handle in list(self.handles.values()):
                if not handle.alive and handle.traits:
                    self.start(handle)
            loading = [h for h in self.handles.values() if h.loading is not None]
            if not loading:
                return
            self.wait_for_loads(loading, 0.05, requests)

    def stats(self, _msg: "Message", _attachment: bytes | None) -> "Message":
        workers = []
        for handle in self.handles.values():
            if handle.alive:
                assert handle.pid is not None  # set when it was spawned, never unset
                workers.append(
                    {
                        "agent": handle.agent,
                        "traits": list(handle.traits),
                        "solo": handle.solo,
                        "pid": handle.pid,
                        "rss_kb": rss_kb(handle.pid),
                        "cpu_ms": round(handle.cpu_ns() / 1e6, 1),
                    }
                )
        return {"ok": True, "op": "stats", "supervisor_rss_kb": rss_kb(os.getpid()), "workers": workers}

    def views(self, msg: "Message", attachment: bytes | None) -> "Reply":
        arrived = time.monotonic()
        run = msg.pop("run")
        if type(run) is not list or any(type(name) is not str for name in run):
            raise ValueError("run must be a list of trait names")
        assert self.config is not None  # a request before the hello is refused (main)
        deadline_s = msg.pop("deadline_ms", None)
        deadline_s = float(deadline_s) / 1000.0 if type(deadline_s) in (int, float) else self.config.tick_deadline_s
        results: dict[str, Result] = {}
        work: dict[WorkerHandle, list[str]] = {}  # handle -> its traits of ``run``, in run order
        for name in run:
            handle = self.trait_handle.get(name)
            if handle is None:
                results[name] = failed_result("trait not loaded")
            else:
                work.setdefault(handle, []).append(name)
        complete = msg.pop("complete", False) is True
        self.poll_loads()
        for handle in work:
            if not handle.alive:
                self.start(handle)
        # A worker still starting sits this tick out (its agent's traits lose it): the live world
        # never waits for one, so it costs no other agent a moment. A request that must not lose
        # ticks (fast-forward, a sandbox test, a shadow) waits for it, within half its deadline.
        starting = [h for h in work if not h.ready] if complete else []
        while starting and time.monotonic() - arrived < deadline_s / 2:
            for handle in starting:
                if not handle.alive:
                    self.start(handle)
            self.wait_for_loads(starting, deadline_s / 2)
            starting = [h for h in starting if not h.ready]
        for handle in list(work):
            for name in [n for n in work[handle] if n in handle.load_errors]:
                results[name] = failed_result(handle.load_errors.pop(name))
                work[handle].remove(name)
            if not handle.ready or not work[handle]:
                for name in work.pop(handle):
                    results.setdefault(name, lost_result("its process is being started"))
        shares = None if complete else self.throttle(work, results)
        # The deadline counts from the request's arrival, whatever starting workers took.
        replies = self.run_workers(work, msg, attachment, max(0.0, arrived + deadline_s - time.monotonic()), results)
        groups, group_agents, blob = [], [], bytearray()
        for handle, names in work.items():
            got = replies.get(handle)
            if got is None:
                continue
            reply, reply_attachment = got
            worker_groups = reply.get("intent_groups")
            worker_groups = (
                [checked_group(g, len(blob), len(reply_attachment)) for g in worker_groups]
                if type(worker_groups) is list and len(worker_groups) <= len(names)
                else [None]
            )
            worker_results = reply.get("results")
            if reply.get("ok") is not True:  # it could not handle the request: every trait's error
                why = "its process refused the tick: %s" % str(reply.get("error"))[:200]
                for name in names:
                    results[name] = failed_result(why)
                continue
            if None in worker_groups or type(worker_results) is not dict:  # garbage: only trait code makes it
                self.failed(handle, names, "its process sent an unusable reply", results, blame=True, all_ran=True)
                continue
            for name in names:
                results[name] = checked_result(worker_results.get(name))
            blob += reply_attachment
            groups.extend(worker_groups)
            group_agents.extend([handle.agent] * len(worker_groups))
        if shares is not None:
            self.charge(shares, work, results)
        out = {
            "ok": True,
            "op": "views",
            "tick": msg.get("tick") if type(msg.get("tick")) is int else None,
            "results": results,
            "intent_groups": groups,
            "group_agents": group_agents,
        }
        loads = {}
        for name in list(self.background):
            outcome = self.outcomes.get(name, PENDING)
            if outcome is not PENDING:
                self.background.discard(name)
                self.outcomes.pop(name, None)
                loads[name] = {"ok": True} if outcome is None else {"ok": False, "error": outcome}
        if loads:
            out["loads"] = loads
        return (out, bytes(blob)) if attachment is not None else out

    def throttle(self, work: "dict[WorkerHandle, list[str]]", results: "dict[str, Result]") -> float | None:
        """Fair CPU: take out of ``work`` the workers of agents that owe CPU (their traits'
        results say "throttled"); the fair share of this tick, per agent, or None when the
        traits' CPU is not limited."""
        assert self.config is not None  # a request before the hello is refused (main)
        budget = self.config.tick_share_s
        if budget <= 0 or not work:
            return None
        agents = {handle.agent for handle in work}
        share = budget / len(agents)
        for agent in agents:
            fair = self.fairness.get(agent)
            if fair is None:
                fair = self.fairness[agent] = Fairness()
            fair.begin_tick(share)
        for handle in list(work):
            fair = self.fairness[handle.agent]
            if fair.owes():
                why = "throttled: its agent used more than its share of the traits' CPU (%.2f ms a tick)" % (
                    share * 1000
                )
                for name in work.pop(handle):
                    results[name] = dict(lost_result(why), throttled=why)
                fair.skipped()
        return share

    def charge(self, share: float, work: "dict[WorkerHandle, list[str]]", results: "dict[str, Result]") -> None:
        """After a tick: when the traits together used more than the budget, each agent that ran
        pays what its workers used against its share; an agent that owed CPU on most of its
        recent ticks has its heaviest trait reported ("over_share") for the engine to quarantine."""
        assert self.config is not None  # a request before the hello is refused (main)
        used_by: dict[str, float] = {}
        for handle, names in work.items():
            used = handle.tick_used if handle.tick_used is not None else 0.0
            used_by[handle.agent] = used_by.get(handle.agent, 0.0) + used
            fair = self.fairness[handle.agent]
            for name in names:
                result = results.get(name)
                if type(result) is dict:
                    fair.trait_us[name] = fair.trait_us.get(name, 0.0) + result.get("total_us", 0.0)
        contended = sum(used_by.values()) > self.config.tick_share_s
        for agent, used in used_by.items():
            fair = self.fairness[agent]
            fair.ran(used if contended else 0.0)
            if fair.persistent():
                live = {name: us for name, us in fair.trait_us.items() if name in results and name in self.trait_handle}
                heaviest = max(live, key=live.get, default=None)  # type: ignore[arg-type]  # (mypy: dict.get overloads)
                if heaviest is not None:
                    results[heaviest]["over_share"] = (
                        "its agent kept using more than its fair share of the traits' CPU (%.2f ms a tick): "
                        "throttled on %d of its last %d ticks; it is the agent's heaviest trait"
                        % (share * 1000, fair.throttled, Fairness.WINDOW)
                    )
                fair.forgive()
        gone = set(self.fairness) - {handle.agent for handle in self.handles.values()}
        for agent in gone:
            del self.fairness[agent]

    def act(self, msg: "Message", _attachment: bytes | None) -> "Message":
        """Run agents' round actions, each in a one-shot worker (see the protocol)."""
        items = msg.get("items")
        if type(items) is not list or len(items) > MAX_ACTION_ITEMS:
            raise ValueError("items must be a list of at most %d submissions" % MAX_ACTION_ITEMS)
        cpu_ms = msg.get("cpu_ms", 200)
        cpu_s = float(cpu_ms) / 1000.0 if type(cpu_ms) in (int, float) and 0 < cpu_ms <= 10_000 else 0.2
        deadline_ms = msg.get("deadline_ms", 2000)
        deadline_s = float(deadline_ms) / 1000.0 if type(deadline_ms) in (int, float) and deadline_ms > 0 else 2.0
        deadline = time.monotonic() + deadline_s
        parallel = msg.get("parallel", 1)
        parallel = parallel if type(parallel) is int and 1 <= parallel <= ACT_PARALLEL_MAX else 1
        results: dict[str, Message | None]  # None: still to run
        queue: list[dict[str, Any]]
        results, queue = {}, []
        why: str | Message | None  # a bad item's reason, then an item's failure
        for item in items:
            item_id = item.get("id") if type(item) is dict else None
            if type(item_id) is not str or not item_id or len(item_id) > 64 or item_id in results:
                raise ValueError("every item needs a unique string id")
            code, state = item.get("code"), item.get("state")
            if type(code) is not str or len(code) > MAX_ACTION_CODE or type(state) is not dict:
                why = "an item needs code (a string) and a state (an object)"
                results[item_id] = action_failure("bad_request", why)
                continue
            results[item_id] = None
            queue.append(item)
        running: dict[WorkerHandle, str] = {}  # handle -> item id
        selector = selectors.DefaultSelector()
        hard_ns = 3 * cpu_s * 1e9  # the in-process alarm fires at one to two budgets
        # Each agent with items has an equal share of the round's time, and its items' wall time
        # (from spawning their worker to their end) is charged to it: however many agents another
        # one runs, and however long their items take, none is pushed past its share.
        agents = {str(item.get("agent", ""))[:128] for item in queue}
        share_s = deadline_s / max(len(agents), 1)
        used_s = dict.fromkeys(agents, 0.0)
        started_at: dict[WorkerHandle, float] = {}  # handle -> when its worker was spawned

        def charge(handle: "WorkerHandle") -> None:
            used_s[handle.agent] += time.monotonic() - started_at.pop(handle)

        try:
            while queue or running:
                while queue and len(running) < parallel and time.monotonic() < deadline:
                    item = queue.pop(0)
                    agent = str(item.get("agent", ""))[:128]
                    if used_s[agent] >= share_s:
                        results[item["id"]] = action_failure(
                            "deadline", "its agent had used its share of the round's time (%.0f ms)" % (share_s * 1000)
                        )
                        continue
                    handle = WorkerHandle("act:" + item["id"], agent)
                    started_at[handle] = time.monotonic()
                    self.spawn(handle)
                    handle.inbox = Inbox()
                    handle.tick_cpu0 = handle.cpu_ns()
                    try:
                        handle.send({"op": "act", "code": item["code"], "state": item["state"], "cpu_ms": cpu_s * 1000})
                    except (OSError, ValueError):
                        handle.kill()
                        charge(handle)
                        results[item["id"]] = action_failure("killed", "its process stopped reading")
                        continue
                    assert handle.sock is not None  # spawned above
                    handle.sock.setblocking(False)
                    selector.register(handle.sock, selectors.EVENT_READ, handle)
                    running[handle] = item["id"]
                if not running:
                    break
                for key, _events in selector.select(max(0.0, min(0.005, deadline - time.monotonic()))):
                    handle = key.data
                    got = handle.receive()
                    if got is not None:
                        (done,) = got
                        item_id = running.pop(handle)
                        selector.unregister(handle.sock)
                        handle.kill()
                        charge(handle)
                        if done is None:
                            results[item_id] = action_failure("killed", "its process died")
                        else:
                            results[item_id] = checked_action_reply(done[0])
                now = time.monotonic()
                for handle in list(running):
                    why = None
                    if handle.cpu_ns() - handle.tick_cpu0 > hard_ns:
                        why = action_failure("timeout", "it used over %.0f ms of CPU and was killed" % (hard_ns / 1e6))
                    elif now >= deadline:
                        why = action_failure("deadline", "it had not finished within %.0f ms" % (deadline_s * 1000))
                    elif used_s[handle.agent] + now - started_at[handle] >= share_s:
                        why = action_failure(
                            "deadline", "its agent's share of the round's time (%.0f ms) ran out" % (share_s * 1000)
                        )
                    if why is not None:
                        item_id = running.pop(handle)
                        assert handle.sock is not None  # running: spawned, not yet killed
                        selector.unregister(handle.sock)
                        handle.kill()
                        charge(handle)
                        results[item_id] = why
            for item in queue:  # never started: the deadline came first
                results[item["id"]] = action_failure("deadline", "time ran out before it could start")
        finally:
            selector.close()
            for handle in running:
                handle.kill()
        return {"ok": True, "op": "act", "results": results}

    # -- workers ---------------------------------------------------------------------------
    def spawn(self, handle: WorkerHandle) -> None:
        """A fresh worker for ``handle``, forked by the zygote; no trait loaded yet."""
        handle.close()
        try:
            # (None after a refused hello: the AttributeError is then the request's error)
            self.zygote.sendall(b"F")  # type: ignore[union-attr]
            data, fds, _flags, _addr = socket.recv_fds(self.zygote, 16, 2)  # type: ignore[arg-type]
        except OSError:
            data, fds = b"", []
        if len(fds) != 2 or len(data) != 8:
            # Without its zygote the host cannot start a clean worker, and a new zygote forked
            # from here would inherit this process's memory: exit, and be started afresh.
            sys.stderr.write("trait host: the zygote is gone; exiting\n")
            os._exit(3)
        handle.pid = struct.unpack("=q", data)[0]
        handle.sock = socket.socket(fileno=fds[0])
        try:
            handle.schedstat = os.open("/proc/%d/schedstat" % handle.pid, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            handle.schedstat = None  # gone already: its socket says so at once
        handle.status_map = mmap.mmap(fds[1], 8 * STATUS_SLOTS)
        os.close(fds[1])
        handle.status = memoryview(handle.status_map).cast("Q")

    def start(self, handle: WorkerHandle, first: str | None = None) -> None:
        """Fork ``handle``'s worker afresh and start loading its traits (``first`` first), one at
        a time, in the background (``pump``, ``poll_loads``): a fork costs the supervisor ~2 ms,
        a load nothing."""
        self.spawn(handle)
        queue = [name for name in handle.traits if name not in handle.load_errors and name != first]
        handle.queue = ([first] if first in handle.traits else []) + queue
        self.pump(handle)

    def pump(self, handle: WorkerHandle) -> None:
        """Send the next queued trait to ``handle``'s worker unless one is loading already."""
        while handle.loading is None and handle.queue and handle.alive:
            name = handle.queue.pop(0)
            source, class_name, _agent = self.sources[name]
            index = handle.next_index
            handle.next_index += 1
            try:
                handle.send({"op": "load", "trait": name, "source": source, "class_name": class_name, "index": index})
            except (OSError, ValueError):
                self.load_failed(handle, name, "its process stopped reading")
                return
            assert handle.sock is not None  # alive (the loop's condition)
            handle.sock.setblocking(False)
            handle.inbox = Inbox()
            handle.loading = (name, index, handle.cpu_ns(), time.monotonic())

    def poll_loads(self) -> None:
        for handle in list(self.handles.values()):
            if handle.loading is not None:
                self.poll_load(handle)

    def wait_for_loads(
        self, handles: list[WorkerHandle], timeout_s: float, requests: "FileDescriptorLike | None" = None
    ) -> None:
        """Wait up to ``timeout_s`` (or until ``requests`` is readable) for a loading worker to
        answer, then take what arrived."""
        assert self.config is not None  # a request before the hello is refused (main)
        socks = [h.sock for h in handles if h.loading is not None and h.sock is not None]
        step = min(timeout_s, max(self.config.call_timeout_s, 0.002))  # a load's CPU is checked at this pace
        if socks:
            select.select(socks + ([requests] if requests is not None else []), [], [], step)
        else:
            time.sleep(step)
        for handle in handles:
            if handle.loading is not None:
                self.poll_load(handle)

    def poll_load(self, handle: WorkerHandle) -> None:
        """Take ``handle``'s answer to the load it is running, if it came; enforce the load's CPU
        limit (the trait's module body and constructor: two calls' hard limits) from outside."""
        assert handle.loading is not None  # asked only while it loads (poll_loads, wait_for_loads)
        assert self.config is not None  # a request before the hello is refused (main)
        name, index, cpu0, began = handle.loading
        got = handle.receive()
        if got is None:
            used = handle.cpu_ns() - cpu0
            if used > 8 * self.config.call_timeout_s * 1e9:
                self.load_failed(handle, name, "loading it used over %.0f ms of CPU" % (used / 1e6))
            elif time.monotonic() - began > LOAD_DEADLINE_S:  # starved, not slow: try again later
                handle.kill()
            return
        (done,) = got
        if done is None:
            self.load_failed(handle, name, "loading it killed its process")
            return
        reply = done[0]
        handle.loading = None
        if reply.get("ok") is True:
            handle.by_index[index] = name
            self.settled(name, None)
        else:
            self.settled(name, str(reply.get("error"))[:500], handle)
        self.pump(handle)

    def load_failed(self, handle: WorkerHandle, name: str, why: str) -> None:
        """The load of ``name`` killed or overran its worker: it is the trait's failure (its
        mates are loaded again in a fresh process, without it)."""
        handle.kill()
        self.settled(name, why, handle)
        if handle.traits:
            self.start(handle)

    def settled(self, name: str, error: str | None, handle: WorkerHandle | None = None) -> None:
        """A load of ``name`` ended: loaded (``error`` None) or not. A first load is answered
        (and a trait that never loaded leaves its worker); a load again, after a recycle, that
        fails is reported when the trait next runs."""
        if self.outcomes.get(name) is PENDING:
            self.outcomes[name] = error
            if error is not None:
                self.trait_handle.pop(name, None)
                self.sources.pop(name, None)
                if handle is not None and name in handle.traits:
                    handle.traits.remove(name)
                    if not handle.traits:
                        self.drop(handle)
        elif error is not None and handle is not None:
            handle.load_errors[name] = "failed to load again: %s" % error

    def run_workers(
        self,
        work: "dict[WorkerHandle, list[str]]",
        msg: "Message",
        attachment: bytes | None,
        deadline_s: float,
        results: "dict[str, Result]",
    ) -> "dict[WorkerHandle, tuple[Message, bytes]]":
        """Send each worker its share of the tick; collect the replies within the deadline."""
        sent = {}
        for handle in work:
            handle.tick_used = None
        # The tick's JSON is encoded once; each worker's line only puts its own "run" in front.
        common = dict(msg, op="views")
        if attachment:
            common["attachment"] = len(attachment)
        body = json.dumps(common, allow_nan=False, separators=(",", ":"))[1:]
        tail = bytes(attachment) if attachment else b""
        for handle, names in work.items():
            try:
                line = '{"run":%s,%s\n' % (json.dumps(names, separators=(",", ":")), body)
                assert handle.sock is not None  # ready (views)
                handle.sock.settimeout(deadline_s)
                handle.sock.sendall(line.encode("ascii") + tail)
                sent[handle] = names
            except (OSError, ValueError):
                self.failed(handle, names, "its process stopped reading", results, blame=False)
        return self.collect(sent, deadline_s, results)

    def collect(
        self, work: "dict[WorkerHandle, list[str]]", deadline_s: float, results: "dict[str, Result]", blame: bool = True
    ) -> "dict[WorkerHandle, tuple[Message, bytes]]":
        """Replies of ``work``'s workers. A worker whose call runs past its CPU budget (measured
        by the kernel, enforced with SIGKILL) is killed and the trait it was running blamed; one
        still running at the deadline without having used its budget is killed without blame."""
        config = self.config
        assert config is not None  # a request before the hello is refused (main)
        replies = {}
        pending = set(work)
        selector = selectors.DefaultSelector()
        for handle in work:
            assert handle.sock is not None  # sent the tick (run_workers)
            handle.sock.setblocking(False)
            handle.inbox = Inbox()
            handle.tick_used = None
            handle.tick_cpu0 = handle.seq_cpu = handle.cpu_ns()
            handle.seq_seen = handle.status[0]  # type: ignore[index]  # mapped when it was spawned
            selector.register(handle.sock, selectors.EVENT_READ, handle)
        started = time.monotonic()
        deadline = started + deadline_s
        call_hard_ns = 4 * config.call_timeout_s * 1e9  # the in-process alarm fires at 1-2 budgets
        tick_hard_ns = config.tick_cpu_s * 1e9
        poll = max(config.call_timeout_s, 0.002)
        next_check = started + poll  # the limits are checked at this pace, not at every reply
        why: str | None
        try:
            while pending:
                for key, _events in selector.select(max(0.0, min(next_check, deadline) - time.monotonic())):
                    handle = key.data
                    got = handle.receive()
                    if got is not None:
                        (done,) = got
                        selector.unregister(handle.sock)
                        pending.discard(handle)
                        handle.tick_used = (handle.cpu_ns() - handle.tick_cpu0) / 1e9
                        if done is not None:
                            replies[handle] = done
                        else:
                            why = "its process died or sent garbage"
                            self.failed(handle, work[handle], why, results, blame, all_ran=True)
                now = time.monotonic()
                if now < next_check and now < deadline:
                    continue
                next_check = now + poll
                for handle in list(pending):
                    assert handle.sock is not None and handle.pid is not None  # pending: alive (it has not failed)
                    cpu = handle.cpu_ns()
                    seq, trait = handle.running()
                    if seq != handle.seq_seen:
                        handle.seq_seen, handle.seq_cpu = seq, cpu
                    why = None
                    if trait is not None and cpu - handle.seq_cpu > call_hard_ns:
                        why = "one call ran over %.0f ms of CPU" % (call_hard_ns / 1e6)
                    elif cpu - handle.tick_cpu0 > tick_hard_ns:
                        why = "its calls used over %.0f ms of CPU in one tick" % (tick_hard_ns / 1e6)
                    elif now >= deadline and trait is not None and process_state(handle.pid) in BLOCKED_STATES:
                        # a trait call that waits rather than runs: only escaped code can block
                        why = "one call was blocked (not running) at the tick's deadline"
                    elif now >= deadline:
                        why = "the machine was too busy to finish it in time"
                    if why is not None:
                        selector.unregister(handle.sock)
                        pending.discard(handle)
                        handle.tick_used = (cpu - handle.tick_cpu0) / 1e9
                        guilty = blame and (now < deadline or why.startswith("one call was blocked"))
                        self.failed(handle, work[handle], why, results, guilty)
        finally:
            selector.close()
            for handle in work:
                if handle.alive:
                    assert handle.sock is not None  # (what alive says)
                    handle.sock.setblocking(True)
        return replies

    def failed(
        self,
        handle: WorkerHandle,
        names: list[str],
        why: str,
        results: "dict[str, Result]",
        blame: bool,
        all_ran: bool = False,
    ) -> None:
        """``handle``'s worker is killed. With ``blame``, the trait it was running is a suspect
        (with ``all_ran``, when none was running: it died or sent garbage in its own code, which
        only the code of a trait it ran can have made it do, so every one of ``names`` is): if it
        ran alone the fault is confirmed; else each suspect goes to a worker of its own to prove
        itself. The worker's other traits lost this tick through no fault of theirs."""
        _seq, culprit = handle.running() if handle.alive else (None, None)
        handle.kill()
        for name in names:
            results[name] = lost_result(why)
        if not blame:
            return
        culprits = [culprit] if culprit is not None else list(names) if all_ran else []
        for name in culprits:
            if name not in handle.traits:
                continue
            results[name] = dict(failed_result(why), killed=why, confirmed=handle.solo)
            if handle.solo:
                self.forget(name)
            else:  # the suspect moves out; the agent's worker is forked again without it
                handle.traits.remove(name)
                suspect = WorkerHandle("suspect:" + name, handle.agent, solo=True)
                self.handles[suspect.key] = suspect
                suspect.traits.append(name)
                self.trait_handle[name] = suspect
        if not handle.traits:
            self.drop(handle)

    def forget(self, name: str) -> None:
        """A trait confirmed at fault: its process is gone and it is never run again."""
        handle = self.trait_handle.pop(name, None)
        self.sources.pop(name, None)
        if handle is not None:
            handle.traits.remove(name)
            if not handle.traits:
                self.drop(handle)

    def drop(self, handle: WorkerHandle) -> None:
        handle.kill()
        if self.handles.get(handle.key) is handle:
            del self.handles[handle.key]


def main() -> None:
    protected = non_dumpable()
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
    sys.stdout = sys.stderr
    if not protected:
        sys.stderr.write("trait host: could not make its processes non-dumpable\n")
    supervisor = Supervisor()
    handlers: dict[object, Handler] = {  # by "op"
        "hello": supervisor.hello,
        "load": supervisor.load,
        "unload": supervisor.unload,
        "views": supervisor.views,
        "stats": supervisor.stats,
        "act": supervisor.act,
    }
    while True:
        try:
            msg, attachment = read_message(requests)
        except (ValueError, OSError) as exc:
            out.write(encode_line({"ok": False, "error": "bad request: %s" % describe(exc)}))
            out.flush()
            continue
        if msg is None:
            break
        op = msg.get("op")
        known = type(op) is str and (op == "hello" or supervisor.config is not None)
        handler = handlers.get(op) if known else None
        out.write(answer(handler, msg, attachment))
        out.flush()
        if supervisor.config is not None:
            # stdin's buffer is a BufferedReader too (typeshed: a BinaryIO), over a file with a descriptor
            supervisor.maintain(requests.raw)  # type: ignore[union-attr]
    for handle in list(supervisor.handles.values()):
        handle.kill()


if __name__ == "__main__":
    main()
