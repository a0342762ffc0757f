"""The forms of the ids a request carries (agents', tasks'), and path parameters: every id in a URL
has a known form, and a value that cannot have it (NUL, a path, 5,000 characters) is a 422 naming
the parameter before anything looks it up."""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import Path
from pydantic import AfterValidator

from evolution.schedules import SCHEDULE_ID_PATTERN
from genesis.ids import MUTATION_ID_PATTERN
from genesis.signing import RECEIPT_ID_PATTERN

AGENT_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,127}$")
TASK_ID_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
# Trigger ids: trg_<12 hex> (the Watcher's) or sch_<schedule id>-<run time> (a schedule's runs).
TRIGGER_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:+-]{0,119}$")


def _id_path(name: str, pattern: re.Pattern, form: str):
    def check(value: str) -> str:
        if not pattern.match(value):
            raise ValueError(f"{name} must be {form}")
        return value

    return Annotated[
        str,
        Path(description=f"{form[0].upper()}{form[1:]}", json_schema_extra={"pattern": pattern.pattern}),
        AfterValidator(check),
    ]


def check_task_id(value: str | None) -> str | None:
    """The task_id rule shared by proposals and task publication."""
    if value is not None and not TASK_ID_PATTERN.match(value):
        raise ValueError("task_id must be 1-64 characters: letters, digits, _ and -")
    return value


MutationIdPath = _id_path("mutation_id", MUTATION_ID_PATTERN, "'mut_' followed by 6-32 hex digits")
TaskIdPath = _id_path("task_id", TASK_ID_PATTERN, "1-64 characters: letters, digits, _ and -")
TriggerIdPath = _id_path(
    "trigger_id",
    TRIGGER_ID_PATTERN,
    "a trigger id: trg_<12 hex> (the Watcher's) or sch_<schedule>-<time> (a schedule's run)",
)
ReceiptIdPath = _id_path("receipt_id", RECEIPT_ID_PATTERN, "'rcpt_' followed by 24 hex digits")
ScheduleIdPath = _id_path(
    "schedule_id", SCHEDULE_ID_PATTERN, "1-64 letters, digits, '_', '.' or '-', starting with a letter or digit"
)
