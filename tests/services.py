"""Where the stack layer's services are (``GENESIS_TEST_DATABASE_URL``, ``GENESIS_TEST_REDIS_URL``)
and what tests that shape their own world do with them: a fresh journal, new rules."""

from __future__ import annotations

import os
import uuid

from sqlalchemy.ext.asyncio import create_async_engine

from genesis.config import Settings
from governance.records import manifests

TEST_DATABASE_URL = os.environ.get(
    "GENESIS_TEST_DATABASE_URL", "postgresql+asyncpg://genesis:genesis@127.0.0.1:5432/genesis_test"
)
TEST_REDIS_URL = os.environ.get("GENESIS_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
# The engine tests' own db, flushed by them: must differ from the suite's (and other runs' on one machine).
ENGINE_REDIS_URL = os.environ.get("GENESIS_TEST_ENGINE_REDIS_URL", "redis://127.0.0.1:6379/13")


def fresh_journal(settings: Settings, name: str) -> Settings:
    """``settings`` with a journal directory nobody used: an engine started on it begins a new
    world, as every engine did before the journal (tests expect their own world, not the last
    module's)."""
    return settings.override(journal_dir=settings.mutations_dir.parent / f"journal-{name}-{uuid.uuid4().hex[:8]}")


KEEP_ALL = {"max_live_traits": 1000, "extinction_ticks": 10_000_000}  # the manifest's largest bounds


async def set_rules(database_url: str, cause: str, **changes) -> None:
    """A new manifest version with ``changes`` (section -> fields) on the one in force."""
    database = create_async_engine(database_url)
    try:
        async with database.begin() as conn:
            await manifests.amend(conn, cause, **changes)
    finally:
        await database.dispose()
