"""Doubles for the workflow unit tests (tests/unit/test_*_workflow.py): activities replaced by
name record their calls and fail the attempts a test scripts, each run on a task queue of its own."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from temporalio import activity


def unique_queue(prefix: str) -> str:
    """A task queue no other test's worker polls."""
    return f"{prefix}-unit-{uuid.uuid4().hex[:8]}"


def fail_scripted(failures: Sequence[BaseException], attempt: int) -> None:
    """Raise the failure scripted for this attempt (``failures[0]`` for the first), if there is one."""
    if attempt <= len(failures):
        raise failures[attempt - 1]


def record_call(calls: list, name: str, failures: Sequence[BaseException] = ()) -> int:
    """Record the running activity's call as ``(name, attempt)``, raise the failure scripted for
    the attempt, and return the attempt."""
    attempt = activity.info().attempt
    calls.append((name, attempt))
    fail_scripted(failures, attempt)
    return attempt
