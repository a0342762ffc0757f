"""Versions of one trait that stack tests share: fresh names, code that passes, proposing as an
agent (a replacement names the version it replaces) and following it until it is live."""

from __future__ import annotations

import itertools
import random

from sqlalchemy import func, select

from genesis.db.models import Mutation
from genesis.db.session import get_sessionmaker
from tests import traits
from tests.pipeline_steps import wait_for_status

_variants = itertools.count(random.randrange(10_000_000, 90_000_000, 1000))


def code() -> str:
    """A valid trait whose code hash no other proposal of the suite has."""
    return traits.seeker(next(_variants))


def fresh_name(prefix: str) -> str:
    return f"{prefix}_{random.randrange(16**8):08x}"


async def propose(http, agent, trait_name: str, source: str, replaces: dict | None = None, **extra):
    body = {"trait_name": trait_name, "goal": "modify test", "code": source, **extra}
    if replaces is not None:
        body["replaces"] = replaces
    return await http.post("/api/mutations/propose", json=body, headers=agent.headers)


async def go_live(http, agent, trait_name: str, source: str | None = None, replaces: dict | None = None) -> dict:
    response = await propose(http, agent, trait_name, source or code(), replaces)
    assert response.status_code == 202, response.text
    status = await wait_for_status(http, response.json()["mutation_id"], {"activated", "rejected", "failed"}, 90)
    assert status["status"] == "activated", status
    return status


async def count_mutations(settings, agent_id: str) -> int:
    async with get_sessionmaker(settings.database_url)() as session:
        return await session.scalar(select(func.count()).select_from(Mutation).where(Mutation.agent_id == agent_id))
