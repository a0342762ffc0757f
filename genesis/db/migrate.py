"""Apply Alembic migrations programmatically (used by the bootstrap, `make run` and the tests).

``python -m genesis.db.migrate [URL]`` migrates URL, or else the database of GENESIS_DATABASE_URL."""

from __future__ import annotations

import asyncio
import sys

from alembic import command
from sqlalchemy import make_url, text
from sqlalchemy.exc import ProgrammingError
from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine
from tenacity import AsyncRetrying, retry_if_exception, stop_after_delay, wait_exponential

from genesis.db.schema import alembic_config


def upgrade(database_url: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(database_url), revision)


def upgrade_to_head(database_url: str) -> None:
    upgrade(database_url, "head")


async def fresh_database(database_url: str, revision: str | None = "head") -> None:
    """Create the database anew (dropped first if it exists), migrated to ``revision`` (None: an
    empty, never migrated one): for tests and benchmarks that need a database of their own."""
    url = make_url(database_url)
    admin = create_async_engine(url.set(database="postgres"), isolation_level="AUTOCOMMIT")
    try:
        async with admin.connect() as conn:
            await _drop(conn, str(url.database))
            await conn.execute(text(f'CREATE DATABASE "{url.database}"'))
    finally:
        await admin.dispose()
    if revision is not None:
        await asyncio.to_thread(upgrade, database_url, revision)


def _autovacuum_in_the_way(error: BaseException) -> bool:
    # FORCE may not terminate an autovacuum worker on the database unless the role is a superuser
    # (or in pg_signal_backend); the worker is done within moments, so wait for it instead.
    return isinstance(error, ProgrammingError) and "whose process is being terminated" in str(error)


async def _drop(conn: AsyncConnection, database: str) -> None:
    async for attempt in AsyncRetrying(
        retry=retry_if_exception(_autovacuum_in_the_way),
        wait=wait_exponential(multiplier=0.05, max=1.0),
        stop=stop_after_delay(30),
        reraise=True,
    ):
        with attempt:
            await conn.execute(text(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)'))


if __name__ == "__main__":
    from genesis.config import get_settings

    upgrade_to_head(sys.argv[1] if len(sys.argv) > 1 else get_settings().database_url)
    print("migrations: database is at head")
