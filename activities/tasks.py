"""The side effects of a TaskWorkflow: publish the task to Redis, and take it out again."""

from __future__ import annotations

import redis.asyncio as aioredis
from temporalio import activity

from activities import names
from evolution import tasks
from genesis.dto import AgentTask, TaskClose


class TaskActivities:
    def __init__(self, redis: aioredis.Redis):
        self._redis = redis

    @activity.defn(name=names.PUBLISH_TASK)
    async def publish_task(self, task: AgentTask) -> bool:
        """``agent:task:{id}`` (expiring at ``expires_at``), ``agent:tasks:queue`` and ``TaskPublished``.
        False when the task had already expired (nothing written)."""
        published = await tasks.publish(self._redis, task)
        activity.logger.info(
            "task %s %s (%s, expires at %.0f)",
            task.task_id,
            "published" if published else "already expired",
            task.severity.value,
            task.expires_at,
        )
        return published

    @activity.defn(name=names.CLOSE_TASK)
    async def close_task(self, close: TaskClose) -> bool:
        """Remove the task and its claim; ``TaskExpired`` or ``TaskClosed`` on ``ch:agent:tasks``."""
        removed = await tasks.close(self._redis, close)
        activity.logger.info("task %s closed: %s", close.task_id, close.reason.value)
        return removed
