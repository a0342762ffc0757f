"""Selection after the verdict, in a real world: the live ledger rolls a harmful trait back late,
a trait no Molbot carries goes extinct and its owner revives it.

On a stack of its own (Postgres database, Redis db, worker, API, and an engine in fast-forward
with a journal, so departures reach the audit). Verdicts are the window's and need more carriers
than the world has: every trait is kept without evidence (``inconclusive``, or without a verdict
before the engine starts), so what happens next is the ledger's doing alone.
"""

from __future__ import annotations

import os

import httpx
import pytest
from redis import asyncio as aioredis

from cli.processes import engine_process, worker_and_api
from pipeline import registry
from tests import agents
from tests.example_traits import EXAMPLES_DIR
from tests.own_stack import own_settings, set_rules
from tests.pipeline_steps import HISTORIES, propose, wait_for_status, wait_until
from tests.replays import assert_replays
from workflows.extinction import ExtinctionWorkflow, RevivalWorkflow

CALM = """class BaseTrait:
    pass

class CalmTrait(BaseTrait):
    async def execute(self, entity) -> None:
        entity.state = "calm"
"""
LONER = CALM.replace("CalmTrait", "LonerTrait").replace('"calm"', '"loner"')
EXTINCTION_TICKS = 300


@pytest.fixture(scope="module")
async def world(settings):
    own = await own_settings(
        settings,
        "selection",
        journal_enabled=True,
        verdict_mode="window",
        observation_window_ticks=300,
        observation_timeout_s=2.0,  # kept without a verdict while no engine runs
        observation_min_carriers=100_000,  # never enough: the window's verdict is inconclusive
        engine_fast_forward=True,
        engine_snapshot_interval=100,
        engine_initial_population=0,
        engine_min_population=150,
        engine_trait_gain_chance=0.5,
        verdict_ledger_window=5,
        verdict_ledger_min_snapshots=3,
        verdict_ledger_min_carriers=5,
        verdict_ledger_margin=0.2,  # the default (the suite's shared settings turn late verdicts off)
    )
    await set_rules(own.database_url, "test: short extinction", selection={"extinction_ticks": EXTINCTION_TICKS})
    async with worker_and_api(own, "selection") as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
        await wait_until(lambda: _healthy(http), timeout_s=90, what="the stack to answer")
        yield own, http


async def _healthy(http) -> bool:
    return (await http.get("/api/health")).status_code == 200


@pytest.mark.timeout(300)
async def test_the_ledger_rolls_back_a_harmful_trait_late_and_an_uncarried_one_goes_extinct(world, temporal_client):
    own, http = world
    reckless = await propose(http, (EXAMPLES_DIR / "reckless.py").read_text(), trait_name="reckless")
    calm = await propose(http, CALM, trait_name="calm")
    for mutation_id in (reckless, calm):
        status = await wait_for_status(http, mutation_id, {"kept", "rolled_back", "rejected"}, timeout_s=60)
        assert status["status"] == "kept" and status["fitness_verdict"] is None, status
    # The engine starts now: the Molbots its population floor spawns gain one of the two traits or
    # none, so each trait has carriers and comparable non-carriers from the first tick.
    engine = engine_process(own, "engine-selection")
    engine.start()
    try:
        late = await wait_for_status(http, reckless, {"rolled_back"}, timeout_s=120)
        assert late["rollback_reason"].startswith("late verdict: its carriers' fitness was -"), late
        assert (await http.get(f"/api/mutations/{calm}/status")).json()["status"] == "kept"
        answer = await http.get("/api/traits")
        assert answer.status_code == 200, answer.text
        traits = answer.json()
        assert [t["trait_name"] for t in traits["traits"]] == ["calm"]
        assert traits["traits"][0]["ledger"]["carriers"] > 0, traits
        departed = {d["trait_name"]: d for d in traits["departed"]}
        assert departed["reckless"]["how"] == "late_verdict"
        assert departed["reckless"]["reason"] == late["rollback_reason"]

        # No newborn gains a trait from now on: a trait that goes live now has no carrier.
        await set_rules(own.database_url, "test: no trait gain", params={"trait_gain_chance": 0.0})
        loner = await propose(http, LONER, trait_name="loner")
        extinct = await wait_for_status(http, loner, {"extinct", "rolled_back", "rejected"}, timeout_s=120)
        assert extinct["status"] == "extinct", extinct
        assert extinct["validation_log"][-1] == (
            f"Extinct: no Molbot has carried it for {EXTINCTION_TICKS:,} ticks "
            "(the manifest's selection.extinction_ticks)"
        )
        redis = aioredis.from_url(own.redis_url)
        assert "loner" not in await registry.read_entries(redis)
        await redis.aclose()
        receipts = (await http.get("/v1/receipts", params={"mutation_id": loner})).json()["receipts"]
        assert "mutation.extinct" in [r["kind"] for r in receipts]
        operator = await agents.operator_headers(own)
        events = await wait_until(
            lambda: _left(http, operator, loner), timeout_s=30, what="the audit event of its departure"
        )
        assert events[0]["trait_name"] == "loner"
        detail = (await http.get("/api/traits/loner")).json()
        assert detail["versions"][0]["status"] == "extinct" and detail["live_version"] is None
        assert detail["versions"][0]["extinct_reason"].startswith("no Molbot has carried it")

        owner = (await agents.agent(http, agents.DEFAULT_AGENT)).headers
        stranger = (await agents.agent(http, "selection-stranger")).headers
        refused = await http.post(f"/api/mutations/{loner}/revive", headers=stranger)
        assert refused.status_code == 403 and refused.json()["error"] == "NOT_YOUR_MUTATION"
        revived = await http.post(f"/api/mutations/{loner}/revive", headers=owner)
        assert revived.status_code == 200, revived.text
        assert revived.json()["status"] == "kept"
        again = await http.post(f"/api/mutations/{calm}/revive", headers=owner)
        assert again.status_code == 409 and again.json()["error"] == "NOT_EXTINCT"
        status = (await http.get(f"/api/mutations/{loner}/status")).json()
        assert any(line.startswith("Revived: revived by") for line in status["validation_log"]), status
        receipts = (await http.get("/v1/receipts", params={"mutation_id": loner})).json()["receipts"]
        assert "mutation.revived" in [r["kind"] for r in receipts]
        for workflow_id, name in ((f"extinction-{loner}", "trait_extinct"), (f"revival-{loner}", "trait_revived")):
            await replay_and_maybe_record(temporal_client, workflow_id, name)
    finally:
        engine.stop()


async def replay_and_maybe_record(temporal_client, workflow_id: str, name: str) -> None:
    """Replay the finished workflow against the current code; with GENESIS_RECORD_HISTORIES=1
    also store it in tests/histories/ so every later run replays it."""
    history = await temporal_client.get_workflow_handle(workflow_id).fetch_history()
    await assert_replays(history, [ExtinctionWorkflow, RevivalWorkflow])
    if os.environ.get("GENESIS_RECORD_HISTORIES"):
        with open(os.path.join(HISTORIES, f"{name}.json"), "w") as f:
            f.write(history.to_json())


async def _left(http, operator: dict[str, str], mutation_id: str) -> list[dict]:
    params = {"mutation_id": mutation_id, "kind": "trait.left"}
    response = await http.get("/v1/audit/events", params=params, headers=operator)
    return response.json().get("events", []) if response.status_code == 200 else []
