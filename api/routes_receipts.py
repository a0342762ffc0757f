"""Signed receipts: ``GET /v1/receipts/{id}``, ``GET /v1/receipts`` and ``GET /v1/keys``.

The API serves receipts and public keys; it holds no private key and signs nothing (the worker
signs the mutation pipeline's stages and audit exports, the engine the world's trait-set changes
and rollbacks). Verify them offline with ``genesis verify`` (docs/receipts.md).

Who reads what follows the records they vouch for: a mutation's stages are public, as its status
is (``GET /api/mutations/{id}/status``); the receipts of the world's journal and of audit exports
carry what the audit shows, so, like an agent's timeline, the agent they concern and operators read
them (anyone in GENESIS_AUTH=open without a key). The public keys are public."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response
from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic.config import JsonDict
from sqlalchemy import or_, select
from sqlalchemy.exc import SQLAlchemyError

from api.auth import API_KEY, OPERATOR_KEY, authenticate, operator_of
from api.deps import ServicesDep, SessionsDep
from api.errors import ApiError, Responses, invalid_field, unavailable
from api.paging import Cursor, Keyset, NextCursor, paged, whole
from api.params import ReceiptIdPath
from api.schemas import AGENT_ID_PATTERN, ErrorResponse
from genesis import signing
from genesis.db.models import ReceiptRow
from genesis.ids import MUTATION_ID_PATTERN
from pipeline import receipts

router = APIRouter(tags=["receipts"])
PAGES = Keyset("receipts", whole(2**63))
# Receipts anyone may read: the stages of a mutation, public like its status, and settled rounds,
# public like the round.
PUBLIC_KINDS = tuple(kind for kind in signing.KINDS if kind.startswith("mutation.")) + ("round.settled",)
WHO_READS = (
    "receipts of the world's journal and of audit exports are read by the agent they concern "
    "(X-API-Key) and operators (X-Operator-Key); those of mutation stages and settled rounds by anyone"
)
ERRORS: Responses = {
    422: {"model": ErrorResponse, "description": "Invalid fields (the detail names each one)"},
    503: {"model": ErrorResponse, "description": "Postgres unavailable"},
}
READ_ERRORS: Responses = {
    401: {"model": ErrorResponse, "description": "An invalid key was sent (INVALID_API_KEY, INVALID_OPERATOR_KEY)"},
}
# A real receipt, signed by the current key of EXAMPLE_KEYS (tests/unit/test_signing.py verifies it).
EXAMPLE_RECEIPT: JsonDict = {
    "v": 1,
    "id": "rcpt_306a324d2146c1b3bf736c11",
    "kind": "mutation.sandbox_verdict",
    "domain": "genesis/receipt/mutation.sandbox_verdict/v1",
    "key_id": "k_5a02454e05e7f91a",
    "prev": "9c1d0e5b7a3f4e2d8c6b1a0f9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d",
    "issued_at": "2026-11-27T01:37:10.123456Z",
    "subject": {
        "mutation_id": "mut_3fa2c1d4e5",
        "agent_id": "claude-external-1",
        "trait_name": "energy_hoarder",
        "code_hash": "5b2e0c9d8a7f6e5d4c3b2a1f0e9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d",
    },
    "body": {"verdict": "passed"},
    "sig": "Bf8FoWeFIYDNYe76n4a5yDK/CNVpFfM0a9AdbFXBpQHOtjcgWd5kBMWp5WgihO0HJK29gtQSQTy+yi7ehGTFBg==",
    "hash": "93015fd77d99e86dde5ffc5ba617bdba4947b9a244d04869a5c1de650b2f87ac",
    "seq": 42,
    "journal_seq": 1207,
    "cbor": (
        "qmF2AWJpZHgdcmNwdF8zMDZhMzI0ZDIxNDZjMWIzYmY3MzZjMTFjc2lnWEAF/wWhZ4UhgM1h7vqfhrnIMr8I1WkV8zRr0B1sVcGlAc62NyBZ"
        "3mQExanlaCKE7Qckrb2C1BJBPL7KLt6EZMUGZGJvZHmhZ3ZlcmRpY3RmcGFzc2VkZGtpbmR4GG11dGF0aW9uLnNhbmRib3hfdmVyZGljdGRw"
        "cmV2eEA5YzFkMGU1YjdhM2Y0ZTJkOGM2YjFhMGY5ZThkN2M2YjVhNGYzZTJkMWMwYjlhOGY3ZTZkNWM0YjNhMmYxZTBkZmRvbWFpbngrZ2Vu"
        "ZXNpcy9yZWNlaXB0L211dGF0aW9uLnNhbmRib3hfdmVyZGljdC92MWZrZXlfaWRya181YTAyNDU0ZTA1ZTdmOTFhZ3N1YmplY3SkaGFnZW50"
        "X2lkcWNsYXVkZS1leHRlcm5hbC0xaWNvZGVfaGFzaHhANWIyZTBjOWQ4YTdmNmU1ZDRjM2IyYTFmMGU5ZDhjN2I2YTVmNGUzZDJjMWIwYTlm"
        "OGU3ZDZjNWI0YTNmMmUxZGp0cmFpdF9uYW1lbmVuZXJneV9ob2FyZGVya211dGF0aW9uX2lkbm11dF8zZmEyYzFkNGU1aWlzc3VlZF9hdHgb"
        "MjAyNi0xMS0yN1QwMTozNzoxMC4xMjM0NTZa"
    ),
}
EXAMPLE_KEYS: JsonDict = {
    "keys": [
        {
            "key_id": "k_a8c3db14887a8928",
            "algorithm": "Ed25519",
            "public_key": "SpXXZ4hct0rvW5Ibb9n4XOt3HiSE47D7UL3/tLfElZs=",
            "created_at": "2026-11-20T08:00:00+00:00",
            "retired_at": "2026-11-27T01:00:00+00:00",
            "current": False,
        },
        {
            "key_id": "k_5a02454e05e7f91a",
            "algorithm": "Ed25519",
            "public_key": "A/0fs8zpjS0DVAn4l+u0orWuvwbhdtUXs895ogqnbMA=",
            "created_at": "2026-11-27T01:00:00+00:00",
            "retired_at": None,
            "current": True,
        },
    ]
}


class ReceiptModel(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [EXAMPLE_RECEIPT]})

    v: int = Field(description="The receipt format's version (1)")
    id: str = Field(description="'rcpt_' + 24 hex digits")
    kind: str = Field(description=f"One of {', '.join(signing.KINDS)}")
    domain: str = Field(description="genesis/receipt/<kind>/v1: the domain tag the signature covers")
    key_id: str = Field(description="The key that signed it: 'k_' + 16 hex digits of the sha256 of the public key")
    prev: str | None = Field(description="sha256 (hex) of the previous receipt in the chain; null for the first")
    issued_at: str = Field(description="When it was signed (UTC)")
    subject: dict[str, Any] = Field(description="What it is about: mutation, agent, trait, journal record")
    body: dict[str, Any] = Field(description="What happened: verdict, failure code, fitness, reason")
    sig: str = Field(description="The Ed25519 signature, base64")
    hash: str = Field(description="sha256 (hex) of the receipt's canonical CBOR")
    seq: int = Field(description="Its place in the chain")
    journal_seq: int | None = Field(description="The world journal's record that carries it (null: not yet)")
    cbor: str = Field(description="The receipt's exact canonical CBOR, base64: what was signed (with sig) and hashed")


class ChainHeadModel(BaseModel):
    v: int
    id: str
    kind: str = Field(description=f"{signing.HEAD_KIND!r}")
    domain: str = Field(description=f"{signing.domain(signing.HEAD_KIND)}")
    key_id: str
    prev: str = Field(description="sha256 (hex) of the chain's newest receipt when it was signed")
    issued_at: str = Field(description="When it was signed: with every receipt, and once a minute on a quiet chain")
    subject: dict[str, Any] = Field(description="Empty")
    body: dict[str, Any] = Field(description="count: how many receipts the chain held")
    sig: str = Field(description="The Ed25519 signature, base64")
    hash: str
    cbor: str = Field(description="Its exact canonical CBOR, base64")


class ReceiptList(BaseModel):
    receipts: list[ReceiptModel]
    head: ChainHeadModel | None = Field(
        description="The chain's signed head, read after the receipts: a listing that should reach the chain's end "
        "and stops before this head's receipt was cut (`genesis verify --chain`). Null before the first receipt"
    )
    next_cursor: NextCursor = None


class PublicKeyModel(BaseModel):
    key_id: str = Field(description="'k_' + the first 16 hex digits of the sha256 of the raw public key")
    algorithm: str = signing.ALGORITHM
    public_key: str = Field(description="The raw 32-byte Ed25519 public key, base64")
    created_at: str
    retired_at: str | None = Field(description="When another key became the signing key (it still verifies)")
    current: bool = Field(description="A key that signs now (not retired)")


class KeyList(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [EXAMPLE_KEYS]})

    keys: list[PublicKeyModel]


@dataclass(frozen=True)
class Reader:
    """Whose receipts of the world and audit exports a caller reads: all, or one agent's (or none)."""

    everything: bool
    agent_id: str | None = None

    def may_read(self, row: ReceiptRow) -> bool:
        return (
            self.everything or row.kind in PUBLIC_KINDS or (row.agent_id is not None and row.agent_id == self.agent_id)
        )


