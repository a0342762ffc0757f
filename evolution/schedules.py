"""Periodic improvement: Temporal Schedules that start an EvolutionCycleWorkflow
(``periodic_improvement``) every ``interval_sec`` seconds, overlap policy SKIP (a run still going
when the next is due is not joined by a second one).

Used by the API (``/api/schedules``) and meant for a CLI as well: every function takes a
connected Temporal client and returns plain dicts in the API's shape. Only Genesis' own
schedules are seen or touched: one whose action starts an EvolutionCycleWorkflow with this
schedule's cycle id on the given task queue. Any other schedule of the namespace is, to these
functions, not there (ScheduleNotFound), so the API cannot pause or delete it. Errors:
:class:`ScheduleNotFound`, :class:`ScheduleExists`, :class:`ScheduleInvalid` (their message says
what was wrong)."""

from __future__ import annotations

import re
import secrets
from datetime import datetime, timedelta
from typing import Any

from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleDescription,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleState,
)
from temporalio.service import RPCError, RPCStatusCode

from genesis.dto import CycleKind, EvolutionCycleInput
from genesis.workflow_api import EVOLUTION_WORKFLOW, evolution_workflow_id, search_attributes, trigger_id_of

SCHEDULE_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
MAX_NOTE = 500
RECENT_RUNS = 10
NEXT_RUNS = 5
MAX_INTERVAL_S = 30 * 86400


class ScheduleError(Exception):
    pass


class ScheduleNotFound(ScheduleError):
    pass


class ScheduleExists(ScheduleError):
    pass


class ScheduleInvalid(ScheduleError):
    pass


def new_schedule_id() -> str:
    return f"periodic-{secrets.token_hex(4)}"


def check_id(schedule_id: str) -> str:
    if not SCHEDULE_ID_PATTERN.match(schedule_id or ""):
        raise ScheduleInvalid(
            f"schedule_id {schedule_id!r} must be 1-64 letters, digits, '_', '.' or '-', "
            "starting with a letter or digit"
        )
    return schedule_id


def cycle_workflow_id(schedule_id: str) -> str:
    """The id of each run's cycle (Temporal appends the run's time to it)."""
    return evolution_workflow_id(f"sch_{schedule_id}")


def _ts(value: datetime | None) -> float | None:
    return round(value.timestamp(), 3) if value is not None else None


def describe_dict(schedule_id: str, description: ScheduleDescription) -> dict[str, Any]:
    """The API's schedule description."""
    schedule, info = description.schedule, description.info
    every = schedule.spec.intervals[0].every if schedule.spec.intervals else None
    runs = []
    for run in list(info.recent_actions)[-RECENT_RUNS:]:
        workflow_id = getattr(run.action, "workflow_id", None)
        runs.append(
            {
                "scheduled_at": _ts(run.scheduled_at),
                "started_at": _ts(run.started_at),
                "workflow_id": workflow_id,
                "trigger_id": trigger_id_of(workflow_id) if workflow_id else None,
            }
        )
    return {
        "schedule_id": schedule_id,
        "interval_sec": every.total_seconds() if every is not None else None,
        "interval_s": every.total_seconds() if every is not None else None,  # the older name
        "paused": schedule.state.paused,
        "note": schedule.state.note or "",
        "next_run_times": [_ts(t) for t in list(info.next_action_times)[:NEXT_RUNS]],
        "recent_runs": runs,
        "runs_total": info.num_actions,
        "runs_skipped_overlap": info.num_actions_skipped_overlap,
    }


