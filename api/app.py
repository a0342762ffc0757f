"""FastAPI app factory: ``uvicorn api.app:create_app --factory``."""

from __future__ import annotations

import asyncio
import logging
from contextlib import asynccontextmanager

import anyio
import anyio.lowlevel
import redis.asyncio as aioredis
from fastapi import Depends, FastAPI
from sqlalchemy.orm import configure_mappers

from api.audit import routes as audit, routes_receipts as receipts
from api.deps import Services
from api.errors import BodySizeLimit, document_error_responses, install_error_handlers
from api.evolution import (
    routes as evolution,
    routes_context as agent_context,
    routes_feed as feed,
    routes_schedules as schedules,
    routes_tasks as tasks,
)
from api.governance import routes as governance, routes_proposals as governance_proposals
from api.identity import routes as agents, routes_webhooks as agent_webhooks
from api.metrics import RequestMetrics, router as metrics_router
from api.mutations import (
    admission,
    routes as mutations,
    routes_approval as mutation_approval,
    routes_batch as mutation_batch,
    routes_check as mutation_check,
    routes_list as mutation_list,
    routes_ops as mutation_ops,
)
from api.request_guard import RequestGuard
from api.rounds import routes as rounds
from api.service import routes_docs as reference_docs, routes_health as health
from api.socket_budget import SocketBudget
from api.stream_hubs import FeedHub, WorldFramesHub
from api.strict_requests import check_declared_inputs
from api.telemetry_hub import TelemetryHub
from api.traits import routes as traits
from api.viewer import routes as viewer
from api.workflow_starter import WorkflowStarter
from api.world import (
    routes as world,
    routes_journal as journal,
    routes_replay as world_replay,
    routes_rollback as world_rollback,
    routes_telemetry as telemetry,
)
from genesis import gc_tuning
from genesis.config import Settings, get_settings
from genesis.db.schema import log_schema_at_start
from genesis.db.session import get_engine, get_sessionmaker
from genesis.logs import configure_logging
from gepa_steps import api as routes_gepa
from identity.apikeys import load_pepper
from pipeline.webhooks import load_server_secret

MAX_BODY_BYTES = 96 * 1024  # 32 KB of code can grow when JSON-escaped
WARM_CONNECTIONS = 2  # Postgres connections opened (statements prepared) at startup: ~100 proposals/s keep 1-3 busy
log = logging.getLogger("genesis.api")
OPEN_MODE_WARNING = (
    "\n" + "!" * 78 + "\n"
    "  GENESIS_AUTH=open: THIS API CHECKS NO KEYS.\n"
    "  Anyone who can reach it may act as any agent and use every operator endpoint: publish\n"
    "  and resolve tasks, create, pause and delete schedules, force evolution triggers, roll\n"
    "  back any mutation and replace any trait. For local development only; anywhere else\n"
    "  leave GENESIS_AUTH unset (required) and create operator keys with\n"
    "  `genesis operator create-key`.\n" + "!" * 78
)


def _build_lazy_state(app: FastAPI) -> None:
    """What the first requests would otherwise build while other requests wait on the event loop
    (20-30 ms each on this machine), built before the API accepts connections: the ORM's mapper
    configuration (the workflow starter builds Mutation objects) and FastAPI's per-route state
    (request and response models), which it builds for a router's routes the first time a
    request is matched against them — here by matching a path no route has against every route."""
    configure_mappers()
    scope = {
        "type": "http",
        "method": "GET",
        "path": "/__warm-up__",
        "root_path": "",
        "headers": [],
        "query_string": b"",
    }
    for route in app.router.routes:
        route.matches(scope)


async def _warm_connections(services: Services) -> None:
    """The schema's state logged (an error naming the fix when it is behind; /api/health says so
    too), then Postgres connections with the admission's statements and the Temporal client,
    opened in the background after start-up. A dependency that is down is not an error here: the
    requests that need it say so."""
    steps = (
        lambda: log_schema_at_start(services.settings.database_url),
        lambda: admission.warm(services.database, WARM_CONNECTIONS),
        services.temporal,
    )
    for step in steps:  # each coroutine made when its turn comes: none is left un-awaited if cancelled
        try:
            await step()
        except Exception as exc:  # noqa: BLE001 - warming up is optional
            log.info("warm-up step skipped: %s", exc)


