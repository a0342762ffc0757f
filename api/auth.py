"""Who is calling: the X-API-Key of a registered agent (GENESIS_AUTH=required), or, in open
mode, whoever the body says (the seed's keyless flow for local experiments)."""

from __future__ import annotations

from fastapi.security import APIKeyHeader
from sqlalchemy import select

from api.deps import Services
from api.errors import ApiError
from genesis import apikeys
from genesis.db.models import Agent

API_KEY = APIKeyHeader(
    name="X-API-Key",
    auto_error=False,  # the handlers answer 401 in the API's error shape (after body validation)
    description="The key POST /v1/agents/register returned (gen_…). Required on write endpoints "
    "unless GENESIS_AUTH=open.",
)
_CHALLENGE = {"WWW-Authenticate": 'ApiKey header="X-API-Key"'}
_DUMMY_DIGEST = "0" * 64


def _unauthorized(error: str, detail: str) -> ApiError:
    return ApiError(401, error, detail, headers=_CHALLENGE)


async def authenticate(services: Services, api_key: str | None) -> Agent:
    """The agent a key belongs to; 401 when the key is missing, malformed or unknown."""
    if not api_key:
        raise _unauthorized(
            "API_KEY_REQUIRED",
            "send your agent's key in the X-API-Key header (get one with POST /v1/agents/register)",
        )
    prefix = apikeys.prefix_of(api_key)
    agent = None
    if prefix is not None:
        async with services.sessions() as session:
            agent = await session.scalar(select(Agent).where(Agent.key_prefix == prefix))
    # Compare digests even when there is no candidate, so a miss takes as long as a mismatch.
    if not apikeys.matches(services.pepper, api_key, agent.key_hash if agent else _DUMMY_DIGEST) or agent is None:
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
                403, "AGENT_ID_MISMATCH",
                f"the X-API-Key belongs to agent '{agent.agent_id}' but the body names agent_id "
                f"'{claimed_agent_id}': an agent may only act as itself (leave agent_id out or send "
                f"'{agent.agent_id}')",
            )
        return agent.agent_id
    if claimed_agent_id is None:
        raise ApiError(
            422, "VALIDATION_ERROR", "agent_id: field required (or send an X-API-Key)",
            extra={"errors": [{"field": "agent_id", "message": "field required (or send an X-API-Key)"}]},
        )
    return claimed_agent_id
