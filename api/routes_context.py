"""Context for agents writing traits: GET /api/agents/context/sandbox-api."""

from __future__ import annotations

from fastapi import APIRouter

from genesis import rules

router = APIRouter(prefix="/api/agents/context", tags=["agent context"])


@router.get("/sandbox-api")
async def sandbox_api() -> dict:
    """The rules a trait must follow (imports, banned calls and attributes, the Entity API,
    timeouts). Cache it and refetch when ``sandbox_rules_version`` changes."""
    return rules.sandbox_api_document()
