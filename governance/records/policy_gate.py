"""The policy gate in front of every gated request: the manifest in force and the caller's live
grants decide (governance/policy.py), and the decision is recorded before anything happens, allow
or deny. The record is an outbox: the engine carries it into the world's journal, where the audit
finds it (kind ``policy.decision``); replay reads such records and never decides again.

In open mode (GENESIS_AUTH=open, local development) a request may name an agent that never
registered; such an agent holds the manifest's default capabilities.
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import AsyncConnection

from genesis import canonical
from genesis.config import Settings
from genesis.db.models import Agent, PolicyDecisionRow
from governance import policy

from . import capabilities, manifests


def new_decision_id() -> str:
    return f"dec_{secrets.token_hex(8)}"


async def holdings(conn: AsyncConnection, settings: Settings, agent_id: str, defaults: Sequence[str]) -> frozenset[str]:
    """The agent's live grants (an unregistered agent in open mode: the defaults)."""
    held = await capabilities.live(conn, agent_id)
    if held or settings.auth != "open":
        return held
    registered = await conn.scalar(select(Agent.agent_id).where(Agent.agent_id == agent_id))
    return held if registered is not None else frozenset(defaults)


async def decide(conn: AsyncConnection, settings: Settings, request: policy.Request) -> tuple[policy.Decision, str]:
    """Decide and record; the decision and its id."""
    current = await manifests.current(conn, settings)
    rules = current.manifest
    if request.role == "agent" and request.agent_id is not None:
        held = await holdings(conn, settings, request.agent_id, list(rules.capabilities.agent_defaults))
        request = dataclasses.replace(request, capabilities=held)
    decision = policy.decide(rules.policy, current.hash, request)
    return decision, await record(conn, request, decision)


def record_body(
    decision_id: str, decided_at: datetime, request: policy.Request, decision: policy.Decision
) -> dict[str, Any]:
    return {
        "id": decision_id,
        "decided_at": decided_at.isoformat(),
        "request": request.to_data(),
        "decision": decision.to_data(),
    }


async def record(conn: AsyncConnection, request: policy.Request, decision: policy.Decision) -> str:
    decision_id = new_decision_id()
    now = datetime.now(UTC)
    await conn.execute(
        insert(PolicyDecisionRow),
        {
            "id": decision_id,
            "decided_at": now,
            "role": request.role,
            "action": request.action,
            "subject": request.agent_id,
            "resource": request.resource[:200],
            "decision": decision.decision,
            "rule": decision.rule,
            "manifest_hash": decision.manifest_hash,
            "body": canonical.encode(record_body(decision_id, now, request, decision)),
        },
    )
    return decision_id
