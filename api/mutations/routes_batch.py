"""POST /api/mutations/propose/batch: several proposals in one request, each handled exactly as
POST /api/mutations/propose would handle it alone (validated, authorised, rate limited, in order)."""

from __future__ import annotations

import logging

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from api.auth import API_KEY, OPERATOR_KEY, acting_agent, authenticate, operator_of
from api.deps import ServicesDep
from api.errors import ApiError, ErrorResponse, validation_error_body
from api.metrics import count_proposal
from api.mutations.admission import accept_proposal
from api.mutations.records import MUTATION_ERRORS, MUTATION_WRITE_ERRORS
from api.mutations.schemas import BatchItemResult, BatchProposeItem, BatchProposeRequest, BatchProposeResponse

log = logging.getLogger("genesis.api")
router = APIRouter(prefix="/api/mutations", tags=["mutations"])
BATCH_PATH = "/api/mutations/propose/batch"


@router.post(
    "/propose/batch",
    status_code=207,
    response_model=BatchProposeResponse,
    responses={
        **{k: v for k, v in MUTATION_WRITE_ERRORS.items() if k != 404},
        422: {"model": ErrorResponse, "description": "Not a batch (no proposals, too many, not a list)"},
        **{k: v for k, v in MUTATION_ERRORS.items() if k == 413},
    },
)
async def propose_batch(
    body: BatchProposeRequest,
    request: Request,
    services: ServicesDep,
    api_key: str | None = Depends(API_KEY),
    operator_key: str | None = Depends(OPERATOR_KEY),
) -> JSONResponse:
    """Propose up to ``GENESIS_BATCH_MAX_ITEMS`` mutations at once. The answer is **207
    Multi-Status** with one result per item, in order: ``status_code`` 202 with the
    ``mutation_id`` for an accepted item, or the status and ``{"error", "detail"}`` that
    POST /api/mutations/propose would have answered for that item alone (422 invalid fields,
    403 another agent's agent_id, 409 reused idempotency_key, 429 a rate limit with
    ``retry_after_sec``, 503). Every item counts against the rate limits as one proposal.
    A missing or invalid ``X-API-Key`` (or an invalid ``X-Operator-Key``) refuses the whole batch (401)."""
    limit = services.settings.batch_max_items
    if len(body.proposals) > limit:
        raise ApiError(
            422,
            "BATCH_TOO_LARGE",
            f"{len(body.proposals)} proposals in one batch; at most {limit} (GENESIS_BATCH_MAX_ITEMS)",
        )
    operator = await operator_of(services, operator_key)
    if api_key or services.settings.auth == "required":
        await authenticate(services, api_key)  # a bad key refuses the batch, not each item
    results: list[BatchItemResult] = []
    for index, raw in enumerate(body.proposals):
        try:
            item = BatchProposeItem.model_validate(raw)
            agent_id = await acting_agent(services, api_key, item.agent_id)
            accepted = await accept_proposal(
                services,
                request,
                item,
                agent_id,
                item.idempotency_key,
                operator.label if operator is not None else None,
            )
            results.append(BatchItemResult(index=index, status_code=202, **accepted.model_dump()))
        except ValidationError as exc:
            results.append(BatchItemResult(index=index, status_code=422, **validation_error_body(exc.errors())))
        except ApiError as exc:
            results.append(
                BatchItemResult(
                    index=index, status_code=exc.status_code, error=exc.error, detail=exc.detail, **exc.extra
                )
            )
        except Exception:  # noqa: BLE001 - one item's failure must not hide the others' results
            log.exception("batch item %d failed", index)
            results.append(
                BatchItemResult(
                    index=index,
                    status_code=500,
                    error="INTERNAL_ERROR",
                    detail="this item failed unexpectedly; the API's log has the details",
                )
            )
    for result in results:
        count_proposal("batch", "accepted" if result.status_code == 202 else result.error or str(result.status_code))
    accepted_count = sum(1 for r in results if r.status_code == 202)
    reply = BatchProposeResponse(accepted=accepted_count, refused=len(results) - accepted_count, results=results)
    return JSONResponse(reply.model_dump(exclude_none=True), status_code=207)
