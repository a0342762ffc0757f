"""Apply Alembic migrations programmatically (used by the bootstrap and the tests)."""

from __future__ import annotations

import sys
from pathlib import Path

from alembic import command
from alembic.config import Config

ALEMBIC_INI = Path(__file__).resolve().parent.parent / "alembic.ini"


def upgrade_to_head(database_url: str) -> None:
    config = Config(str(ALEMBIC_INI))
    config.set_main_option("sqlalchemy.url", database_url)
    command.upgrade(config, "head")


if __name__ == "__main__":
    from genesis.config import get_settings

    upgrade_to_head(sys.argv[1] if len(sys.argv) > 1 else get_settings().database_url)
    print("migrations: database is at head")
