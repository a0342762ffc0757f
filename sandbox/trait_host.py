"""Trait host: runs untrusted trait code inside a sandbox container. Standard library only.

The container is the boundary between trait code and Genesis. Inside it, the agent is the
boundary between traits: three kinds of process, so that one agent's code can neither see,
change nor starve another's.

* The **supervisor** (this program's first process) speaks the protocol with the trusted side
  (the sandbox activity in the worker, the live engine) and never runs trait code. It routes each
  trait to its agent's worker, forwards every tick's views to the workers that have traits to
  run, enforces their limits from outside (a ``SIGKILL`` cannot be ignored), blames the trait
  that was running, and merges the replies.
* The **zygote**, forked once at ``hello`` after the allowed modules are imported, never holds a
  trait's source or a tick's data; it only forks workers. So a worker inherits a pristine
  interpreter: nothing another agent's trait wrote, loaded or received is in its memory.
* One **worker** per agent (traits of different agents never share an interpreter), and one per
  *suspect* trait: a trait whose worker was killed while it ran is confirmed alone, in a worker
  of its own, before it is blamed (a machine hiccup never quarantines a harmless trait). A
  worker has an address-space limit of its own, and an unload recycles the agent's worker (a
  fresh fork with the agent's other traits loaded again), so a trait leaves nothing behind.

Every process is non-dumpable (no ptrace, no reading another's memory through /proc).

Protocol: JSON lines over stdin/stdout, or, when GENESIS_HOST_SOCKET names one, a Unix socket
this program connects to (the live engine's private channel, see sandbox/container.py).

  {"op": "hello", "entity_api": {...}, "allowed_imports": [...], "call_timeout_ms": 5,
   "tick_cpu_ms": 100, "tick_deadline_ms": 150, "worker_memory_mb": 128, "max_intents_per_call": 16}
      -> {"ok": true, "op": "hello", "python": "3.11.2", "implementation": "cpython"}
  {"op": "load", "trait": NAME, "source": CODE, "class_name": CLS, "agent": AGENT_ID,
   "suspect": false, "background": false}
      -> {"ok": true, "op": "load", "trait": NAME} | {"ok": false, "op": "load", "error": ...}
      A suspect runs in a worker of its own. A worker loads its traits one at a time while the
      supervisor goes on answering ticks (a load's CPU beyond two calls' hard limits fails it:
      the trait's own cost). Without "background" the answer waits for this trait's load (put
      first in line); with it the answer is at once ({"ok": true, "pending": true}) and the
      outcome comes with a later ``views`` reply.
  {"op": "unload", "trait": NAME}                  -> {"ok": true, "op": "unload"}
  {"op": "stats"} -> {"ok": true, "op": "stats", "supervisor_rss_kb": n, "workers": [{"agent": A,
      "traits": [...], "solo": bool, "pid": p, "rss_kb": n, "cpu_ms": t, "blocks": b}, ...]}
  {"op": "views", "tick": N, "fields": [NAME, ...], "world": {NAME: value, ...},
   "trait_sets": [[TRAIT, ...], ...], "run": [TRAIT, ...], "columns": [...], "count": n}
      Every carrier's view is sent once, as the values of ``fields`` (its "traits" value is an
      index into ``trait_sets``); ``world`` holds the values shared by every entity. A column is
      a JSON list, {"f8"|"i8"|"i4": base64 of a little-endian float64/int64/int32 array, or
      [offset, length] of those bytes in the request's attachment}, {"text": [offset, length]}
      (UTF-8 strings joined by "\\x1f" in the attachment) or {"same": value} (every one of the
      ``count`` rows holds it); a NaN ``nearest_dx`` means no resource in range. Each trait of
      ``run`` runs, in that order, on the rows whose trait set contains it. Optional
      "deadline_ms" overrides the hello's tick deadline; "count_blocks": true adds each worker's
      allocated memory blocks to its traits' results ("blocks"). A worker still starting (forked again
      after a kill or an unload, loading its traits) sits the tick out, its traits' results
      "lost", and so does an agent over its fair share of CPU (see ``Fairness``; "throttled":
      why), unless "complete" is true: then every trait runs (a starting worker is waited for,
      within half the deadline; nobody is throttled), as fast-forward, sandbox tests and shadows
      need to equal a paced run.
      -> {"ok": true, "op": "views", "tick": N, "intent_groups": [COLUMNS, ...],
          "results": {TRAIT: {"calls": n, "total_us": t, "max_us": m, "errors": [...],
          "error_count": k, "timeouts": [ids], "intents": i, "blocks": b}}, "group_agents": [AGENT, ...],
          "loads": {TRAIT: {"ok": true} | {"ok": false, "error": ...}}}
      One group of intent columns (see ``IntentColumns``) per trait that ran, entities ascending
      within each: the groups of each worker in the order of its first trait in ``run``, each
      worker's in ``run`` order; ``group_agents`` names the agent whose worker sent each group
      (the trusted side accepts a group's intents only for carriers of that agent's traits).
      An entity's intents are its groups' in that order. A trait's
      result may also say "killed": why (its worker was killed while it ran; "confirmed": true
      when it ran alone) or "lost": why (its worker was killed for another trait's fault or the
      machine was too busy: nobody's fault, no intents). ``loads`` (only when there are any):
      the outcomes of background loads that ended since the last reply.
  {"op": "act", "items": [{"id": ID, "agent": AGENT, "code": CODE, "state": STATE}, ...],
   "cpu_ms": 20, "deadline_ms": 2000, "parallel": 1}
      Agents' round actions: each item's ``agent_action(engine, member_id)`` runs once, in a
      fresh worker of its own (forked for it, killed after it), against a proxy of its member
      and what the member sees (STATE: "member_id", "round_id", "member", "neighbours",
      "resources", "world"). Calls on the proxy are recorded, never executed.
      -> {"ok": true, "op": "act", "results": {ID: {"ok": true, "actions": [[KIND, ...], ...]}
          | {"ok": false, "error": CODE, "detail": TEXT}}}
      CODE is one of ACTION_ERRORS.
Attachments: a line with "attachment": N is followed by N raw bytes, which columns name by
[offset, length]. A ``views`` request with an attachment is answered in kind.
The host exits when stdin (or the socket) closes.
"""

