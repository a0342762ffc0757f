"""Start mutation workflows off the request path: the proposal row is the outbox.

``POST /api/mutations/propose`` answers 202 as soon as the mutation is recorded in Postgres (status
``queued``); its MutationWorkflow is started right after, in the background. A start that fails
(Temporal down or slow) loses nothing: the row stays ``queued`` and a sweeper in every API process
starts the workflow of each ``queued`` row untouched for ``workflow_start_stale_s`` — claimed with
``FOR UPDATE SKIP LOCKED`` so two API processes do not pick the same rows, and started with the
conflict policy USE_EXISTING so a workflow that did start is never started twice.

Why: a workflow start costs the Temporal server ~12 ms of CPU; on a small machine that cost, not
the API's, set the propose latency under load. A row stays ``queued`` until its workflow's first
step, so a row the sweeper sees may also belong to a started workflow whose worker is busy or
down — restarting it is then a no-op.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta

from sqlalchemy import select, update
from temporalio.client import Client, WorkflowHandle
from temporalio.common import SearchAttributePair, TypedSearchAttributes, WorkflowIDConflictPolicy

from genesis.config import Settings
from genesis.db.models import Mutation
from genesis.dto import MutationInput, MutationStatus
from genesis.workflow_api import MUTATION_WORKFLOW, SA_AGENT_ID, SA_STATUS, SA_TRAIT_NAME
from pipeline.mutation_proposals import mutation_input

log = logging.getLogger("genesis.api.starter")
SWEEP_BATCH = 100


async def start_mutation_workflow(
    client: Client, settings: Settings, mutation: MutationInput, workflow_id: str
) -> WorkflowHandle:
    """Start (or find running: USE_EXISTING) the MutationWorkflow of a recorded mutation. A closed
    earlier run of the same id does not block a new one (the default reuse policy): that is how
    POST /api/mutations/{id}/retry re-runs a mutation whose workflow failed."""
    return await client.start_workflow(
        MUTATION_WORKFLOW,
        mutation,
        id=workflow_id,
        task_queue=settings.task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        search_attributes=TypedSearchAttributes(
            [
                SearchAttributePair(SA_AGENT_ID, mutation.agent_id),
                SearchAttributePair(SA_TRAIT_NAME, mutation.trait_name),
                SearchAttributePair(SA_STATUS, MutationStatus.queued.value),
            ]
        ),
    )


class WorkflowStarter:
    def __init__(self, services) -> None:
        self._services = services
        self._settings: Settings = services.settings
        self._pending: set[asyncio.Task] = set()
        # Starts in flight at once: a burst of proposals is admitted at once, while the Temporal
        # server's share of the machine stays bounded (the rest queue here, then in the sweep).
        self._slots = asyncio.Semaphore(services.settings.workflow.start_concurrency)
        self._sweeper: asyncio.Task | None = None
        self.started = 0
        self.failed = 0
        self.swept = 0

    def start_soon(self, record: Mutation) -> None:
        """Start ``record``'s workflow in the background (the caller has committed the row)."""
        task = asyncio.create_task(self._start(mutation_input(record, self._settings), record.workflow_id))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _start(self, mutation: MutationInput, workflow_id: str) -> bool:
        async with self._slots:
            return await self._start_now(mutation, workflow_id)

    async def _start_now(self, mutation: MutationInput, workflow_id: str) -> bool:
        try:
            await start_mutation_workflow(await self._services.temporal(), self._settings, mutation, workflow_id)
        except Exception as exc:  # the row stays queued: the sweeper tries again
            self.failed += 1
            log.warning(
                "could not start %s yet (%s); it stays queued and will be retried",
                workflow_id,
                exc,
                extra={"workflow_id": workflow_id, "mutation_id": mutation.mutation_id},
            )
            return False
        self.started += 1
        return True

    # -- the sweeper ---------------------------------------------------------------------------
    def start_sweeping(self) -> None:
        self._sweeper = asyncio.create_task(self._sweep_forever())

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(self._settings.workflow.start_sweep_s)
            try:
                await self.sweep()
            except Exception as exc:  # Postgres away: next round
                log.warning("workflow start sweep failed: %s", exc)

    async def sweep(self) -> int:
        """(Re)start the workflows of queued rows nobody touched for a while; returns how many."""
        stale = datetime.now(UTC) - timedelta(seconds=self._settings.workflow.start_stale_s)
        async with self._services.sessions() as session:
            claimed = (
                select(Mutation.mutation_id)
                .where(Mutation.status == MutationStatus.queued.value, Mutation.updated_at < stale)
                .order_by(Mutation.created_at)
                .limit(SWEEP_BATCH)
                .with_for_update(skip_locked=True)
                .scalar_subquery()
            )
            rows = (
                await session.scalars(
                    update(Mutation)
                    .where(Mutation.mutation_id.in_(claimed))
                    .values(updated_at=datetime.now(UTC))
                    .returning(Mutation)
                    .execution_options(synchronize_session=False)
                )
            ).all()
            await session.commit()
        for record in rows:
            if await self._start(mutation_input(record, self._settings), record.workflow_id):
                self.swept += 1
        return len(rows)

    async def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            await asyncio.gather(self._sweeper, return_exceptions=True)
        if self._pending:  # let starts in flight finish (a row left queued is swept later anyway)
            await asyncio.wait(self._pending, timeout=10)
