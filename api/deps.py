"""Process-wide clients of the API, created once in the app's lifespan."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import redis.asyncio as aioredis
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker
from temporalio.client import Client

from api.errors import unavailable
from genesis.config import Settings
from genesis.temporal import connect

if TYPE_CHECKING:
    from api.workflow_starter import WorkflowStarter


@dataclass
class Services:
    settings: Settings
    database: AsyncEngine  # the process's one Postgres pool (genesis/db/session.py)
    sessions: async_sessionmaker  # ORM sessions on ``database``
    redis: aioredis.Redis
    pepper: bytes = b""  # server secret of the API key hashes (pipeline/apikeys.py)
    webhook_secret: bytes = b""  # server secret the agents' webhook secrets derive from (pipeline/webhooks.py)
    starter: WorkflowStarter | None = None  # api/workflow_starter.py, set in the app's lifespan
    _temporal: Client | None = None
    _temporal_lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def temporal(self) -> Client:
        """Connect lazily so the API starts (and reports health) while Temporal is down."""
        if self._temporal is None:
            async with self._temporal_lock:
                if self._temporal is None:
                    try:
                        self._temporal = await asyncio.wait_for(connect(self.settings), timeout=5)
                    except Exception as exc:
                        raise unavailable("TEMPORAL_UNAVAILABLE", "Temporal", exc) from exc
        return self._temporal
