"""The supervision of `make run` (cli/supervisor.py) on small Python child processes:
restarts with backoff, the crash loop, prompt stops, and where each child's output goes. The
launcher with Genesis' own processes is tested in tests/stack/test_launcher.py."""

from __future__ import annotations

import io
import logging
import os
import signal
import sys
import threading
import time

import pytest

from cli.supervisor import Child, CrashLoop, RestartPolicy, Supervisor, describe_exit

SLEEPER = [sys.executable, "-c", "import time; print('sleeping', flush=True); time.sleep(120)"]
BAD_SETTING = [sys.executable, "-c", "import sys; print('GENESIS_X is not a number'); sys.exit(3)"]
DEAF = [  # ignores SIGTERM, like a process stuck in a graceful shutdown
    sys.executable,
    "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('deaf', flush=True); time.sleep(120)",
]
FAST = RestartPolicy(initial_s=0.05, max_s=0.2, crash_limit=3, crash_window_s=30)


class SharedOutput(io.BytesIO):
    """The supervisor's stdout, written from its output threads."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()

    def write(self, data) -> int:  # type: ignore[override]
        with self.lock:
            return super().write(data)

    def text(self) -> str:
        with self.lock:
            return self.getvalue().decode()


class Running:
    """A supervisor running on a thread of its own, as `make run`'s main thread runs it."""

    def __init__(self, commands: dict[str, list[str]], policy: RestartPolicy, log_dir) -> None:
        self.out = SharedOutput()
        self.supervisor = Supervisor(commands, policy, log_dir, out=self.out)
        self.stop = threading.Event()
        self.crash: CrashLoop | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.supervisor.run(self.stop)
        except CrashLoop as loop:
            self.crash = loop

    def child(self, name: str) -> Child:
        return self.supervisor.children[name]

    def wait_for(self, condition, timeout_s: float = 20, what: str = "") -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            assert time.monotonic() < deadline, f"timed out waiting for {what}; output:\n{self.out.text()}"
            time.sleep(0.02)

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(10)
        self.supervisor.stop_all(grace_s=5)


def test_pause_doubles_with_jitter_and_is_capped():
    policy = RestartPolicy(initial_s=1.0, max_s=30.0, crash_limit=5, crash_window_s=60)
    for exits, ceiling in ((1, 1.0), (2, 2.0), (3, 4.0), (5, 16.0), (6, 30.0), (500, 30.0)):
        pauses = [policy.pause(exits) for _ in range(200)]
        assert all(ceiling / 2 <= pause <= ceiling for pause in pauses), (exits, min(pauses), max(pauses))
        assert max(pauses) - min(pauses) > ceiling / 10  # jittered, not one fixed value


def test_exit_descriptions():
    assert describe_exit(-signal.SIGKILL) == "killed by SIGKILL"
    assert describe_exit(3) == "exited with code 3"
    assert describe_exit(0) == "exited with code 0"


def test_a_killed_child_comes_back_and_the_others_keep_running(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="genesis.run")
    running = Running({"first": SLEEPER, "second": SLEEPER}, FAST, tmp_path)
    try:
        running.wait_for(lambda: running.out.text().count("sleeping") == 2, what="both children")
        first, second = running.child("first"), running.child("second")
        first_pid, second_pid = first.pid, second.pid
        assert first_pid and second_pid
        os.kill(first_pid, signal.SIGKILL)
        running.wait_for(lambda: first.running() and first.pid != first_pid, what="the restart")
        assert second.pid == second_pid and second.running()
        assert first.restarts == 1 and second.restarts == 0
        running.wait_for(lambda: running.out.text().count("sleeping") == 3, what="the restarted child's output")
    finally:
        running.finish()
    messages = [record.getMessage() for record in caplog.records]
    died = next(m for m in messages if m.startswith(f"first (pid {first_pid}) killed by SIGKILL"))
    assert "restarting it in" in died and "restart 1;" in died and str(tmp_path / "first.log") in died
    assert any(m.startswith("first restarted (restart 1)") and "(1 restart)" in m for m in messages), messages
    assert running.crash is None
    # Each child's output is in its log, both runs of the restarted one; on stdout with its name.
    assert (tmp_path / "first.log").read_text().splitlines().count("sleeping") == 2
    assert "first  | sleeping" in running.out.text() and "second | sleeping" in running.out.text()
    assert not first.running() and not second.running()


def test_a_child_that_keeps_exiting_stops_everything(tmp_path):
    running = Running({"sleeper": SLEEPER, "broken": BAD_SETTING}, FAST, tmp_path)
    running.thread.join(30)
    try:
        assert not running.thread.is_alive()
        crash = running.crash
        assert crash is not None and crash.child.name == "broken"
        assert str(crash) == (
            f"broken exited 3 times within 30 s (last: exited with code 3): it is crashing in a loop, so "
            f"everything stops. Its log: {tmp_path / 'broken.log'}"
        )
        assert crash.child.restarts == 2
        assert "GENESIS_X is not a number" in running.supervisor.log_tail(crash.child)
    finally:
        running.supervisor.stop_all(grace_s=5)
    assert not running.child("sleeper").running()


def test_exits_outside_the_window_are_forgotten(tmp_path):
    policy = RestartPolicy(initial_s=0.05, max_s=0.05, crash_limit=2, crash_window_s=0.01)
    running = Running({"broken": BAD_SETTING}, policy, tmp_path)
    try:
        running.wait_for(lambda: running.child("broken").restarts >= 3, what="three restarts")
        assert running.crash is None
    finally:
        running.finish()


def test_stop_is_prompt_and_kills_what_ignores_sigterm(tmp_path):
    running = Running({"sleeper": SLEEPER, "deaf": DEAF}, FAST, tmp_path)
    running.wait_for(lambda: "deaf" in running.out.text() and "sleeping" in running.out.text(), what="start")
    started = time.monotonic()
    running.stop.set()
    running.thread.join(5)
    running.supervisor.stop_all(grace_s=1)
    assert time.monotonic() - started < 4
    assert not running.child("sleeper").running() and not running.child("deaf").running()
    assert running.child("sleeper").proc.returncode == -signal.SIGTERM
    assert running.child("deaf").proc.returncode == -signal.SIGKILL


def test_the_previous_runs_log_is_kept(tmp_path):
    (tmp_path / "sleeper.log").write_text("the previous run\n")
    running = Running({"sleeper": SLEEPER}, FAST, tmp_path)
    try:
        running.wait_for(lambda: "sleeping" in running.out.text(), what="start")
    finally:
        running.finish()
    assert (tmp_path / "sleeper.log.1").read_text() == "the previous run\n"
    assert "make run starts sleeper" in (tmp_path / "sleeper.log").read_text()


def test_run_settings_are_checked():
    from cli.run import commands
    from genesis.config import Settings

    order = r"GENESIS_RUN_RESTART_MAX_S \(1\) must be at least GENESIS_RUN_RESTART_INITIAL_S \(2\)"
    with pytest.raises(ValueError, match=order):
        Settings().override(run_restart_initial_s=2.0, run_restart_max_s=1.0)
    unknown = "GENESIS_RUN_PROCESSES must name some of worker, engine, watcher, api; unknown: db"
    with pytest.raises(ValueError, match=unknown):
        Settings().override(run_processes="api,db")
    with pytest.raises(ValueError, match="it names none"):
        Settings().override(run_processes=" , ")
    chosen = Settings().override(run_processes=" api, worker,api")
    assert list(commands(chosen)) == ["worker", "api"]  # start order, once each
    assert list(commands(Settings())) == ["worker", "engine", "watcher", "api"]
