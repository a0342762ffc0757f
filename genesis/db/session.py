"""Async engine and session factory, one per process and database URL."""

from __future__ import annotations

from functools import lru_cache

from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker, create_async_engine


@lru_cache
def get_engine(database_url: str) -> AsyncEngine:
    return create_async_engine(database_url, pool_size=10, max_overflow=20, pool_pre_ping=True)


def get_sessionmaker(database_url: str) -> async_sessionmaker:
    return async_sessionmaker(get_engine(database_url), expire_on_commit=False)
