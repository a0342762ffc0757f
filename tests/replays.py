"""Replaying a finished run's history against the current workflow code, the way ``genesis
workflows replay`` does (``cli.replay``), for the tests that check a workflow they just
ran is deterministic."""

from __future__ import annotations

from collections.abc import Sequence

from temporalio.client import WorkflowHistory

from cli import replay as replaying


async def assert_replays(history: WorkflowHistory, workflows: Sequence[type] | None = None) -> None:
    """``history`` replays on ``workflows`` (default: every workflow the worker registers)."""
    [report] = await replaying.replay([history], workflows)
    assert report.ok, report.to_json()
