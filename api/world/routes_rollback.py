"""The world's snapshots and rollbacks: ``GET /v1/world/snapshots``, ``POST /v1/world/rollback``
and ``GET /v1/world/rollbacks/{request_id}``.

A rollback takes the world back to a kept snapshot as a new epoch of its journal (the journal only
grows: the abandoned epoch stays in it). The engine is the journal's only writer: the API queues
the request (Redis ``world:rollback:requests``) and the engine applies it between two ticks,
usually within a second, or refuses it with the reason (engine/process/rollbacks.py)."""

from __future__ import annotations

import json
import secrets
from typing import Annotated

from fastapi import APIRouter, Depends, Path
from fastapi.responses import JSONResponse
from pydantic import AfterValidator
from redis.exceptions import RedisError

from api.auth import OPERATOR_ERRORS, require_operator
from api.deps import RedisDep
from api.errors import ApiError, ErrorResponse, Responses, unavailable
from api.world.schemas import (
    ROLLBACK_ID_PATTERN,
    SnapshotListResponse,
    WorldRollbackAccepted,
    WorldRollbackRequest,
    WorldRollbackStatus,
)
from genesis import redis_keys as keys
from identity.operators import Operator
from world import rollbacks

router = APIRouter(prefix="/v1/world", tags=["world journal"])
ERRORS: Responses = {
    422: {"model": ErrorResponse, "description": "Invalid fields (the detail names each one)"},
    503: {"model": ErrorResponse, "description": "Redis unavailable"},
}


def _rollback_id(value: str) -> str:
    if not ROLLBACK_ID_PATTERN.match(value):
        raise ValueError("request_id must be 'rbk_' followed by 16 hex digits")
    return value


RollbackIdPath = Annotated[
    str,
    Path(description="'rbk_' followed by 16 hex digits", json_schema_extra={"pattern": ROLLBACK_ID_PATTERN.pattern}),
    AfterValidator(_rollback_id),
]


@router.get("/snapshots", response_model=SnapshotListResponse, responses=ERRORS)
async def list_snapshots(redis: RedisDep) -> dict:
    """The snapshots the engine keeps (the last few, every Nth, and the rollback points of
    mutations under observation), oldest first, as the engine last published them."""
    try:
        raw = await redis.get(keys.ENGINE_SNAPSHOTS)
    except RedisError as exc:
        raise unavailable("REDIS_UNAVAILABLE", "Redis", exc, "reading the snapshots") from exc
    return {"snapshots": json.loads(raw) if raw else []}


@router.post(
    "/rollback",
    status_code=202,
    response_model=WorldRollbackAccepted,
    responses={**ERRORS, **OPERATOR_ERRORS},
)
async def request_rollback(
    body: WorldRollbackRequest,
    redis: RedisDep,
    operator: Operator | None = Depends(require_operator),
) -> JSONResponse:
    """Take the world back to a kept snapshot, as a new epoch of the journal. Returns at once with
    the request's id; ``GET /v1/world/rollbacks/{request_id}`` says when the engine applied it (or
    why it refused: an unknown snapshot, no snapshot before that tick, a mutation with no rollback
    point kept, the journal off). Only an operator rewinds the world: it abandons every agent's
    progress since."""
    request_id = f"rbk_{secrets.token_hex(8)}"
    target = body.target()
    by = operator.label if operator is not None else "open"
    try:
        await rollbacks.request(redis, request_id, target, body.reason, by)
    except RedisError as exc:
        raise unavailable("REDIS_UNAVAILABLE", "Redis", exc, "queueing the rollback") from exc
    url = f"/v1/world/rollbacks/{request_id}"
    return JSONResponse(
        {"request_id": request_id, "status": "requested", "status_url": url}, status_code=202, headers={"Location": url}
    )


@router.get(
    "/rollbacks/{request_id}",
    response_model=WorldRollbackStatus,
    responses={**ERRORS, 404: {"model": ErrorResponse, "description": "No such rollback request (or it expired)"}},
)
async def rollback_status(request_id: RollbackIdPath, redis: RedisDep) -> dict:
    """A rollback request: ``requested`` until the engine takes it, then ``applied`` (the new epoch,
    from and to ticks, the rollback record's sequence number and state hash) or ``refused``."""
    try:
        raw = await redis.get(keys.world_rollback(request_id))
    except RedisError as exc:
        raise unavailable("REDIS_UNAVAILABLE", "Redis", exc, "reading the rollback") from exc
    if raw is None:
        raise ApiError(404, "ROLLBACK_NOT_FOUND", f"no rollback request {request_id} (they are kept for 7 days)")
    return json.loads(raw)
