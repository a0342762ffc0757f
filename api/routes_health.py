"""GET /api/health: the state of every dependency, checked concurrently with a short timeout."""

from __future__ import annotations

import asyncio
import time

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from sqlalchemy import text
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest

router = APIRouter(prefix="/api", tags=["health"])
CHECK_TIMEOUT_S = 3.0


async def _timed(check) -> dict:
    started = time.perf_counter()
    try:
        extra = await asyncio.wait_for(check(), CHECK_TIMEOUT_S)
        result = {"status": "ok", **(extra or {})}
    except Exception as exc:  # report, never raise: health must answer while things are down
        result = {"status": "down", "error": f"{type(exc).__name__}: {exc}"[:300]}
    result["latency_ms"] = round((time.perf_counter() - started) * 1000, 1)
    return result


@router.get("/health", responses={503: {"description": "A dependency is down (the same body, status degraded)"}})
async def health(request: Request) -> JSONResponse:
    services = request.app.state.services

    async def postgres():
        async with services.sessions() as session:
            await session.execute(text("SELECT 1"))

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
            raise RuntimeError(f"no worker is polling task queue {services.settings.task_queue!r}")
        return {"pollers": pollers}

    names = ("postgres", "redis", "temporal", "worker")
    results = await asyncio.gather(*(_timed(c) for c in (postgres, redis, temporal, worker)))
    dependencies = dict(zip(names, results))
    healthy = all(r["status"] == "ok" for r in results)
    return JSONResponse(
        {"status": "ok" if healthy else "degraded", "dependencies": dependencies},
        status_code=200 if healthy else 503,
    )
