"""Process-wide clients of the API, created once in the app's lifespan, and the typed dependencies
that hand them to routes: a route declares ``services: ServicesDep`` (or one member:
``SessionsDep``, ``RedisDep``, ``SettingsDep``; a stream's hub: ``TelemetryHubDep``,
``FeedHubDep``, ``WorldFramesHubDep``). None of them is a parameter of a request: the OpenAPI
document does not show them. This module is the one place a route's clients are read from
``app.state``, where api/app.py's lifespan puts them."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated

import redis.asyncio as aioredis
from fastapi import Depends
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker
from starlette.requests import HTTPConnection
from temporalio.client import Client

from api.errors import unavailable
from api.stream_hubs import FeedHub, WorldFramesHub
from api.telemetry_hub import TelemetryHub
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
    pepper: bytes = b""  # server secret of the API key hashes (identity/apikeys.py)
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


# The dependencies are coroutines: FastAPI would run a plain function in its thread pool.


async def get_services(connection: HTTPConnection) -> Services:
    """The process's clients, for a request or a WebSocket."""
    services: Services = connection.app.state.services
    return services


ServicesDep = Annotated[Services, Depends(get_services)]


async def get_app_settings(services: ServicesDep) -> Settings:
    return services.settings


async def get_sessions(services: ServicesDep) -> async_sessionmaker:
    return services.sessions


async def get_redis(services: ServicesDep) -> aioredis.Redis:
    return services.redis


SettingsDep = Annotated[Settings, Depends(get_app_settings)]
SessionsDep = Annotated[async_sessionmaker, Depends(get_sessions)]
RedisDep = Annotated[aioredis.Redis, Depends(get_redis)]


async def get_telemetry_hub(connection: HTTPConnection) -> TelemetryHub:
    hub: TelemetryHub = connection.app.state.telemetry
    return hub


async def get_feed_hub(connection: HTTPConnection) -> FeedHub:
    hub: FeedHub = connection.app.state.feed
    return hub


async def get_world_frames_hub(connection: HTTPConnection) -> WorldFramesHub:
    hub: WorldFramesHub = connection.app.state.world_frames
    return hub


TelemetryHubDep = Annotated[TelemetryHub, Depends(get_telemetry_hub)]
FeedHubDep = Annotated[FeedHub, Depends(get_feed_hub)]
WorldFramesHubDep = Annotated[WorldFramesHub, Depends(get_world_frames_hub)]