async def create(
    client: Client,
    task_queue: str,
    *,
    interval_s: float,
    schedule_id: str | None = None,
    paused: bool = False,
    note: str = "",
    min_interval_s: float = 60.0,
) -> dict[str, Any]:
    schedule_id = check_id(schedule_id) if schedule_id is not None else new_schedule_id()
    if not min_interval_s <= interval_s <= MAX_INTERVAL_S:
        raise ScheduleInvalid(
            f"interval_sec must be between {min_interval_s:g} and {MAX_INTERVAL_S} seconds (got {interval_s:g})"
        )
    if len(note) > MAX_NOTE:
        raise ScheduleInvalid(f"note is longer than {MAX_NOTE} characters")
    schedule = Schedule(
        action=ScheduleActionStartWorkflow(
            EVOLUTION_WORKFLOW,
            EvolutionCycleInput(kind=CycleKind.periodic_improvement, schedule_id=schedule_id),
            id=cycle_workflow_id(schedule_id),
            task_queue=task_queue,
            typed_search_attributes=search_attributes(problem_type="periodic_improvement"),
        ),
        spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(every=timedelta(seconds=interval_s))]),
        policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.SKIP),
        state=ScheduleState(paused=paused, note=note or "periodic improvement"),
    )
    try:
        handle = await client.create_schedule(schedule_id, schedule)
    except ScheduleAlreadyRunningError as exc:
        raise ScheduleExists(
            f"a schedule {schedule_id!r} already exists: choose another schedule_id or delete it first"
        ) from exc
    return describe_dict(schedule_id, await handle.describe())


def is_genesis_schedule(schedule_id: str, schedule: Schedule, task_queue: str) -> bool:
    """Whether ``schedule`` is one :func:`create` made for this task queue."""
    action = schedule.action
    return (
        isinstance(action, ScheduleActionStartWorkflow)
        and action.workflow == EVOLUTION_WORKFLOW
        and action.id == cycle_workflow_id(schedule_id)
        and action.task_queue == task_queue
    )


async def describe(client: Client, schedule_id: str, task_queue: str) -> dict[str, Any]:
    check_id(schedule_id)
    try:
        description = await client.get_schedule_handle(schedule_id).describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            raise ScheduleNotFound(f"no schedule {schedule_id!r}") from exc
        raise
    if not is_genesis_schedule(schedule_id, description.schedule, task_queue):
        raise ScheduleNotFound(f"no schedule {schedule_id!r}")  # another program's: not ours to show or touch
    return describe_dict(schedule_id, description)


async def list_all(
    client: Client, task_queue: str, after: str | None = None, limit: int | None = None
) -> list[dict[str, Any]]:
    """Genesis' schedules on this task queue, sorted by id: at most ``limit`` of them, those whose
    id comes after ``after`` if given (the list comes from Temporal's visibility store, which may
    take a moment to show a new schedule). Only the schedules listed are described."""
    ids = []
    async for entry in await client.list_schedules():
        action = entry.schedule.action if entry.schedule is not None else None
        if action is not None and getattr(action, "workflow", None) != EVOLUTION_WORKFLOW:
            continue
        if after is None or entry.id > after:
            ids.append(entry.id)
    out: list[dict[str, Any]] = []
    for schedule_id in sorted(ids):
        if limit is not None and len(out) >= limit:
            break
        try:
            out.append(await describe(client, schedule_id, task_queue))
        except (ScheduleNotFound, ScheduleInvalid):  # deleted meanwhile, or not one of ours
            continue
    return out


async def pause(client: Client, schedule_id: str, task_queue: str) -> dict[str, Any]:
    """Stop starting runs (idempotent; the note is kept)."""
    current = await describe(client, schedule_id, task_queue)
    await client.get_schedule_handle(schedule_id).pause(note=current["note"])
    return await describe(client, schedule_id, task_queue)


async def resume(client: Client, schedule_id: str, task_queue: str) -> dict[str, Any]:
    current = await describe(client, schedule_id, task_queue)
    await client.get_schedule_handle(schedule_id).unpause(note=current["note"])
    return await describe(client, schedule_id, task_queue)


async def delete(client: Client, schedule_id: str, task_queue: str) -> dict[str, Any]:
    """Delete it; returns its last description (cycles already running go on)."""
    last = await describe(client, schedule_id, task_queue)
    await client.get_schedule_handle(schedule_id).delete()
    return last