import array
import binascii
import builtins
import collections
import gc
import json
import math
import mmap
import os
import select
import selectors
import signal
import socket
import struct
import sys
import time
import traceback

TRAIT_FILE_PREFIX = "<trait "
MAX_LINE = 16 * 2**20  # a worker's reply line (its intents travel in the attachment)
MAX_ATTACHMENT = 64 * 2**20
MAX_INTENTS_PER_CALL = 16
MAX_INT = 2**53  # ints beyond this are not plain data (and a huge one would not even encode)
MAX_REPORTED_ERRORS = 20
LOAD_DEADLINE_S = 2.0
MAX_ACTIONS = 16  # recorded actions of one submission
MAX_ACTION_ITEMS = 1000  # submissions in one act request
ACT_PARALLEL_MAX = 16  # one-shot workers alive at once (the request's "parallel", default 1)
MAX_ACTION_CODE = 64 * 1024
MAX_MESSAGE_CHARS = 280
ACTION_KINDS = {"move": 2, "move_towards": 2, "eat": 0, "share": 2, "attack": 1, "message": 2}  # kind -> arguments
ACTION_ERRORS = (
    "bad_request",  # the item itself is malformed
    "syntax_error",  # the code does not compile
    "no_entry_point",  # no function agent_action(engine, member_id)
    "timeout",  # it ran past its CPU budget
    "memory",  # it ran out of its memory
    "error",  # it raised
    "too_many_actions",  # it recorded more than MAX_ACTIONS
    "bad_actions",  # what came back is not plain actions
    "killed",  # its process died or was killed (a C-level loop, the container's memory)
    "deadline",  # it had not finished when the request's deadline came
)
BLOCKED_STATES = ("S", "D", "T", "t")  # a process waiting (sleep, I/O, stopped), not running or runnable
PENDING = object()  # a load's outcome while its worker has not answered
STATUS_SLOTS = 2  # a worker's status: [call sequence, running trait's index + 1 (0: host code)]


class TraitTimeout(BaseException):
    """Raised by the CPU-time alarm inside a trait call that overran its budget.

    A BaseException so a trait's ``except Exception`` cannot swallow it."""


class TraitLimit(Exception):
    """A trait call exceeded a limit of what it may return (intents per call)."""


# ---------------------------------------------------------------------------------------------
# Framing: a JSON line, then an optional attachment of raw bytes.


def encode_line(message, attachment=None):
    if attachment is not None:
        message = dict(message, attachment=len(attachment))
    line = json.dumps(message, allow_nan=False, separators=(",", ":")).encode("ascii") + b"\n"
    return line + bytes(attachment) if attachment else line


def read_message(stream):
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

    def __init__(self):
        self.buf = bytearray()
        self.msg = None
        self.need = None

    def feed(self, data):
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
        if len(self.buf) < self.need:
            return None
        attachment = bytes(self.buf[: self.need])
        msg = self.msg
        self.buf, self.msg, self.need = bytearray(), None, None
        return msg, attachment


# ---------------------------------------------------------------------------------------------
# The supervisor.


class Config:
    """The rules of the hello, shared by every process of the host."""

    def __init__(self, msg):
        api = msg["entity_api"]
        self.readable = frozenset(api["readable"])
        self.writable = dict(api["writable"])
        self.methods = list(api["methods"])
        self.allowed_imports = frozenset(msg.get("allowed_imports", ()))
        self.call_timeout_s = float(msg.get("call_timeout_ms", 5)) / 1000.0
        # A tick's budget never undercuts the in-process alarm of one call (which fires after one
        # to two call budgets): a slow call is a timeout of its own, not a kill of its process.
        self.tick_cpu_s = max(float(msg.get("tick_cpu_ms", 100)) / 1000.0, 3 * self.call_timeout_s)
        self.tick_deadline_s = float(msg.get("tick_deadline_ms", 1000)) / 1000.0
        self.worker_memory = int(float(msg.get("worker_memory_mb", 128)) * 2**20)
        # All traits' CPU per tick before it is split between agents (0: never split).
        self.tick_share_s = max(0.0, float(msg.get("tick_share_ms", 0.0)) / 1000.0)
        global MAX_INTENTS_PER_CALL
        MAX_INTENTS_PER_CALL = int(msg.get("max_intents_per_call", MAX_INTENTS_PER_CALL))


