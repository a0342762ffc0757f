"""The Postgres work of admitting a proposal, in as few round trips as the checks allow.

POST /api/mutations/propose is the API's hot write path. Through the ORM session it cost ~12
round trips per proposal (a pre-ping of BEGIN/;/ROLLBACK at each of two checkouts, BEGIN, the
query, COMMIT/ROLLBACK) and about half of the API's CPU per request. Here the same checks and
the same row take one pooled asyncpg connection, held for the whole admission, and plain
statements (prepared once per connection by asyncpg's statement cache): the live-trait lookup
and one ``INSERT ... ON CONFLICT DO NOTHING`` — each statement its own transaction, which is all
the row needs. The row written is the one the ORM model ``genesis.db.models.Mutation`` reads.

The pool skips asyncpg's reset query on release (``RESET ALL``, ``UNLISTEN *``, ...: one more
round trip): these connections only run the statements below, which change no session state;
an open transaction is still rolled back by asyncpg itself. A connection Postgres closed (a
restart) is replaced on the next acquire, as asyncpg's pool does for any closed connection.
"""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from typing import AsyncIterator

import asyncpg
from asyncpg.pool import PoolConnectionProxy
from sqlalchemy.engine import make_url

from genesis.dto import MutationStatus

ACQUIRE_TIMEOUT_S = 5.0
# The statements below run on a pooled connection (the proxy a pool hands out) or a plain one.
Connection = asyncpg.Connection | PoolConnectionProxy
_LIVE_TRAIT = ("SELECT v.version, v.mutation_id, m.agent_id FROM trait_versions v "
               "LEFT JOIN mutations m ON m.mutation_id = v.mutation_id WHERE v.trait_name = $1 AND v.status = 'active'")
_LATEST_TRAIT = "SELECT version, status FROM trait_versions WHERE trait_name = $1 ORDER BY version DESC LIMIT 1"
_PROPOSAL = ("SELECT mutation_id, status, code, trait_name, replaces_trait, replaces_version "
             "FROM mutations WHERE mutation_id = $1")
_INSERT = (
    "INSERT INTO mutations (mutation_id, agent_id, task_id, trait_name, goal, code, status, validation_log, "
    "workflow_id, client_ip, notify_url, replaces_trait, replaces_version, replacement_approved_by) "
    "VALUES ($1, $2, $3, $4, $5, $6, $7, '[]'::jsonb, $8, $9, $10, $11, $12, $13) "
    "ON CONFLICT (mutation_id) DO NOTHING RETURNING 1"
)


def asyncpg_dsn(database_url: str) -> str:
    """``postgresql+asyncpg://...`` (SQLAlchemy's form, GENESIS_DATABASE_URL) as asyncpg takes it."""
    return make_url(database_url).set(drivername="postgresql").render_as_string(hide_password=False)


async def _keep_session(_connection: asyncpg.Connection) -> None:
    """Release without the reset query: nothing here sets session state (see the module doc)."""


async def create_pool(database_url: str, max_size: int) -> asyncpg.Pool:
    """Connects lazily (min_size 0): the API starts, and reports health, while Postgres is down."""
    return await asyncpg.create_pool(asyncpg_dsn(database_url), min_size=0, max_size=max_size,
                                     reset=_keep_session)


async def warm(pool: asyncpg.Pool, connections: int) -> None:
    """Open ``connections`` connections and run the lookups once on each (an empty name matches
    nothing), which puts them in asyncpg's statement cache, so the first proposals pay for
    neither. Run in the background at startup: Postgres may be down, and then the first
    proposals connect (or answer 503)."""
    async def prepare() -> None:
        async with pool.acquire() as conn:
            await live_trait(conn, "")
            await proposal(conn, "")
    await asyncio.gather(*(prepare() for _ in range(connections)))


@asynccontextmanager
async def connection(pool: asyncpg.Pool) -> AsyncIterator[PoolConnectionProxy]:
    """A pooled connection; TimeoutError when none frees up (or connects) within ACQUIRE_TIMEOUT_S."""
    async with pool.acquire(timeout=ACQUIRE_TIMEOUT_S) as conn:
        yield conn


async def live_trait(conn: Connection, trait_name: str) -> asyncpg.Record | None:
    """(version, mutation_id, agent_id: its owner) of the trait's active version, if any."""
    return await conn.fetchrow(_LIVE_TRAIT, trait_name)


async def latest_trait(conn: Connection, trait_name: str) -> asyncpg.Record | None:
    """(version, status) of the trait's newest version, if any was ever activated."""
    return await conn.fetchrow(_LATEST_TRAIT, trait_name)


async def proposal(conn: Connection, mutation_id: str) -> asyncpg.Record | None:
    """What an idempotent retry is compared with: status, code, trait_name, replaces_*."""
    return await conn.fetchrow(_PROPOSAL, mutation_id)


async def insert_proposal(conn: Connection, *, mutation_id: str, agent_id: str, task_id: str | None,
                          trait_name: str, goal: str, code: str, workflow_id: str, client_ip: str | None,
                          notify_url: str | None, replaces_trait: str | None,
                          replaces_version: int | None, replacement_approved_by: str | None = None) -> bool:
    """Record a ``queued`` proposal; False when a row with this mutation_id exists already (the
    same Idempotency-Key, recorded by a concurrent request), which is then left as it was."""
    inserted = await conn.fetchval(
        _INSERT, mutation_id, agent_id, task_id, trait_name, goal, code, MutationStatus.queued.value,
        workflow_id, client_ip, notify_url, replaces_trait, replaces_version, replacement_approved_by,
    )
    return inserted is not None
