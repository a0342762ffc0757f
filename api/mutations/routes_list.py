"""List mutations, newest first: ``GET /api/mutations?status=&agent_id=&trait_name=&limit=&cursor=``
(paged as every list is: api/paging.py).

Each item has the shape of ``GET /api/mutations/{id}/status`` (which carries ``workflow_id``, the
Temporal workflow to open in its UI). The world viewer's mutation list reads it."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query, Request, Response
from sqlalchemy import select, tuple_

from api.auth import Reader, reader
from api.deps import SessionsDep
from api.errors import ErrorResponse
from api.mutations.records import status_response
from api.mutations.schemas import MutationListResponse
from api.paging import Cursor, Keyset, moment, paged, text
from api.params import AGENT_ID_PATTERN
from genesis import rules
from genesis.db.models import Mutation
from genesis.dto import MutationStatus
from genesis.ids import MUTATION_ID_PATTERN
from pipeline.quarantines import quarantines_of

router = APIRouter(prefix="/api/mutations", tags=["mutations"])

MAX_LIMIT = 200
PAGES = Keyset("mutations", moment, text(MUTATION_ID_PATTERN))  # (created_at, mutation_id), descending


@router.get(
    "",
    response_model=MutationListResponse,
    responses=paged(
        {
            422: {
                "model": ErrorResponse,
                "description": "An invalid status, agent_id, trait_name, limit or cursor (the detail names it)",
            }
        }
    ),
)
async def list_mutations(
    request: Request,
    response: Response,
    sessions: SessionsDep,
    status: MutationStatus | None = Query(None, description="only mutations in this status"),
    agent_id: str | None = Query(None, pattern=AGENT_ID_PATTERN.pattern, description="only this agent's mutations"),
    limit: int = Query(50, ge=1, le=MAX_LIMIT, description=f"how many (1..{MAX_LIMIT}), newest first"),
    trait_name: str | None = Query(None, pattern=rules.TRAIT_NAME_PATTERN, description="only this trait's mutations"),
    cursor: Cursor = None,
    who: Reader = Depends(reader),
) -> MutationListResponse:
    """Mutations, newest first, optionally of one status and/or one agent (each ``notify_url``
    only for its agent's key or an operator's)."""
    after = PAGES.decode(cursor)
    query = select(Mutation).order_by(Mutation.created_at.desc(), Mutation.mutation_id.desc()).limit(limit + 1)
    if after is not None:
        query = query.where(tuple_(Mutation.created_at, Mutation.mutation_id) < after)
    if status is not None:
        query = query.where(Mutation.status == status.value)
    if agent_id is not None:
        query = query.where(Mutation.agent_id == agent_id)
    if trait_name is not None:
        query = query.where(Mutation.trait_name == trait_name)
    async with sessions() as session:
        records, next_cursor = PAGES.page(
            request, response, (await session.scalars(query)).all(), limit, lambda r: (r.created_at, r.mutation_id)
        )
        quarantines = await quarantines_of(session, (r.mutation_id for r in records))
    return MutationListResponse(
        mutations=[
            status_response(r, quarantines.get(r.mutation_id), private=who.sees_private_of(r.agent_id)) for r in records
        ],
        next_cursor=next_cursor,
    )
