"""Run Genesis processes (worker, engine, Watcher, API) as real subprocesses with a given Settings.

Used by the test suite and the benchmarks, which start their own Temporal dev server and need
the processes exactly as `make run` starts them, only pointed elsewhere."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx

from genesis.config import PROJECT_ROOT, Settings

TEMPORAL_CLI = Path(sys.executable).parent / "temporal"
# One partition per task queue (scripts/services.sh starts `make run`'s server with the same): a
# queue then hands out its tasks in the order they were scheduled, so concurrent verdicts are
# served one after the other instead of interleaved until all end late (docs/evolution.md).
DEV_SERVER_ARGS = [
    *("--dynamic-config-value", "matching.numTaskqueueReadPartitions=1"),
    *("--dynamic-config-value", "matching.numTaskqueueWritePartitions=1"),
]
LOG_DIR = PROJECT_ROOT / ".state" / "logs"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def env_for(settings: Settings) -> dict[str, str]:
    env = dict(os.environ) | settings.environment()
    env["PYTHONUNBUFFERED"] = "1"
    return env


class ManagedProcess:
    def __init__(self, name: str, argv: list[str], settings: Settings):
        self.name, self.argv, self.settings = name, argv, settings
        self.proc: subprocess.Popen | None = None
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        self.log_path = LOG_DIR / f"{name}.log"

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.argv, cwd=PROJECT_ROOT, env=env_for(self.settings), stdout=log, stderr=log
            )

    def kill(self) -> None:
        """SIGKILL: no graceful shutdown, like a crashed host."""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()


def worker_process(settings: Settings, name: str = "worker") -> ManagedProcess:
    return ManagedProcess(name, [sys.executable, str(PROJECT_ROOT / "worker.py")], settings)


def engine_process(settings: Settings, name: str = "engine", *, fast_forward: bool | None = None) -> ManagedProcess:
    """``python -m engine``; ``fast_forward`` overrides ``GENESIS_ENGINE_FAST_FORWARD`` (the world
    unpaced, as fast as the machine allows: docs/world.md#fast-forward)."""
    if fast_forward is not None:
        settings = settings.override(engine_fast_forward=fast_forward)
    return ManagedProcess(name, [sys.executable, "-m", "engine"], settings)


def api_process(settings: Settings, name: str = "api") -> ManagedProcess:
    return ManagedProcess(
        name,
        [sys.executable, "-m", "api", "--log-level", "warning"],
        settings,
    )


def launcher_process(settings: Settings, name: str = "launcher") -> ManagedProcess:
    """``python -m cli.run``, the supervisor of `make run`: it migrates the database and
    starts the processes GENESIS_RUN_PROCESSES names, each logging to ``<state_dir>/logs/``."""
    return ManagedProcess(name, [sys.executable, "-m", "cli.run"], settings)


def wait_for_api(process: ManagedProcess, timeout_s: float = 30) -> str:
    url = f"http://{process.settings.api.host}:{process.settings.api.port}"
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if httpx.get(f"{url}/api/health", timeout=5).status_code in (200, 503):
                return url
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline or (process.proc and process.proc.poll() is not None):
            raise RuntimeError(f"the API did not start; see {process.log_path}")
        time.sleep(0.2)


@asynccontextmanager
async def worker_and_api(settings: Settings, prefix: str) -> AsyncIterator[str]:
    """A worker and an API process of their own on ``settings``; yields the API's URL and stops
    both on the way out (their logs are ``<prefix>-worker.log`` and ``<prefix>-api.log``)."""
    worker = worker_process(settings, f"{prefix}-worker")
    api = api_process(settings, f"{prefix}-api")
    worker.start()
    api.start()
    try:
        yield await asyncio.to_thread(wait_for_api, api)
    finally:
        api.stop()
        worker.stop()
