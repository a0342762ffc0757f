"""Steps of a mutation's life that stack tests share: proposing, following its status to a
verdict, reporting observation windows as the engine would, replaying its workflow's history."""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid

from genesis.db.models import Mutation
from genesis.db.session import get_sessionmaker
from genesis.dto import ActivationRequest
from genesis.effects import WorldSample
from genesis.workflow_api import SA_TRAIT_NAME
from tests import agents, traits
from tests.replays import assert_replays
from workflows.mutation import MutationWorkflow

# A verdict on the sandbox has been reached once the status leaves queued/validating.
PASSED = {"sandbox_ok", "activated", "kept"}
FINAL = PASSED | {"rejected", "failed", "rolled_back"}
HISTORIES = os.path.join(os.path.dirname(__file__), "histories")


async def propose(http, code: str, trait_name: str = "energy_hoarder", agent_id: str | None = None, **extra) -> str:
    """Propose as the registered agent named ``agent_id`` (the session's test agent if None)."""
    proposer = await agents.agent(http, agent_id or agents.DEFAULT_AGENT)
    body = {"agent_id": proposer.agent_id, "trait_name": trait_name, "goal": "test", "code": code, **extra}
    response = await http.post("/api/mutations/propose", json=body, headers=proposer.headers)
    assert response.status_code == 202, response.text
    payload = response.json()
    assert payload["status"] == "queued"
    assert payload["mutation_id"].startswith("mut_")
    return payload["mutation_id"]


async def wait_for_verdict(http, mutation_id: str, timeout_s: float = 90) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        response = await http.get(f"/api/mutations/{mutation_id}/status")
        assert response.status_code == 200, response.text
        status = response.json()
        if status["status"] in FINAL:
            return status
        await asyncio.sleep(0.1)
    raise AssertionError(f"{mutation_id} reached no verdict in {timeout_s}s: {status}")


def new_mutation_id() -> str:
    return f"mut_{uuid.uuid4().hex[:12]}"


async def insert_mutation(settings, mutation_id: str, trait_name: str, code: str) -> None:
    async with get_sessionmaker(settings.database_url)() as session:
        session.add(
            Mutation(
                mutation_id=mutation_id,
                agent_id="lifecycle-test",
                trait_name=trait_name,
                code=code,
                status="sandbox_ok",
                validation_log=[],
                workflow_id=f"mutation-{mutation_id}",
            )
        )
        await session.commit()


async def activation(settings, trait_name: str, variant: int) -> ActivationRequest:
    mutation_id = new_mutation_id()
    code = traits.seeker(variant)
    await insert_mutation(settings, mutation_id, trait_name, code)
    return ActivationRequest(
        mutation_id=mutation_id,
        trait_name=trait_name,
        class_name="SeekerTrait",
        code=code,
        code_hash=uuid.uuid4().hex * 2,
    )


async def next_message(pubsub, timeout: float = 5.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=0.5)
        if message:
            return json.loads(message["data"])
    raise AssertionError("no message published")


CARRIERS = 20  # enough Molbots carrying the observed trait for a verdict (GENESIS_OBSERVATION_MIN_CARRIERS)


def sample(tick: int, count: int, energy: float, starvation: int, carriers: int = CARRIERS) -> WorldSample:
    """A WorldSample whose carriers are those of trait "t" (signal_window reports them as the
    observed trait's)."""
    return WorldSample(
        tick=tick,
        entity_count=count,
        avg_energy=energy,
        period_starvation=starvation,
        trait_stats={"t": {"carriers": carriers, "avg_energy": energy + 5, "births": 0, "deaths": {}}},
    )


async def replay_and_maybe_record(temporal_client, mutation_id: str, name: str) -> None:
    """Replay the finished workflow against the current code; with GENESIS_RECORD_HISTORIES=1
    also store it in tests/histories/ so every later run replays it."""
    history = await temporal_client.get_workflow_handle(f"mutation-{mutation_id}").fetch_history()
    await assert_replays(history, [MutationWorkflow])
    if os.environ.get("GENESIS_RECORD_HISTORIES"):
        with open(os.path.join(HISTORIES, f"{name}.json"), "w") as f:
            f.write(history.to_json())


def assert_honest_verdict(answer: dict) -> None:
    """A GET /api/mutations/{id}/effects answer after a real engine's window: judged only with
    enough carriers, inconclusive (and kept) otherwise, with the reason either way."""
    verdict, effects = answer["fitness_verdict"], answer["effects"]
    assert verdict in ("positive", "neutral", "negative", "inconclusive"), answer
    assert (verdict == "inconclusive") == (effects["carriers_seen"] < effects["carriers_needed"]), answer
    assert answer["status"] == ("rolled_back" if verdict == "negative" else "kept"), answer
    assert answer["verdict_reason"] == effects["verdict_reason"] and answer["verdict_reason"], answer


async def signal_window(temporal_client, mutation_id: str, before: WorldSample, after: WorldSample) -> None:
    """Report an observation window to the mutation's workflow as the engine would, the samples'
    carriers of trait "t" as its trait's (its name comes from the workflow's search attribute)."""
    handle = temporal_client.get_workflow_handle(f"mutation-{mutation_id}")
    trait = (await handle.describe()).typed_search_attributes.get(SA_TRAIT_NAME)
    for report in (before, after):
        stats = {trait if name == "t" else name: value for name, value in report.trait_stats.items()}
        await handle.signal("world_snapshot", report.model_copy(update={"trait_stats": stats}))


async def wait_for_status(http, mutation_id: str, wanted: set[str], timeout_s: float = 60) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = (await http.get(f"/api/mutations/{mutation_id}/status")).json()
        if status["status"] in wanted:
            return status
        await asyncio.sleep(0.1)
    raise AssertionError(f"{mutation_id} never reached {wanted}: {status}")


async def wait_until(predicate, timeout_s: float = 60, what: str = "condition"):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = await predicate()
        if value:
            return value
        await asyncio.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}")
