"""Every branch of TaskWorkflow on Temporal's time-skipping server, with its Redis activities
replaced by name: publication, the expiry timer (skipped in about a second), the two signals
that end a task early, and the close. The real activities run in tests/stack/test_tasks.py and
test_task_expiry.py."""

from __future__ import annotations

import asyncio
import time
import uuid
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pytest
from temporalio import activity
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHandle
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from activities import names
from genesis.dto import AgentTask, TaskClose, TaskEndReason, TaskResult, TaskSeverity
from genesis.workflow_api import TASK_QUERY, TASK_SIGNAL_MUTATION_ACTIVATED, TASK_SIGNAL_RESOLVE, TASK_WORKFLOW
from tests.workflow_doubles import fail_scripted, unique_queue
from workflows.task import TaskWorkflow

TEN_MINUTES = 600.0


def agent_task(ttl_s: float = TEN_MINUTES) -> AgentTask:
    return AgentTask(
        task_id=f"tsk{uuid.uuid4().hex[:8]}",
        expires_at=time.time() + ttl_s,
        problem_type="starvation",
        severity=TaskSeverity.high,
        description="Molbots starve in the north",
    )


@dataclass
class Script:
    """What each replaced activity does, and the calls they got (name, attempt)."""

    published: bool = True  # what publish_task answers (False: it found the task expired)
    publish: list[Exception] = field(default_factory=list)  # raised by the first attempts, in order
    publish_hangs: bool = False  # Redis does not answer
    close: list[Exception] = field(default_factory=list)
    close_gate: asyncio.Event | None = None  # close_task waits for it: a later signal arrives meanwhile
    calls: list[tuple[str, int]] = field(default_factory=list)
    closes: list[TaskClose] = field(default_factory=list)

    def activities(self) -> list:
        @activity.defn(name=names.PUBLISH_TASK)
        async def publish_task(task: AgentTask) -> bool:
            attempt = activity.info().attempt
            self.calls.append(("publish", attempt))
            if self.publish_hangs:
                await asyncio.sleep(60)
            fail_scripted(self.publish, attempt)
            return self.published

        @activity.defn(name=names.CLOSE_TASK)
        async def close_task(close: TaskClose) -> bool:
            attempt = activity.info().attempt
            self.calls.append(("close", attempt))
            if self.close_gate is not None:
                await self.close_gate.wait()
            fail_scripted(self.close, attempt)
            self.closes.append(close)
            return True

        return [publish_task, close_task]


@asynccontextmanager
async def task_worker(env, script: Script):
    """A worker with the real workflow and the fakes on a queue of its own; yields the queue."""
    queue = unique_queue("task")
    async with Worker(env.client, task_queue=queue, workflows=[TaskWorkflow], activities=script.activities()):
        yield queue


async def start(env, queue: str, task: AgentTask, **options) -> WorkflowHandle:
    return await env.client.start_workflow(
        TASK_WORKFLOW, task, id=f"task-{task.task_id}", task_queue=queue, result_type=TaskResult, **options
    )


async def run_task(env, script: Script, task: AgentTask) -> TaskResult:
    async with task_worker(env, script) as queue:
        return await (await start(env, queue, task)).result()


async def started_timers(handle: WorkflowHandle) -> int:
    return len([e async for e in handle.fetch_history_events() if e.event_type == EventType.EVENT_TYPE_TIMER_STARTED])


async def wait_for_expiry_timer(handle: WorkflowHandle) -> None:
    """Until the workflow waits on its expiry timer (published, no signal yet)."""
    deadline = time.monotonic() + 10
    while not await started_timers(handle):
        assert time.monotonic() < deadline, "the workflow never started its expiry timer"
        await asyncio.sleep(0.05)


async def test_a_task_nobody_answers_is_published_then_expires_on_its_timer(skipping_env):
    script = Script()
    task = agent_task(TEN_MINUTES)
    async with task_worker(skipping_env, script) as queue:
        handle = await start(skipping_env, queue, task)
        result = await handle.result()  # ten minutes of the workflow's time, skipped
        assert await handle.query(TASK_QUERY, result_type=AgentTask) == task
        assert await skipping_env.get_current_time(handle) >= datetime.fromtimestamp(task.expires_at, UTC)
    assert script.calls == [("publish", 1), ("close", 1)]
    assert result == TaskResult(task_id=task.task_id, reason=TaskEndReason.expired, published=True)
    assert script.closes == [TaskClose(task_id=task.task_id, reason=TaskEndReason.expired)]


async def test_a_task_already_expired_at_its_start_is_closed_without_being_published(skipping_env):
    script = Script()
    result = await run_task(skipping_env, script, agent_task(ttl_s=-5))
    assert script.calls == [("close", 1)]
    assert result.reason == TaskEndReason.expired and not result.published


async def test_a_task_the_publisher_found_expired_counts_as_not_published(skipping_env):
    result = await run_task(skipping_env, Script(published=False), agent_task())
    assert result.reason == TaskEndReason.expired and not result.published


