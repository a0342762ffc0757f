"""GEPA optimisation steps (codeevolver-gepa.md): POST /connect-git, POST /execute_step,
GET /program/{program_id}. The work happens in GepaConnect/GepaStep workflows on the GEPA task
queue; this module validates, records and starts them."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from urllib.parse import urlsplit

from fastapi import APIRouter, Depends, Path as PathParam, Query, Request
from fastapi.responses import JSONResponse
from sqlalchemy import update
from sqlalchemy.exc import IntegrityError
from temporalio.client import WorkflowFailureError
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.service import RPCError

from api.auth import API_KEY, authenticate
from api.deps import ServicesDep
from api.errors import ApiError, ErrorResponse, Responses
from api.mutations.admission import take_gepa_limit
from genesis import netpolicy
from genesis.db.models import GepaClient, Program
from genesis.github_grants import InstallationGrants
from genesis.workflow_api import search_attributes
from gepa_steps import programs
from gepa_steps.dto import (
    GEPA_CONNECT_WORKFLOW,
    GEPA_STEP_PROGRESS_QUERY,
    GEPA_STEP_WORKFLOW,
    ConnectRequest,
    ConnectResult,
    ProgramStatus,
    StepRequest,
    StepResult,
)
from gepa_steps.github_app import (
    GitHubApp,
    GitHubAppError,
    InstallationNotFound,
    NotOnGitHub,
    RepositoryNotInInstallation,
)
from gepa_steps.schemas import (
    ConnectGitRequest,
    ConnectGitResponse,
    ExecuteStepAccepted,
    ExecuteStepRequest,
    ProgramResponse,
)

router = APIRouter(tags=["gepa"])
EXECUTE_STEP_PATH = "/execute_step"
ERRORS: Responses = {
    401: {"model": ErrorResponse, "description": "Missing or unknown X-API-Key (GENESIS_AUTH=required)"},
    403: {
        "model": ErrorResponse,
        "description": "INSTALLATION_NOT_ALLOWED / REPOSITORY_NOT_IN_INSTALLATION: "
        "the GitHub App installation may not be used for this",
    },
    404: {"model": ErrorResponse, "description": "Unknown client or program (or another agent's)"},
    409: {"model": ErrorResponse, "description": "PROGRAM_EXISTS: the program_id belongs to another client"},
    429: {
        "model": ErrorResponse,
        "description": "RATE_LIMIT_EXCEEDED: too many steps or connections by this caller this hour",
    },
    422: {"model": ErrorResponse, "description": "Invalid fields (the detail names each one)"},
    502: {"model": ErrorResponse, "description": "GITHUB_APP_FAILED: GitHub issued no installation token"},
    503: {"model": ErrorResponse, "description": "Temporal is unavailable"},
}
# connect-git refusals of the worker's GitHub App checks (ConnectResult.error_code) and their status
GITHUB_REFUSALS = {InstallationNotFound.code: 422, RepositoryNotInInstallation.code: 403, GitHubAppError.code: 502}


async def _caller(services, api_key: str | None) -> str | None:
    """The agent behind the request's X-API-Key; None for a keyless request under GENESIS_AUTH=open."""
    if api_key or services.settings.auth == "required":
        return (await authenticate(services, api_key)).agent_id
    return None


def _address(request: Request) -> str:
    return request.client.host if request.client else "unknown"


def _visible(client: GepaClient | None, caller: str | None) -> bool:
    """A client is used only by the agent that connected it (one without an owner: by anyone)."""
    return client is not None and (client.owner_agent_id is None or client.owner_agent_id == caller)


def _invalid(field: str, message: str) -> ApiError:
    return ApiError(
        422, "VALIDATION_ERROR", f"{field}: {message}", extra={"errors": [{"field": field, "message": message}]}
    )


@router.post("/connect-git", status_code=201, response_model=ConnectGitResponse, responses=ERRORS)
async def connect_git(
    body: ConnectGitRequest, request: Request, services: ServicesDep, api_key: str | None = Depends(API_KEY)
) -> ConnectGitResponse:
    """Register a repository and clone it once (the client's one clone; worktrees branch off it).
    The client belongs to the calling agent: only its X-API-Key can run steps on it."""
    owner = await _caller(services, api_key)
    try:
        url = programs.check_repo_url(
            body.repo_url, services.settings.gepa.local_repo_roots, services.settings.gepa.allow_http_repos
        )
    except programs.InvalidId as exc:
        raise _invalid("repo_url", str(exc)) from None
    if body.installation_id is not None:
        _check_installation(services.settings, url, body.installation_id, owner)
    await _check_destinations(netpolicy.NetPolicy.from_settings(services.settings), url, body.egress_allow)
    await take_gepa_limit(services, "connect", owner, _address(request))
    client_id = programs.new_client_id()
    async with services.sessions() as session:
        session.add(
            GepaClient(
                client_id=client_id,
                repo_url=url,
                installation_id=body.installation_id,
                owner_agent_id=owner,
                egress_allow=body.egress_allow,
                status="connecting",
            )
        )
        await session.commit()
    temporal = await services.temporal()
    result: ConnectResult = await temporal.execute_workflow(
        GEPA_CONNECT_WORKFLOW,
        ConnectRequest(
            client_id=client_id, repo_url=url, installation_id=body.installation_id, egress_allow=body.egress_allow
        ),
        id=programs.connect_workflow_id(client_id),
        task_queue=services.settings.gepa_task_queue(),
        result_type=ConnectResult,
        search_attributes=search_attributes(agent_id=owner),
    )
    if result.error:
        code = result.error_code if result.error_code in GITHUB_REFUSALS else "CLONE_FAILED"
        raise ApiError(
            GITHUB_REFUSALS.get(code, 422), code, result.error, extra={"client_id": client_id, "status": "failed"}
        )
    return ConnectGitResponse(
        client_id=client_id,
        status="connected",
        default_branch=result.default_branch or "",
        egress_allow=body.egress_allow,
    )