class WorkerHandle:
    """The supervisor's side of one worker process: an agent's traits, or one suspect's."""

    def __init__(self, key, agent, solo=False):
        self.key = key
        self.agent = agent
        self.solo = solo
        self.traits = []  # names in load order
        self.by_index = {}  # status index -> trait, as loaded into the running worker
        self.next_index = 1
        self.pid = None
        self.sock = None
        self.schedstat = None  # the worker's /proc/<pid>/schedstat, open: read in ~2 us, not ~20
        self.status_map = None  # the worker's status page, shared with it
        self.status = None  # that page as [call sequence, running trait's index (0: none)]
        self.inbox = Inbox()
        self.load_errors = {}  # trait -> why it failed to load again after a recycle
        self.queue = []  # traits still to load into the running process, in order
        self.loading = None  # (trait, index, CPU ns, monotonic s) of the load it is running

    @property
    def alive(self):
        return self.sock is not None

    @property
    def ready(self):
        """Alive with every trait loaded: it may run a tick."""
        return self.sock is not None and self.loading is None and not self.queue

    def cpu_ns(self):
        """The worker's time on a CPU, from the kernel (a worker cannot lie about it); 0 if gone."""
        try:
            return int(os.pread(self.schedstat, 64, 0).split()[0])
        except (OSError, TypeError, ValueError, IndexError):
            return 0

    def running(self):
        """(call sequence, the trait running now or None), as the worker's status says."""
        seq, at = self.status[0], self.status[1]
        return seq, self.by_index.get(at)

    def send(self, msg, attachment=None, timeout=LOAD_DEADLINE_S):
        self.sock.settimeout(timeout)
        self.sock.sendall(encode_line(msg, attachment))

    def receive(self):
        """Read what the worker sent (its socket is non-blocking): None while its reply is still
        incomplete, else ``(reply,)``, with None for a worker that closed or sent garbage."""
        try:
            data = self.sock.recv(1 << 20)
        except BlockingIOError:
            return None
        except OSError:
            return (None,)
        if not data:
            return (None,)
        try:
            done = self.inbox.feed(data)
        except Exception:  # garbage of any kind (a reply nested too deep raises RecursionError)
            return (None,)
        return None if done is None else (done,)

    def kill(self):
        if self.pid is not None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except OSError:
                pass
        self.close()

    def close(self):
        if self.status is not None:
            self.status.release()
        if self.schedstat is not None:
            try:
                os.close(self.schedstat)
            except OSError:
                pass
            self.schedstat = None
        for thing in (self.sock, self.status_map):
            try:
                if thing is not None:
                    thing.close()
            except OSError:
                pass
        self.sock = self.status = self.status_map = None
        self.inbox = Inbox()
        self.by_index = {}
        self.queue = []
        self.loading = None


