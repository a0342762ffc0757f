"""Report each telemetry snapshot to the MutationWorkflows observing a live trait.

The workflow waits for its observation window with ``wait_condition``; these signals are how
the world's ticks reach it. A workflow that has already ended is remembered and skipped."""

from __future__ import annotations

import logging

from temporalio.client import Client
from temporalio.service import RPCError

from genesis.effects import WorldSample
from genesis.ids import mutation_workflow_id

log = logging.getLogger("genesis.engine.observers")


class ObservationReporter:
    def __init__(self, client: Client):
        self._client = client
        self._finished: set[str] = set()

    async def report(self, sample: WorldSample, live: dict[str, str]) -> int:
        """Signal ``world_snapshot`` to the workflow of each live trait's mutation; returns how many."""
        sent = 0
        for mutation_id in sorted(set(live.values()) - self._finished):
            try:
                await self._client.get_workflow_handle(mutation_workflow_id(mutation_id)).signal(
                    "world_snapshot", sample
                )
                sent += 1
            except RPCError as exc:  # completed (kept, rolled back) or unknown: stop reporting to it
                self._finished.add(mutation_id)
                log.debug("not reporting to %s any more: %s", mutation_id, exc)
        return sent

    async def report_to(self, workflow_id: str, sample: WorldSample) -> bool:
        """Signal ``world_snapshot`` to one workflow by id (an evolution cycle observing a
        world-parameter change); False once it has ended."""
        if workflow_id in self._finished:
            return False
        try:
            await self._client.get_workflow_handle(workflow_id).signal("world_snapshot", sample)
            return True
        except RPCError as exc:
            self._finished.add(workflow_id)
            log.debug("not reporting to %s any more: %s", workflow_id, exc)
            return False
