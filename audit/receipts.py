"""Signed receipts in Postgres: issuing them into one linear chain, the public keys, and reading.

``issue`` signs a receipt (genesis/signing.py) naming the hash of the latest receipt and writes it
in the caller's transaction, under a transaction-scoped advisory lock: issuers in every process
take turns, so the chain never forks. Each receipt has a ``topic`` (what it is about, once: a
mutation's stage, a journal record's event), so a retried activity or a replayed projection issues
nothing twice. The engine carries every receipt into the world's journal
(audit/journal_outbox.py), where the audit projection and the agents' timelines find them.

The chain's head (``receipt_chain_head``) is a signed ``chain.head`` statement of its newest receipt
and its length, re-signed in the transaction of every receipt and, by the engine, once a minute
(``refresh_head``): a listing that carries it shows when it was cut at its end, and the head's
time how fresh that claim is."""

from __future__ import annotations

import base64
import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, select, text, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from genesis import canonical, signing
from genesis.db.models import ReceiptChainHead, ReceiptKey, ReceiptRow

log = logging.getLogger("genesis.receipts")
CHAIN_LOCK = 0x67656E72_63707473 & 0x7FFFFFFFFFFFFFFF  # pg_advisory_xact_lock key of the chain
HEAD_ROW = 1
HEAD_REFRESH_S = 60.0  # a quiet chain's head is re-signed this often: its time says it is current


async def _lock_chain(session: AsyncSession) -> None:
    await session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": CHAIN_LOCK})


async def issue(
    session: AsyncSession,
    keyring: signing.Keyring,
    kind: str,
    topic: str,
    subject: Mapping[str, Any],
    body: Mapping[str, Any],
) -> dict[str, Any] | None:
    """Sign and record a receipt in the session's transaction (the caller commits); None when the
    topic has one already."""
    await _lock_chain(session)
    if await session.scalar(select(ReceiptRow.id).where(ReceiptRow.topic == topic)) is not None:
        return None
    prev = await session.scalar(select(ReceiptRow.hash).order_by(ReceiptRow.seq.desc()).limit(1))
    clean_subject = {k: v for k, v in subject.items() if v is not None}
    receipt = signing.sign(keyring, kind, clean_subject, dict(body), prev)
    session.add(
        ReceiptRow(
            id=receipt["id"],
            kind=kind,
            key_id=receipt["key_id"],
            mutation_id=clean_subject.get("mutation_id"),
            agent_id=clean_subject.get("agent_id"),
            trait_name=clean_subject.get("trait_name"),
            topic=topic,
            issued_at=datetime.fromisoformat(receipt["issued_at"].replace("Z", "+00:00")),
            hash=signing.receipt_hash(receipt),
            prev_hash=prev,
            body=canonical.encode(receipt),
        )
    )
    await session.flush()
    counted = await _count_at(session, prev)
    count = counted + 1 if counted is not None else await _count_all(session)
    await _sign_head(session, keyring, signing.receipt_hash(receipt), count)
    return receipt


async def _count_at(session: AsyncSession, newest: str | None) -> int | None:
    """The chain's length by its head, if the head names ``newest`` (None otherwise: a chain older
    than its first head is counted once)."""
    row = (
        await session.execute(
            select(ReceiptChainHead.newest_hash, ReceiptChainHead.count).where(ReceiptChainHead.id == HEAD_ROW)
        )
    ).first()
    if row is None or row[0] != newest:
        return None
    return int(row[1])


async def _count_all(session: AsyncSession) -> int:
    return await session.scalar(select(func.count()).select_from(ReceiptRow)) or 0


async def _sign_head(session: AsyncSession, keyring: signing.Keyring, newest: str, count: int) -> None:
    statement = signing.sign_head(keyring, newest, count)
    values = {
        "newest_hash": newest,
        "count": count,
        "signed_at": datetime.fromisoformat(statement["issued_at"].replace("Z", "+00:00")),
        "body": canonical.encode(statement),
    }
    await session.execute(
        insert(ReceiptChainHead)
        .values(id=HEAD_ROW, **values)
        .on_conflict_do_update(index_elements=[ReceiptChainHead.id], set_=values)
    )


async def refresh_head(
    sessions: async_sessionmaker, keyring: signing.Keyring, max_age_s: float = HEAD_REFRESH_S
) -> bool:
    """Re-sign the chain's head when it is older than ``max_age_s`` (True if it was): a head's time
    then says the chain had no newer receipt a minute ago, not only when its last one was issued."""
    async with sessions() as session, session.begin():
        signed_at = await session.scalar(select(ReceiptChainHead.signed_at).where(ReceiptChainHead.id == HEAD_ROW))
        if signed_at is not None and (datetime.now(UTC) - signed_at).total_seconds() < max_age_s:
            return False
        await _lock_chain(session)  # then read the chain as it is: no issuer is between
        newest = await session.scalar(select(ReceiptRow.hash).order_by(ReceiptRow.seq.desc()).limit(1))
        if newest is None:
            return False  # no chain yet
        counted = await _count_at(session, newest)
        await _sign_head(session, keyring, newest, counted if counted is not None else await _count_all(session))
        return True


