"""``POST /api/mutations/check``: judge a trait as a proposal would be judged — the gatekeeper,
dedupe and the sandbox test — and record nothing.

The API never runs submitted code: the check is a short CheckWorkflow on the worker (the same
activities a MutationWorkflow runs for those steps, the trait in a sandbox container), and the
request waits for its result. Nothing of it is a mutation: no row in Postgres, no registry
change, no search attribute a mutation search would match; only the workflow's own history in
Temporal (for the namespace's retention), as any workflow's. Checks have their own rate limits
(pipeline/ratelimit.py), so trying code never uses up proposals, nor proposals checks.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

from fastapi import APIRouter, Depends, Request
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import TimeoutError as TemporalTimeout
from temporalio.service import RPCError

from api.auth import API_KEY, OPERATOR_KEY, acting_agent, operator_of
from api.deps import Services, ServicesDep
from api.errors import ApiError, ErrorResponse, RateLimitResponse, unavailable
from api.metrics import count_check
from api.mutations.admission import check_target, take_check_limit
from api.mutations.records import MUTATION_WRITE_ERRORS
from api.mutations.schemas import CheckRequest, CheckResponse
from genesis.dto import CheckResult, TraitCheck
from genesis.ids import new_check_id
from genesis.workflow_api import CHECK_WORKFLOW, check_workflow_id

log = logging.getLogger("genesis.api.check")

router = APIRouter(prefix="/api/mutations", tags=["mutations"])

# Beyond the workflow's own time limit: how long the API still waits for Temporal to report its end.
RESULT_GRACE_S = 5.0
CONFLICTS = "TRAIT_EXISTS, TRAIT_NOT_LIVE, VERSION_CONFLICT: what a proposal of this trait_name would get"
UNAVAILABLE = (
    "CHECK_TIMEOUT (no verdict within GENESIS_SANDBOX_CHECK_TIMEOUT_S: the worker is busy or down), "
    "CHECK_FAILED (the sandbox test could not run), TEMPORAL_UNAVAILABLE, DATABASE_UNAVAILABLE, "
    "RATE_LIMITER_UNAVAILABLE"
)


@router.post(
    "/check",
    response_model=CheckResponse,
    responses={
        **{code: MUTATION_WRITE_ERRORS[code] for code in (400, 401, 413, 422)},
        403: {
            "model": ErrorResponse,
            "description": "AGENT_ID_MISMATCH (the X-API-Key belongs to another agent), NOT_TRAIT_OWNER (the live "
            "version of the trait is another agent's: check it under another trait_name)",
        },
        409: {"model": ErrorResponse, "description": CONFLICTS},
        429: {"model": RateLimitResponse, "description": "A check rate limit; retry after retry_after_sec"},
        503: {"model": ErrorResponse, "description": UNAVAILABLE},
    },
)
async def check(
    body: CheckRequest,
    request: Request,
    services: ServicesDep,
    api_key: str | None = Depends(API_KEY),
    operator_key: str | None = Depends(OPERATOR_KEY),
) -> CheckResponse:
    """Check a trait before proposing it: the gatekeeper, dedupe and the sandbox test a proposal
    gets, with the verdict, validation log and sandbox report its status would show — and nothing
    recorded (no mutation, nothing in the mutation list, nothing in the world).

    Same key and trait rules as propose (``X-API-Key``; ``replaces`` to check a new version of
    your live trait; ``X-Operator-Key`` to check replacing another agent's). Rate limited per
    agent and per client IP per minute, apart from proposals. The answer takes as long as the
    sandbox test (about a second), at most GENESIS_SANDBOX_CHECK_TIMEOUT_S."""
    try:
        operator = await operator_of(services, operator_key)
        agent_id = await acting_agent(services, api_key, body.agent_id)
        await check_target(services, body, agent_id, operator.label if operator is not None else None)
        await take_check_limit(services, agent_id, request.client.host if request.client else "unknown")
        check_id = new_check_id()
        result = await _run_check(services, check_id, agent_id, body)
    except ApiError as exc:
        count_check(exc.error)
        raise
    count_check(result.verdict)
    return CheckResponse(trait_name=body.trait_name, workflow_id=check_workflow_id(check_id), **result.model_dump())


async def _run_check(services: Services, check_id: str, agent_id: str, body: CheckRequest) -> CheckResult:
    """Run the CheckWorkflow on the worker and wait for its verdict (503 if none comes in time)."""
    settings = services.settings
    timeout_s = settings.sandbox.check_timeout_s
    client = await services.temporal()
    work = client.execute_workflow(
        CHECK_WORKFLOW,
        TraitCheck(
            check_id=check_id, agent_id=agent_id, trait_name=body.trait_name, code=body.code, timeout_s=timeout_s
        ),
        id=check_workflow_id(check_id),
        task_queue=settings.task_queue,
        execution_timeout=timedelta(seconds=timeout_s),
        result_type=CheckResult,
    )
    try:
        return await asyncio.wait_for(work, timeout=timeout_s + RESULT_GRACE_S)
    except WorkflowFailureError as exc:
        if isinstance(exc.cause, TemporalTimeout):
            raise _timed_out(timeout_s) from exc
        log.warning("check %s ended without a verdict: %s", check_id, _root(exc))
        raise ApiError(
            503,
            "CHECK_FAILED",
            "the check could not finish (an infrastructure problem such as Docker being unavailable, not a "
            "verdict on the code); try again later, the API's log has the details",
        ) from exc
    except TimeoutError as exc:
        raise _timed_out(timeout_s) from exc
    except RPCError as exc:
        raise unavailable("TEMPORAL_UNAVAILABLE", "Temporal", exc, "running the check") from exc


def _root(exc: BaseException) -> str:
    while exc.__cause__ is not None:
        exc = exc.__cause__
    return f"{type(exc).__name__}: {exc}"


def _timed_out(timeout_s: float) -> ApiError:
    return ApiError(
        503,
        "CHECK_TIMEOUT",
        f"no verdict within {timeout_s:g} s: the worker is busy or not running; try again later (nothing was recorded)",
    )
