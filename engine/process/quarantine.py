"""A quarantined trait leaves the mutation lifecycle, not only the engine's memory.

When the trait runner quarantines a live trait (engine/process/live_traits.py) it calls
:meth:`QuarantineReporter.report`, which returns at once; a background task then

1. announces it on the Evolution Feed (``trait_quarantined``, best effort, as before);
2. records it in Postgres (``trait_quarantines``, this engine is its only writer): a restarted
   engine never loads that version again (``registry.rebuild_from_postgres`` leaves it out, and
   :meth:`holds` answers the runner), and the API stops listing it as live at once;
3. has its mutation rolled back with reason ``quarantined: <why>`` (pipeline/rollbacks.py): the
   running MutationWorkflow is signalled, a mutation already ``kept`` gets a RollbackWorkflow.

Steps 2 and 3 are retried with exponential backoff (Postgres or Temporal down) for up to
``GENESIS_ENGINE_QUARANTINE_REPORT_RETRY_S``; nothing here runs on the tick path. At start,
:meth:`load` reads the recorded quarantines and finishes step 3 for any an earlier engine recorded
but could not report (its mutation still ``activated`` or ``kept``)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import redis.asyncio as aioredis
from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import async_sessionmaker
from temporalio.client import Client
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_not_exception_type,
    stop_after_delay,
    wait_exponential_jitter,
)

from evolution import feed
from genesis.config import Settings
from genesis.db.models import Mutation, TraitQuarantine
from genesis.dto import MutationStatus
from genesis.ids import mutation_workflow_id
from pipeline.registry import RegistryEntry
from pipeline.rollbacks import RollbackRoute, WorkflowNotRunning, request_rollback

log = logging.getLogger("genesis.engine.quarantine")

REASON_PREFIX = "quarantined: "
MAX_WHY_CHARS = 300  # the why may quote a trait's own exception text: keep records and logs bounded
FEED_ATTEMPTS = 3
STILL_LIVE = (MutationStatus.activated.value, MutationStatus.kept.value)


class NothingToRollBack(Exception):
    """The mutation's record says there is no live workflow or version to roll back (not retried)."""


class AwaitingRollback(Exception):
    """Asked for; the record does not say rolled_back yet (looked at again, with backoff)."""


def rollback_reason(why: str) -> str:
    return REASON_PREFIX + (why if len(why) <= MAX_WHY_CHARS else why[: MAX_WHY_CHARS - 1] + "…")


