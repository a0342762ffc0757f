"""Who is calling: the X-API-Key of a registered agent (GENESIS_AUTH=required), or, in open
mode, whoever the body says (the seed's keyless flow for local experiments); and whether the
caller is an operator (X-Operator-Key, identity/operators.py)."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Depends, Request
from fastapi.security import APIKeyHeader
from sqlalchemy import select

from api.deps import Services, ServicesDep
from api.errors import ApiError, ErrorResponse, Responses
from genesis.db.models import Agent
from identity import apikeys, operators

API_KEY = APIKeyHeader(
    name="X-API-Key",
    auto_error=False,  # the handlers answer 401 in the API's error shape (after body validation)
    description="The key POST /v1/agents/register returned (gen_…). Required on write endpoints "
    "unless GENESIS_AUTH=open.",
)
OPERATOR_KEY = APIKeyHeader(
    name="X-Operator-Key",
    auto_error=False,
    scheme_name="OperatorKey",
    description="An operator key (genop_…, made with `genesis operator create-key` on the API's host). "
    "Required on operator endpoints unless GENESIS_AUTH=open; on propose it allows replacing another "
    "agent's trait, on rollback and retry it allows any mutation.",
)
_CHALLENGE = {"WWW-Authenticate": 'ApiKey header="X-API-Key"'}
_OPERATOR_CHALLENGE = {"WWW-Authenticate": 'ApiKey header="X-Operator-Key"'}
OPERATOR_ERRORS: Responses = {
    401: {
        "model": ErrorResponse,
        "description": "OPERATOR_KEY_REQUIRED (no X-Operator-Key; GENESIS_AUTH=required) or INVALID_OPERATOR_KEY",
    },
    403: {"model": ErrorResponse, "description": "OPERATOR_KEY_REQUIRED: only an agent's X-API-Key was sent"},
}
HOW_TO_GET_OPERATOR_KEY = "create one with `genesis operator create-key --name NAME` on the API's host"


def _unauthorized(error: str, detail: str) -> ApiError:
    return ApiError(401, error, detail, headers=_CHALLENGE)


async def authenticate(services: Services, api_key: str | None) -> Agent:
    """The agent a key belongs to; 401 when the key is missing, malformed or unknown."""
    if not api_key:
        raise _unauthorized(
            "API_KEY_REQUIRED",
            "send your agent's key in the X-API-Key header (get one with POST /v1/agents/register)",
        )
    if apikeys.prefix_of(api_key, apikeys.OPERATOR_KEY_HEAD) is not None:
        raise _unauthorized(
            "INVALID_API_KEY",
            "the X-API-Key is an operator key: send it in the X-Operator-Key header (X-API-Key is for agents' keys)",
        )
    prefix = apikeys.prefix_of(api_key)
    agent = None
    if prefix is not None:
        async with services.sessions() as session:
            agent = await session.scalar(select(Agent).where(Agent.key_prefix == prefix))
    matched = apikeys.matches_row(services.pepper, api_key, agent.key_hash if agent else None)  # compared either way
    if not matched or agent is None:
        raise _unauthorized("INVALID_API_KEY", "the X-API-Key is not a key of any registered agent")
    return agent


async def acting_agent(services: Services, api_key: str | None, claimed_agent_id: str | None) -> str:
    """The agent_id a write request acts as.

    With a key: the key's agent, and a body ``agent_id`` that names another agent is refused
    (403): an agent cannot act as another. Without a key: 401, unless GENESIS_AUTH=open, where
    the body's ``agent_id`` is taken as given."""
    if api_key or services.settings.auth == "required":
        agent = await authenticate(services, api_key)
        if claimed_agent_id is not None and claimed_agent_id != agent.agent_id:
            raise ApiError(
                403,
                "AGENT_ID_MISMATCH",
                f"the X-API-Key belongs to agent '{agent.agent_id}' but the body names agent_id "
                f"'{claimed_agent_id}': an agent may only act as itself (leave agent_id out or send "
                f"'{agent.agent_id}')",
            )
        return agent.agent_id
    if claimed_agent_id is None:
        raise ApiError(
            422,
            "VALIDATION_ERROR",
            "agent_id: field required (or send an X-API-Key)",
            extra={"errors": [{"field": "agent_id", "message": "field required (or send an X-API-Key)"}]},
        )
    return claimed_agent_id


async def operator_of(services: Services, operator_key: str | None) -> operators.Operator | None:
    """The operator of an X-Operator-Key; None when none was sent; 401 for a key that is not a
    valid, unrevoked operator key (also in open mode: a key that is sent is checked)."""
    if not operator_key:
        return None
    operator = await operators.verify(services.sessions, services.pepper, operator_key)
    if operator is None:
        raise ApiError(
            401,
            "INVALID_OPERATOR_KEY",
            f"the X-Operator-Key is not a valid operator key (unknown, malformed or revoked); "
            f"{HOW_TO_GET_OPERATOR_KEY}",
            headers=_OPERATOR_CHALLENGE,
        )
    return operator


@dataclass(frozen=True)
class Reader:
    """Who reads a public answer. What is private to an agent (its proposals' ``notify_url``,
    where webhook URLs often carry a token) is shown only to that agent and to operators."""

    operator: bool = False
    agent_id: str | None = None

    def sees_private_of(self, agent_id: str | None) -> bool:
        return self.operator or (self.agent_id is not None and self.agent_id == agent_id)


async def reader(
    services: ServicesDep,
    api_key: str | None = Depends(API_KEY),
    operator_key: str | None = Depends(OPERATOR_KEY),
) -> Reader:
    """Dependency of public reads: the reader a key names (401 for a key that is sent and is not
    valid); nobody in particular without one. In GENESIS_AUTH=open everyone reads as an operator."""
    if await operator_of(services, operator_key) is not None or services.settings.auth == "open":
        return Reader(operator=True)
    if api_key:
        return Reader(agent_id=(await authenticate(services, api_key)).agent_id)
    return Reader()


async def require_operator(
    request: Request,
    services: ServicesDep,
    operator_key: str | None = Depends(OPERATOR_KEY),
    api_key: str | None = Depends(API_KEY),
) -> operators.Operator | None:
    """Dependency of the operator endpoints, checked before the body: the operator of a valid
    X-Operator-Key. Without one: 401 (403 when only an agent's X-API-Key was sent), unless
    GENESIS_AUTH=open, where anyone may call them (None)."""
    operator = await operator_of(services, operator_key)
    if operator is not None or services.settings.auth == "open":
        return operator
    route = request.scope.get("route")
    what = f"{request.method} {getattr(route, 'path', 'this path')}"
    if api_key and apikeys.prefix_of(api_key, apikeys.OPERATOR_KEY_HEAD) is not None:
        raise ApiError(
            401,
            "OPERATOR_KEY_REQUIRED",
            f"{what} is an operator endpoint and an operator key was sent as X-API-Key: send it in the "
            "X-Operator-Key header instead",
            headers=_OPERATOR_CHALLENGE,
        )
    if api_key:
        raise ApiError(
            403,
            "OPERATOR_KEY_REQUIRED",
            f"{what} is an operator endpoint: an agent's X-API-Key does not open it; send an operator "
            f"key in X-Operator-Key ({HOW_TO_GET_OPERATOR_KEY})",
        )
    raise ApiError(
        401,
        "OPERATOR_KEY_REQUIRED",
        f"{what} is an operator endpoint: send an operator key in X-Operator-Key ({HOW_TO_GET_OPERATOR_KEY})",
        headers=_OPERATOR_CHALLENGE,
    )
