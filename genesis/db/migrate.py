"""Apply Alembic migrations programmatically (used by the bootstrap, `make run` and the tests).

``python -m genesis.db.migrate [URL]`` migrates URL, or else the database of GENESIS_DATABASE_URL."""

from __future__ import annotations

import asyncio
import sys

from alembic import command
from sqlalchemy import make_url, text
from sqlalchemy.ext.asyncio import create_async_engine

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
            await conn.execute(text(f'DROP DATABASE IF EXISTS "{url.database}" WITH (FORCE)'))
            await conn.execute(text(f'CREATE DATABASE "{url.database}"'))
    finally:
        await admin.dispose()
    if revision is not None:
        await asyncio.to_thread(upgrade, database_url, revision)


if __name__ == "__main__":
    from genesis.config import get_settings

    upgrade_to_head(sys.argv[1] if len(sys.argv) > 1 else get_settings().database_url)
    print("migrations: database is at head")
