"""Evolution cycles from the outside: start one (the Watcher, the API) and read their records
(``GET /api/evolution/cycles``). The cycle itself is workflows/evolution.py."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import func, select, tuple_
from sqlalchemy.ext.asyncio import async_sessionmaker
from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy

from genesis.db.models import EvolutionCycle
from genesis.dto import CycleKind, EvolutionCycleInput
from genesis.workflow_api import EVOLUTION_WORKFLOW, evolution_workflow_id, search_attributes


async def start_cycle(
    client: Client,
    task_queue: str,
    trigger_id: str,
    kind: CycleKind = CycleKind.anomaly,
    problem_type: str | None = None,
) -> str:
    """Start the cycle of a trigger (idempotent: the id is fixed); returns its workflow id."""
    workflow_id = evolution_workflow_id(trigger_id)
    await client.start_workflow(
        EVOLUTION_WORKFLOW,
        EvolutionCycleInput(trigger_id=trigger_id, kind=kind),
        id=workflow_id,
        task_queue=task_queue,
        search_attributes=search_attributes(problem_type=problem_type),
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
    )
    return workflow_id


def as_dict(row: EvolutionCycle) -> dict[str, Any]:
    return {
        "trigger_id": row.trigger_id,
        "workflow_id": row.workflow_id,
        "kind": row.kind,
        "problem_type": row.problem_type,
        "severity": row.severity,
        "stage": row.stage,
        "status": row.status,
        "action_type": row.action_type,
        "plan": row.plan,
        "code": row.code,
        "attempts": row.attempts,
        "mutation_id": row.mutation_id,
        "mutation_status": row.mutation_status,
        "params_change": row.params_change,
        "provider": row.provider,
        "model": row.model,
        "llm_calls": row.llm_calls,
        "tokens_in": row.tokens_in,
        "tokens_out": row.tokens_out,
        "estimated_cost_usd": row.estimated_cost_usd,
        "error": row.error,
        "created_at": row.created_at.timestamp(),
        "updated_at": row.updated_at.timestamp(),
    }


async def list_cycles(
    sessions: async_sessionmaker,
    limit: int = 50,
    status: str | None = None,
    after: tuple[datetime, str] | None = None,
) -> list[EvolutionCycle]:
    """The newest cycles first (by creation, then trigger id), those older than ``after``
    (``(created_at, trigger_id)`` of the last one seen) if given."""
    query = (
        select(EvolutionCycle).order_by(EvolutionCycle.created_at.desc(), EvolutionCycle.trigger_id.desc()).limit(limit)
    )
    if status:
        query = query.where(EvolutionCycle.status == status)
    if after is not None:
        query = query.where(tuple_(EvolutionCycle.created_at, EvolutionCycle.trigger_id) < after)
    async with sessions() as session:
        return list((await session.scalars(query)).all())


async def count_running(sessions: async_sessionmaker, since: datetime) -> int:
    """Cycles still running that were created after ``since``: an older record still marked
    running is taken for a cycle whose workflow was lost (its record would never end)."""
    query = select(func.count()).where(EvolutionCycle.status == "running", EvolutionCycle.created_at > since)
    async with sessions() as session:
        return int(await session.scalar(query) or 0)


async def get_cycle(sessions: async_sessionmaker, trigger_id: str) -> dict[str, Any] | None:
    async with sessions() as session:
        row = await session.get(EvolutionCycle, trigger_id)
    return as_dict(row) if row is not None else None