def _check_installation(settings, url: str, installation_id: int, caller: str | None) -> None:
    """An installation's token reads its account's repositories for the operator's App: it is used
    only for a repository on the App's host, by an agent the operator granted it (the worker then
    asks GitHub whether the repository's owner is the installation's account)."""
    app = GitHubApp(settings)
    if not app.configured:
        raise _invalid(
            "installation_id",
            "this server has no GitHub App configured (GENESIS_GEPA_GITHUB_APP_ID and "
            "GENESIS_GEPA_GITHUB_PRIVATE_KEY_PATH)",
        )
    try:
        app.repository(url)
    except NotOnGitHub as exc:
        raise _invalid("repo_url", str(exc)) from None
    if not InstallationGrants.parse(settings.gepa.github_installations).allows(installation_id, caller):
        who = f"agent {caller!r}" if caller else "a caller without an X-API-Key"
        raise ApiError(
            403,
            "INSTALLATION_NOT_ALLOWED",
            f"installation_id {installation_id} may not be used by {who}: the operator grants "
            f"installations to agents (GENESIS_GEPA_GITHUB_INSTALLATIONS)",
        )


async def _check_destinations(policy: netpolicy.NetPolicy, url: str, egress_allow: list[str]) -> None:
    """422 for a repository host or an egress_allow entry the server may not connect to (a
    private address, or a name resolving to one). The worker checks the repository again where
    it clones, and the egress gateway every connection: this is the early, precise answer. An
    egress name that does not resolve now is kept (checked whenever a program asks for it)."""
    if urlsplit(url).scheme in ("http", "https"):
        try:
            await netpolicy.check_async(*netpolicy.url_host_port(url), policy)
        except netpolicy.Refused as exc:
            raise _invalid("repo_url", str(exc)) from None
    checks = [netpolicy.check_async(*netpolicy.split_host_port(entry), policy) for entry in egress_allow]
    for entry, outcome in zip(egress_allow, await asyncio.gather(*checks, return_exceptions=True)):
        if isinstance(outcome, netpolicy.Refused) and not isinstance(outcome, netpolicy.Unresolvable):
            raise _invalid("egress_allow", f"entry {entry!r}: {outcome}")
        if isinstance(outcome, BaseException) and not isinstance(outcome, netpolicy.Refused):
            raise outcome


@router.post(
    EXECUTE_STEP_PATH,
    response_model=StepResult,
    responses={
        **ERRORS,
        202: {
            "model": ExecuteStepAccepted,
            "description": "?async=true (or the step outlasted the wait): follow status_url",
        },
    },
)
async def execute_step(
    body: ExecuteStepRequest,
    request: Request,
    services: ServicesDep,
    api_key: str | None = Depends(API_KEY),
    run_async: bool = Query(False, alias="async", description="answer 202 at once and run in the background"),
):
    """Run one GEPA step: a worktree on branch ``program_<program_id>`` from the parent's branch,
    the prompt or code mutation committed there, then the program run on ``test_examples`` in
    the client's sandbox container. Synchronous by default: the answer is the step's result
    (``status`` success or failed with ``error``). Idempotent per ``program_id``: a repeated
    request waits for (or returns) the same step; a failed step runs again."""
    settings = services.settings
    if len(body.test_examples) > settings.gepa.max_examples:
        raise _invalid(
            "test_examples", f"at most {settings.gepa.max_examples} examples per step, got {len(body.test_examples)}"
        )
    if body.mutation_type == "code" and not (body.change_request or "").strip():
        raise _invalid("change_request", "a code mutation needs a change_request")
    _check_parents(body)
    step = StepRequest(**body.model_dump())
    caller = await _caller(services, api_key)
    async with services.sessions() as session:
        client = await session.get(GepaClient, body.client_id)
        if not _visible(client, caller) or client.status != "connected":
            detail = f"unknown client_id {body.client_id!r}: connect the repository with POST /connect-git first"
            raise ApiError(404, "CLIENT_NOT_FOUND", detail, extra={"program_id": body.program_id, "status": "failed"})
        known = await session.get(Program, body.program_id)
        if known is None or known.status == ProgramStatus.failed.value:  # a step starts (a repeat waits for it)
            await take_gepa_limit(services, "step", caller, _address(request))
        existing = await _record_program(session, step)
    if existing is not None and existing.status == ProgramStatus.completed.value and existing.result:
        return JSONResponse(existing.result)  # the step already ran: same answer
    temporal = await services.temporal()
    workflow_id = programs.workflow_id(body.program_id)
    handle = await temporal.start_workflow(
        GEPA_STEP_WORKFLOW,
        step,
        id=workflow_id,
        task_queue=settings.gepa_task_queue(),
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        result_type=StepResult,
        search_attributes=search_attributes(agent_id=caller, program_id=body.program_id),
    )
    accepted = ExecuteStepAccepted(
        program_id=body.program_id, status="pending", workflow_id=workflow_id, status_url=f"/program/{body.program_id}"
    )
    if run_async:
        return JSONResponse(accepted.model_dump(), status_code=202)
    try:
        result: StepResult = await asyncio.wait_for(asyncio.shield(handle.result()), settings.gepa.step_timeout_s)
    except TimeoutError:
        return JSONResponse({**accepted.model_dump(), "status": "in_progress"}, status_code=202)
    except WorkflowFailureError as exc:  # the workflow itself failed (not a step verdict)
        result = StepResult(
            program_id=body.program_id, status="failed", error=f"the step's workflow failed: {exc.cause or exc}"
        )
    return JSONResponse(result.model_dump())


