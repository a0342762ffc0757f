"""Registered agents and operator keys for tests: the API runs with GENESIS_AUTH=required, so
every proposal is sent with the X-API-Key of a registered agent, and every call of an operator
endpoint with an X-Operator-Key."""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from genesis.config import Settings
from genesis.db.session import get_sessionmaker
from identity import operators
from tests import traits

DEFAULT_AGENT = "genesis-tests"
_registered: dict[tuple[str, str], TestAgent] = {}


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


DEFAULT_OPERATOR = "genesis-tests-operator"
_operator_keys: dict[tuple[str, str], TestOperator] = {}


@dataclass(frozen=True)
class TestOperator:
    key: str
    key_prefix: str
    name: str

    @property
    def headers(self) -> dict[str, str]:
        return {"X-Operator-Key": self.key}


async def new_operator(settings: Settings, name: str) -> TestOperator:
    """A new operator key, made as `genesis operator create-key` makes one (into the test
    database, hashed with the suite's pepper)."""
    pepper = settings.api.key_pepper.get_secret_value().encode()
    issued, row = await operators.create_key(get_sessionmaker(settings.database_url), pepper, name)
    return TestOperator(key=issued.key, key_prefix=row.key_prefix, name=row.name)


async def operator(settings: Settings, name: str = DEFAULT_OPERATOR) -> TestOperator:
    """The operator key made under ``name`` for this test session (made on first use)."""
    cache_key = (settings.database_url, name)
    if cache_key not in _operator_keys:
        _operator_keys[cache_key] = await new_operator(settings, name)
    return _operator_keys[cache_key]


async def operator_headers(settings: Settings, name: str = DEFAULT_OPERATOR) -> dict[str, str]:
    return (await operator(settings, name)).headers


def forbidden(tag: str) -> str:
    """Code the gatekeeper rejects in milliseconds (no sandbox run)."""
    return traits.FORBIDDEN_IMPORT.replace('"hi"', f'"{tag}"')


def client_from(url: str, source_ip: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=url, timeout=60, transport=httpx.AsyncHTTPTransport(local_address=source_ip))
