"""Replay recorded workflow histories against the current workflow code and say precisely where
a run diverges (``genesis workflows replay``, and tests/ replaying tests/histories/).

Temporal's Replayer reports a nondeterminism error in the core SDK's words ("Activity machine
does not handle this event: HistoryEvent(id: 6, TimerStarted)", "Missing associated machine for
LocalActivity(1)", ...). This module adds the event it is about: its id, type and name (activity
type, local activity, timer, patch, signal), found from the event id or the command's sequence
number the message names, and the list of commands the history recorded."""

from __future__ import annotations

import gc
import json
import logging
import re
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.runtime import LogForwardingConfig, LoggingConfig, Runtime, TelemetryConfig, TelemetryFilter
from temporalio.worker import Replayer

# Events that record a command the workflow code issued: these must match on replay.
COMMAND_EVENTS = {
    EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED,
    EventType.EVENT_TYPE_MARKER_RECORDED,
    EventType.EVENT_TYPE_TIMER_STARTED,
    EventType.EVENT_TYPE_TIMER_CANCELED,
    EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED,
    EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED,
    EventType.EVENT_TYPE_REQUEST_CANCEL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED,
    EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES,
    EventType.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW,
}
# Core names a command by kind and sequence number, e.g. LocalActivity(1), Timer(2).
_SEQ_KINDS = {
    "LocalActivity": "local activity",
    "Activity": "activity",
    "Timer": "timer",
    "ChildWorkflow": "child workflow",
    "SignalExternal": "signal",
}
_CORE_MESSAGE = re.compile(r'message: "((?:[^"\\]|\\.)*)"')
_EVENT_ID = re.compile(r"HistoryEvent\(id: (\d+)")
_SEQUENCE = re.compile(r"\b(LocalActivity|Activity|Timer|ChildWorkflow|SignalExternal)\((\d+)\)")
_RECORDED_NAME = re.compile(r"(?:recorded marker|recorded event|scheduled event) '([^']+)'")
_ISSUED = (
    re.compile(r"of ((?:local )?activity) command '([^']+)'"),  # a command of another name
    re.compile(r"(\w+) machine does not handle this event"),  # a command of another kind
    re.compile(r"No command scheduled for event"),  # the code issued fewer commands
)


def issued_instead(message: str) -> str | None:
    """What the current code issued where the history has the located event, if the message says."""
    named = _ISSUED[0].search(message)
    if named:
        return f"{named.group(1)} {named.group(2)!r}"
    kind = _ISSUED[1].search(message)
    if kind:
        what = kind.group(1).lower()
        return f"{'an' if what[0] in 'aeiou' else 'a'} {what} command"
    if _ISSUED[2].search(message):
        return "no command"
    return None


@dataclass
class CommandEvent:
    event_id: int
    event_type: str  # e.g. ACTIVITY_TASK_SCHEDULED
    kind: str  # activity, local activity, timer, patch, signal, child workflow, search attributes, end
    name: str  # activity type, timer id, patch id, signal name ...
    seq: int | None = None  # the command's sequence number within its kind, when known

    def describe(self) -> str:
        return (
            f"event {self.event_id} {self.event_type} ({self.kind} {self.name!r})"
            if self.name
            else f"event {self.event_id} {self.event_type} ({self.kind})"
        )


@dataclass
class ReplayReport:
    workflow_id: str
    run_id: str | None
    workflow_type: str
    ok: bool
    error_kind: str | None = None  # "nondeterminism" or "failure"
    message: str | None = None  # the core SDK's own words
    issued: str | None = None  # what the current code did instead, when the message says
    event: CommandEvent | None = None  # the recorded event the mismatch is about, if it could be found
    # When the message names the event only by name and several recorded events share it: their
    # ids (``event`` is the first of them, which may not be the one).
    candidates: list[int] = field(default_factory=list)
    commands: list[CommandEvent] = field(default_factory=list)  # what the history recorded, in order

    def to_json(self) -> dict:
        return {
            "workflow_id": self.workflow_id,
            "run_id": self.run_id,
            "workflow_type": self.workflow_type,
            "ok": self.ok,
            "error_kind": self.error_kind,
            "message": self.message,
            "issued": self.issued,
            "event": self.event.__dict__ if self.event else None,
            "candidates": self.candidates or None,
            "recorded_commands": [c.__dict__ for c in self.commands] if not self.ok else None,
        }


