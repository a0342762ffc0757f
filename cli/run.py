"""``make run``: migrate the configured database, create the key that signs receipts (once), start
the worker, the world engine, the Watcher and the API in the foreground and keep them up; Ctrl-C
(or SIGTERM) stops them.

A process that exits is restarted with a growing pause; one that keeps exiting stops everything
with a message naming it and its log (cli/supervisor.py, settings ``GENESIS_RUN_*``).
Services (Postgres, Redis, Temporal, Docker) are started before this by scripts/services.sh."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import threading

from sqlalchemy import make_url

from cli import gepa_demo
from cli.supervisor import CrashLoop, RestartPolicy, Supervisor
from genesis import signing
from genesis.config import PROJECT_ROOT, Settings, get_settings
from genesis.db.migrate import upgrade_to_head
from genesis.db.schema import schema_state_of, shown_url
from genesis.logs import configure_logging

log = logging.getLogger("genesis.run")

COMMANDS = {
    "worker": [sys.executable, str(PROJECT_ROOT / "worker.py")],
    "engine": [sys.executable, "-m", "engine"],
    "watcher": [sys.executable, "-m", "evolution"],
    "api": [sys.executable, "-m", "api", "--log-level", "info"],
}


def commands(settings: Settings) -> dict[str, list[str]]:
    """The processes GENESIS_RUN_PROCESSES names, in start order."""
    chosen = settings.run.processes.split(",")
    return {name: argv for name, argv in COMMANDS.items() if name in chosen}


def _metrics_url(settings: Settings, port: int) -> str:
    return f"http://{settings.metrics_host}:{port}/metrics" if port else "off"


def migrate(settings: Settings) -> bool:
    """Bring GENESIS_DATABASE_URL's schema to head before any process uses it: `make services`
    migrates only the databases it creates."""
    url = shown_url(settings.database_url)
    # One line of ours instead of Alembic's (one per migration, with each one's whole docstring).
    logging.getLogger("alembic").setLevel(logging.WARNING)
    try:
        before = asyncio.run(schema_state_of(settings.database_url))
        upgrade_to_head(settings.database_url)
    except Exception as exc:  # noqa: BLE001 - any failure is reported in words, and nothing starts
        reason = getattr(exc, "orig", None) or exc  # the driver's error, without SQLAlchemy's wrapping
        log.error(
            "cannot migrate the database %s (GENESIS_DATABASE_URL): %s. Is Postgres running, and does the "
            "database exist (create it with `su postgres -c 'createdb -O %s %s'`)? Nothing was started.",
            url,
            reason,
            make_url(settings.database_url).username,
            make_url(settings.database_url).database,
        )
        return False
    if before.at_head:
        log.info("database %s: %s", url, before.describe())
    else:
        log.info("database %s migrated from %s to head %s", url, before.current or "an empty schema", before.head)
    return True


def receipt_keys(settings: Settings) -> bool:
    """Create the key that signs receipts the first time (docs/receipts.md), before the worker and
    the engine start: both sign with it, and would otherwise race to make it."""
    try:
        keyring = signing.ensure_keyring(settings.receipt_keys_path)
    except (OSError, ValueError) as exc:
        log.error(
            "cannot open the receipt signing keys in %s (GENESIS_RECEIPT_KEYS_DIR): %s. Nothing was started.",
            settings.receipt_keys_path,
            exc,
        )
        return False
    log.info("receipts are signed with key %s (from %s)", keyring.current, keyring.directory)
    return True


def banner(settings: Settings, log_dir: str, names: list[str]) -> str:
    base = f"http://{settings.api.host}:{settings.api.port}"
    logs = f"{log_dir}/{names[0]}.log" if len(names) == 1 else f"{log_dir}/{{{','.join(names)}}}.log"
    return (
        "\n  Genesis is starting\n"
        f"    API           {base}\n"
        f"    World viewer  {base}/\n"
        f"    API docs      {base}/docs\n"
        f"    Health        {base}/api/health\n"
        f"    World stats   {base}/api/stats   (frames: ws://{settings.api.host}:{settings.api.port}/ws/world)\n"
        f"    Temporal UI   {settings.temporal.ui_url}/namespaces/{settings.temporal.namespace}/workflows\n"
        f"    Agents        POST {base}/v1/agents/register, then send X-API-Key (GENESIS_AUTH={settings.auth})\n"
        f"    Evolution     {base}/api/feed (live: ws://{settings.api.host}:{settings.api.port}/ws/feed), "
        f"{base}/api/evolution/cycles   (evolution: {settings.llm.provider})\n"
        f"    Metrics       {base}/metrics, engine {_metrics_url(settings, settings.engine.metrics_port)}, "
        f"worker {_metrics_url(settings, settings.worker.metrics_port)}\n"
        f"    Logs          {logs}\n"
        f"  Processes: {', '.join(names)}. A process that exits is restarted; Ctrl-C stops them (the services "
        "keep running).\n"
    )


def main() -> int:
    settings = get_settings()
    configure_logging("run", settings)
    if not migrate(settings):
        return 1
    log_dir = settings.state_dir / "logs"
    started = commands(settings)
    if ({"worker", "engine"} & started.keys()) and not receipt_keys(settings):
        return 1
    demo = gepa_demo.start(settings) if settings.gepa.demo else None
    environment = {**os.environ, **(demo.environment if demo else {})}
    supervisor = Supervisor(started, RestartPolicy.from_settings(settings.run), log_dir, env=environment)
    stop, force = threading.Event(), threading.Event()

    def on_signal(*_: object) -> None:
        if stop.is_set():  # a second Ctrl-C: do not wait for graceful shutdowns
            force.set()
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    print(banner(settings, str(log_dir), list(started)), flush=True)
    if demo is not None:
        print(
            f"  GEPA demo: a DSPy program in {demo.directory}/sources/qa-program, its examples and a scripted LM at "
            f"{demo.lm.base_url} (GENESIS_GEPA_DEMO).\n  Optimise it once the worker is up: {demo.command}\n",
            flush=True,
        )
    crash: CrashLoop | None = None
    try:
        supervisor.run(stop)
    except CrashLoop as loop:
        crash = loop
        log.error("%s", loop)
    finally:
        supervisor.stop_all(force)
        if demo is not None:
            demo.close()
    if crash is None:
        print("Genesis stopped", flush=True)
        return 0
    print(
        f"\nThe last lines of {crash.child.log_path}:\n"
        + "\n".join(f"    {line}" for line in supervisor.log_tail(crash.child))
        + f"\nGenesis stopped: {crash.child.name} is crashing in a loop ({crash.child.last_exit}); "
        f"its log is {crash.child.log_path}",
        file=sys.stderr,
        flush=True,
    )
    return 1


if __name__ == "__main__":
    sys.exit(main())
