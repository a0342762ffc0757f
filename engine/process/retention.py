"""The journal's retention in the engine process (journal/retention.py says what is kept).

Every ``RETENTION_EVERY_S`` the keeper reads the manifest's ``retention`` in force; a change takes
effect at once, journaled as a ``journal.retention`` record (its audit event names the policy
before and after). Then the closed segments no kept snapshot, restart, replay or audit projection
needs are archived or deleted as the policy says, each batch with a signed receipt
(``journal.archived`` / ``journal.deleted``, carried into the journal like every receipt), and the
journal's disk use is published for ``GET /v1/journal/status`` — with a warning in the log when
the disk holding it has less than ``GENESIS_JOURNAL_DISK_WARN_FREE`` free.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import asdict

import redis.asyncio as aioredis
from prometheus_client import Counter, Gauge
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker

from audit import projection, receipts
from genesis import signing
from genesis.config import Settings
from genesis.redis_keys import JOURNAL_STATUS
from governance.manifest import Retention
from governance.records import manifests
from journal import retention

from .journaling import WorldJournal
from .loop import Engine

log = logging.getLogger("genesis.engine.retention")
DISK_FREE = Gauge("genesis_engine_journal_disk_free_bytes", "Free space on the disk that holds the journal")
JOURNAL_BYTES = Gauge("genesis_engine_journal_bytes", "The journal on disk, by part", ["part"])
RETIRED = Counter(
    "genesis_engine_journal_segments_retired", "Journal segments retention archived or deleted", ["action"]
)
RETENTION_EVERY_S = 10.0
WARN_EVERY_S = 600.0
STATUS_TTL_S = 120
KIND_RETENTION = "journal.retention"


def policy_of(governed: Retention) -> retention.Policy:
    return retention.Policy(
        keep_last=governed.keep_last,
        keep_every=governed.keep_every,
        keep_ticks=governed.keep_ticks,
        segments=governed.segments,
    )


class RetentionKeeper:
    def __init__(
        self,
        settings: Settings,
        engine: Engine,
        journal: WorldJournal,
        database: AsyncEngine,
        sessions: async_sessionmaker,
        keyring: signing.Keyring,
        redis: aioredis.Redis,
    ) -> None:
        self.settings = settings
        self.engine = engine
        self.journal = journal
        self.database = database
        self.sessions = sessions
        self.keyring = keyring
        self.redis = redis
        self._last = 0.0
        self._warned = 0.0
        self.retired_segments = 0
        self.disk_free_bytes: int | None = None

    async def maybe_run(self) -> None:
        """A round when the last is ``RETENTION_EVERY_S`` old (called about once a second), up to
        the last record the audit projection has read: the segment holding it stays, since the
        projection goes on from there."""
        now = time.monotonic()
        if now - self._last < RETENTION_EVERY_S:
            return
        self._last = now
        projected_seq, _ = await projection.position(self.sessions)
        await self.run(projected_seq)

    async def run(self, projected_seq: int) -> None:
        await self._follow_the_manifest()
        retiring = await self.journal.retire(projected_seq)
        if retiring:
            await self._receipt([entry for _, entry in retiring])
            await self.journal.remove([segment for segment, _ in retiring])
        await self.publish()

    async def _follow_the_manifest(self) -> None:
        async with self.database.connect() as conn:
            current = await manifests.current(conn, self.settings)
        policy = policy_of(current.manifest.retention)
        before = self.journal.policy
        if policy == before:
            return
        self.journal.policy = policy
        body = {"policy": asdict(policy), "previous": asdict(before), "manifest_version": current.version}
        self.engine.journal_events(KIND_RETENTION, [body])
        log.info("journal retention from manifest v%d: %s", current.version, policy.describe())

    async def _receipt(self, retired: list[retention.Archived]) -> None:
        action = "archived" if self.journal.policy.segments == "archive" else "deleted"
        first, last = retired[0], retired[-1]
        body = {
            "segments": [r.to_data() for r in retired],
            "first_seq": first.first_seq,
            "last_seq": last.last_seq,
            "first_tick": first.first_tick,
            "last_tick": last.last_tick,
            "policy": asdict(self.journal.policy),
        }
        topic = f"journal:{action}:{first.first_seq}-{last.last_seq}"
        async with self.sessions() as session, session.begin():
            await receipts.issue(session, self.keyring, f"journal.{action}", topic, {}, body)
        self.retired_segments += len(retired)
        RETIRED.labels(action).inc(len(retired))
        log.info(
            "journal: %s %d segment(s), records %d-%d (ticks %d-%d)",
            action,
            len(retired),
            first.first_seq,
            last.last_seq,
            first.first_tick,
            last.last_tick,
        )

    async def publish(self) -> None:
        usage = await asyncio.to_thread(self.journal.usage)
        disk = usage["disk"]
        self.disk_free_bytes = disk["free_bytes"]
        DISK_FREE.set(disk["free_bytes"])
        for part, value in (
            ("records", usage["records_bytes"]),
            ("snapshots", usage["snapshots_bytes"]),
            ("archive", usage["archive"]["bytes"]),
        ):
            JOURNAL_BYTES.labels(part).set(value)
        low = disk["free_bytes"] < disk["total_bytes"] * self.settings.journal.disk_warn_free
        usage["disk"]["low"] = low
        usage["updated_at"] = round(time.time(), 3)
        if low and time.monotonic() - self._warned > WARN_EVERY_S:
            self._warned = time.monotonic()
            log.warning(
                "the journal's disk is filling: %.1f GB free of %.1f GB (%s). Retention: %s. Archive or delete "
                "older segments (the manifest's retention.segments) or free the disk before it fills: the "
                "engine stops when it cannot journal.",
                disk["free_bytes"] / 1e9,
                disk["total_bytes"] / 1e9,
                self.settings.journal_dir,
                self.journal.policy.describe(),
            )
        await self.redis.set(JOURNAL_STATUS, json.dumps(usage, separators=(",", ":")), ex=STATUS_TTL_S)
