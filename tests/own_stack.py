"""Settings of a stack of its own for tests that run a real engine on a world they shape: a fresh
Postgres database ``<suite db>_<name>``, a Redis db of its own (flushed), a folder of trait files
and a task queue of its own, on the session's Temporal server. The suite's registry holds the traits other modules left
live; such a stack starts with none.

The Redis db is ``GENESIS_TEST_OWN_STACK_REDIS_URL``, by default the db three below the suite's
(``GENESIS_TEST_REDIS_URL``): set it when test runs with different suite dbs share one Redis."""

from __future__ import annotations

import os
from urllib.parse import urlsplit, urlunsplit

import redis.asyncio as aioredis

from cli.processes import free_port
from genesis.config import Settings
from genesis.db.migrate import fresh_database
from tests.services import TEST_DATABASE_URL, TEST_REDIS_URL, fresh_journal, set_rules


def with_path(url: str, path: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=path))


def redis_db_below(offset: int) -> str:
    """The URL of the Redis db ``offset`` below the suite's (tests that need a registry of their own)."""
    suite_db = int(urlsplit(TEST_REDIS_URL).path.lstrip("/") or 0)
    return with_path(TEST_REDIS_URL, f"/{(suite_db - offset) % 16}")


async def own_settings(settings: Settings, name: str, *, revision: str | None = "head", **changes) -> Settings:
    """The suite's settings pointed at a fresh database (migrated to ``revision``, None: not at
    all), Redis db and trait-file folder, with ``changes`` on top."""
    database_url = f"{TEST_DATABASE_URL}_{name}"
    redis_url = os.environ.get("GENESIS_TEST_OWN_STACK_REDIS_URL") or redis_db_below(3)
    await fresh_database(database_url, revision)
    redis = aioredis.from_url(redis_url)
    await redis.flushdb()
    await redis.aclose()
    own = settings.override(
        database_url=database_url,
        redis_url=redis_url,
        task_queue=f"genesis-test-{name}",
        api_port=free_port(),
        mutations_dir=settings.mutations_dir.parent / f"{settings.mutations_dir.name}-{name}",
        **changes,
    )
    return own if "journal_dir" in changes else fresh_journal(own, name)


__all__ = ["own_settings", "set_rules"]