async def test_a_publish_that_cannot_finish_before_the_expiry_lets_the_task_expire_unpublished(skipping_env, caplog):
    """Redis hangs until the task's expiry: the local activity times out (ActivityError, caught)
    and the task just expires. The time to live exceeds publish's 10 s start-to-close, so the
    expiry (schedule-to-close) falls in the second attempt. With 10 s or less sdk-core clamps
    start-to-close to it and the two race; when start-to-close wins, retries go on past the expiry."""
    script = Script(publish_hangs=True)
    result = await run_task(skipping_env, script, agent_task(ttl_s=11.5))
    assert script.calls == [("publish", 1), ("publish", 2), ("close", 1)]
    assert result.reason == TaskEndReason.expired and not result.published
    assert script.closes == [TaskClose(task_id=result.task_id, reason=TaskEndReason.expired)]
    assert f"task {result.task_id} could not be published before it expired" in caplog.text


async def test_a_publish_refused_for_good_lets_the_task_expire_unpublished(skipping_env):
    script = Script(publish=[ApplicationError("redis refused the write", non_retryable=True)])
    result = await run_task(skipping_env, script, agent_task())
    assert script.calls == [("publish", 1), ("close", 1)]
    assert result.reason == TaskEndReason.expired and not result.published


async def test_redis_errors_of_publish_and_close_are_retried(skipping_env):
    script = Script(publish=[ConnectionError("redis is away")], close=[ConnectionError("redis is away")] * 2)
    result = await run_task(skipping_env, script, agent_task())
    assert script.calls == [("publish", 1), ("publish", 2), ("close", 1), ("close", 2), ("close", 3)]
    assert result.reason == TaskEndReason.expired and result.published
    assert len(script.closes) == 1


@pytest.mark.parametrize(
    ("signal", "argument", "ended"),
    [
        (
            TASK_SIGNAL_MUTATION_ACTIVATED,
            "mut_1",
            TaskClose(task_id="", reason=TaskEndReason.mutation_activated, mutation_id="mut_1"),
        ),
        (
            TASK_SIGNAL_RESOLVE,
            "anomaly gone",
            TaskClose(task_id="", reason=TaskEndReason.resolved, detail="anomaly gone"),
        ),
        (TASK_SIGNAL_RESOLVE, "", TaskClose(task_id="", reason=TaskEndReason.resolved, detail="resolved")),
    ],
    ids=["mutation_activated", "resolve", "resolve_without_a_reason"],
)
async def test_a_signal_while_the_task_waits_ends_it_before_its_expiry(skipping_env, signal, argument, ended):
    script = Script()
    task = agent_task(TEN_MINUTES)
    async with task_worker(skipping_env, script) as queue:
        with skipping_env.with_time_skipping_disabled():  # the timer must not pass before the signal
            handle = await start(skipping_env, queue, task)
        await wait_for_expiry_timer(handle)
        await handle.signal(signal, argument)
        result = await handle.result()
    expected = ended.model_copy(update={"task_id": task.task_id})
    assert script.calls == [("publish", 1), ("close", 1)]
    assert script.closes == [expected]
    assert result == TaskResult(published=True, **expected.model_dump())
    assert time.time() < task.expires_at  # ended by the signal, not by the timer


@pytest.mark.parametrize(
    ("first", "second", "ended"),
    [
        (
            (TASK_SIGNAL_MUTATION_ACTIVATED, "mut_1"),
            (TASK_SIGNAL_RESOLVE, "anomaly gone"),
            {"reason": TaskEndReason.mutation_activated, "mutation_id": "mut_1", "detail": None},
        ),
        (
            (TASK_SIGNAL_RESOLVE, "anomaly gone"),
            (TASK_SIGNAL_MUTATION_ACTIVATED, "mut_1"),
            {"reason": TaskEndReason.resolved, "mutation_id": None, "detail": "anomaly gone"},
        ),
    ],
    ids=["activated_then_resolved", "resolved_then_activated"],
)
async def test_a_signal_after_the_task_ended_changes_nothing(skipping_env, first, second, ended):
    script = Script(close_gate=asyncio.Event())
    task = agent_task(TEN_MINUTES)
    async with task_worker(skipping_env, script) as queue:
        with skipping_env.with_time_skipping_disabled():
            handle = await start(skipping_env, queue, task)
        await wait_for_expiry_timer(handle)
        await handle.signal(*first)
        while ("close", 1) not in script.calls:  # ended by the first signal, closing
            await asyncio.sleep(0.02)
        await handle.signal(*second)
        script.close_gate.set()
        result = await handle.result()
    assert result == TaskResult(task_id=task.task_id, published=True, **ended)
    # A signal during the close's workflow task makes Temporal run that task again, close included
    # (local activities are at least once): every close it made says how the first signal ended it.
    assert script.closes and all(close == TaskClose(task_id=task.task_id, **ended) for close in script.closes)


async def test_a_task_signalled_before_it_runs_is_closed_without_being_published(skipping_env):
    """Signal-with-start: the signal is handled before the run, which skips publish and wait."""
    script = Script()
    task = agent_task(TEN_MINUTES)
    async with task_worker(skipping_env, script) as queue:
        handle = await start(skipping_env, queue, task, start_signal=TASK_SIGNAL_RESOLVE, start_signal_args=["gone"])
        result = await handle.result()
    assert script.calls == [("close", 1)]
    assert result == TaskResult(task_id=task.task_id, reason=TaskEndReason.resolved, published=False, detail="gone")
