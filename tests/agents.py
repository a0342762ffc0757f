"""Registered agents for tests: the API runs with GENESIS_AUTH=required, so every proposal is
sent with the X-API-Key of a registered agent."""

from __future__ import annotations

from dataclasses import dataclass

import httpx

DEFAULT_AGENT = "genesis-tests"
_registered: dict[tuple[str, str], "TestAgent"] = {}


@dataclass(frozen=True)
class TestAgent:
    agent_id: str
    api_key: str
    name: str

    @property
    def headers(self) -> dict[str, str]:
        return {"X-API-Key": self.api_key}


async def register(http: httpx.AsyncClient, name: str, description: str = "") -> TestAgent:
    """A new agent (a fresh agent_id and key) on every call."""
    response = await http.post("/v1/agents/register", json={"name": name, "description": description})
    assert response.status_code == 201, response.text
    body = response.json()
    return TestAgent(agent_id=body["agent_id"], api_key=body["api_key"], name=name)


async def agent(http: httpx.AsyncClient, name: str = DEFAULT_AGENT) -> TestAgent:
    """The agent registered under ``name`` for this test session (registered on first use)."""
    cache_key = (str(http.base_url), name)
    if cache_key not in _registered:
        _registered[cache_key] = await register(http, name)
    return _registered[cache_key]


async def headers(http: httpx.AsyncClient, name: str = DEFAULT_AGENT) -> dict[str, str]:
    return (await agent(http, name)).headers
