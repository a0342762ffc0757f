"""GET /v1/agents/me/webhook-secret: the secret an agent verifies its webhooks with."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from api.auth import API_KEY, authenticate
from api.deps import ServicesDep
from api.errors import ErrorResponse
from api.identity.schemas import WebhookSecretResponse
from pipeline import webhooks

router = APIRouter(prefix="/v1/agents", tags=["agents"])


@router.get(
    "/me/webhook-secret",
    response_model=WebhookSecretResponse,
    responses={401: {"model": ErrorResponse, "description": "Missing or unknown X-API-Key"}},
)
async def webhook_secret(services: ServicesDep, api_key: str | None = Depends(API_KEY)) -> WebhookSecretResponse:
    """The secret that signs the webhooks of this agent's proposals (``notify_url``), in Standard
    Webhooks form. Verify ``webhook-signature`` = ``v1,`` + base64 HMAC-SHA256(base64-decoded
    secret after ``whsec_``, ``{webhook-id}.{webhook-timestamp}.{raw body}``), and reject old
    timestamps (e.g. more than 5 minutes away)."""
    agent = await authenticate(services, api_key)
    return WebhookSecretResponse(
        agent_id=agent.agent_id,
        webhook_secret=webhooks.agent_secret(services.webhook_secret, agent.agent_id),
        scheme="Standard Webhooks v1 (HMAC-SHA256)",
        signed_content="{webhook-id}.{webhook-timestamp}.{raw body}",
        headers=["webhook-id", "webhook-timestamp", "webhook-signature"],
    )