def _check_parents(body: ExecuteStepRequest) -> None:
    """A merge names two different parents and nothing else to change; only a merge has a second."""
    if body.mutation_type != "merge":
        if body.second_parent_program_id is not None:
            raise _invalid("second_parent_program_id", "only a merge mutation has a second parent")
        return
    if body.parent_program_id is None or body.second_parent_program_id is None:
        missing = "parent_program_id" if body.parent_program_id is None else "second_parent_program_id"
        raise _invalid(missing, "a merge mutation needs parent_program_id and second_parent_program_id")
    if body.second_parent_program_id == body.parent_program_id:
        raise _invalid("second_parent_program_id", "a merge needs two different parents")
    if body.candidate or body.change_request:
        field = "candidate" if body.candidate else "change_request"
        raise _invalid(field, "a merge mutation changes nothing of its own: leave candidate and change_request out")


async def _record_program(session, step: StepRequest) -> Program | None:
    """Insert the pending program row; an existing one of the same client is reused (a failed one
    is reset to pending so it runs again). Returns the row that existed, if any."""
    row = Program(
        program_id=step.program_id,
        client_id=step.client_id,
        parent_program_id=step.parent_program_id,
        second_parent_program_id=step.second_parent_program_id,
        mutation_type=step.mutation_type,
        branch_name=programs.branch_name(step.program_id),
        status=ProgramStatus.pending.value,
    )
    session.add(row)
    try:
        await session.commit()
        return None
    except IntegrityError:
        await session.rollback()
    existing = await session.get(Program, step.program_id)
    if existing is None or existing.client_id != step.client_id:
        raise ApiError(
            409, "PROGRAM_EXISTS", f"program_id {step.program_id!r} is taken by another client: choose a new id"
        )
    if existing.status == ProgramStatus.failed.value:
        await session.execute(
            update(Program)
            .where(Program.program_id == step.program_id)
            .values(
                status=ProgramStatus.pending.value,
                parent_program_id=step.parent_program_id,
                second_parent_program_id=step.second_parent_program_id,
                mutation_type=step.mutation_type,
                result=None,
                error=None,
                updated_at=datetime.now(UTC),
            )
        )
        await session.commit()
    return existing


@router.get("/program/{program_id}", response_model=ProgramResponse, responses=ERRORS)
async def get_program(
    services: ServicesDep, program_id: str = PathParam(max_length=64), api_key: str | None = Depends(API_KEY)
) -> ProgramResponse:
    """A program version: status, branch, program.json and, once its step ended, the step's response
    (for the agent that connected its repository)."""
    try:
        programs.check_program_id(program_id)
    except programs.InvalidId as exc:
        raise _invalid("program_id", str(exc)) from None
    caller = await _caller(services, api_key)
    async with services.sessions() as session:
        row = await session.get(Program, program_id)
        client = await session.get(GepaClient, row.client_id) if row is not None else None
    if row is None or not _visible(client, caller):
        raise ApiError(404, "PROGRAM_NOT_FOUND", f"no program {program_id!r}")
    progress = None
    if row.status in (ProgramStatus.pending.value, ProgramStatus.in_progress.value):
        try:
            temporal = await services.temporal()
            progress = await temporal.get_workflow_handle(programs.workflow_id(program_id)).query(
                GEPA_STEP_PROGRESS_QUERY
            )
        except (RPCError, ApiError, WorkflowFailureError):
            progress = None
    return ProgramResponse(
        program_id=row.program_id,
        client_id=row.client_id,
        parent_program_id=row.parent_program_id,
        second_parent_program_id=row.second_parent_program_id,
        mutation_type=row.mutation_type,
        status=row.status,
        branch_name=row.branch_name,
        program_json=row.program_json,
        result=row.result,
        error=row.error,
        progress=progress,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )
