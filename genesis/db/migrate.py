"""Apply Alembic migrations programmatically (used by the bootstrap, `make run` and the tests).

``python -m genesis.db.migrate [URL]`` migrates URL, or else the database of GENESIS_DATABASE_URL."""

from __future__ import annotations

import sys

from alembic import command

from genesis.db.schema import alembic_config


def upgrade(database_url: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(database_url), revision)


def upgrade_to_head(database_url: str) -> None:
    upgrade(database_url, "head")


if __name__ == "__main__":
    from genesis.config import get_settings

    upgrade_to_head(sys.argv[1] if len(sys.argv) > 1 else get_settings().database_url)
    print("migrations: database is at head")