def process_state(pid):
    """A process's scheduling state letter (R running or runnable, S sleeping, D waiting on I/O,
    ...), from the kernel; "?" if it cannot be read."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0].decode("ascii")
    except (OSError, ValueError, IndexError):
        return "?"


def rss_kb(pid):
    try:
        with open("/proc/%d/statm" % pid, "rb") as f:
            return int(f.read().split()[1]) * (mmap.PAGESIZE // 1024)
    except (OSError, ValueError, IndexError):
        return 0


class Supervisor:
    def __init__(self):
        self.config = None
        self.zygote = None  # the control socket to the zygote
        self.handles = {}  # key -> WorkerHandle
        self.trait_handle = {}  # trait -> WorkerHandle
        self.sources = {}  # trait -> (source, class_name, agent)
        self.outcomes = {}  # trait -> None (loaded) or why not, for a first load not yet answered for
        self.fairness = {}  # agent -> Fairness
        self.background = set()  # first loads whose outcome goes out with the next tick's reply

    # -- requests --------------------------------------------------------------------------
    def hello(self, msg, _attachment):
        self.config = Config(msg)
        proxy = make_column_proxy_class(self.config.readable, self.config.writable, ("id",), {})[0]
        missing = [m for m in self.config.methods if not hasattr(proxy, m)]
        if missing:
            return {"ok": False, "op": "hello", "error": "host lacks entity methods: %s" % missing}
        if self.zygote is None:
            self.zygote = start_zygote(self.config)
        return {"ok": True, "op": "hello", "python": sys.version.split()[0], "implementation": sys.implementation.name}

    def load(self, msg, _attachment):
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

    def unload(self, msg, _attachment):
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

    def maintain(self, requests):
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

    def stats(self, _msg, _attachment):
        workers = []
        for handle in self.handles.values():
            if handle.alive:
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

    def views(self, msg, attachment):
        arrived = time.monotonic()
        run = msg.pop("run")
        if type(run) is not list or any(type(name) is not str for name in run):
            raise ValueError("run must be a list of trait names")
        deadline_s = msg.pop("deadline_ms", None)
        deadline_s = float(deadline_s) / 1000.0 if type(deadline_s) in (int, float) else self.config.tick_deadline_s
        results = {}
        work = {}  # handle -> its traits of ``run``, in run order
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

    def throttle(self, work, results):
        """Fair CPU: take out of ``work`` the workers of agents that owe CPU (their traits'
        results say "throttled"); the fair share of this tick, per agent, or None when the
        traits' CPU is not limited."""
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

    def charge(self, share, work, results):
        """After a tick: when the traits together used more than the budget, each agent that ran
        pays what its workers used against its share; an agent that owed CPU on most of its
        recent ticks has its heaviest trait reported ("over_share") for the engine to quarantine."""
        used_by = {}
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
                heaviest = max(live, key=live.get, default=None)
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

    def act(self, msg, _attachment):
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
        results, queue = {}, []
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
        running = {}  # handle -> item id
        selector = selectors.DefaultSelector()
        hard_ns = 3 * cpu_s * 1e9  # the in-process alarm fires at one to two budgets
        try:
            while queue or running:
                while queue and len(running) < parallel and time.monotonic() < deadline:
                    item = queue.pop(0)
                    handle = WorkerHandle("act:" + item["id"], str(item.get("agent", ""))[:128])
                    self.spawn(handle)
                    handle.inbox = Inbox()
                    handle.tick_cpu0 = handle.cpu_ns()
                    try:
                        handle.send({"op": "act", "code": item["code"], "state": item["state"], "cpu_ms": cpu_s * 1000})
                    except (OSError, ValueError):
                        handle.kill()
                        results[item["id"]] = action_failure("killed", "its process stopped reading")
                        continue
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
                    if why is not None:
                        item_id = running.pop(handle)
                        selector.unregister(handle.sock)
                        handle.kill()
                        results[item_id] = why
            for item in queue:  # never started: the deadline came first
                results[item["id"]] = action_failure("deadline", "time ran out before it could start")
        finally:
            selector.close()
            for handle in running:
                handle.kill()
        return {"ok": True, "op": "act", "results": results}

    # -- workers ---------------------------------------------------------------------------
    def spawn(self, handle):
        """A fresh worker for ``handle``, forked by the zygote; no trait loaded yet."""
        handle.close()
        try:
            self.zygote.sendall(b"F")
            data, fds, _flags, _addr = socket.recv_fds(self.zygote, 16, 2)
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

    def start(self, handle, first=None):
        """Fork ``handle``'s worker afresh and start loading its traits (``first`` first), one at
        a time, in the background (``pump``, ``poll_loads``): a fork costs the supervisor ~2 ms,
        a load nothing."""
        self.spawn(handle)
        queue = [name for name in handle.traits if name not in handle.load_errors and name != first]
        handle.queue = ([first] if first in handle.traits else []) + queue
        self.pump(handle)

    def pump(self, handle):
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
            handle.sock.setblocking(False)
            handle.inbox = Inbox()
            handle.loading = (name, index, handle.cpu_ns(), time.monotonic())

    def poll_loads(self):
        for handle in list(self.handles.values()):
            if handle.loading is not None:
                self.poll_load(handle)

    def wait_for_loads(self, handles, timeout_s, requests=None):
        """Wait up to ``timeout_s`` (or until ``requests`` is readable) for a loading worker to
        answer, then take what arrived."""
        socks = [h.sock for h in handles if h.loading is not None and h.sock is not None]
        step = min(timeout_s, max(self.config.call_timeout_s, 0.002))  # a load's CPU is checked at this pace
        if socks:
            select.select(socks + ([requests] if requests is not None else []), [], [], step)
        else:
            time.sleep(step)
        for handle in handles:
            if handle.loading is not None:
                self.poll_load(handle)

    def poll_load(self, handle):
        """Take ``handle``'s answer to the load it is running, if it came; enforce the load's CPU
        limit (the trait's module body and constructor: two calls' hard limits) from outside."""
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

    def load_failed(self, handle, name, why):
        """The load of ``name`` killed or overran its worker: it is the trait's failure (its
        mates are loaded again in a fresh process, without it)."""
        handle.kill()
        self.settled(name, why, handle)
        if handle.traits:
            self.start(handle)

    def settled(self, name, error, handle=None):
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

    def run_workers(self, work, msg, attachment, deadline_s, results):
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
                handle.sock.settimeout(deadline_s)
                handle.sock.sendall(line.encode("ascii") + tail)
                sent[handle] = names
            except (OSError, ValueError):
                self.failed(handle, names, "its process stopped reading", results, blame=False)
        return self.collect(sent, deadline_s, results)

    def collect(self, work, deadline_s, results, blame=True):
        """Replies of ``work``'s workers. A worker whose call runs past its CPU budget (measured
        by the kernel, enforced with SIGKILL) is killed and the trait it was running blamed; one
        still running at the deadline without having used its budget is killed without blame."""
        config = self.config
        replies = {}
        pending = set(work)
        selector = selectors.DefaultSelector()
        for handle in work:
            handle.sock.setblocking(False)
            handle.inbox = Inbox()
            handle.tick_used = None
            handle.tick_cpu0 = handle.seq_cpu = handle.cpu_ns()
            handle.seq_seen = handle.status[0]
            selector.register(handle.sock, selectors.EVENT_READ, handle)
        started = time.monotonic()
        deadline = started + deadline_s
        call_hard_ns = 4 * config.call_timeout_s * 1e9  # the in-process alarm fires at 1-2 budgets
        tick_hard_ns = config.tick_cpu_s * 1e9
        poll = max(config.call_timeout_s, 0.002)
        next_check = started + poll  # the limits are checked at this pace, not at every reply
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
                    handle.sock.setblocking(True)
        return replies

    def failed(self, handle, names, why, results, blame, all_ran=False):
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

    def forget(self, name):
        """A trait confirmed at fault: its process is gone and it is never run again."""
        handle = self.trait_handle.pop(name, None)
        self.sources.pop(name, None)
        if handle is not None:
            handle.traits.remove(name)
            if not handle.traits:
                self.drop(handle)

    def drop(self, handle):
        handle.kill()
        if self.handles.get(handle.key) is handle:
            del self.handles[handle.key]