def request_redis(settings: Settings) -> aioredis.Redis:
    """The Redis client of the API's requests: a pool of its own size, in which a request waits
    briefly for a connection rather than failing at once when all are in use."""
    pool = aioredis.BlockingConnectionPool.from_url(
        settings.redis_url,
        max_connections=settings.api.redis_pool,
        timeout=2,
        socket_timeout=2,
        socket_connect_timeout=2,
    )
    return aioredis.Redis.from_pool(pool)


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    configure_logging("api", settings)
    gc_tuning.observe_gc_pauses()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        if settings.auth == "open":
            log.warning(OPEN_MODE_WARNING)
        # api/deps.py hands these to the routes as typed dependencies
        services = app.state.services = Services(
            settings=settings,
            database=get_engine(settings.database_url),
            sessions=get_sessionmaker(settings.database_url),
            redis=request_redis(settings),
            pepper=load_pepper(settings.api.key_pepper.get_secret_value(), settings.state_dir),
            webhook_secret=load_server_secret(settings.webhook.secret.get_secret_value(), settings.state_dir),
        )
        app.state.telemetry = TelemetryHub(
            settings.redis_url,
            services.redis,
            queue_size=settings.telemetry.client_queue,
            reconnect_max_s=settings.telemetry.reconnect_max_s,
        )
        reconnect_s = settings.telemetry.reconnect_max_s
        app.state.world_frames = WorldFramesHub(settings.redis_url, queue_size=1, reconnect_max_s=reconnect_s)
        app.state.feed = FeedHub(
            settings.redis_url, queue_size=settings.telemetry.client_queue, reconnect_max_s=reconnect_s
        )
        hubs = (app.state.telemetry, app.state.world_frames, app.state.feed)
        for hub in hubs:
            hub.start()
        services.starter = WorkflowStarter(services)
        services.starter.start_sweeping()
        _build_lazy_state(app)
        await anyio.lowlevel.checkpoint()  # loads anyio's asyncio backend, which Starlette uses to read bodies
        # Last before serving: what start-up built lives as long as the process, and full
        # collections skip it from now on (the freeze's own collection pauses for ~100 ms).
        log.info("start-up heap frozen: %d objects", gc_tuning.freeze_startup_heap())
        warming = asyncio.create_task(_warm_connections(services))
        yield
        warming.cancel()
        await services.starter.close()
        for hub in hubs:
            await hub.close()
        await services.redis.aclose()
        await services.database.dispose()

    app = FastAPI(
        title="Genesis",
        version="0.1.0",
        description=(
            "A self-evolving world. Propose trait code; every mutation runs through a durable "
            f"Temporal workflow (validate → sandbox → verdict). Temporal UI: {settings.temporal.ui_url}"
        ),
        lifespan=lifespan,
        docs_url=None,  # /docs and /redoc from local assets: api/service/routes_docs.py
        redoc_url=None,
        # Unknown query parameters are a 422, a JSON body without its Content-Type a 415.
        dependencies=[Depends(check_declared_inputs)],
    )
    install_error_handlers(app)
    document_error_responses(app)
    # Control characters in the URL, duplicate keys and unreadable integers in JSON: 422 before
    # routing (api/request_guard.py); inside BodySizeLimit, so it never reads more than the limit.
    app.add_middleware(RequestGuard)
    app.add_middleware(SocketBudget, per_client=settings.api.sockets_per_client, total=settings.api.sockets_total)
    app.add_middleware(
        BodySizeLimit,
        max_bytes=MAX_BODY_BYTES,
        per_path={
            mutation_batch.BATCH_PATH: MAX_BODY_BYTES * settings.batch_max_items,
            routes_gepa.EXECUTE_STEP_PATH: settings.gepa.max_body_bytes,
        },
    )
    app.include_router(mutations.router)
    app.include_router(mutation_batch.router)
    app.include_router(mutation_check.router)
    app.include_router(agents.router)
    app.include_router(agent_webhooks.router)
    app.include_router(agent_context.router)
    app.include_router(tasks.router)
    app.include_router(evolution.router)
    app.include_router(health.router)
    app.include_router(health.root_router)
    app.include_router(world.router)
    app.include_router(world_rollback.router)
    app.include_router(journal.router)
    app.include_router(world_replay.router)
    app.include_router(audit.router)
    app.include_router(receipts.router)
    app.include_router(governance.router)
    app.include_router(rounds.router)
    app.include_router(governance_proposals.router)
    app.include_router(mutation_approval.router)
    app.include_router(telemetry.router)
    app.include_router(traits.router)
    # Evolution cycles: the feed and the periodic improvement schedules
    app.include_router(feed.router)
    app.include_router(schedules.router)
    # The mutation list and the world viewer at / (api/viewer/static/, no build step).
    app.include_router(mutation_list.router)
    viewer.install(app)
    reference_docs.install(app)
    # Prometheus: GET /metrics, and every request counted/timed (outermost: sees 413s too)
    app.include_router(metrics_router)
    app.add_middleware(RequestMetrics)
    # Re-run a mutation whose workflow failed for an infrastructure reason (the CLI's `mutations retry`).
    app.include_router(mutation_ops.router)
    app.include_router(routes_gepa.router)  # GEPA optimisation steps
    return app
