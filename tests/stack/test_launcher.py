"""`make run`'s launcher (`python -m cli.run`, cli/run.py) with Genesis' real
processes: it migrates the database it is configured with, brings back each process that is
SIGKILLed while the others keep running, stops everything with a clear message when one keeps
crashing, and stops promptly on SIGTERM. And a process started on a schema behind the code says
so: the API in /api/health (and its answers leak no SQL), the worker by refusing to start.

A stack of its own (tests/own_stack.py): a fresh database, a Redis db and a task queue, on the
session's Temporal server; short restart pauses so that the module takes a few minutes."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import time

import httpx
import psutil
import pytest
from alembic.script import ScriptDirectory

from cli.processes import ManagedProcess, api_process, launcher_process, wait_for_api, worker_process
from genesis.config import Settings
from genesis.db.schema import EXIT_SCHEMA_BEHIND, MIGRATE_COMMAND, alembic_config, schema_state_of
from tests.own_stack import own_settings

FAST_RESTARTS = {
    "run_restart_initial_s": 0.2,
    "run_restart_max_s": 1.0,
    "run_crash_limit": 5,
    "run_crash_window_s": 60.0,
}
STATUS_PID = re.compile(r"\b(worker|engine|watcher|api) pid (\d+)")
PROCESSES = ("worker", "engine", "watcher", "api")
SQL_WORDS = ("relation", "column", "select ", "insert ", "does not exist", "genesis_test", "asyncpg", "sqlalchemy")


def output(process: ManagedProcess) -> str:
    return process.log_path.read_text(errors="replace") if process.log_path.exists() else ""


def start_fresh(process: ManagedProcess) -> None:
    process.log_path.unlink(missing_ok=True)
    process.start()


async def wait_for(condition, timeout_s: float, what: str, process: ManagedProcess) -> None:
    deadline = time.monotonic() + timeout_s
    while not await condition():
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out after {timeout_s:g} s waiting for {what}; launcher output:\n{output(process)[-6000:]}"
            )
        await asyncio.sleep(0.2)


def status_pids(line: str) -> dict[str, int]:
    return {name: int(pid) for name, pid in STATUS_PID.findall(line)}


def latest_pids(process: ManagedProcess) -> dict[str, int]:
    """The pids of the launcher's latest status line (at start and after each restart)."""
    lines = [line for line in output(process).splitlines() if "started: " in line or " restarted (restart " in line]
    return status_pids(lines[-1]) if lines else {}


def children_of(process: ManagedProcess) -> set[int]:
    assert process.proc is not None
    return {child.pid for child in psutil.Process(process.proc.pid).children()}


async def healthy(url: str) -> bool:
    try:
        async with httpx.AsyncClient(timeout=5) as client:
            return (await client.get(f"{url}/api/health")).status_code == 200
    except httpx.TransportError:
        return False


@pytest.fixture(scope="module")
async def launcher_stack(settings, tmp_path_factory):
    """A launcher on a fresh database nobody migrated; its children log to a state dir of its own."""
    own = await own_settings(
        settings,
        "launcher",
        revision=None,
        state_dir=tmp_path_factory.mktemp("launcher-state"),
        sandbox_pool_size=1,
        **FAST_RESTARTS,
    )
    assert (await schema_state_of(own.database_url)).current is None
    process = launcher_process(own, "test-launcher")
    start_fresh(process)
    url = f"http://{own.api.host}:{own.api.port}"
    # The worker polls only once its sandbox image and pool are ready: health says when.
    await wait_for(lambda: healthy(url), 180, "a healthy API", process)
    yield own, process, url
    process.stop()


async def test_make_run_migrates_the_database_it_is_configured_with(launcher_stack):
    own, process, _ = launcher_stack
    state = await schema_state_of(own.database_url)
    assert state.at_head, state
    assert f"_launcher migrated from an empty schema to head {state.head}" in output(process)
    assert "genesis:***@" in output(process) and "genesis:genesis@" not in output(process)  # no password shown


