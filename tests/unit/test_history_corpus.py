"""The replay corpus covers every workflow type a worker registers: each has at least one
recorded history in tests/histories/ (GEPA's in gepa/), replayed by `make test`."""

from __future__ import annotations

import json

from genesis.config import PROJECT_ROOT
from workflows.registry import GEPA_WORKFLOWS, WORKFLOWS

HISTORIES = PROJECT_ROOT / "tests" / "histories"


def recorded_type(path) -> str:
    first = json.loads(path.read_text())["events"][0]
    return first["workflowExecutionStartedEventAttributes"]["workflowType"]["name"]


def test_every_registered_workflow_type_has_a_recorded_history():
    recorded = {recorded_type(p) for p in [*HISTORIES.glob("*.json"), *HISTORIES.glob("gepa/*.json")]}
    registered = {w.__temporal_workflow_definition.name for w in [*WORKFLOWS, *GEPA_WORKFLOWS]}
    assert registered - recorded == set(), f"no recorded history of {sorted(registered - recorded)}"