def default_workflows() -> list[type]:
    """The worker's registered workflows (both task queues): what production runs, so what a
    history must replay on."""
    from workflows.registry import GEPA_WORKFLOWS, WORKFLOWS

    return [*WORKFLOWS, *GEPA_WORKFLOWS]


def _event_name(event) -> str:
    return EventType.Name(event.event_type).removeprefix("EVENT_TYPE_")


def command_events(history: WorkflowHistory) -> list[CommandEvent]:
    """The commands the run recorded, each named; local activities and timers numbered by sequence."""
    found: list[CommandEvent] = []
    activity_seq = 0
    for event in history.events:
        if event.event_type not in COMMAND_EVENTS:
            continue
        kind, name, seq = "", "", None
        et = event.event_type
        if et == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            activity_seq += 1
            kind, name, seq = (
                "activity",
                event.activity_task_scheduled_event_attributes.activity_type.name,
                activity_seq,
            )
        elif et == EventType.EVENT_TYPE_MARKER_RECORDED:
            attrs = event.marker_recorded_event_attributes
            kind, name, seq = _marker(attrs)
        elif et == EventType.EVENT_TYPE_TIMER_STARTED:
            timer_id = event.timer_started_event_attributes.timer_id
            kind, name, seq = "timer", timer_id, int(timer_id) if timer_id.isdigit() else None
        elif et == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
            kind, name = (
                "child workflow",
                event.start_child_workflow_execution_initiated_event_attributes.workflow_type.name,
            )
        elif et == EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED:
            kind, name = "signal", event.signal_external_workflow_execution_initiated_event_attributes.signal_name
        elif et == EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
            fields = event.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields
            kind, name = "search attributes", ",".join(sorted(fields))
        else:
            kind = "end" if "WORKFLOW_EXECUTION" in _event_name(event) else "command"
        found.append(CommandEvent(event.event_id, _event_name(event), kind, name, seq))
    return found


def _marker(attrs) -> tuple[str, str, int | None]:
    if attrs.marker_name == "core_local_activity" and "data" in attrs.details and attrs.details["data"].payloads:
        try:
            data = json.loads(attrs.details["data"].payloads[0].data)
            return "local activity", str(data.get("activity_type", "")), data.get("seq")
        except ValueError:
            pass
    if attrs.marker_name == "core_patch" and "patch-data" in attrs.details and attrs.details["patch-data"].payloads:
        try:
            return "patch", str(json.loads(attrs.details["patch-data"].payloads[0].data).get("id", "")), None
        except ValueError:
            pass
    return "marker", attrs.marker_name, None


def core_message(error: BaseException) -> str:
    """The SDK core's message inside the Python error's ``Failure { ... }`` dump, or the error text."""
    text = str(error)
    match = _CORE_MESSAGE.search(text)
    return match.group(1).replace('\\"', '"') if match else text


def locate(message: str, commands: Sequence[CommandEvent]) -> CommandEvent | None:
    """The recorded command event a core nondeterminism message is about."""
    match = _EVENT_ID.search(message)
    if match:
        event_id = int(match.group(1))
        return next((c for c in commands if c.event_id == event_id), None) or CommandEvent(event_id, "?", "event", "")
    match = _SEQUENCE.search(message)
    if match:
        kind, seq = _SEQ_KINDS[match.group(1)], int(match.group(2))
        return next((c for c in commands if c.kind == kind and c.seq == seq), None)
    match = _RECORDED_NAME.search(message)
    if match:
        return next((c for c in commands if c.name == match.group(1)), None)
    return None


async def _iterate(histories: Iterable[WorkflowHistory]) -> AsyncIterator[WorkflowHistory]:
    for history in histories:
        yield history


async def replay(
    histories: Sequence[WorkflowHistory], workflows: Sequence[type] | None = None, on_result=None
) -> list[ReplayReport]:
    """Replay each history against ``workflows`` (default: the worker's); one report per history.
    ``on_result(report)`` is called as each one finishes (progress)."""
    replayer = Replayer(
        workflows=list(workflows or default_workflows()),
        data_converter=pydantic_data_converter,
        runtime=_quiet_runtime(),
    )
    reports: list[ReplayReport] = []
    with _cyclic_collector_paused():
        async with replayer.workflow_replay_iterator(_iterate(histories)) as results:
            async for result in results:
                reports.append(_report(result.history, result.replay_failure))
                if on_result is not None:
                    on_result(reports[-1])
                gc.collect()  # here, on this thread, outside any sandboxed import: memory stays bounded
    return reports


