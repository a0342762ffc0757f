"""Limits enforced on trait code: the CPU watchdog inside a worker, the seccomp filter and
non-dumpable processes, what the kernel says of a process (its CPU state, its memory), and the
fair share of the traits' CPU between agents. Standard library only."""

import collections
import mmap
import os
import signal
import struct

TYPE_CHECKING = False  # typing is the type checker's alone (see wire.py)
if TYPE_CHECKING:
    from types import FrameType

BLOCKED_STATES = ("S", "D", "T", "t")  # a process waiting (sleep, I/O, stopped), not running or runnable


class TraitTimeout(BaseException):
    """Raised by the CPU-time alarm inside a trait call that overran its budget.

    A BaseException so a trait's ``except Exception`` cannot swallow it."""


def process_state(pid: int) -> str:
    """A process's scheduling state letter (R running or runnable, S sleeping, D waiting on I/O,
    ...), from the kernel; "?" if it cannot be read."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0].decode("ascii")
    except (OSError, ValueError, IndexError):
        return "?"


def rss_kb(pid: int) -> int:
    try:
        with open("/proc/%d/statm" % pid, "rb") as f:
            return int(f.read().split()[1]) * (mmap.PAGESIZE // 1024)
    except (OSError, ValueError, IndexError):
        return 0


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

    def __init__(self) -> None:
        self.credit: float | None = None  # a new agent starts with a full bucket
        self.recent: collections.deque[int] = collections.deque(maxlen=self.WINDOW)  # 1: a tick sat out, 0: one it ran
        self.throttled = 0  # sum(recent)
        self.trait_us: dict[str, float] = {}  # trait -> its CPU (its worker's own count) since the window began

    def begin_tick(self, share: float) -> None:
        full = self.BURST_TICKS * share
        self.credit = full if self.credit is None else min(self.credit + share, full)

    def owes(self) -> bool:
        assert self.credit is not None  # asked after this tick's begin_tick
        return self.credit < 0.0

    def skipped(self) -> None:
        self.note(1)

    def ran(self, used_s: float) -> None:
        assert self.credit is not None  # charged after this tick's begin_tick
        self.credit -= used_s
        self.note(0)

    def note(self, throttled: int) -> None:
        if len(self.recent) == self.WINDOW:
            self.throttled -= self.recent[0]
        self.recent.append(throttled)
        self.throttled += throttled

    def persistent(self) -> bool:
        return len(self.recent) == self.WINDOW and 2 * self.throttled >= self.WINDOW

    def forgive(self) -> None:
        """After its heaviest trait was reported: a new window, and no debt (what remains of
        the agent's traits starts afresh)."""
        self.recent.clear()
        self.throttled = 0
        self.trait_us = {}
        self.credit = 0.0


class Watchdog:
    """CPU-time limit of trait calls inside a worker with one periodic timer per batch.

    ITIMER_VIRTUAL (time on the CPU, so a busy machine does not make an honest trait look slow)
    fires every budget while a batch runs. Each call bumps ``calls``; a firing that finds the
    same call still running as at the previous firing raises TraitTimeout in it. So a Python-level
    loop is stopped after one to two budgets of CPU time. A call stuck in C code cannot be
    interrupted here: the supervisor kills the worker from outside."""

    def __init__(self) -> None:
        self.calls = 0
        self.seen = -1
        self.in_call = False

    def on_alarm(self, signum: int, frame: "FrameType | None") -> None:
        if self.in_call and self.calls == self.seen:
            raise TraitTimeout()
        self.seen = self.calls

    def arm(self, budget_s: float) -> None:
        self.seen = -1
        signal.setitimer(signal.ITIMER_VIRTUAL, budget_s, budget_s)

    def disarm(self) -> None:
        signal.setitimer(signal.ITIMER_VIRTUAL, 0)


WATCHDOG = Watchdog()


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


def seccomp_program(machine: str) -> list[tuple[int, int, int, int]] | None:
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


def forbid_syscalls() -> bool:
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


def non_dumpable() -> bool:
    """No process of this host may be traced, or have its memory read through /proc, by
    another process of the same user (a worker by another agent's worker)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_DUMPABLE = 4
        return libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
    except Exception:
        return False
