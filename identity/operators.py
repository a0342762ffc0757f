"""Operator keys: who may run the world rather than only act in it (publish and resolve tasks,
schedules, forced triggers, roll back any mutation, replace another agent's trait).

Keys are created on the API's host with ``genesis operator create-key`` (written straight to
Postgres: there is no endpoint that makes one), shown once and stored like agents' keys
(identity/apikeys.py). A revoked key stays in the table for the record and opens nothing."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import async_sessionmaker

from genesis.db.models import OperatorKey
from identity import apikeys

MAX_NAME = 64


@dataclass(frozen=True)
class Operator:
    """An operator as a request sees it: the key's name and prefix (for logs and records)."""

    name: str
    key_prefix: str

    @property
    def label(self) -> str:
        """How records name the operator (e.g. a mutation's replacement_approved_by)."""
        return f"operator '{self.name}'"


class OperatorKeyError(ValueError):
    pass


def check_name(name: str) -> str:
    name = name.strip()
    if not name or len(name) > MAX_NAME or not name.isprintable():
        raise OperatorKeyError(f"the key's name must be 1-{MAX_NAME} printable characters")
    return name


async def create_key(sessions: async_sessionmaker, pepper: bytes, name: str) -> tuple[apikeys.IssuedKey, OperatorKey]:
    """A new operator key; the IssuedKey's ``key`` exists only in the return value."""
    name = check_name(name)
    for _ in range(3):  # a clash of random prefixes is rare; draw again
        issued = apikeys.issue(pepper, apikeys.OPERATOR_KEY_HEAD)
        row = OperatorKey(
            key_prefix=issued.prefix,
            name=name,
            key_hash=issued.digest,
            key_scheme=apikeys.KEY_SCHEME,
            created_at=datetime.now(UTC),
        )
        async with sessions() as session:
            session.add(row)
            try:
                await session.commit()
                return issued, row
            except IntegrityError:
                await session.rollback()
    raise OperatorKeyError("could not allocate a unique key prefix; try again")


async def list_keys(sessions: async_sessionmaker) -> list[OperatorKey]:
    async with sessions() as session:
        return list((await session.scalars(select(OperatorKey).order_by(OperatorKey.created_at))).all())


async def revoke_key(sessions: async_sessionmaker, key_prefix: str) -> OperatorKey:
    """Revoke the key with this prefix (idempotent); OperatorKeyError if there is none."""
    async with sessions() as session:
        row = await session.scalar(select(OperatorKey).where(OperatorKey.key_prefix == key_prefix))
        if row is None:
            raise OperatorKeyError(
                f"no operator key with prefix {key_prefix!r} (genesis operator list-keys shows them)"
            )
        if row.revoked_at is None:
            await session.execute(
                update(OperatorKey).where(OperatorKey.key_prefix == key_prefix).values(revoked_at=datetime.now(UTC))
            )
            await session.commit()
            await session.refresh(row)
        return row


async def verify(sessions: async_sessionmaker, pepper: bytes, key: str) -> Operator | None:
    """The operator of a valid, unrevoked key, or None."""
    prefix = apikeys.prefix_of(key, apikeys.OPERATOR_KEY_HEAD)
    row = None
    if prefix is not None:
        async with sessions() as session:
            row = await session.scalar(select(OperatorKey).where(OperatorKey.key_prefix == prefix))
    matched = apikeys.matches_row(pepper, key, row.key_hash if row is not None else None)  # compared either way
    if not matched or row is None or row.revoked_at is not None:
        return None
    return Operator(name=row.name, key_prefix=row.key_prefix)
