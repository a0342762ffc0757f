"""Async engine and session factory, one per process and database URL: every Postgres access
of a process (ORM sessions and Core statements alike) goes through its pool.

No pre-ping: it costs three round trips (BEGIN, ``;``, ROLLBACK) at every checkout, more than
the API's propose path spends on its own statements. A connection the server closed (a restart)
is known to asyncpg without asking the server, and is replaced at checkout instead. One that
breaks while in use fails its request once (an API answers 503, an activity is retried), and
SQLAlchemy then replaces every pooled connection opened before it.
"""

from __future__ import annotations

from functools import lru_cache

from sqlalchemy import event
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker, create_async_engine

# Connecting, or waiting for a free pooled connection, fails after this long instead of hanging
# the request or activity (an API answers 503; Temporal retries an activity).
WAIT_S = 5.0


@lru_cache
def get_engine(database_url: str) -> AsyncEngine:
    engine = create_async_engine(
        database_url, pool_size=10, max_overflow=20, pool_timeout=WAIT_S, connect_args={"timeout": WAIT_S}
    )
    event.listen(engine.sync_engine, "checkout", _replace_if_closed)
    return engine


def _replace_if_closed(_dbapi_connection, connection_record, _proxy) -> None:
    """A checkout check with no round trip: asyncpg knows when the server closed the connection."""
    if connection_record.driver_connection.is_closed():
        raise DisconnectionError("the server closed this pooled connection")  # the pool connects anew


def get_sessionmaker(database_url: str) -> async_sessionmaker:
    return async_sessionmaker(get_engine(database_url), expire_on_commit=False)