async def test_each_process_killed_comes_back_alone(launcher_stack):
    own, process, url = launcher_stack
    pids = latest_pids(process)
    assert sorted(pids) == sorted(PROCESSES) and set(pids.values()) <= children_of(process), output(process)
    logs = own.state_dir / "logs"
    for name in PROCESSES:
        os.kill(pids[name], signal.SIGKILL)
        restarted = f"{name} restarted (restart 1)"

        async def came_back(restarted=restarted) -> bool:
            return restarted in output(process)

        await wait_for(came_back, 30, f"{name} to come back", process)
        text = output(process)
        died = next(line for line in text.splitlines() if f"{name} (pid {pids[name]}) killed by SIGKILL" in line)
        assert "restarting it in" in died and "restart 1;" in died and str(logs / f"{name}.log") in died, died
        now = status_pids(next(line for line in text.splitlines() if restarted in line))
        assert now[name] != pids[name] and now[name] in children_of(process)
        assert {n: p for n, p in now.items() if n != name} == {n: p for n, p in pids.items() if n != name}
        assert f"{name} pid {now[name]} (1 restart)" in text
        pids = now
        # Each log has both lives of its process, after the launcher's start marker.
        assert (logs / f"{name}.log").read_text(errors="replace").count(f"make run starts {name}") == 2
    await asyncio.sleep(3)  # none of them is crash-looping: the same pids a while later
    assert latest_pids(process) == pids and set(pids.values()) <= children_of(process)
    assert all(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE for pid in pids.values())
    await wait_for(lambda: healthy(url), 180, "a healthy API again (the restarted worker polling)", process)


async def test_sigterm_stops_everything_promptly(launcher_stack):
    _, process, _ = launcher_stack
    assert process.proc is not None and process.proc.poll() is None
    children = children_of(process)
    started = time.monotonic()
    process.proc.send_signal(signal.SIGTERM)
    code = await asyncio.to_thread(process.proc.wait, 30)
    assert code == 0 and time.monotonic() - started < 20, output(process)[-3000:]
    assert output(process).rstrip().endswith("Genesis stopped")
    assert not [pid for pid in children if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"]


async def test_a_process_that_keeps_crashing_stops_the_launcher(settings, tmp_path):
    """A bad setting: the API's port is taken, so the API exits at once, every time."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        own = settings.override(
            api_port=taken.getsockname()[1],
            state_dir=tmp_path,
            run_processes="api",
            run_crash_limit=2,
            run_restart_initial_s=0.2,
            run_restart_max_s=0.5,
        )
        process = launcher_process(own, "test-launcher-crash-loop")
        start_fresh(process)
        try:
            code = await asyncio.to_thread(process.proc.wait, 120)
        finally:
            process.stop()
    text = output(process)
    api_log = tmp_path / "logs" / "api.log"
    assert code == 1, text[-3000:]
    assert "api exited 2 times within 60 s (last: exited with code" in text
    assert text.rstrip().splitlines()[-1].startswith(
        "Genesis stopped: api is crashing in a loop (exited with code"
    ) and text.rstrip().endswith(f"its log is {api_log}")
    assert "address already in use" in api_log.read_text() and "address already in use" in text


def migrations_base() -> str:
    base = ScriptDirectory.from_config(alembic_config()).get_base()
    assert isinstance(base, str)
    return base


async def test_processes_on_a_schema_behind_say_so(settings):
    """The first migration only: the API answers, but its health names the schema and the fix,
    and requests that need the newer schema fail as DATABASE_UNAVAILABLE without any SQL; the
    worker refuses to start, naming the fix."""
    base = migrations_base()
    own: Settings = await own_settings(settings, "behind", revision=base)
    state = await schema_state_of(own.database_url)
    assert state.current == base and state.behind
    api = api_process(own, "test-behind-api")
    start_fresh(api)
    worker = worker_process(own, "test-behind-worker")
    start_fresh(worker)
    try:
        url = await asyncio.to_thread(wait_for_api, api)
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            health = await client.get("/api/health")
            assert health.status_code == 503
            assert health.json()["dependencies"]["postgres"]["error"] == (
                f"schema behind: at {base}, head {state.head}; run `{MIGRATE_COMMAND}`"
            )
            answers = [
                await client.get("/api/mutations"),
                await client.get("/api/traits"),
                await client.post("/v1/agents/register", json={"name": "behind"}),
            ]
        for answer in answers:
            assert answer.status_code == 503, answer.text
            body = answer.json()
            assert body == {
                "error": "DATABASE_UNAVAILABLE",
                "detail": "Postgres is unavailable: ProgrammingError (the API's log has the details)",
            }, body
            assert not [word for word in SQL_WORDS if word in answer.text.lower()], answer.text
        code = await asyncio.to_thread(worker.proc.wait, 60)
        assert code == EXIT_SCHEMA_BEHIND
        worker_log = worker.log_path.read_text()
        assert f"(schema behind: at {base}, head {state.head}): run `{MIGRATE_COMMAND}`" in worker_log
        assert "genesis:***@" in worker_log
        api_log = api.log_path.read_text()
        assert f"schema behind: at {base}, head {state.head}" in api_log  # said at start, not only on request
    finally:
        api.stop()
        worker.stop()