async def reader(
    services: ServicesDep,
    operator_key: str | None = Depends(OPERATOR_KEY),
    api_key: str | None = Depends(API_KEY),
) -> Reader:
    """An operator reads every receipt, an agent its own; without a key, mutation stages only
    (every receipt in GENESIS_AUTH=open). A key that is sent must be valid (401 otherwise)."""
    if await operator_of(services, operator_key) is not None:
        return Reader(everything=True)
    if api_key:
        return Reader(everything=False, agent_id=(await authenticate(services, api_key)).agent_id)
    return Reader(everything=services.settings.auth == "open")


def _optional(name: str, pattern, form: str):
    def check(value: str | None) -> str | None:
        if value is not None and not pattern.match(value):
            raise ValueError(f"{name} must be {form}")
        return value

    return check


@router.get(
    "/v1/receipts/{receipt_id}",
    response_model=ReceiptModel,
    responses={
        **ERRORS,
        401: {
            "model": ErrorResponse,
            "description": "API_KEY_REQUIRED: a receipt of the world or of an audit export, and no key; or an "
            "invalid key",
        },
        403: {"model": ErrorResponse, "description": "FORBIDDEN: a receipt of the world that concerns another agent"},
        404: {"model": ErrorResponse, "description": "RECEIPT_NOT_FOUND: no receipt with that id"},
    },
)
async def get_receipt(
    receipt_id: ReceiptIdPath, sessions: SessionsDep, caller: Reader = Depends(reader)
) -> dict[str, Any]:
    """One signed receipt, with its exact canonical bytes (``cbor``) to verify offline. Mutation
    stages are public; receipts of the world and of audit exports are read by the agent they
    concern and operators."""
    try:
        async with sessions() as session:
            row = await session.get(ReceiptRow, receipt_id)
    except SQLAlchemyError as exc:
        raise unavailable("DATABASE_UNAVAILABLE", "Postgres", exc, "reading the receipt") from exc
    if row is None:
        raise ApiError(404, "RECEIPT_NOT_FOUND", f"no receipt {receipt_id}")
    if not caller.may_read(row):
        if caller.agent_id is None:
            raise ApiError(
                401,
                "API_KEY_REQUIRED",
                f"receipt {receipt_id} is a {row.kind} receipt: {WHO_READS}",
                headers={"WWW-Authenticate": 'ApiKey header="X-API-Key"'},
            )
        raise ApiError(
            403, "FORBIDDEN", f"receipt {receipt_id} does not concern agent '{caller.agent_id}': {WHO_READS}"
        )
    return receipts.as_json(row)


