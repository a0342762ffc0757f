"""Is a database's schema at the head of Genesis' migrations? Alembic's current revision of the
database against the head of ``genesis/migrations``, so that a process says at start what is
wrong and which command fixes it, instead of failing every statement later."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import make_url, text
from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine
from sqlalchemy.pool import NullPool

from genesis.db.session import WAIT_S

ALEMBIC_INI = Path(__file__).resolve().parent.parent / "alembic.ini"
MIGRATE_COMMAND = "python -m genesis.db.migrate"
# Exit status of a process that refuses to start on a schema behind its code (sysexits' EX_CONFIG).
EXIT_SCHEMA_BEHIND = 78

log = logging.getLogger("genesis.db")


def alembic_config(database_url: str | None = None) -> Config:
    config = Config(str(ALEMBIC_INI))
    if database_url:
        config.set_main_option("sqlalchemy.url", database_url)
    return config


@lru_cache
def _migrations() -> tuple[str, frozenset[str]]:
    """The head revision(s) of this code's migrations and every revision they know."""
    script = ScriptDirectory.from_config(alembic_config())
    known = frozenset(revision.revision for revision in script.walk_revisions())
    return ",".join(sorted(script.get_heads())), known


@dataclass(frozen=True)
class SchemaState:
    current: str | None  # Alembic's revision of the database; None: never migrated
    head: str  # the newest revision this code's migrations reach

    @property
    def at_head(self) -> bool:
        return self.current == self.head

    @property
    def behind(self) -> bool:
        """Older than this code: never migrated, or at a revision before the head."""
        return not self.at_head and (self.current is None or self.current in _migrations()[1])

    @property
    def ahead(self) -> bool:
        """At a revision this code does not know: migrated by a newer version of Genesis."""
        return not self.at_head and not self.behind

    def describe(self) -> str:
        if self.behind:
            return f"schema behind: at {self.current or 'no revision (never migrated)'}, head {self.head}"
        if self.ahead:
            return f"schema ahead: at {self.current}, which this code's migrations (head {self.head}) do not know"
        return f"schema at head {self.head}"


async def read_schema_state(connection: AsyncConnection) -> SchemaState:
    """Alembic's own record, its ``alembic_version`` table, read directly: no table, never migrated.
    (Alembic's MigrationContext reads the same and logs two info lines per call.)"""
    heads: list[str] = []
    if await connection.scalar(text("SELECT to_regclass('alembic_version') IS NOT NULL")):
        heads = list(await connection.scalars(text("SELECT version_num FROM alembic_version")))
    return SchemaState(current=",".join(sorted(heads)) or None, head=_migrations()[0])


async def schema_state_of(database_url: str) -> SchemaState:
    """The schema state over a connection of its own (no pool left behind)."""
    engine = create_async_engine(database_url, poolclass=NullPool, connect_args={"timeout": WAIT_S})
    try:
        async with engine.connect() as connection:
            return await read_schema_state(connection)
    finally:
        await engine.dispose()


def shown_url(database_url: str) -> str:
    """The URL as it may be logged: the password masked."""
    return make_url(database_url).render_as_string(hide_password=True)


def behind_message(state: SchemaState, database_url: str) -> str:
    return (
        f"the database {shown_url(database_url)} is not migrated for this code ({state.describe()}): "
        f"run `{MIGRATE_COMMAND}` with the same GENESIS_DATABASE_URL (`make run` migrates it itself)"
    )


async def log_schema_at_start(database_url: str) -> SchemaState | None:
    """Read and log the schema state at a process's start: an error when it is behind, a warning
    when it is ahead or cannot be read (Postgres down: the process's statements say so later)."""
    try:
        state = await schema_state_of(database_url)
    except Exception as exc:  # noqa: BLE001 - a database that is down is reported, not fatal here
        log.warning(
            "could not read the schema of %s at start: %s: %s",
            shown_url(database_url),
            type(exc).__name__,
            exc,
        )
        return None
    if state.behind:
        log.error("%s", behind_message(state, database_url))
    elif state.ahead:
        log.warning("%s; statements of this older code may fail", state.describe())
    else:
        log.info("database %s, %s", shown_url(database_url), state.describe())
    return state


async def exit_if_schema_behind(database_url: str) -> None:
    """For the processes whose every job needs the schema (worker, engine, Watcher): refuse to
    start on a schema behind the code, with the command that fixes it in the log."""
    state = await log_schema_at_start(database_url)
    if state is not None and state.behind:
        raise SystemExit(EXIT_SCHEMA_BEHIND)