class Fairness:
    """One agent's account of the traits' CPU, a token bucket in seconds of CPU: each tick it has
    work in adds its fair share (the traits' budget per tick split evenly between the agents with
    work), up to BURST_TICKS shares (where a new agent starts); each tick it runs while the traits
    together use more than the budget costs it what its workers used (measured by the kernel). An
    agent in debt sits ticks out until the shares repay it. Without contention nobody pays, so agents that fit the
    budget together are never throttled, however uneven their use. An agent in debt on at least
    half of its last WINDOW ticks persists: its heaviest trait is reported."""

    BURST_TICKS = 30
    WINDOW = 300

    def __init__(self):
        self.credit = None  # a new agent starts with a full bucket
        self.recent = collections.deque(maxlen=self.WINDOW)  # 1: a tick it sat out, 0: one it ran
        self.throttled = 0  # sum(recent)
        self.trait_us = {}  # trait -> its CPU (its worker's own count) since the window began

    def begin_tick(self, share):
        full = self.BURST_TICKS * share
        self.credit = full if self.credit is None else min(self.credit + share, full)

    def owes(self):
        return self.credit < 0.0

    def skipped(self):
        self.note(1)

    def ran(self, used_s):
        self.credit -= used_s
        self.note(0)

    def note(self, throttled):
        if len(self.recent) == self.WINDOW:
            self.throttled -= self.recent[0]
        self.recent.append(throttled)
        self.throttled += throttled

    def persistent(self):
        return len(self.recent) == self.WINDOW and 2 * self.throttled >= self.WINDOW

    def forgive(self):
        """After its heaviest trait was reported: a new window, and no debt (what remains of
        the agent's traits starts afresh)."""
        self.recent.clear()
        self.throttled = 0
        self.trait_us = {}
        self.credit = 0.0


def failed_result(why):
    return {
        "calls": 0,
        "total_us": 0.0,
        "max_us": 0.0,
        "error_count": 1,
        "errors": [{"entity_id": None, "error": why}],
        "timeouts": [],
    }


def lost_result(why):
    return {"calls": 0, "total_us": 0.0, "max_us": 0.0, "error_count": 0, "errors": [], "timeouts": [], "lost": why}


def checked_result(result):
    """A worker's result for one trait, rebuilt from plain values of the expected types (a worker
    runs untrusted code: nothing it sends is passed on as is)."""
    if type(result) is not dict:
        return failed_result("its process sent no result for it")

    def number(key, kind):
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


def checked_group(columns, base, size):
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


def action_failure(code, detail):
    return {"ok": False, "error": code, "detail": str(detail)[:500]}


def checked_action_reply(reply):
    """A one-shot worker's answer rebuilt from plain values: a failure with a known code, or
    actions of known kinds and arities with plain arguments."""
    if type(reply) is not dict:
        return action_failure("bad_actions", "its process sent no answer")
    if reply.get("ok") is not True:
        code = reply.get("error")
        return action_failure(code if code in ACTION_ERRORS else "error", reply.get("detail", ""))
    actions = reply.get("actions")
    if type(actions) is not list or len(actions) > MAX_ACTIONS:
        return action_failure("bad_actions", "actions must be a list of at most %d" % MAX_ACTIONS)
    out = []
    for action in actions:
        if type(action) is not list or not action or ACTION_KINDS.get(action[0]) != len(action) - 1:
            return action_failure("bad_actions", "an action is [kind, arguments...] of a known kind")
        args = []
        for value in action[1:]:
            kind = type(value)
            number = (kind is int and abs(value) <= MAX_INT) or (kind is float and math.isfinite(value))
            if number or (kind is str and len(value) <= MAX_MESSAGE_CHARS):
                args.append(value)
            else:
                return action_failure("bad_actions", "action arguments are finite numbers or short strings")
        out.append([action[0]] + args)
    return {"ok": True, "actions": out}


# ---------------------------------------------------------------------------------------------
# The zygote and its workers.


def start_zygote(config):
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


def zygote_main(control, config):
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


def keep_only_fds(keep):
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


