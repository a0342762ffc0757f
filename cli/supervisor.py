"""Keep long-running child processes up: the supervision of `make run` (cli/run.py).

A child that exits while nobody asked it to is started again after a pause that doubles with
each of its exits within the crash window, drawn between half and all of that value (jitter, so
processes that failed together do not come back in lockstep) and capped. A child that exits
``crash_limit`` times within the window is in a crash loop: the supervisor stops every child and
reports which one, how it ended and where its log is.

Each child's output (stdout and stderr) goes to its log file, ``<log_dir>/<name>.log`` (the
previous run's is kept as ``<name>.log.1``), and to the supervisor's stdout with the child's
name in front. Children are started from the thread that calls :meth:`Supervisor.run` and get
SIGTERM if the supervisor dies without stopping them (Linux' parent-death signal).

Backoff without a library: tenacity (a dependency, used for retries of a function call) counts
attempts of one call that never succeeds, while a restart's pause depends on recent exits only
and must be waited for together with the other children and a stop request.
"""

from __future__ import annotations

import ctypes
import logging
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from genesis.config import PROJECT_ROOT, RunSettings

log = logging.getLogger("genesis.run")

PR_SET_PDEATHSIG = 1
POLL_S = 0.1
STOP_GRACE_S = 15.0
LOG_TAIL_LINES = 12

