"""The supervisor's side of the host's processes: the rules of the hello every process shares
(``Config``), and one worker process as the supervisor sees it (``WorkerHandle``: its traits, its
socket, its status page and its CPU count). Standard library only."""

import mmap
import os
import signal
import socket

from .wire import MAX_INTENTS_PER_CALL, Inbox, encode_line

TYPE_CHECKING = False  # typing is the type checker's alone (see wire.py)
if TYPE_CHECKING:
    from typing import Any

    from .wire import Message

LOAD_DEADLINE_S = 2.0


class Config:
    """The rules of the hello, shared by every process of the host."""

    def __init__(self, msg: "Message") -> None:
        api = msg["entity_api"]
        self.readable: frozenset[str] = frozenset(api["readable"])
        self.writable: dict[str, Any] = dict(api["writable"])
        self.methods: list[str] = list(api["methods"])
        self.allowed_imports: frozenset[str] = frozenset(msg.get("allowed_imports", ()))
        self.call_timeout_s = float(msg.get("call_timeout_ms", 5)) / 1000.0
        # A tick's budget never undercuts the in-process alarm of one call (which fires after one
        # to two call budgets): a slow call is a timeout of its own, not a kill of its process.
        self.tick_cpu_s = max(float(msg.get("tick_cpu_ms", 100)) / 1000.0, 3 * self.call_timeout_s)
        self.tick_deadline_s = float(msg.get("tick_deadline_ms", 1000)) / 1000.0
        self.worker_memory = int(float(msg.get("worker_memory_mb", 128)) * 2**20)
        # All traits' CPU per tick before it is split between agents (0: never split).
        self.tick_share_s = max(0.0, float(msg.get("tick_share_ms", 0.0)) / 1000.0)
        self.max_intents_per_call = int(msg.get("max_intents_per_call", MAX_INTENTS_PER_CALL))


class WorkerHandle:
    """The supervisor's side of one worker process: an agent's traits, or one suspect's."""

    # Set by the supervisor for a tick (collect) or an action (act): CPU in s, CPU ns at the start, the call
    # sequence last seen in the status and the CPU ns then.
    tick_used: float | None
    tick_cpu0: int
    seq_seen: int
    seq_cpu: int

    def __init__(self, key: str, agent: str, solo: bool = False) -> None:
        self.key = key
        self.agent = agent
        self.solo = solo
        self.traits: list[str] = []  # names in load order
        self.by_index: dict[int, str] = {}  # status index -> trait, as loaded into the running worker
        self.next_index = 1
        self.pid: int | None = None
        self.sock: socket.socket | None = None
        self.schedstat: int | None = None  # the worker's /proc/<pid>/schedstat, open: read in ~2 us, not ~20
        self.status_map: mmap.mmap | None = None  # the worker's status page, shared with it
        self.status: memoryview | None = None  # that page as [call sequence, running trait's index (0: none)]
        self.inbox = Inbox()
        self.load_errors: dict[str, str] = {}  # trait -> why it failed to load again after a recycle
        self.queue: list[str] = []  # traits still to load into the running process, in order
        # (trait, index, CPU ns, monotonic s) of the load it is running
        self.loading: tuple[str, int, int, float] | None = None

    @property
    def alive(self) -> bool:
        return self.sock is not None

    @property
    def ready(self) -> bool:
        """Alive with every trait loaded: it may run a tick."""
        return self.sock is not None and self.loading is None and not self.queue

    def cpu_ns(self) -> int:
        """The worker's time on a CPU, from the kernel (a worker cannot lie about it); 0 if gone."""
        try:
            return int(os.pread(self.schedstat, 64, 0).split()[0])  # type: ignore[arg-type]  # None: TypeError, 0
        except (OSError, TypeError, ValueError, IndexError):
            return 0

    def running(self) -> tuple[int, str | None]:
        """(call sequence, the trait running now or None), as the worker's status says."""
        seq, at = self.status[0], self.status[1]  # type: ignore[index]  # mapped when it was spawned
        return seq, self.by_index.get(at)

    def send(self, msg: "Message", attachment: bytes | None = None, timeout: float = LOAD_DEADLINE_S) -> None:
        assert self.sock is not None  # sent to a live worker only (pump, act)
        self.sock.settimeout(timeout)
        self.sock.sendall(encode_line(msg, attachment))

    def receive(self) -> "tuple[tuple[Message, bytes] | None] | None":
        """Read what the worker sent (its socket is non-blocking): None while its reply is still
        incomplete, else ``(reply,)``, with None for a worker that closed or sent garbage."""
        assert self.sock is not None  # asked of a live worker only: registered, or loading
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

    def kill(self) -> None:
        if self.pid is not None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except OSError:
                pass
        self.close()

    def close(self) -> None:
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