async def head(session: AsyncSession) -> bytes | None:
    """The chain's signed head, its canonical bytes (None before the first receipt)."""
    return await session.scalar(select(ReceiptChainHead.body).where(ReceiptChainHead.id == HEAD_ROW))


async def publish_public_keys(sessions: async_sessionmaker, keyring: signing.Keyring) -> None:
    """Every public key of the keyring into ``receipt_keys`` (what ``GET /v1/keys`` serves); the
    keyring's keys other than its current one are marked retired (they still verify what they
    signed). Safe when several processes publish at once (the worker and the engine start together),
    and a retired key stays retired: a process that loaded the keyring before a rotation cannot make
    its old key current again."""
    now = datetime.now(UTC)
    async with sessions() as session, session.begin():
        for kid, raw in sorted(keyring.public_keys().items()):
            retired = None if kid == keyring.current else now
            await session.execute(
                insert(ReceiptKey).values(key_id=kid, public_key=raw, retired_at=retired).on_conflict_do_nothing()
            )
            if retired is not None:
                await session.execute(
                    update(ReceiptKey)
                    .where(ReceiptKey.key_id == kid, ReceiptKey.retired_at.is_(None))
                    .values(retired_at=retired)
                )


class Signer:
    """A process's keyring, whose public keys are published (once) before its first receipt."""

    def __init__(self, sessions: async_sessionmaker, keyring: signing.Keyring) -> None:
        self.sessions = sessions
        self.keyring = keyring
        self._published = False

    async def ready(self) -> signing.Keyring:
        if not self._published:  # the API serves them (GET /v1/keys) without the private keys
            await publish_public_keys(self.sessions, self.keyring)
            self._published = True
        return self.keyring


async def public_keys(session: AsyncSession) -> list[ReceiptKey]:
    return list((await session.scalars(select(ReceiptKey).order_by(ReceiptKey.created_at))).all())


def as_json(row: ReceiptRow) -> dict[str, Any]:
    """A receipt for clients: its fields (``sig`` base64), its hash, and ``cbor``: the exact canonical
    bytes that were signed over and hashed, base64, to verify byte for byte."""
    out = signed_json(row.body, row.hash)
    out["seq"] = row.seq
    out["journal_seq"] = row.journal_seq
    return out


def signed_json(body: bytes, known_hash: str | None = None) -> dict[str, Any]:
    """A signed record's fields (``sig`` base64), its hash (``known_hash`` when the row stores it)
    and its exact bytes (``cbor``, base64)."""
    receipt = canonical.decode(body)
    out = {k: v for k, v in receipt.items() if k != "sig"}
    out["sig"] = base64.b64encode(receipt["sig"]).decode()
    out["hash"] = known_hash or signing.receipt_hash(receipt)
    out["cbor"] = base64.b64encode(body).decode()
    return out


def from_json(data: Mapping[str, Any]) -> dict[str, Any]:
    """The receipt (``sig`` as bytes) of :func:`as_json`'s form. From ``cbor`` when present, so the
    bytes checked are the bytes signed, and then the fields shown beside it must say the same
    (ReceiptInvalid names the first that does not): what a reader sees is what was verified."""
    if data.get("cbor") is None:
        receipt = {k: v for k, v in data.items() if k in signing.FIELDS}
        if isinstance(receipt.get("sig"), str):
            receipt["sig"] = _base64(receipt["sig"], "sig")
        return receipt
    if not isinstance(data["cbor"], str):
        raise signing.ReceiptInvalid("cbor must be base64 text")
    try:
        receipt = canonical.decode(_base64(data["cbor"], "cbor"))
    except canonical.NonCanonical as exc:
        raise signing.ReceiptInvalid(f"cbor is not a receipt's canonical bytes: {exc}") from None
    if not isinstance(receipt, dict):
        raise signing.ReceiptInvalid("cbor does not hold a receipt (a map)")
    for name in signing.FIELDS:
        if name not in data:
            continue
        signed = receipt.get(name)
        shown = base64.b64encode(signed).decode() if name == "sig" and isinstance(signed, bytes) else signed
        if data[name] != shown or type(data[name]) is not type(shown):
            raise signing.ReceiptInvalid(f"its {name} differs from the {name} in its signed bytes (cbor)")
    return receipt


def _base64(text: str, name: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except ValueError:
        raise signing.ReceiptInvalid(f"{name} is not base64") from None
