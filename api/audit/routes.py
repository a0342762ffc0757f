"""Audit of the world's journal: ``GET /v1/audit/events`` (query), ``GET /v1/audit/export`` (NDJSON
with a manifest) and ``GET /v1/agents/{agent_id}/timeline`` (one agent's events).

They read the audit projection (audit/projection.py): events derived from the journal's records —
trait versions arriving and leaving, rollbacks, parameter changes, ticks the trait host did not
serve, engine starts — in journal order (sequence number, then index within the record), with
keyset paging that hands out each event once while the engine appends more."""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request, Response
from fastapi.responses import StreamingResponse
from pydantic import AfterValidator
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import async_sessionmaker
from temporalio.common import WorkflowIDConflictPolicy

from api.audit.schemas import AuditEventList
from api.auth import API_KEY, OPERATOR_ERRORS, OPERATOR_KEY, authenticate, operator_of, require_operator
from api.deps import Services, ServicesDep, SessionsDep
from api.errors import ApiError, ErrorResponse, Responses, invalid_field, unavailable
from api.paging import Cursor, Keyset, paged, whole
from api.params import AGENT_ID_PATTERN
from audit import projection
from genesis import canonical
from genesis.dto import AuditManifestRequest
from genesis.ids import MUTATION_ID_PATTERN
from genesis.rules import TRAIT_NAME_PATTERN
from genesis.workflow_api import AUDIT_MANIFEST_WORKFLOW
from journal.audit import EVENT_KINDS

router = APIRouter()  # tags per route: the timeline is listed with the agents' routes
log = logging.getLogger("genesis.api")
SIGN_TIMEOUT_S = 30
PAGES = Keyset("audit", whole(2**63), whole(2**15))
EXPORT_MAX = 100_000  # events in one export; narrow the filter for more
ERRORS: Responses = {
    422: {"model": ErrorResponse, "description": "Invalid fields (the detail names each one)"},
    503: {"model": ErrorResponse, "description": "Postgres unavailable"},
}


def _checked(name: str, pattern: re.Pattern | str, form: str):
    regex = re.compile(pattern)

    def check(value: str | None) -> str | None:
        if value is not None and not regex.match(value):
            raise ValueError(f"{name} must be {form}")
        return value

    return check


AgentQuery = Annotated[
    str | None,
    Query(description="Events concerning this agent"),
    AfterValidator(_checked("agent_id", AGENT_ID_PATTERN, "an agent id")),
]
MutationQuery = Annotated[
    str | None,
    Query(description="Events concerning this mutation"),
    AfterValidator(_checked("mutation_id", MUTATION_ID_PATTERN, "'mut_' followed by 6-32 hex digits")),
]
TraitQuery = Annotated[
    str | None,
    Query(alias="trait", description="Events concerning this trait"),
    AfterValidator(_checked("trait", TRAIT_NAME_PATTERN, "a trait name (snake_case, at most 64 characters)")),
]


def audit_filter(
    kind: Annotated[list[str] | None, Query(description="Event kinds (repeat for several)")] = None,
    from_seq: Annotated[int | None, Query(ge=0, le=2**62)] = None,
    to_seq: Annotated[int | None, Query(ge=0, le=2**62)] = None,
    from_tick: Annotated[int | None, Query(ge=0, le=2**62)] = None,
    to_tick: Annotated[int | None, Query(ge=0, le=2**62)] = None,
    epoch: Annotated[int | None, Query(ge=0, le=2**31 - 1)] = None,
    agent_id: AgentQuery = None,
    mutation_id: MutationQuery = None,
    trait_name: TraitQuery = None,
    cause: Annotated[str | None, Query(max_length=500, description="Exactly this cause")] = None,
) -> projection.AuditFilter:
    unknown = [k for k in kind or () if k not in EVENT_KINDS]
    if unknown:
        raise invalid_field("query.kind", f"unknown event kind(s) {unknown}: one of {', '.join(EVENT_KINDS)}")
    for low, high, name in ((from_seq, to_seq, "seq"), (from_tick, to_tick, "tick")):
        if low is not None and high is not None and high < low:
            raise invalid_field(f"query.to_{name}", f"to_{name} must be >= from_{name}")
    return projection.AuditFilter(
        kinds=tuple(kind or ()),
        from_seq=from_seq,
        to_seq=to_seq,
        from_tick=from_tick,
        to_tick=to_tick,
        epoch=epoch,
        agent_id=agent_id,
        mutation_id=mutation_id,
        trait_name=trait_name,
        cause=cause,
    )


async def _page(
    request: Request,
    response: Response,
    sessions: async_sessionmaker,
    f: projection.AuditFilter,
    limit: int,
    cursor: str | None,
) -> dict[str, Any]:
    after = PAGES.decode(cursor)
    try:
        rows = await projection.query(sessions, f, after, limit + 1)
        projected, _ = await projection.position(sessions)
    except SQLAlchemyError as exc:
        raise unavailable("DATABASE_UNAVAILABLE", "Postgres", exc, "reading the audit events") from exc
    page, next_cursor = PAGES.page(request, response, rows, limit, lambda e: (e["seq"], e["index"]))
    return {"events": page, "next_cursor": next_cursor, "projected_seq": projected}


Limit = Annotated[int, Query(ge=1, le=1000, description="At most this many events, in journal order")]


