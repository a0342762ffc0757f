"""``GET /v1/journal/status``: the journal's disk use, its archive and the retention in force, as
the engine publishes them (engine/process/retention.py). Operators only: it describes the host's disk."""

from __future__ import annotations

import json

from fastapi import APIRouter, Depends
from redis.exceptions import RedisError

from api.auth import OPERATOR_ERRORS, require_operator
from api.deps import ServicesDep
from api.errors import ApiError, ErrorResponse, unavailable
from api.world.schemas import JournalStatus
from genesis import redis_keys as keys
from identity.operators import Operator

router = APIRouter(prefix="/v1/journal", tags=["world journal"])


@router.get(
    "/status",
    response_model=JournalStatus,
    responses={
        **OPERATOR_ERRORS,
        409: {"model": ErrorResponse, "description": "JOURNAL_OFF: this deployment records no journal"},
        503: {"model": ErrorResponse, "description": "JOURNAL_STATUS_UNAVAILABLE or REDIS_UNAVAILABLE"},
    },
)
async def journal_status(services: ServicesDep, _: Operator | None = Depends(require_operator)) -> dict:
    """Disk use of the journal's segments and snapshots, the archive's state, the oldest tick a
    replay can start from, the disk's free space, and the retention policy the engine applies."""
    if not services.settings.journal.enabled:
        raise ApiError(
            409, "JOURNAL_OFF", "the journal is off (GENESIS_JOURNAL_ENABLED=false): nothing is recorded or retained"
        )
    try:
        raw = await services.redis.get(keys.JOURNAL_STATUS)
    except RedisError as exc:
        raise unavailable("REDIS_UNAVAILABLE", "Redis", exc, "reading the journal's status") from exc
    if raw is None:
        raise ApiError(
            503,
            "JOURNAL_STATUS_UNAVAILABLE",
            "the engine has not published the journal's status in the last two minutes (is it running, with its "
            "journal on?)",
        )
    return json.loads(raw)
