"""``python -m evolution``: follow ``ch:telemetry``, detect anomalies, write WorldReports, publish
tasks for external agents and feed messages (evolution/watcher.py). Started by ``make run``."""

from __future__ import annotations

import asyncio
import logging
import signal

import redis.asyncio as aioredis
from temporalio.client import Client

from evolution.watcher import Watcher
from genesis.config import Settings, get_settings
from genesis.db.schema import exit_if_schema_behind
from genesis.db.session import get_sessionmaker
from genesis.logs import configure_logging
from genesis.temporal import connect

log = logging.getLogger("genesis.watcher")


class LazyTemporal:
    """Connect on first use and again after a failure: the Watcher does not wait for Temporal."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.client: Client | None = None

    async def __call__(self) -> Client:
        if self.client is None:
            self.client = await connect(self.settings)
        return self.client


async def main() -> None:
    settings = get_settings()
    await exit_if_schema_behind(settings.database_url)
    redis = aioredis.from_url(settings.redis_url, socket_timeout=10, socket_connect_timeout=5)
    watcher = Watcher(settings, redis, LazyTemporal(settings), get_sessionmaker(settings.database_url))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await watcher.run(stop)
    finally:
        await watcher.drain(timeout=5)
        await redis.aclose()
    log.info("watcher stopped")


if __name__ == "__main__":
    configure_logging("watcher", get_settings())
    asyncio.run(main())