# Looked up here, not in the child: between fork and exec the child must not load libraries
# (the output threads of the supervisor may hold locks that a load would wait for forever).
_prctl: Callable[..., int] | None
try:
    _prctl = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):  # not Linux
    _prctl = None


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the thread that started it ends (Linux prctl)."""
    if _prctl is not None:
        _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exited with code {returncode}"


@dataclass(frozen=True)
class RestartPolicy:
    initial_s: float
    max_s: float
    crash_limit: int
    crash_window_s: float

    @classmethod
    def from_settings(cls, run: RunSettings) -> RestartPolicy:
        return cls(run.restart_initial_s, run.restart_max_s, run.crash_limit, run.crash_window_s)

    def pause(self, recent_exits: int) -> float:
        """The pause before a restart after ``recent_exits`` exits within the window (1 for the first)."""
        ceiling = min(self.max_s, self.initial_s * 2 ** min(recent_exits - 1, 62))
        return random.uniform(ceiling / 2, ceiling)


@dataclass
class Child:
    name: str
    argv: Sequence[str]
    log_path: Path
    proc: subprocess.Popen | None = None
    started_at: float = 0.0
    restarts: int = 0
    exits: deque[float] = field(default_factory=deque)  # monotonic times of exits within the window
    restart_at: float | None = None  # a restart is due at this monotonic time
    last_exit: str = ""

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class CrashLoop(Exception):
    def __init__(self, child: Child, policy: RestartPolicy):
        self.child = child
        super().__init__(
            f"{child.name} exited {len(child.exits)} times within {policy.crash_window_s:g} s "
            f"(last: {child.last_exit}): it is crashing in a loop, so everything stops. Its log: {child.log_path}"
        )


class Supervisor:
    def __init__(
        self,
        commands: Mapping[str, Sequence[str]],
        policy: RestartPolicy,
        log_dir: Path,
        env: Mapping[str, str] | None = None,
        out: BinaryIO | None = None,
    ):
        self.policy = policy
        # Unbuffered: a child's prints reach its log and the terminal as they happen, not per 8 KB.
        self.env = {**(os.environ if env is None else env), "PYTHONUNBUFFERED": "1"}
        self._pumps: list[threading.Thread] = []
        self.out = out if out is not None else sys.stdout.buffer
        self._out_lock = threading.Lock()
        self._width = max(map(len, commands))
        log_dir.mkdir(parents=True, exist_ok=True)
        self.children = {name: Child(name, list(argv), log_dir / f"{name}.log") for name, argv in commands.items()}
        for child in self.children.values():
            if child.log_path.exists():
                os.replace(child.log_path, child.log_path.with_name(child.log_path.name + ".1"))

    def status(self) -> str:
        """One line: each child's pid (or when it comes back) and its restarts so far."""
        parts = []
        for child in self.children.values():
            where = f"pid {child.pid}" if child.running() else "restarting" if child.restart_at else "down"
            restarts = f" ({child.restarts} restart{'s' if child.restarts > 1 else ''})" if child.restarts else ""
            parts.append(f"{child.name} {where}{restarts}")
        return ", ".join(parts)

    def run(self, stop: threading.Event) -> None:
        """Start every child and keep them up until ``stop`` is set; raises CrashLoop (with every
        child stopped) when one crashes in a loop. Call :meth:`stop_all` afterwards either way."""
        for child in self.children.values():
            self._start(child)
        log.info("started: %s", self.status())
        while not stop.wait(POLL_S):
            now = time.monotonic()
            for child in self.children.values():
                if child.restart_at is not None:
                    if now >= child.restart_at and not stop.is_set():
                        child.restart_at = None
                        child.restarts += 1
                        self._start(child)
                        log.warning("%s restarted (restart %d); now %s", child.name, child.restarts, self.status())
                elif child.proc is not None and child.proc.poll() is not None:
                    self._exited(child, now)

    def _exited(self, child: Child, now: float) -> None:
        assert child.proc is not None
        child.last_exit = describe_exit(child.proc.returncode)
        uptime = now - child.started_at
        child.exits.append(now)
        while child.exits and child.exits[0] < now - self.policy.crash_window_s:
            child.exits.popleft()
        if len(child.exits) >= self.policy.crash_limit:
            raise CrashLoop(child, self.policy)
        pause = self.policy.pause(len(child.exits))
        child.restart_at = now + pause
        log.warning(
            "%s (pid %d) %s after %.1f s: restarting it in %.2g s (restart %d; exits within the last %g s: "
            "%d, at %d everything stops; log %s)",
            child.name,
            child.proc.pid,
            child.last_exit,
            uptime,
            pause,
            child.restarts + 1,
            self.policy.crash_window_s,
            len(child.exits),
            self.policy.crash_limit,
            child.log_path,
        )

    def _start(self, child: Child) -> None:
        log_file = open(child.log_path, "ab")  # noqa: SIM115 - closed by the pump thread at EOF
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        log_file.write(f"--- {stamp} make run starts {child.name}: {' '.join(child.argv)}\n".encode())
        log_file.flush()
        child.proc = subprocess.Popen(
            child.argv,
            cwd=PROJECT_ROOT,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent,
        )
        child.started_at = time.monotonic()
        pump = threading.Thread(
            target=self._pump, args=(child.name, child.proc, log_file), name=f"output-{child.name}", daemon=True
        )
        pump.start()
        self._pumps = [thread for thread in self._pumps if thread.is_alive()] + [pump]

    def _pump(self, name: str, proc: subprocess.Popen, log_file: BinaryIO) -> None:
        """Copy one child's output, line by line, to its log file and to our stdout (named)."""
        prefix = f"{name:<{self._width}} | ".encode()
        assert proc.stdout is not None
        with log_file, proc.stdout:
            for line in iter(proc.stdout.readline, b""):
                log_file.write(line)
                log_file.flush()
                with self._out_lock:
                    try:
                        self.out.write(prefix + line)
                        self.out.flush()
                    except (OSError, ValueError):  # our stdout is gone (a closed pipe): the log file still has it
                        pass

    def stop_all(self, force: threading.Event | None = None, grace_s: float = STOP_GRACE_S) -> None:
        """SIGTERM every running child, wait for them together, SIGKILL what is left after
        ``grace_s`` (or at once when ``force`` is set, e.g. by a second Ctrl-C)."""
        for child in self.children.values():
            child.restart_at = None
            if child.running():
                assert child.proc is not None
                child.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while any(child.running() for child in self.children.values()):
            if time.monotonic() > deadline or (force is not None and force.is_set()):
                for child in self.children.values():
                    if child.running():
                        assert child.proc is not None
                        log.warning("%s (pid %d) did not stop; killing it", child.name, child.proc.pid)
                        child.proc.kill()
                        child.proc.wait(5)
                break
            time.sleep(POLL_S)
        for pump in self._pumps:  # the children's last lines before ours
            pump.join(timeout=2)

    def log_tail(self, child: Child, lines: int = LOG_TAIL_LINES) -> list[str]:
        """The last lines of a child's log (its last run's output, after our start marker)."""
        try:
            with open(child.log_path, "rb") as log_file:
                log_file.seek(0, os.SEEK_END)
                log_file.seek(max(0, log_file.tell() - 64 * 1024))
                text = log_file.read().decode(errors="replace")
        except OSError:
            return []
        return text.splitlines()[-lines:]
