"""TaskWorkflow: one task for external agents, alive from publication until the first of

- its time to live runs out (a durable timer: ``TaskExpired``),
- a mutation proposed for it is activated (signal ``mutation_activated`` from the MutationWorkflow),
- the problem is resolved (signal ``resolve``, from the Watcher or an operator).

Orchestration only: the Redis writes are local activities referenced by name. The timer is set
to the task's ``expires_at`` (an input), so replays and retries keep the same deadline."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities import names
    from genesis.dto import AgentTask, TaskClose, TaskEndReason, TaskResult
    from genesis.workflow_api import TASK_QUERY, TASK_SIGNAL_MUTATION_ACTIVATED, TASK_SIGNAL_RESOLVE, TASK_WORKFLOW

REDIS_RETRY = RetryPolicy(initial_interval=timedelta(milliseconds=200), maximum_interval=timedelta(seconds=10))
# Closing is cleanup plus the event; the body expires by itself, so give up after a day.
CLOSE_SCHEDULE_TO_CLOSE = timedelta(days=1)
# Runs started before it fail when the publish fails for good (a local activity's own failure
# reaches the workflow as a bare ApplicationError, not inside an ActivityError): they expire now.
PUBLISH_FAILURE_EXPIRES = "task-publish-failure-expires"


@workflow.defn(name=TASK_WORKFLOW)
class TaskWorkflow:
    def __init__(self) -> None:
        self._task: AgentTask | None = None
        self._end_reason: TaskEndReason | None = None
        self._mutation_id: str | None = None
        self._detail: str | None = None

    @workflow.query(name=TASK_QUERY)
    def task(self) -> AgentTask | None:
        return self._task

    @workflow.signal(name=TASK_SIGNAL_MUTATION_ACTIVATED)
    def mutation_activated(self, mutation_id: str) -> None:
        """A mutation proposed for this task went live: the task is done."""
        if self._end_reason is None:
            self._end_reason, self._mutation_id = TaskEndReason.mutation_activated, mutation_id

    @workflow.signal(name=TASK_SIGNAL_RESOLVE)
    def resolve(self, reason: str) -> None:
        """The problem went away (the Watcher saw a snapshot without the anomaly, or an operator)."""
        if self._end_reason is None:
            self._end_reason, self._detail = TaskEndReason.resolved, reason or "resolved"

    @workflow.run
    async def run(self, task: AgentTask) -> TaskResult:
        self._task = task
        published = False
        if self._end_reason is None and self._remaining_s(task) > 0:
            try:
                published = await workflow.execute_local_activity(
                    names.PUBLISH_TASK,
                    task,
                    result_type=bool,
                    start_to_close_timeout=timedelta(seconds=10),
                    schedule_to_close_timeout=timedelta(seconds=self._remaining_s(task)),
                    retry_policy=REDIS_RETRY,
                )
            except ActivityError:  # Redis unreachable until the task's expiry: it simply expires
                workflow.logger.warning("task %s could not be published before it expired", task.task_id)
            except ApplicationError as error:  # the publish refused for good: the task expires unpublished
                if not workflow.patched(PUBLISH_FAILURE_EXPIRES):
                    raise
                workflow.logger.warning("task %s could not be published: %s", task.task_id, error)
        remaining = self._remaining_s(task)
        if self._end_reason is None and remaining > 0:
            try:
                await workflow.wait_condition(
                    lambda: self._end_reason is not None, timeout=timedelta(seconds=remaining)
                )
            except TimeoutError:
                pass
        close = TaskClose(
            task_id=task.task_id,
            reason=self._end_reason or TaskEndReason.expired,
            mutation_id=self._mutation_id,
            detail=self._detail,
        )
        await workflow.execute_local_activity(
            names.CLOSE_TASK,
            close,
            result_type=bool,
            start_to_close_timeout=timedelta(seconds=10),
            schedule_to_close_timeout=CLOSE_SCHEDULE_TO_CLOSE,
            retry_policy=REDIS_RETRY,
        )
        return TaskResult(
            task_id=task.task_id,
            reason=close.reason,
            published=published,
            mutation_id=close.mutation_id,
            detail=close.detail,
        )

    @staticmethod
    def _remaining_s(task: AgentTask) -> float:
        return task.expires_at - workflow.now().timestamp()