@router.get("/v1/receipts", response_model=ReceiptList, responses=paged({**ERRORS, **READ_ERRORS}))
async def list_receipts(
    request: Request,
    response: Response,
    sessions: SessionsDep,
    mutation_id: Annotated[
        str | None,
        Query(description="Receipts of this mutation"),
        AfterValidator(_optional("mutation_id", MUTATION_ID_PATTERN, "'mut_' followed by 6-32 hex digits")),
    ] = None,
    agent_id: Annotated[
        str | None,
        Query(description="Receipts concerning this agent"),
        AfterValidator(_optional("agent_id", AGENT_ID_PATTERN, "an agent id (letters, digits and _.:@-, at most 128)")),
    ] = None,
    kind: Annotated[str | None, Query(description=f"Receipts of this kind: {', '.join(signing.KINDS)}")] = None,
    limit: Annotated[int, Query(ge=1, le=500, description="At most this many, in chain order")] = 100,
    cursor: Cursor = None,
    caller: Reader = Depends(reader),
) -> dict[str, Any]:
    """Signed receipts in chain order, by mutation, agent or kind, with the chain's signed head
    (its newest receipt and its length: a listing cut at its end shows). Receipts the caller may
    not read are left out: without a key, those of the world and of audit exports (an agent reads
    the ones that concern it, an operator all)."""
    if kind is not None and kind not in signing.KINDS:
        raise invalid_field("query.kind", f"unknown receipt kind {kind!r}: one of {', '.join(signing.KINDS)}")
    after = PAGES.decode(cursor)
    conditions: list[Any] = []
    if mutation_id is not None:
        conditions.append(ReceiptRow.mutation_id == mutation_id)
    if agent_id is not None:
        conditions.append(ReceiptRow.agent_id == agent_id)
    if kind is not None:
        conditions.append(ReceiptRow.kind == kind)
    if not caller.everything:
        readable = ReceiptRow.kind.in_(PUBLIC_KINDS)
        conditions.append(
            readable if caller.agent_id is None else or_(readable, ReceiptRow.agent_id == caller.agent_id)
        )
    if after is not None:
        conditions.append(ReceiptRow.seq > after[0])
    statement = select(ReceiptRow).where(*conditions).order_by(ReceiptRow.seq).limit(limit + 1)
    try:
        async with sessions() as session:
            rows = (await session.scalars(statement)).all()
            head = await receipts.head(session)  # after the rows: it names their newest, or a newer one
    except SQLAlchemyError as exc:
        raise unavailable("DATABASE_UNAVAILABLE", "Postgres", exc, "reading receipts") from exc
    page, next_cursor = PAGES.page(request, response, rows, limit, lambda r: (r.seq,))
    return {
        "receipts": [receipts.as_json(r) for r in page],
        "head": receipts.signed_json(head) if head is not None else None,
        "next_cursor": next_cursor,
    }


@router.get("/v1/keys", response_model=KeyList, responses=ERRORS)
async def list_keys(sessions: SessionsDep) -> dict[str, Any]:
    """The public keys that verify receipts, old ones included (a rotated key still verifies what
    it signed). Each key id is the hash of its key, so a saved answer checks itself. Save it to
    verify offline later: ``genesis verify FILE --keys KEYS``."""
    try:
        async with sessions() as session:
            keys = await receipts.public_keys(session)
    except SQLAlchemyError as exc:
        raise unavailable("DATABASE_UNAVAILABLE", "Postgres", exc, "reading the keys") from exc
    return {
        "keys": [
            {
                "key_id": k.key_id,
                "algorithm": signing.ALGORITHM,
                "public_key": base64.b64encode(k.public_key).decode(),
                "created_at": k.created_at.isoformat(),
                "retired_at": k.retired_at.isoformat() if k.retired_at else None,
                "current": k.retired_at is None,
            }
            for k in keys
        ]
    }