@contextmanager
def _cyclic_collector_paused() -> Iterator[None]:
    """No cyclic garbage collection while the workflow sandbox imports a workflow's modules.

    Before Python 3.12 a module's import lock is not re-entrant, and the sandbox's importer takes
    it even for modules already loaded. A finalizer of cyclic garbage that imports (an unclosed
    transport's or a never-awaited coroutine's warning) can run at any allocation, on the thread
    holding that lock: the import then fails with ``KeyError: <thread id>`` inside importlib and
    the replay with "Failed validating workflow", though the history is fine. Garbage is collected
    between histories instead, on the caller's thread."""
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


_runtime: Runtime | None = None


def _quiet_runtime() -> Runtime:
    """A runtime whose core logs go to the ``temporalio.core`` logger, not to stdout: the core
    logs every nondeterminism as a WARN line, and the report says it better (and --json needs a
    clean stdout)."""
    global _runtime
    if _runtime is None:
        _runtime = Runtime(
            telemetry=TelemetryConfig(
                logging=LoggingConfig(
                    filter=TelemetryFilter(core_level="ERROR", other_level="ERROR"),
                    forwarding=LogForwardingConfig(logger=logging.getLogger("temporalio.core")),
                )
            )
        )
    return _runtime


def _report(history: WorkflowHistory, failure: Exception | None) -> ReplayReport:
    first = history.events[0] if history.events else None
    started = first.workflow_execution_started_event_attributes if first is not None else None
    report = ReplayReport(
        workflow_id=history.workflow_id,
        run_id=(started.original_execution_run_id or None) if started is not None else None,
        workflow_type=started.workflow_type.name if started is not None else "?",
        ok=failure is None,
    )
    if failure is not None:
        from temporalio.workflow import NondeterminismError

        report.error_kind = "nondeterminism" if isinstance(failure, NondeterminismError) else "failure"
        report.message = core_message(failure)
        report.commands = command_events(history)
        report.event = locate(report.message, report.commands)
        report.issued = issued_instead(report.message)
        if report.event is not None and not _EVENT_ID.search(report.message):
            same = [c.event_id for c in report.commands if (c.kind, c.name) == (report.event.kind, report.event.name)]
            report.candidates = same if len(same) > 1 else []
    return report


def parse_since(text: str) -> timedelta:
    """``30s``, ``15m``, ``6h``, ``1d``, ``2w`` → a timedelta (ValueError with the accepted forms)."""
    match = re.fullmatch(r"\s*(\d+)\s*([smhdw])\s*", text or "")
    if not match or int(match.group(1)) == 0:
        raise ValueError(f"{text!r} is not a duration: use a positive number and a unit s, m, h, d or w (e.g. 1d, 6h)")
    unit = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}[match.group(2)]
    return timedelta(**{unit: int(match.group(1))})


def failed_query(since: timedelta, now: datetime | None = None) -> str:
    """The visibility query of the workflow runs that failed within ``since``."""
    cutoff = (now or datetime.now(UTC)) - since
    return f'ExecutionStatus = "Failed" AND CloseTime > "{cutoff.strftime("%Y-%m-%dT%H:%M:%SZ")}"'


async def fetch_histories(client: Client, workflow_ids: Sequence[tuple[str, str | None]]) -> list[WorkflowHistory]:
    """The histories of these (workflow id, run id or None for the latest run)."""
    return [await client.get_workflow_handle(wid, run_id=rid).fetch_history() for wid, rid in workflow_ids]


async def failed_runs(client: Client, since: timedelta, limit: int) -> list[tuple[str, str | None]]:
    """(workflow id, run id) of the runs that failed within ``since``, newest first, at most ``limit``."""
    found: list[tuple[str, str | None]] = []
    async for execution in client.list_workflows(failed_query(since), limit=limit):
        found.append((execution.id, execution.run_id))
    return found
