"""The policy gate as the API applies it: decide, record, and refuse with the reason (403
POLICY_DENIED, naming the rule and the decision's id) or go on (governance/records/policy_gate.py)."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncConnection

from api.errors import ApiError
from governance import policy
from governance.records import policy_gate
from identity.operators import Operator


async def require(services, conn: AsyncConnection, asked: policy.Request) -> str:
    """The id of the recorded decision when it allows ``asked``; 403 POLICY_DENIED otherwise."""
    decision, decision_id = await policy_gate.decide(conn, services.settings, asked)
    if not decision.allowed:
        raise ApiError(
            403,
            "POLICY_DENIED",
            f"{asked.action} denied: {decision.reason} (decision {decision_id})",
            extra={"decision_id": decision_id, "rule": decision.rule},
        )
    return decision_id


async def operator_decides(services, operator: Operator | None, action: str, resource: str) -> str:
    """Who decides on ``resource`` (the operator's label; "open-mode" without keys), once the gate
    allowed ``action``. The decision is recorded on a connection of its own: it stands whatever
    the request does next."""
    by = operator.label if operator is not None else "open-mode"
    async with services.database.connect() as conn:
        conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
        await require(services, conn, policy.Request("operator", action, by, resource=resource))
    return by