def worker_main(sock, status_fd, config):
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
    handlers = {"load": worker.load, "views": worker.views, "act": worker.act}
    while True:
        try:
            msg, attachment = read_message(stream)
        except (ValueError, OSError):
            return
        if msg is None:
            return
        out.write(answer(handlers.get(msg.get("op")), msg, attachment))
        out.flush()


class Watchdog:
    """CPU-time limit of trait calls inside a worker with one periodic timer per batch.

    ITIMER_VIRTUAL (time on the CPU, so a busy machine does not make an honest trait look slow)
    fires every budget while a batch runs. Each call bumps ``calls``; a firing that finds the
    same call still running as at the previous firing raises TraitTimeout in it. So a Python-level
    loop is stopped after one to two budgets of CPU time. A call stuck in C code cannot be
    interrupted here: the supervisor kills the worker from outside."""

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


class Worker:
    """Runs one agent's traits (or one suspect) in a process of its own."""

    def __init__(self, config, status):
        self.config = config
        self.status = status
        self.classes = {}  # trait -> class
        self.index = {}  # trait -> the index the supervisor knows it by in this worker's status
        self.instances = {}  # trait -> {entity_id: instance}
        self.row_proxies = {}  # fields -> (proxy class, bind)

    def load(self, msg, _attachment):
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

    def views(self, msg, attachment):
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

    def run_views(self, run, sets, set_column, id_column, proxy_class, intents, results):
        """Each trait of ``run`` on the rows whose trait set holds it; a proxy is a row index."""
        everyone = range(len(id_column))
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
                intents[name] = IntentColumns()
                results[name] = self.run_calls(name, ids, rows, proxy_class, intents[name])
                results[name]["intents"] = len(intents[name].kinds)
            finally:
                self.status[1] = 0

    def run_calls(self, name, ids, items, proxy_class, intents):
        """``execute(proxy_class(item, intents))`` of trait ``name`` for each entity, under the
        CPU watchdog; its intents go into ``intents`` (an IntentColumns) as they are made. One
        clock read per call (each call's time runs from the previous read, so it includes the
        loop's own share)."""
        cls = self.classes[name]
        instances = self.instances[name]
        status = self.status
        kept = {}
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

    def act(self, msg, _attachment):
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

        def run():
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

    def with_cpu_alarm(self, fn):
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


class NoEntryPoint(Exception):
    pass


class Seen:
    """A read-only record of what a member sees (its own copy: nothing written to it matters)."""

    def __init__(self, values):
        for key, value in values.items():
            if type(key) is str and key.isidentifier():
                object.__setattr__(self, key, value)

    def __setattr__(self, name, value):
        raise AttributeError("what a member sees is read-only")

    def __repr__(self):
        return "Seen(%s)" % ", ".join("%s=%r" % kv for kv in sorted(vars(self).items()))


class ActionProxy:
    """The ``engine`` an agent's action code gets: what its member sees, and methods that record
    actions (the world applies them after checking them again). It acts only through its own
    member: any other ``member_id`` is a PermissionError."""

    def __init__(self, state):
        self.member_id = state.get("member_id")
        self.round_id = state.get("round_id")
        self.member = Seen(state.get("member") or {})
        self.neighbours = [Seen(n) for n in state.get("neighbours") or () if type(n) is dict]
        self.resources = [Seen(r) for r in state.get("resources") or () if type(r) is dict]
        self.world = Seen(state.get("world") or {})
        self._recorded = []

    def _record(self, member_id, kind, *args):
        if member_id != self.member_id or type(member_id) is not int:
            raise PermissionError("an agent acts only through its own member (%r)" % (self.member_id,))
        if len(self._recorded) >= MAX_ACTIONS:
            raise TraitLimit("more than %d actions in one submission" % MAX_ACTIONS)
        self._recorded.append([kind] + [plain(a) for a in args])

    def move(self, member_id, dx, dy):
        self._record(member_id, "move", dx, dy)

    def move_towards(self, member_id, x, y):
        self._record(member_id, "move_towards", x, y)

    def eat(self, member_id):
        self._record(member_id, "eat")

    def share(self, member_id, target_id, amount):
        """Give ``amount`` of the member's energy to a neighbour."""
        self._record(member_id, "share", target_id, amount)

    def attack(self, member_id, target_id):
        self._record(member_id, "attack", target_id)

    def send_message(self, member_id, to_member_id, text):
        self._record(member_id, "message", to_member_id, str(text)[:MAX_MESSAGE_CHARS] if type(text) is str else text)


def safe_builtins(allowed):
    def guarded_import(name, globals=None, locals=None, fromlist=(), level=0):
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


async def _coroutine():
    pass


_sample = _coroutine()
COROUTINE = type(_sample)
_sample.close()


def drive(coro):
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

    def move(self, dx, dy):
        self._intents.add("m", -1, plain(dx), plain(dy))

    def move_towards(self, x, y):
        self._intents.add("t", -1, plain(x), plain(y))

    def eat(self):
        self._intents.add("e", -1, NAN, NAN)


NAN = math.nan