@router.get(
    "/v1/audit/events",
    tags=["audit"],
    response_model=AuditEventList,
    responses=paged({**ERRORS, **OPERATOR_ERRORS}),
    dependencies=[Depends(require_operator)],
)
async def audit_events(
    request: Request,
    response: Response,
    sessions: SessionsDep,
    f: projection.AuditFilter = Depends(audit_filter),
    limit: Limit = 100,
    cursor: Cursor = None,
) -> dict[str, Any]:
    """The world's audit events matching every filter given, in journal order (operators)."""
    return await _page(request, response, sessions, f, limit, cursor)


@router.get(
    "/v1/audit/export",
    tags=["audit"],
    responses={
        **ERRORS,
        **OPERATOR_ERRORS,
        200: {"content": {"application/x-ndjson": {}}, "description": "One event per line, then the manifest"},
    },
    dependencies=[Depends(require_operator)],
)
async def audit_export(services: ServicesDep, f: projection.AuditFilter = Depends(audit_filter)) -> StreamingResponse:
    """Every event matching the filter as NDJSON, one per line in journal order, then one last
    line ``{"manifest": {...}, "receipt": {...}}``: the filter, the first and last sequence numbers,
    the count, the sha256 of the event lines and the journal position (sequence number and header
    hash) the projection had reached, signed as an ``audit.export`` receipt by the worker
    (``receipt`` null if it could not be signed). `genesis audit verify FILE` checks it all
    offline. At most 100,000 events: narrow the filter for more."""
    sessions = services.sessions
    try:
        projected, head = await projection.position(sessions)
        first_rows = await projection.query(sessions, f, None, 1000)
    except SQLAlchemyError as exc:
        raise unavailable("DATABASE_UNAVAILABLE", "Postgres", exc, "exporting the audit events") from exc

    async def lines() -> AsyncIterator[bytes]:
        digest = hashlib.sha256()
        count, first, last = 0, None, None
        rows = first_rows
        while rows:
            for row in rows:
                if count >= EXPORT_MAX:
                    break
                line = json.dumps(row, separators=(",", ":"), sort_keys=True).encode() + b"\n"
                digest.update(line)
                count += 1
                first = row["seq"] if first is None else first
                last = row["seq"]
                yield line
            if count >= EXPORT_MAX or len(rows) < 1000:
                break
            rows = await projection.query(sessions, f, (rows[-1]["seq"], rows[-1]["index"]), 1000)
        manifest = {
            "filter": f.to_data(),
            "first_seq": first,
            "last_seq": last,
            "count": count,
            "truncated": count >= EXPORT_MAX,
            "events_sha256": digest.hexdigest(),
            "projected_seq": projected,
            "chain_head": head.hex(),
        }
        last_line: dict[str, Any] = {"manifest": manifest, "receipt": await _signed(services, manifest)}
        yield json.dumps(last_line, separators=(",", ":"), sort_keys=True).encode() + b"\n"

    return StreamingResponse(lines(), media_type="application/x-ndjson")


async def _signed(services: Services, manifest: dict[str, Any]) -> dict[str, Any] | None:
    """The manifest's signed ``audit.export`` receipt, from the worker (AuditManifestWorkflow: the
    API holds no private key); None if it could not be had (the export says so by its absence)."""
    digest = hashlib.sha256(canonical.encode(manifest)).hexdigest()
    try:
        client = await services.temporal()
        return await client.execute_workflow(
            AUDIT_MANIFEST_WORKFLOW,
            AuditManifestRequest(manifest=manifest),
            id=f"audit-manifest-{digest[:32]}",
            task_queue=services.settings.task_queue,
            result_type=dict,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            execution_timeout=timedelta(seconds=SIGN_TIMEOUT_S),
        )
    except Exception as exc:  # Temporal or the worker away: the events still export, unsigned
        log.warning("audit export: the manifest could not be signed: %s", exc)
        return None


def _agent_path(value: str) -> str:
    if not AGENT_ID_PATTERN.match(value):
        raise ValueError("agent_id must be an agent id (letters, digits and _.:@-, at most 128)")
    return value


AgentPath = Annotated[str, Path(description="The agent"), AfterValidator(_agent_path)]


@router.get(
    "/v1/agents/{agent_id}/timeline",
    response_model=AuditEventList,
    responses=paged(
        {
            **ERRORS,
            401: {"model": ErrorResponse, "description": "No valid X-API-Key or X-Operator-Key"},
            403: {"model": ErrorResponse, "description": "Another agent's timeline"},
        }
    ),
    tags=["agents"],
)
async def agent_timeline(
    agent_id: AgentPath,
    request: Request,
    response: Response,
    services: ServicesDep,
    limit: Limit = 100,
    cursor: Cursor = None,
    operator_key: str | None = Depends(OPERATOR_KEY),
    api_key: str | None = Depends(API_KEY),
) -> dict[str, Any]:
    """One agent's history in the world, from the journal: its trait versions going live and
    leaving (rolled back, quarantined, replaced), the rollbacks of the world its mutations caused,
    and the receipts of its mutations' stages. An agent reads its own; operators read any."""
    if await operator_of(services, operator_key) is None and not (services.settings.auth == "open" and not api_key):
        agent = await authenticate(services, api_key)
        if agent.agent_id != agent_id:
            raise ApiError(403, "FORBIDDEN", "an agent reads its own timeline only (operators read any)")
    return await _page(request, response, services.sessions, projection.AuditFilter(agent_id=agent_id), limit, cursor)
