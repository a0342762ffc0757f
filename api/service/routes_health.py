"""GET /api/health (and GET /health, the GEPA service's path for it): the state of every
dependency, checked concurrently with a short timeout."""

from __future__ import annotations

import asyncio
import logging
import time

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest

from api.deps import ServicesDep
from genesis.db.schema import MIGRATE_COMMAND, read_schema_state

log = logging.getLogger("genesis.api")
router = APIRouter(prefix="/api", tags=["health"])
root_router = APIRouter(tags=["health"])  # GET /health: the same answer at the GEPA spec's path
CHECK_TIMEOUT_S = 3.0


class Down(Exception):
    """A dependency that answered, but not as it should; the message is ours and is shown."""


def failure_kind(exc: BaseException) -> str:
    """What the answer says about a failed check: the kind of failure only. A driver's message
    may carry addresses, user and database names or SQL; it goes to the API's log instead."""
    if isinstance(exc, Down):
        return str(exc)
    if isinstance(exc, TimeoutError):
        return f"no answer within {CHECK_TIMEOUT_S:g} s"
    return f"not reachable: {type(_innermost(exc)).__name__} (the API's log has the details)"


def _innermost(exc: BaseException) -> BaseException:
    """The driver's own exception under the wrappers (SQLAlchemy's ``orig``, a re-raise's
    ``__cause__``): its type says most about the failure, e.g. InvalidCatalogNameError."""
    seen = {id(exc)}
    while True:
        inner = getattr(exc, "orig", None) or exc.__cause__
        if not isinstance(inner, BaseException) or id(inner) in seen:
            return exc
        seen.add(id(inner))
        exc = inner


async def _timed(name: str, check) -> dict:
    started = time.perf_counter()
    try:
        extra = await asyncio.wait_for(check(), CHECK_TIMEOUT_S)
        result = {"status": "ok", **(extra or {})}
    except Exception as exc:  # report, never raise: health must answer while things are down
        log.warning("health: %s is down: %s: %s", name, type(exc).__name__, exc)
        result = {"status": "down", "error": failure_kind(exc)}
    result["latency_ms"] = round((time.perf_counter() - started) * 1000, 1)
    return result


@root_router.get("/health", responses={503: {"description": "A dependency is down (the same body, status degraded)"}})
@router.get("/health", responses={503: {"description": "A dependency is down (the same body, status degraded)"}})
async def health(services: ServicesDep) -> JSONResponse:
    """Each dependency's ``status`` (ok or down) and ``latency_ms``; a down one's ``error`` says
    only the kind of failure (the API's log has the exception)."""

    async def postgres():
        async with services.database.connect() as connection:
            schema = await read_schema_state(connection)
        if schema.behind:  # every statement on a missing table or column would fail
            raise Down(f"{schema.describe()}; run `{MIGRATE_COMMAND}`")

    async def redis():
        await services.redis.ping()

    async def temporal():
        client = await services.temporal()
        await client.service_client.check_health()

    async def worker():
        client = await services.temporal()
        described = await client.workflow_service.describe_task_queue(
            DescribeTaskQueueRequest(
                namespace=client.namespace,
                task_queue=TaskQueue(name=services.settings.task_queue),
                task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
            )
        )
        pollers = len(described.pollers)
        if pollers == 0:
            raise Down("no worker is polling the task queue (is worker.py running?)")
        return {"pollers": pollers}

    names = ("postgres", "redis", "temporal", "worker")
    results = await asyncio.gather(*(_timed(n, c) for n, c in zip(names, (postgres, redis, temporal, worker))))
    dependencies = dict(zip(names, results))
    healthy = all(r["status"] == "ok" for r in results)
    return JSONResponse(
        {"status": "ok" if healthy else "degraded", "dependencies": dependencies},
        status_code=200 if healthy else 503,
    )