class IntentColumns:
    """One trait's intents of one tick as columns, in the order they are made (entity by entity,
    ascending, as the rows come): ``entity``, ``kind`` (one letter each: s set, m move,
    t move_towards, e eat), ``attr`` (index into ``names``, -1 if not a set), ``a``/``b`` (the
    float arguments, NaN if none) and ``other``: [index, slot, value] for each argument that is
    not a finite float (ints, strings, markers), so nothing is coerced here. ``entity_id`` is
    the entity of the call running now; ``in_call`` counts its intents."""

    __slots__ = ("entity_id", "in_call", "limit", "entity", "kinds", "attr", "a", "b", "other", "names")

    def __init__(self, limit=None):
        self.entity_id = 0
        self.in_call = 0
        self.limit = MAX_INTENTS_PER_CALL if limit is None else limit
        self.entity, self.kinds, self.attr, self.a, self.b, self.other = [], [], [], [], [], []
        self.names = {}

    def add(self, kind, attr, first, second):
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

    def add_set(self, name, value):
        at = self.names.get(name)
        if at is None:
            at = self.names[name] = len(self.names)
        self.add("s", at, value, NAN)

    def encode(self, blob=None):
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


def attached(attachment, span):
    """The bytes ``[offset, length]`` names in the request's attachment (a view, not a copy)."""
    start, size = span
    if attachment is None or not 0 <= start <= start + size <= len(attachment):
        raise ValueError("a column outside the attachment")
    return memoryview(attachment)[start : start + size]


def make_column_proxy_class(readable, writable, fields, world):
    """(The entity proxy class, its ``bind(columns, trait_sets)``.) A proxy is a row index, and
    reads index the tick's columns (one property per readable attribute, built once per field
    layout). Writes become intents and are seen by later reads of the same call only (each call
    has its own proxy). The tick's columns live in this closure: nothing a trait can reach
    rebinds them."""
    index = {name: i for i, name in enumerate(fields)}
    cols = [None] * len(fields)  # this tick's columns, filled in place by bind()
    trait_sets = [()]

    def bind(columns, sets):
        cols[:] = columns if columns is not None else [None] * len(fields)
        trait_sets[0] = sets

    class Entity(IntentMethods):
        """What a trait sees as ``entity``: reads come from the view, writes become intents."""

        __slots__ = ("_row", "_intents", "_writes")

        def __init__(self, row, intents):
            set_row(self, row)  # the slots' own setters: __setattr__ is the trait's
            set_intents(self, intents)
            set_writes(self, None)

        def __getattr__(self, name):  # only reached for names that are not readable
            raise AttributeError("entity has no attribute %r in Entity API v1" % name)

        def __setattr__(self, name, value):
            if name not in writable:
                raise AttributeError("entity.%s is read-only (writable: %s)" % (name, ", ".join(sorted(writable))))
            self._intents.add_set(name, plain(value))
            writes = self._writes
            if writes is None:
                writes = {}
                set_writes(self, writes)
            writes[name] = value  # later reads in the same call see the write

        if "nearest_dx" in index:

            def nearest_resource(self, _at=(index["nearest_dx"], index.get("nearest_dy"), index.get("nearest_dist"))):
                i = self._row
                dx = cols[_at[0]][i]
                if dx != dx:  # NaN: nothing in range
                    return None
                return (dx, cols[_at[1]][i], cols[_at[2]][i])
        else:

            def nearest_resource(self, _at=index.get("nearest_resource")):
                found = None if _at is None else cols[_at][self._row]
                return tuple(found) if found else None

    set_row, set_intents, set_writes = Entity._row.__set__, Entity._intents.__set__, Entity._writes.__set__

    def reader(name):
        at = index.get(name)
        if name == "traits" and at is not None:

            def get(self):
                return list(trait_sets[0][cols[at][self._row]])
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
    return Entity, bind


INTENT_KINDS = {"set": "s", "move": "m", "move_towards": "t", "eat": "e"}


def encode_intents(merged, blob=None):
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
    if not values or (min(values) >= -(2**31) and max(values) < 2**31):
        return pack("i", values, blob)
    return pack("q", values, blob)


def plain(value):
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


def describe(exc):
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


def answer(handler, msg, attachment):
    """The encoded reply of ``handler`` (None: an unknown request, or one before the hello) to a
    request; whatever fails, including the reply's encoding, becomes an error reply."""
    try:
        if handler is None:
            raise ValueError("unknown op %r (say hello first)" % str(msg.get("op"))[:40])
        reply = handler(msg, attachment)
    except Exception as exc:
        reply = {"ok": False, "error": "bad request: %s" % describe(exc)}
    blob = None
    if type(reply) is tuple:
        reply, blob = reply
    try:
        return encode_line(reply, blob)
    except Exception as exc:
        return encode_line({"ok": False, "error": "the reply could not be encoded: %s" % describe(exc)})


