"""Logging for every Genesis process: structlog over the standard library, JSON or console.

``configure_logging("worker", settings)`` once at process start. Every ``logging`` logger of the
process (ours, uvicorn's, the Temporal SDK's) then goes through one structlog formatter, so a
line carries ``service``, ``logger``, ``level`` and ``timestamp``, plus:

- inside a Temporal activity (also a sync one on the thread pool: the SDK copies the context) or
  a ``workflow.logger`` / ``activity.logger`` call: ``workflow_id``, ``run_id``, ``activity``,
  ``attempt``, and the ``mutation_id`` / ``task_id`` the workflow id names;
- any of ``mutation_id``, ``workflow_id``, ``task_id``, ``trait_name`` passed as ``extra=`` or
  bound with ``structlog.contextvars.bound_contextvars``.

GENESIS_LOG_FORMAT=json writes one JSON object per line (compose); console (default) is for
people (`make run`).
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog
from temporalio import activity, workflow

from genesis.config import Settings
from genesis.ids import mutation_workflow_id
from genesis.workflow_api import rollback_workflow_id, task_workflow_id

# Fields a caller may pass as logging ``extra=`` that belong in the structured line.
CONTEXT_FIELDS = ("mutation_id", "workflow_id", "task_id", "trait_name", "agent_id")
# Workflow id prefix -> the id field it carries (mutation-<mutation_id>, rollback-<mutation_id>, task-<task_id>).
WORKFLOW_ID_PREFIXES = (
    (mutation_workflow_id(""), "mutation_id"),
    (rollback_workflow_id(""), "mutation_id"),
    (task_workflow_id(""), "task_id"),
)
UVICORN_LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.access")


def ids_from_workflow_id(workflow_id: str) -> dict[str, str]:
    for prefix, field in WORKFLOW_ID_PREFIXES:
        if workflow_id.startswith(prefix):
            return {field: workflow_id[len(prefix) :]}
    return {}


def _temporal_context(record: logging.LogRecord | None) -> dict[str, Any]:
    """Workflow/activity identity of the current log call, if it comes from Temporal code."""
    details = getattr(record, "temporal_activity", None) or getattr(record, "temporal_workflow", None)
    if details:
        found = {
            "workflow_id": details.get("workflow_id"),
            "run_id": details.get("workflow_run_id") or details.get("run_id"),
        }
        if "activity_type" in details:
            found.update(activity=details["activity_type"], attempt=details.get("attempt"))
        return {k: v for k, v in found.items() if v is not None}
    if activity.in_activity():
        info = activity.info()
        return {
            "workflow_id": info.workflow_id,
            "run_id": info.workflow_run_id,
            "activity": info.activity_type,
            "attempt": info.attempt,
        }
    return {}


def add_context_ids(_logger: Any, _method: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    for key, value in _temporal_context(event_dict.get("_record")).items():
        event_dict.setdefault(key, value)
    workflow_id = event_dict.get("workflow_id")
    if isinstance(workflow_id, str):
        for key, value in ids_from_workflow_id(workflow_id).items():
            event_dict.setdefault(key, value)
    return event_dict


def _add_service(service: str):
    def add(_logger: Any, _method: str, event_dict: dict[str, Any]) -> dict[str, Any]:
        event_dict.setdefault("service", service)
        return event_dict

    return add


class _GenesisHandler(logging.StreamHandler):
    """Marks the root handler this module installed, so configuring twice replaces it."""


def configure_logging(service: str, settings: Settings) -> None:
    json_lines = settings.log.format == "json"
    shared = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        _add_service(service),
        add_context_ids,
    ]
    # Console tracebacks as Python prints them: structlog's default (rich, with every frame's
    # locals) took tens of ms and ~600 lines per failed activity, e.g. every gatekeeper rejection.
    renderer = (
        structlog.processors.JSONRenderer()
        if json_lines
        else structlog.dev.ConsoleRenderer(
            colors=sys.stderr.isatty(), exception_formatter=structlog.dev.plain_traceback
        )
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[structlog.stdlib.ExtraAdder(allow=CONTEXT_FIELDS), *shared],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            *([structlog.processors.format_exc_info] if json_lines else []),  # a string: no locals
            renderer,
        ],
    )
    handler = _GenesisHandler(sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _GenesisHandler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(settings.log.level)
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    if json_lines:
        # uvicorn installs its own plain-text handlers; send its lines through ours instead.
        for name in UVICORN_LOGGERS:
            logger = logging.getLogger(name)
            logger.handlers.clear()
            logger.propagate = True
    # The ids are fields of the line (add_context_ids): the SDK need not append them to the message too.
    activity.logger.activity_info_on_message = False
    workflow.logger.workflow_info_on_message = False
