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
from pydantic import AfterValidator
from sqlalchemy import or_, select
from sqlalchemy.exc import SQLAlchemyError

from api.audit.schemas import KeyList, ReceiptList, ReceiptModel
from api.auth import API_KEY, OPERATOR_KEY, authenticate, operator_of
from api.deps import ServicesDep, SessionsDep
from api.errors import ApiError, ErrorResponse, Responses, invalid_field, unavailable
from api.paging import Cursor, Keyset, paged, whole
from api.params import AGENT_ID_PATTERN, ReceiptIdPath
from audit import receipts
from genesis import signing
from genesis.db.models import ReceiptRow
from genesis.ids import MUTATION_ID_PATTERN

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
