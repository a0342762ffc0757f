"""Signed receipts: ``GET /v1/receipts/{id}``, ``GET /v1/receipts`` and ``GET /v1/keys``.

The API serves receipts and public keys; it holds no private key and signs nothing (the worker
signs the mutation pipeline's stages, the engine the world's trait-set changes and rollbacks).
Anyone may read them, as anyone may read a mutation's status: verify them offline with
``genesis verify`` (docs/receipts.md)."""

from __future__ import annotations

import base64
import re
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request, Response
from pydantic import AfterValidator, BaseModel, Field
from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError

from api.errors import ApiError, Responses, invalid_field, unavailable
from api.paging import Cursor, Keyset, NextCursor, paged, whole
from api.schemas import AGENT_ID_PATTERN, ErrorResponse
from genesis import signing
from genesis.db.models import ReceiptRow
from genesis.ids import MUTATION_ID_PATTERN
from pipeline import receipts

router = APIRouter(tags=["receipts"])
RECEIPT_ID_PATTERN = re.compile(r"^rcpt_[0-9a-f]{24}$")
PAGES = Keyset("receipts", whole(2**63))
ERRORS: Responses = {
    422: {"model": ErrorResponse, "description": "Invalid fields (the detail names each one)"},
    503: {"model": ErrorResponse, "description": "Postgres unavailable"},
}


class ReceiptModel(BaseModel):
    v: int
    id: str
    kind: str = Field(description=f"One of {', '.join(signing.KINDS)}")
    domain: str = Field(description="genesis/receipt/<kind>/v1: the domain tag the signature covers")
    key_id: str
    prev: str | None = Field(description="sha256 (hex) of the previous receipt in the chain; null for the first")
    issued_at: str
    subject: dict[str, Any]
    body: dict[str, Any]
    sig: str = Field(description="The Ed25519 signature, base64")
    hash: str = Field(description="sha256 (hex) of the receipt's canonical CBOR")
    seq: int = Field(description="Its place in the chain")
    journal_seq: int | None = Field(description="The world journal's record that carries it (null: not yet)")
    cbor: str = Field(description="The receipt's exact canonical CBOR, base64: what was signed (with sig) and hashed")


class ReceiptList(BaseModel):
    receipts: list[ReceiptModel]
    next_cursor: NextCursor = None


class PublicKeyModel(BaseModel):
    key_id: str
    algorithm: str = signing.ALGORITHM
    public_key: str = Field(description="The raw 32-byte Ed25519 public key, base64")
    created_at: str
    retired_at: str | None = Field(description="When another key became the signing key (it still verifies)")
    current: bool


class KeyList(BaseModel):
    keys: list[PublicKeyModel]


def _receipt_id(value: str) -> str:
    if not RECEIPT_ID_PATTERN.match(value):
        raise ValueError("receipt_id must be 'rcpt_' followed by 24 hex digits")
    return value


def _optional(name: str, pattern: re.Pattern, form: str):
    def check(value: str | None) -> str | None:
        if value is not None and not pattern.match(value):
            raise ValueError(f"{name} must be {form}")
        return value

    return check


@router.get(
    "/v1/receipts/{receipt_id}",
    response_model=ReceiptModel,
    responses={**ERRORS, 404: {"model": ErrorResponse, "description": "No receipt with that id"}},
)
async def get_receipt(
    receipt_id: Annotated[str, Path(description="'rcpt_' + 24 hex digits"), AfterValidator(_receipt_id)],
    request: Request,
) -> dict[str, Any]:
    """One signed receipt, with its exact canonical bytes (``cbor``) to verify offline."""
    try:
        async with request.app.state.services.sessions() as session:
            row = await session.get(ReceiptRow, receipt_id)
    except SQLAlchemyError as exc:
        raise unavailable("DATABASE_UNAVAILABLE", "Postgres", exc, "reading the receipt") from exc
    if row is None:
        raise ApiError(404, "RECEIPT_NOT_FOUND", f"no receipt {receipt_id}")
    return receipts.as_json(row)


@router.get("/v1/receipts", response_model=ReceiptList, responses=paged(ERRORS))
async def list_receipts(
    request: Request,
    response: Response,
    mutation_id: Annotated[
        str | None,
        Query(description="Receipts of this mutation"),
        AfterValidator(_optional("mutation_id", MUTATION_ID_PATTERN, "'mut_' followed by 6-32 hex digits")),
    ] = None,
    agent_id: Annotated[
        str | None,
        Query(description="Receipts concerning this agent"),
        AfterValidator(_optional("agent_id", AGENT_ID_PATTERN, "an agent id")),
    ] = None,
    kind: Annotated[str | None, Query(description="Receipts of this kind")] = None,
    limit: Annotated[int, Query(ge=1, le=500, description="At most this many, in chain order")] = 100,
    cursor: Cursor = None,
) -> dict[str, Any]:
    """Signed receipts in chain order, by mutation, agent or kind."""
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
    if after is not None:
        conditions.append(ReceiptRow.seq > after[0])
    statement = select(ReceiptRow).where(*conditions).order_by(ReceiptRow.seq).limit(limit + 1)
    try:
        async with request.app.state.services.sessions() as session:
            rows = (await session.scalars(statement)).all()
    except SQLAlchemyError as exc:
        raise unavailable("DATABASE_UNAVAILABLE", "Postgres", exc, "reading receipts") from exc
    page, next_cursor = PAGES.page(request, response, rows, limit, lambda r: (r.seq,))
    return {"receipts": [receipts.as_json(r) for r in page], "next_cursor": next_cursor}


@router.get("/v1/keys", response_model=KeyList, responses=ERRORS)
async def list_keys(request: Request) -> dict[str, Any]:
    """The public keys that verify receipts, old ones included (a rotated key still verifies what
    it signed). Save this answer to verify offline later: ``genesis verify FILE --keys KEYS``."""
    try:
        async with request.app.state.services.sessions() as session:
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