# System calls a worker never needs and another agent's process must be safe from: signalling,
# tracing, reading, limiting, re-prioritising or pinning another process, starting processes or
# programs. Per architecture: (audit arch, {refused name: number}, {name: (number, index of its pid
# argument)}): the second kind is allowed on the caller itself only (pid 0, what glibc passes).
FORBIDDEN_SYSCALLS = {
    "x86_64": (
        0xC000003E,
        {
            "kill": 62,
            "tkill": 200,
            "tgkill": 234,
            "rt_sigqueueinfo": 129,
            "rt_tgsigqueueinfo": 297,
            "ptrace": 101,
            "process_vm_readv": 310,
            "process_vm_writev": 311,
            "pidfd_send_signal": 424,
            "pidfd_open": 434,
            "pidfd_getfd": 438,
            "clone": 56,
            "fork": 57,
            "vfork": 58,
            "clone3": 435,
            "execve": 59,
            "execveat": 322,
            "setpriority": 141,
            "ioprio_set": 251,
            "migrate_pages": 256,
            "move_pages": 279,
            "perf_event_open": 298,
            "process_madvise": 440,
            "process_mrelease": 448,
        },
        {
            "prlimit64": (302, 0),
            "sched_setaffinity": (203, 0),
            "sched_setscheduler": (144, 0),
            "sched_setparam": (142, 0),
            "sched_setattr": (314, 0),
        },
    ),
    "aarch64": (
        0xC00000B7,
        {
            "kill": 129,
            "tkill": 130,
            "tgkill": 131,
            "rt_sigqueueinfo": 138,
            "rt_tgsigqueueinfo": 240,
            "ptrace": 117,
            "process_vm_readv": 270,
            "process_vm_writev": 271,
            "pidfd_send_signal": 424,
            "pidfd_open": 434,
            "pidfd_getfd": 438,
            "clone": 220,
            "clone3": 435,
            "execve": 221,
            "execveat": 281,
            "setpriority": 140,
            "ioprio_set": 30,
            "migrate_pages": 238,
            "move_pages": 239,
            "perf_event_open": 241,
            "process_madvise": 440,
            "process_mrelease": 448,
        },
        {
            "prlimit64": (261, 0),
            "sched_setaffinity": (122, 0),
            "sched_setscheduler": (119, 0),
            "sched_setparam": (118, 0),
            "sched_setattr": (274, 0),
        },
    ),
}


def seccomp_program(machine):
    """The classic-BPF seccomp program of FORBIDDEN_SYSCALLS for ``machine``: a list of
    (code, jt, jf, k), or None for an architecture it does not know."""
    if machine not in FORBIDDEN_SYSCALLS:
        return None
    audit_arch, refused, self_only = FORBIDDEN_SYSCALLS[machine]
    # struct seccomp_data: nr (u32) at 0, arch (u32) at 4, instruction pointer at 8, args (u64) at 16
    LD_W_ABS, JEQ, JGE, RET = 0x20, 0x15, 0x35, 0x06
    ALLOW, ERRNO_EPERM, KILL = 0x7FFF0000, 0x00050000 | 1, 0x80000000
    program = [(LD_W_ABS, 0, 0, 4), (JEQ, 1, 0, audit_arch), (RET, 0, 0, KILL), (LD_W_ABS, 0, 0, 0)]
    if machine == "x86_64":  # the x32 ABI's numbers (bit 30 set) would dodge the list
        program += [(JGE, 0, 1, 0x40000000), (RET, 0, 0, ERRNO_EPERM)]
    for number in sorted(refused.values()):
        program += [(JEQ, 0, 1, number), (RET, 0, 0, ERRNO_EPERM)]
    for number, arg in sorted(self_only.values()):
        low = 16 + 8 * arg  # both halves of the 64-bit pid argument must be 0 (little-endian)
        program += [
            (JEQ, 0, 6, number),  # not this call: on to the next block, the number still loaded
            (LD_W_ABS, 0, 0, low),
            (JEQ, 0, 3, 0),
            (LD_W_ABS, 0, 0, low + 4),
            (JEQ, 0, 1, 0),
            (RET, 0, 0, ALLOW),
            (RET, 0, 0, ERRNO_EPERM),
        ]
    program.append((RET, 0, 0, ALLOW))
    return program


def forbid_syscalls():
    """A seccomp filter on this process (a worker): FORBIDDEN_SYSCALLS fail with EPERM. Even code
    that escaped the interpreter's restrictions then cannot signal, trace, read, limit or
    re-prioritise another agent's process, nor start one. True if the filter is in place."""
    program = seccomp_program(os.uname().machine)
    if program is None:
        return False
    try:
        import ctypes

        filters = b"".join(struct.pack("=HBBI", *instruction) for instruction in program)
        buffer = ctypes.create_string_buffer(filters)

        class SockFprog(ctypes.Structure):
            _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

        fprog = SockFprog(len(program), ctypes.cast(buffer, ctypes.c_void_p))
        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
        if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return False
        return libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) == 0
    except Exception:
        return False


def non_dumpable():
    """No process of this host may be traced, or have its memory read through /proc, by
    another process of the same user (a worker by another agent's worker)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_DUMPABLE = 4
        return libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
    except Exception:
        return False


def main():
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
    handlers = {
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
        handler = handlers.get(op) if op == "hello" or supervisor.config is not None else None
        out.write(answer(handler, msg, attachment))
        out.flush()
        if supervisor.config is not None:
            supervisor.maintain(requests.raw)
    for handle in list(supervisor.handles.values()):
        handle.kill()


if __name__ == "__main__":
    main()
