"""Selection after the verdict, from the engine's side: at each telemetry snapshot, publish the live
ledger (engine/core/ledger.py) and act on it.

- A kept trait whose ledger turned decisively harmful is rolled back late, reason
  ``late verdict: …``, through the same path as any rollback (pipeline/rollbacks.py: the
  RollbackWorkflow, with its receipt). Not with ``GENESIS_VERDICT_MODE=off`` (selection off).
- A kept trait no Molbot has carried for the manifest's ``selection.extinction_ticks`` goes
  extinct (an ExtinctionWorkflow, activities/selection.py).

A trait still under its verdict (``activated``) is left to it. Each is asked for once per engine
process (the workflows' ids make a repeated start a no-op anyway); nothing here is on the tick
path, and a Postgres or Temporal hiccup only delays it to the next snapshot."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import redis.asyncio as aioredis
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker
from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy

from genesis import redis_keys as keys
from genesis.config import Settings
from genesis.db.models import Mutation
from genesis.dto import FateRequest, MutationStatus
from genesis.workflow_api import EXTINCTION_WORKFLOW, extinction_workflow_id, search_attributes
from governance.records import manifests
from pipeline.rollbacks import WorkflowNotRunning, request_rollback

if TYPE_CHECKING:
    from .loop import Engine

log = logging.getLogger("genesis.engine.selection")
RULES_TTL_S = 5.0


class SelectionKeeper:
    def __init__(
        self,
        settings: Settings,
        engine: Engine,
        redis: aioredis.Redis,
        database: AsyncEngine,
        temporal: Callable[[], Awaitable[Client]],
    ) -> None:
        self._settings = settings
        self._engine = engine
        self._redis = redis
        self._database = database
        self._sessions = async_sessionmaker(database, expire_on_commit=False)
        self._temporal = temporal
        self._rules: tuple[float, int] | None = None  # (read at, extinction_ticks)
        self._asked: set[str] = set()  # mutation ids whose late rollback or extinction was asked for
        self.late_rollbacks = 0
        self.extinctions = 0

    async def __call__(self, snapshot: dict[str, Any]) -> None:
        ledger = self._engine.ledger
        live = self._engine.trait_versions  # trait -> mutation id of the version running
        self._asked &= set(live.values())  # one that left and came back may be asked about again
        summary = ledger.summary()
        for name, entry in summary["traits"].items():
            entry["mutation_id"] = live.get(name)
        await self._redis.set(keys.LEDGER_TRAITS, json.dumps(summary, separators=(",", ":")))
        extinction_ticks = await self._extinction_ticks()
        harmful = {} if self._settings.verdict.mode == "off" else {v.trait: v for v in ledger.late_verdicts()}
        uncarried = set(ledger.uncarried(extinction_ticks))
        wanted = {live[n] for n in (set(harmful) | uncarried) if n in live and live[n] not in self._asked}
        if not wanted:
            return
        async with self._sessions() as session:
            records = (await session.scalars(select(Mutation).where(Mutation.mutation_id.in_(wanted)))).all()
        client = await self._temporal()
        for record in sorted(records, key=lambda r: r.mutation_id):
            if record.status != MutationStatus.kept.value:
                continue  # under its verdict still, or gone already
            name = record.trait_name
            if name in harmful:
                await self._roll_back(client, record, harmful[name].reason)
            else:
                await self._go_extinct(client, record, extinction_ticks)

    async def _extinction_ticks(self) -> int:
        """The manifest's selection.extinction_ticks, read again at most every RULES_TTL_S (a
        fast-forwarded world takes several snapshots a second)."""
        now = time.monotonic()
        if self._rules is None or now - self._rules[0] > RULES_TTL_S:
            async with self._database.connect() as conn:
                rules = (await manifests.current(conn, self._settings)).manifest.selection
            self._rules = (now, rules.extinction_ticks)
        return self._rules[1]

    async def _roll_back(self, client: Client, record: Mutation, reason: str) -> None:
        try:
            await request_rollback(client, self._settings, record, reason)
        except WorkflowNotRunning:
            return
        self._asked.add(record.mutation_id)
        self.late_rollbacks += 1
        log.info("late rollback of %s (%s): %s", record.trait_name, record.mutation_id, reason)

    async def _go_extinct(self, client: Client, record: Mutation, ticks: int) -> None:
        reason = f"no Molbot has carried it for {ticks:,} ticks (the manifest's selection.extinction_ticks)"
        await client.start_workflow(
            EXTINCTION_WORKFLOW,
            FateRequest(mutation_id=record.mutation_id, trait_name=record.trait_name, reason=reason),
            id=extinction_workflow_id(record.mutation_id),
            task_queue=self._settings.task_queue,
            search_attributes=search_attributes(agent_id=record.agent_id, trait_name=record.trait_name),
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        )
        self._asked.add(record.mutation_id)
        self.extinctions += 1
        log.info("%s (%s) goes extinct: %s", record.trait_name, record.mutation_id, reason)
