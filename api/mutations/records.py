"""A mutation's record as the mutation endpoints share it: loaded (with the engine's quarantine of
its trait), authorised for an action, shown (the status shape), and the error answers they document."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select

from api.auth import acting_agent, operator_of
from api.deps import Services
from api.errors import ApiError, ErrorResponse, Responses
from api.mutations.schemas import MutationStatusResponse, QuarantineInfo, TraitVersionRef
from genesis.db.models import Mutation, TraitQuarantine, TraitVersion
from pipeline.lineage import recorded_lineage

MUTATION_ERRORS: Responses = {
    400: {"model": ErrorResponse, "description": "Malformed JSON"},
    404: {"model": ErrorResponse, "description": "Unknown mutation"},
    413: {"model": ErrorResponse, "description": "Body too large"},
    422: {"model": ErrorResponse, "description": "Invalid fields (the detail names each one)"},
    503: {"model": ErrorResponse, "description": "A dependency is unavailable; nothing was recorded"},
}
MUTATION_WRITE_ERRORS: Responses = {
    **MUTATION_ERRORS,
    401: {
        "model": ErrorResponse,
        "description": "Missing or unknown X-API-Key (GENESIS_AUTH=required), or an invalid X-Operator-Key",
    },
    403: {
        "model": ErrorResponse,
        "description": "AGENT_ID_MISMATCH (the X-API-Key belongs to another agent), "
        "NOT_YOUR_MUTATION, NOT_TRAIT_OWNER (the live version of the trait is another agent's)",
    },
}


async def load_mutation(services: Services, mutation_id: str) -> Mutation:
    """The mutation of a well-formed id (a path parameter: api/params.py), or 404."""
    return (await load_with_quarantine(services, mutation_id))[0]


async def load_with_quarantine(services: Services, mutation_id: str) -> tuple[Mutation, TraitQuarantine | None]:
    """The mutation's record and the engine's quarantine record of its trait (None: none)."""
    async with services.sessions() as session:
        found = (
            await session.execute(
                select(Mutation, TraitQuarantine)
                .outerjoin(TraitQuarantine, TraitQuarantine.mutation_id == Mutation.mutation_id)
                .where(Mutation.mutation_id == mutation_id)
            )
        ).first()
    if found is None:
        raise ApiError(404, "MUTATION_NOT_FOUND", f"no mutation {mutation_id!r}")
    return found[0], found[1]


@dataclass(frozen=True)
class Authorised:
    """A mutation and who may act on it, and why: its own agent, an operator, or (rollback only)
    the agent whose version it replaced. ``by`` names the latter two for the record."""

    record: Mutation
    by: str | None = None


async def load_own_mutation(
    services: Services,
    mutation_id: str,
    api_key: str | None,
    operator_key: str | None,
    action: str,
    *,
    replaced_owner_may: bool = False,
) -> Authorised:
    """The mutation, if the caller may act on it: an operator (X-Operator-Key) on any mutation;
    an agent on its own; with ``replaced_owner_may``, also the agent that made the version this
    mutation replaced (the owner of v1 may take out another agent's v2). Any caller in
    GENESIS_AUTH=open without a key."""
    operator = await operator_of(services, operator_key)
    caller = None
    if operator is None and (api_key or services.settings.auth == "required"):
        caller = await acting_agent(services, api_key, None)
    record = await load_mutation(services, mutation_id)
    if operator is not None:
        return Authorised(record, by=operator.label)
    if caller is None or caller == record.agent_id:
        return Authorised(record)
    replaced = await _replaced_version_owner(services, record) if replaced_owner_may else None
    if replaced is not None and replaced[1] == caller:
        return Authorised(record, by=f"agent '{caller}', owner of the replaced v{replaced[0]}")
    also = " or the agent whose version it replaced" if replaced_owner_may else ""
    raise ApiError(
        403,
        "NOT_YOUR_MUTATION",
        f"mutation {mutation_id} belongs to agent '{record.agent_id}'; only it{also} (or an operator, "
        f"with X-Operator-Key) may {action}",
    )


async def _replaced_version_owner(services: Services, record: Mutation) -> tuple[int, str | None] | None:
    """(version, agent_id) of the version ``record`` replaced: the one its activation superseded,
    or, before activation, the one its ``replaces`` names (the live one when no version was named)."""
    if record.replaced_version is None and record.replaces_trait is None:
        return None
    query = (
        select(TraitVersion.version, Mutation.agent_id)
        .outerjoin(Mutation, Mutation.mutation_id == TraitVersion.mutation_id)
        .where(TraitVersion.trait_name == record.trait_name)
    )
    version = record.replaced_version if record.replaced_version is not None else record.replaces_version
    if version is not None:
        query = query.where(TraitVersion.version == version)
    elif record.trait_version is None:  # not activated yet, replaces whatever is live
        query = query.where(TraitVersion.status == "active")
    else:  # activated without replacing anything
        return None
    async with services.sessions() as session:
        row = (await session.execute(query)).first()
    return (row[0], row[1]) if row is not None else None


def status_response(
    record: Mutation, quarantine: TraitQuarantine | None = None, *, private: bool = False
) -> MutationStatusResponse:
    """The status shape of one mutation row (GET /api/mutations/{id}/status and each item of
    GET /api/mutations), with the engine's quarantine record of its trait, if any; ``private``:
    for its agent or an operator (``notify_url`` shown)."""
    return MutationStatusResponse(
        mutation_id=record.mutation_id,
        trait_name=record.trait_name,
        agent_id=record.agent_id,
        status=record.status,
        failure_reason_code=record.failure_reason_code,
        created_at=record.created_at.timestamp(),
        updated_at=record.updated_at.timestamp(),
        validation_log=record.validation_log or [],
        goal=record.goal,
        task_id=record.task_id,
        code_hash=record.code_hash,
        workflow_id=record.workflow_id,
        sandbox_report=record.sandbox_report,
        shadow_report=record.shadow_report,
        verdict_report=record.verdict_report,
        trait_version=record.trait_version,
        fitness_verdict=record.fitness_verdict,
        verdict_reason=verdict_reason(record),
        rollback_reason=record.rollback_reason,
        notify_url=record.notify_url if private else None,
        replaces=replaces_ref(record),
        replaced_version=record.replaced_version,
        restored_version=record.restored_version,
        replacement_approved_by=record.replacement_approved_by,
        quarantine=quarantine_info(quarantine),
        lineage=recorded_lineage(record),
    )


EXTINCT_LINE = "Extinct: "


def extinct_reason(record: Mutation) -> str | None:
    """Why an extinct mutation's trait left the live set (the last such line of its log)."""
    if record.status != "extinct":
        return None
    lines = [line for line in record.validation_log or [] if isinstance(line, str) and line.startswith(EXTINCT_LINE)]
    return lines[-1].removeprefix(EXTINCT_LINE) if lines else None


def verdict_reason(record: Mutation) -> str | None:
    """Why its fitness verdict is what it is (recorded with the effects; null before a verdict,
    and for verdicts recorded before reasons were)."""
    for source in (record.verdict_report, record.effects):
        reason = (
            source.get("reason" if source is record.verdict_report else "verdict_reason")
            if isinstance(source, dict)
            else None
        )
        if isinstance(reason, str):
            return reason
    return None


def replaces_ref(record: Mutation) -> TraitVersionRef | None:
    """The ``replaces`` of a mutation record, as the API shows it."""
    if record.replaces_trait is None:
        return None
    return TraitVersionRef(trait_name=record.replaces_trait, version=record.replaces_version)


def quarantine_info(row: TraitQuarantine | None) -> QuarantineInfo | None:
    """The engine's quarantine record of a version, as the API shows it."""
    return QuarantineInfo(reason=row.reason, quarantined_at=row.quarantined_at.timestamp()) if row else None