class QuarantineReporter:
    """The engine's side of quarantine (one per engine process)."""

    def __init__(
        self,
        settings: Settings,
        redis: aioredis.Redis,
        sessions: async_sessionmaker,
        temporal: Callable[[], Awaitable[Client]],
    ):
        self._settings = settings
        self._redis = redis
        self._sessions = sessions
        self._temporal = temporal  # connects lazily: the world never waits for Temporal
        self._held: set[str] = set()  # mutation ids quarantined (recorded earlier, or by this engine)
        self._tasks: set[asyncio.Task] = set()

    def holds(self, mutation_id: str) -> bool:
        """Whether this mutation's version is quarantined: the runner never loads it."""
        return mutation_id in self._held

    async def load(self) -> int:
        """Read the recorded quarantines (once, at start; on failure the world starts without them:
        the registry rebuild that failed with it would have left them out). Returns how many."""
        try:
            async with self._sessions() as session:
                rows = (
                    await session.execute(
                        select(TraitQuarantine, Mutation.status).outerjoin(
                            Mutation, Mutation.mutation_id == TraitQuarantine.mutation_id
                        )
                    )
                ).all()
        except Exception as exc:
            log.warning("could not read the recorded quarantines: %s", exc)
            return 0
        for row, status in rows:
            self._held.add(row.mutation_id)
            if status in STILL_LIVE:  # an earlier engine recorded it but could not report it
                self._spawn(self._roll_back(row.mutation_id, REASON_PREFIX + row.reason))
        return len(rows)

    async def report(self, entry: RegistryEntry, why: str) -> None:
        """The runner quarantined ``entry``: returns at once, the reporting runs in the background."""
        self._held.add(entry.mutation_id)
        self._spawn(self._report(entry, why))

    async def close(self, timeout_s: float = 3.0) -> None:
        """Give reports in flight a moment to finish (engine shutdown), then cancel the rest: what
        was recorded is reported again by the next engine's :meth:`load`."""
        if not self._tasks:
            return
        _, pending = await asyncio.wait(set(self._tasks), timeout=timeout_s)
        for task in pending:
            task.cancel()
        if pending:
            log.warning("%d quarantine report(s) unfinished at shutdown", len(pending))
            await asyncio.wait(pending, timeout=1.0)

    # -- the background report -------------------------------------------------------------------
    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _report(self, entry: RegistryEntry, why: str) -> None:
        reason = rollback_reason(why)
        await self._announce(entry, reason)
        try:
            await self._retrying(lambda: self._record(entry, reason[len(REASON_PREFIX) :]))
        except Exception as exc:
            log.error(
                "could not record the quarantine of %s (%s): %s",
                entry.trait_name,
                entry.mutation_id,
                exc,
                extra={"mutation_id": entry.mutation_id, "trait_name": entry.trait_name},
            )
        await self._roll_back(entry.mutation_id, reason)

    async def _announce(self, entry: RegistryEntry, reason: str) -> None:
        for attempt in range(1, FEED_ATTEMPTS + 1):
            try:
                await feed.publish(
                    self._redis,
                    "engine",
                    "trait_quarantined",
                    f"Trait '{entry.trait_name}' v{entry.version} {reason}",
                    mutation_id=entry.mutation_id,
                    workflow_id=mutation_workflow_id(entry.mutation_id),
                    trait_name=entry.trait_name,
                    version=entry.version,
                )
                return
            except Exception as exc:  # the feed is best effort; the record and the rollback go on
                if attempt == FEED_ATTEMPTS:
                    log.warning("could not publish the quarantine of %s to the feed: %s", entry.trait_name, exc)
                else:
                    await asyncio.sleep(attempt)

    async def _record(self, entry: RegistryEntry, why: str) -> None:
        async with self._sessions() as session, session.begin():
            await session.execute(
                insert(TraitQuarantine)
                .values(mutation_id=entry.mutation_id, trait_name=entry.trait_name, version=entry.version, reason=why)
                .on_conflict_do_nothing(index_elements=[TraitQuarantine.mutation_id])
            )
        log.info(
            "recorded the quarantine of %s v%d (%s)",
            entry.trait_name,
            entry.version,
            entry.mutation_id,
            extra={"mutation_id": entry.mutation_id, "trait_name": entry.trait_name},
        )

    async def _roll_back(self, mutation_id: str, reason: str) -> None:
        """Have the mutation rolled back, and follow it until its record says so: a signal that
        reaches the workflow just after it decided ``kept`` is ignored there, and then the
        RollbackWorkflow does it."""
        rollback = RollbackAttempts(self._read, self._temporal, self._settings, mutation_id, reason)
        try:
            await self._retrying(rollback.attempt)
        except NothingToRollBack as exc:
            log.info("quarantine of %s: %s", mutation_id, exc, extra={"mutation_id": mutation_id})
        except Exception as exc:
            log.error(
                "could not have %s rolled back after its quarantine: %s",
                mutation_id,
                exc,
                extra={"mutation_id": mutation_id},
            )

    async def _read(self, mutation_id: str) -> Mutation | None:
        async with self._sessions() as session:
            return await session.scalar(select(Mutation).where(Mutation.mutation_id == mutation_id))

    async def _retrying(self, attempt: Callable[[], Awaitable[None]]) -> None:
        async for trying in AsyncRetrying(
            stop=stop_after_delay(self._settings.engine.quarantine_report_retry_s),
            wait=wait_exponential_jitter(initial=0.5, max=30),
            retry=retry_if_not_exception_type(NothingToRollBack),
            reraise=True,
            before_sleep=_log_retry,
        ):
            with trying:
                await attempt()


def _log_retry(state: RetryCallState) -> None:
    problem = state.outcome.exception() if state.outcome else None
    if isinstance(problem, AwaitingRollback):
        log.debug("quarantine: %s", problem)
    else:
        log.warning("quarantine report failed (attempt %d), retrying: %s", state.attempt_number, problem)


class RollbackAttempts:
    """One mutation's rollback after its quarantine, one attempt per call (retried by the
    reporter): it ends when the record is ``rolled_back``, or when there is nothing to roll back."""

    def __init__(
        self,
        read: Callable[[str], Awaitable[Mutation | None]],
        temporal: Callable[[], Awaitable[Client]],
        settings: Settings,
        mutation_id: str,
        reason: str,
    ):
        self._read, self._temporal, self._settings = read, temporal, settings
        self._mutation_id, self._reason = mutation_id, reason
        self._signalled = False
        self._not_running = 0

    async def attempt(self) -> None:
        record = await self._read(self._mutation_id)
        if record is None:
            raise NothingToRollBack("no mutation record (registered outside the pipeline): nothing to roll back")
        if record.status == MutationStatus.rolled_back.value:
            return
        if record.status not in STILL_LIVE:
            raise NothingToRollBack(f"its mutation is {record.status}: nothing to roll back")
        if record.status == MutationStatus.activated.value and self._signalled:
            raise AwaitingRollback(f"{self._mutation_id}: signalled; waiting for its workflow to roll it back")
        client = await self._temporal()
        try:
            route = await request_rollback(client, self._settings, record, self._reason)
        except WorkflowNotRunning as exc:  # it may have been recorded kept since it was read
            self._not_running += 1
            if self._not_running > 1:
                raise NothingToRollBack(
                    "its workflow is not running and it was not kept (ended by hand?): nothing to signal"
                ) from exc
            raise AwaitingRollback(f"{self._mutation_id}: its workflow ended between read and signal") from exc
        log.info(
            "quarantine of %s: rollback requested (%s)",
            self._mutation_id,
            route.value,
            extra={"mutation_id": self._mutation_id},
        )
        if route == RollbackRoute.signalled:
            self._signalled = True
            raise AwaitingRollback(f"{self._mutation_id}: signalled; waiting for its workflow to roll it back")
