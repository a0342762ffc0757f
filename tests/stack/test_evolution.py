"""Evolution cycles end to end on real Temporal, Postgres, Redis and Docker; the LLM is a real
local HTTP server with scripted answers (tests/llm_server.py). A worker of this module's own
task queue talks to it; the suite's API serves the cycle records and the feed."""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid

import httpx
import pytest
from pydantic import SecretStr

from cli.processes import free_port, worker_process
from engine.core.world import World as WorldCore, WorldParams
from engine.process.world_overrides import ParamsFollower
from evolution import cycles, llm, operator, prompts
from evolution.watcher import GO, Watcher
from genesis import redis_keys as keys, world_params
from genesis.config import Settings
from genesis.dto import CycleContext, CycleKind
from genesis.effects import WorldSample
from genesis.redis_keys import Channels
from genesis.workflow_api import TASK_SIGNAL_RESOLVE, evolution_workflow_id, task_workflow_id
from tests import agents
from tests.evolution_worlds import write_snapshots
from tests.llm_server import Answer, ScriptedLLM
from tests.pipeline_steps import HISTORIES, wait_for_status
from tests.replays import assert_replays
from workflows.evolution import EvolutionCycleWorkflow

QUEUE = "genesis-evolution-test"
STARVATION = {"entity_count": 90, "deaths_last_period": 80, "death_starvation": 80, "death_age": 0}


def forager(variant: int, name: str = "Forager") -> str:
    """A valid trait whose code differs per variant (dedupe is per code)."""
    return f"""class BaseTrait:
    pass

class {name}Trait(BaseTrait):
    async def execute(self, entity) -> None:
        if entity.energy < {20 + variant % 60}:
            entity.energy_consumption_rate *= 0.9
"""


def plan_answer(name: str, action: str = "new_trait", **extra) -> str:
    plan = {
        "action_type": action,
        "trait_name": name,
        "description": f"{name} saves energy when starving",
        "target_behavior": "burn less energy when energy is low",
        **extra,
    }
    return f"Here is my plan:\n```json\n{json.dumps(plan)}\n```\nIt should help."


def code_answer(code: str) -> str:
    return f"Sure! Here is the trait:\n```python\n{code}```\nThis lowers consumption."


@pytest.fixture(scope="module")
async def llm_server():
    server = ScriptedLLM().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
async def evo_settings(settings, llm_server) -> Settings:
    return settings.override(
        task_queue=QUEUE,
        llm_provider="ollama",
        llm_url=llm_server.url,
        llm_model="scripted",
        llm_attempts=2,
        llm_timeout_s=10.0,
        sandbox_pool_size=0,
        llm_cost_in_per_mtok=1.0,
        llm_cost_out_per_mtok=2.0,
        schedule_min_interval_s=1.0,
        worker_metrics_port=free_port(),
    )


@pytest.fixture(scope="module")
async def evo_worker(evo_settings, api_url):
    process = worker_process(evo_settings, "worker-evolution")
    process.start()
    await asyncio.sleep(3)  # the worker builds/finds its sandbox image before polling
    yield process
    process.stop()


@pytest.fixture
def script(llm_server):
    llm_server.answers.clear()
    llm_server.requests.clear()
    return llm_server


async def wait_cycle(http, trigger_id: str, done, timeout_s: float = 90) -> dict:
    deadline, body = time.monotonic() + timeout_s, None
    while time.monotonic() < deadline:
        response = await http.get(f"/api/evolution/cycles/{trigger_id}")
        if response.status_code == 200:
            body = response.json()
            if done(body):
                return body
        await asyncio.sleep(0.2)
    raise AssertionError(f"cycle {trigger_id} never got there: {body}")


async def feed_of(http, trigger_id: str) -> list[dict]:
    messages, after = [], "0-0"  # from the oldest kept
    while True:
        page = (await http.get("/api/feed", params={"limit": 500, "after": after})).json()
        messages += [m for m in page["messages"] if m["trigger_id"] == trigger_id]
        if not page["messages"]:
            return messages
        after = page["last_id"]


async def start(temporal_client, trigger_id: str | None = None) -> str:
    trigger_id = trigger_id or f"trg_{uuid.uuid4().hex[:12]}"
    await cycles.start_cycle(temporal_client, QUEUE, trigger_id)
    return trigger_id


async def record_history(temporal_client, workflow_id: str, name: str) -> None:
    history = await temporal_client.get_workflow_handle(workflow_id).fetch_history()
    await assert_replays(history, [EvolutionCycleWorkflow])
    if os.environ.get("GENESIS_RECORD_HISTORIES"):
        with open(os.path.join(HISTORIES, f"{name}.json"), "w") as f:
            f.write(history.to_json())


def sample(tick: int, count: int, energy: float, starvation: int, run_id: str = "r") -> WorldSample:
    return WorldSample(tick=tick, run_id=run_id, entity_count=count, avg_energy=energy, period_starvation=starvation)


# -- providers and reading answers (real HTTP, no Temporal) ---------------------------------------


async def test_providers_speak_their_protocols_and_report_usage(script, settings):
    for provider in ("ollama", "openai", "anthropic"):
        script.script(Answer(f"hello from {provider}", tokens_in=7, tokens_out=3))
        s = settings.override(
            llm_provider=provider, llm_url=script.url, llm_model="m1", llm_api_key=SecretStr("sk-test")
        )
        reply = await llm.complete(s, "be brief", f"ask {provider}")
        assert (reply.text, reply.tokens_in, reply.tokens_out, reply.provider) == (
            f"hello from {provider}",
            7,
            3,
            provider,
        )
    ollama, openai, anthropic = script.requests
    assert ollama["_path"] == "/api/generate" and ollama["prompt"] == "ask ollama" and ollama["system"] == "be brief"
    assert ollama["stream"] is False
    assert openai["_path"] == "/v1/chat/completions" and openai["_headers"]["Authorization"] == "Bearer sk-test"
    assert openai["messages"] == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "ask openai"}]
    assert anthropic["_path"] == "/v1/messages" and anthropic["_headers"]["x-api-key"] == "sk-test"
    assert anthropic["system"] == "be brief" and anthropic["_headers"]["anthropic-version"] == llm.ANTHROPIC_VERSION

    s = settings.override(llm_provider="ollama", llm_url=script.url)
    script.script(Answer("overloaded", status=503), Answer("bad model", status=400))
    with pytest.raises(llm.LLMUnavailable, match="503"):
        await llm.complete(s, "s", "p")
    with pytest.raises(llm.LLMBadReply, match="400"):
        await llm.complete(s, "s", "p")
    script.script(Answer("too late", delay_s=1.5))
    with pytest.raises(llm.LLMUnavailable, match=r"did not answer within 0\.5 s"):
        await llm.complete(s.override(llm_timeout_s=0.5), "s", "p")
    down = settings.override(llm_provider="openai", llm_url="http://127.0.0.1:9")
    with pytest.raises(llm.LLMUnavailable, match="not reachable"):
        await llm.complete(down, "s", "p")
    with pytest.raises(llm.LLMOff, match="GENESIS_LLM_PROVIDER=off"):
        await llm.complete(settings.override(llm_provider="off"), "s", "p")


def test_plans_and_code_are_read_tolerantly():
    context = CycleContext(
        trigger_id="t",
        workflow_id="w",
        kind=CycleKind.anomaly,
        problem_type="starvation",
        severity="high",
        active_traits=["hoarder"],
        world_params={"resource_energy": 25.0},
    )
    plan = prompts.parse_plan(
        'Sure. {"action_type": "new_trait", "trait_name": "hoarder", "description": "d"} ok', context
    )
    assert plan.action_type == "modify_trait" and plan.trait_name == "hoarder"  # a live name is a modification
    params = prompts.parse_plan(
        json.dumps({"action_type": "adjust_params", "description": "more food", "params": {"resource_energy": 30}}),
        context,
    )
    assert params.params == {"resource_energy": 30.0}
    for bad, why in (
        ("no json here", "no JSON object"),
        ('{"action_type": "dance", "description": "d"}', "not one of"),
        ('{"action_type": "new_trait", "trait_name": "Bad Name", "description": "d"}', "snake_case"),
        ('{"action_type": "modify_trait", "trait_name": "ghost", "description": "d"}', "not a live trait"),
        ('{"action_type": "adjust_params", "description": "d", "params": {"width": 5}}', "not adjustable"),
        ('{"action_type": "adjust_params", "description": "d", "params": {"resource_energy": 59}}', "more than 50%"),
    ):
        with pytest.raises(prompts.PlanError, match=why):
            prompts.parse_plan(bad, context)
    assert prompts.extract_code("text\n```python\nx = 1\n```\nmore") == "x = 1\n"
    assert prompts.extract_code("```\nclass A:\n    pass\n```") == "class A:\n    pass\n"
    assert prompts.extract_code("class A:\n    pass") == "class A:\n    pass\n"


async def test_engine_applies_world_parameter_overrides(redis_client):
    world = WorldCore(WorldParams(initial_population=5), seed=1)
    applied: list[WorldParams] = []
    follower = ParamsFollower(world.params, applied.append, redis_client)
    record = {"overrides": {"resource_energy": 30.0, "width": 5.0}, "workflow_id": "evolution-x", "trigger_id": "x"}
    await redis_client.set(keys.WORLD_PARAMS_OVERRIDES, json.dumps(record))
    try:
        assert await follower.refresh()
        assert applied[-1].resource_energy == 30.0 and applied[-1].width == 800.0  # not adjustable: ignored
        assert follower.observer_workflow == "evolution-x"
        assert not await follower.refresh()  # unchanged record
        await redis_client.set(keys.WORLD_PARAMS_OVERRIDES, json.dumps({"overrides": {}}))
        assert await follower.refresh() and applied[-1] == world.params and follower.observer_workflow is None
    finally:
        await redis_client.delete(keys.WORLD_PARAMS_OVERRIDES)


async def analyze_written(watcher: Watcher, redis_client, interval: int, *changes: dict):
    """The watcher's outcome on these snapshots. The suite's engine publishes its own tick to the
    same key about once a second: an analysis that may have read the engine's tick instead of
    ours (the key moved before it finished) is run again on fresh snapshots."""
    for _ in range(5):
        newest = await write_snapshots(redis_client, interval, *changes)
        outcome = await watcher.analyze()
        if outcome.status == GO or int(await redis_client.get(keys.WORLD_TICK)) == newest:
            return outcome
    raise AssertionError("the engine's tick kept replacing the test's snapshots")


# -- whole cycles ----------------------------------------------------------------------------------


async def test_starvation_anomaly_runs_a_full_cycle_to_a_live_trait(
    evo_settings, evo_worker, script, http, redis_client, temporal_client
):
    script.script(plan_answer("starvation_saver"), code_answer(forager(1, "StarvationSaver")))
    await redis_client.delete(keys.WATCHER_CIRCUIT_BREAKER, keys.WATCHER_TRIGGER_COUNTER)

    async def temporal():
        return temporal_client

    watcher = Watcher(evo_settings.override(watcher_cooldown_s=0.0), redis_client, temporal)
    interval = evo_settings.engine.snapshot_interval
    outcome = await analyze_written(watcher, redis_client, interval, {}, STARVATION)  # 200, then 90
    await watcher.drain()
    assert outcome.status == GO and outcome.anomaly.type == "starvation" and outcome.anomaly.severity == "critical"
    trigger_id = outcome.trigger_id
    try:
        cycle = await wait_cycle(http, trigger_id, lambda c: c["mutation_id"] and c["stage"] == "mutation_running")
        mutation_id = cycle["mutation_id"]
        status = None
        for _ in range(300):
            status = (await http.get(f"/api/mutations/{mutation_id}/status")).json()
            if status["status"] in ("activated", "rejected", "failed"):
                break
            await asyncio.sleep(0.2)
        assert status["status"] == "activated", status
        assert status["agent_id"] == "genesis-coder" and status["trait_name"] == "starvation_saver"
        assert status["task_id"] == outcome.task_id  # the cycle answers the Watcher's task

        assert cycle["kind"] == "anomaly" and cycle["problem_type"] == "starvation" and cycle["severity"] == "critical"
        assert cycle["action_type"] == "new_trait" and cycle["plan"]["trait_name"] == "starvation_saver"
        assert "StarvationSaverTrait" in cycle["code"] and cycle["attempts"] == 1
        assert (cycle["llm_calls"], cycle["tokens_in"], cycle["tokens_out"]) == (2, 200, 100)
        assert cycle["estimated_cost_usd"] == pytest.approx((200 * 1.0 + 100 * 2.0) / 1e6)
        assert cycle["provider"] == "ollama" and cycle["model"] == "scripted"
        architect_prompt = script.prompts()[0]
        assert "PROBLEM: starvation (severity: critical)" in architect_prompt and "Population: 90" in architect_prompt

        # The mutation's observation window closes well: the cycle ends with a kept trait.
        handle = temporal_client.get_workflow_handle(f"mutation-{mutation_id}")
        await handle.signal("world_snapshot", sample(300, 100, 50.0, 5))
        await handle.signal("world_snapshot", sample(600, 110, 55.0, 2))
        cycle = await wait_cycle(http, trigger_id, lambda c: c["status"] != "running")
        assert (cycle["stage"], cycle["status"], cycle["mutation_status"]) == ("completed", "succeeded", "kept")
        actions = [m["action"] for m in await feed_of(http, trigger_id)]
        assert actions == [
            "anomaly_detected",
            "plan_created",
            "code_generated",
            "mutation_applied",
            "kept",
            "cycle_completed",
        ], actions
        async with httpx.AsyncClient(timeout=10) as client:  # the worker's Prometheus metrics
            metrics = (await client.get(f"http://127.0.0.1:{evo_settings.worker.metrics_port}/metrics")).text
        assert 'genesis_llm_tokens_total{direction="in",provider="ollama"}' in metrics
        assert 'genesis_llm_calls_total{outcome="ok",provider="ollama"}' in metrics
        assert 'genesis_evolution_cycles_ended_total{stage="completed",status="succeeded"}' in metrics
        listed = (await http.get("/api/evolution/cycles", params={"limit": 500})).json()["cycles"]
        assert trigger_id in [c["trigger_id"] for c in listed]
        await record_history(temporal_client, evolution_workflow_id(trigger_id), "evolution_cycle_kept")
    finally:
        try:  # normally closed already by the mutation's activation
            await temporal_client.get_workflow_handle(task_workflow_id(outcome.task_id)).signal(
                TASK_SIGNAL_RESOLVE, "test over"
            )
        except Exception:
            pass


async def test_an_llm_modification_descends_from_the_live_version(evo_worker, script, http, temporal_client):
    """A cycle whose Architect modifies a live trait records that version as the proposal's
    parent, with the LLM provider as its origin."""
    agent = await agents.register(http, "lineage-parent")
    name = f"lineage_parent_{uuid.uuid4().hex[:8]}"
    body = {"trait_name": name, "goal": "a parent", "code": forager(3, "LineageParent")}
    response = await http.post("/api/mutations/propose", json=body, headers=agent.headers)
    assert response.status_code == 202, response.text
    parent_id = response.json()["mutation_id"]
    assert (await wait_for_status(http, parent_id, {"activated", "rejected", "failed"}, 90))["status"] == "activated"
    await observe_well(temporal_client, parent_id)
    await wait_for_status(http, parent_id, {"kept"})

    script.script(plan_answer(name, "modify_trait"), code_answer(forager(4, "LineageParent")))
    trigger_id = await start(temporal_client)
    cycle = await wait_cycle(http, trigger_id, lambda c: c["mutation_id"] and c["stage"] == "mutation_running")
    child = (await http.get(f"/api/mutations/{cycle['mutation_id']}/status")).json()
    assert child["lineage"] == {
        "origin": "ollama",
        "parents": [{"trait_name": name, "version": 1, "mutation_id": parent_id}],
        "operators": [],
        "seed": None,
        "seed_trait": None,
    }
    assert child["replaces"] == {"trait_name": name, "version": 1}
    status = await wait_for_status(http, child["mutation_id"], {"activated", "rejected", "failed"}, 90)
    assert status["status"] == "activated", status
    await observe_well(temporal_client, child["mutation_id"])
    await wait_cycle(http, trigger_id, lambda c: c["status"] != "running")


async def observe_well(temporal_client, mutation_id: str, thriving: str | None = None) -> None:
    """Close a mutation's observation window with a world that did well (it is kept); with
    ``thriving``, that trait's carriers did better than the other Molbots."""
    handle = temporal_client.get_workflow_handle(f"mutation-{mutation_id}")
    before, after = sample(300, 100, 50.0, 5), sample(600, 110, 55.0, 2)
    if thriving:  # enough carriers during the window for a verdict (GENESIS_OBSERVATION_MIN_CARRIERS)
        before.trait_stats = {thriving: {"carriers": 8, "avg_energy": 50.0, "births": 0, "deaths": {}}}
        after.trait_stats = {thriving: {"carriers": 10, "avg_energy": 70.0, "births": 2, "deaths": {}}}
    await handle.signal("world_snapshot", before)
    await handle.signal("world_snapshot", after)


async def test_rejected_code_is_retried_once_with_the_validators_feedback(evo_worker, script, http, temporal_client):
    bad = "import os\n\n" + forager(2, "Retried")
    script.script(plan_answer("retried_saver"), code_answer(bad), code_answer(forager(3, "Retried")))
    trigger_id = await start(temporal_client)
    cycle = await wait_cycle(http, trigger_id, lambda c: c["mutation_id"] is not None)
    assert cycle["attempts"] == 2 and "import os" not in cycle["code"]
    retry_prompt = script.prompts()[2]
    assert "rejected by the validator" in retry_prompt and "AST_IMPORT_FORBIDDEN" in retry_prompt
    assert "Forbidden import: os" in retry_prompt and "import os" in retry_prompt  # the verdict and the code
    messages = await feed_of(http, trigger_id)
    failed = [m for m in messages if m["action"] == "validation_failed"]
    assert len(failed) == 1 and "Retrying once" in failed[0]["message"] and failed[0]["agent"] == "coder"
    # Withdraw the trait once it is live (the cycle records the mutation id just before it starts
    # the child workflow): the cycle ends with the mutation's verdict.
    await wait_for_status(http, cycle["mutation_id"], {"activated"})
    await temporal_client.get_workflow_handle(f"mutation-{cycle['mutation_id']}").signal("rollback", "test over")
    cycle = await wait_cycle(http, trigger_id, lambda c: c["status"] != "running")
    assert (cycle["stage"], cycle["status"], cycle["mutation_status"]) == ("completed", "succeeded", "rolled_back")
    await record_history(temporal_client, evolution_workflow_id(trigger_id), "evolution_retry_rolled_back")


async def test_code_rejected_twice_ends_the_cycle_as_failed(evo_worker, script, http, temporal_client):
    script.script(
        plan_answer("twice_bad"), code_answer("import os\n" + forager(4)), code_answer("eval('1')\n" + forager(5))
    )
    trigger_id = await start(temporal_client)
    cycle = await wait_cycle(http, trigger_id, lambda c: c["status"] != "running")
    assert (cycle["stage"], cycle["status"], cycle["attempts"], cycle["mutation_id"]) == (
        "validation_failed",
        "failed",
        2,
        None,
    )
    assert cycle["error"].startswith("code rejected twice: AST_")
    failed = [m for m in await feed_of(http, trigger_id) if m["action"] == "validation_failed"]
    assert len(failed) == 2 and "Giving up" in failed[1]["message"]
    assert len(script.requests) == 3


async def test_code_a_mutation_already_had_is_never_proposed_again(evo_worker, script, http, temporal_client):
    """The Coder writes code some mutation already had: the cycle asks once more with the reason
    and, given the same code again, ends with it; no mutation is recorded for the copy."""
    agent = await agents.register(http, "dup-original")
    code = forager(7, "DupOriginal")
    body = {"trait_name": f"dup_original_{uuid.uuid4().hex[:8]}", "goal": "the original", "code": code}
    response = await http.post("/api/mutations/propose", json=body, headers=agent.headers)
    assert response.status_code == 202, response.text
    original = response.json()["mutation_id"]
    await wait_for_status(http, original, {"activated", "rejected", "failed"}, 90)  # validated: its hash is known

    copy = f"dup_copy_{uuid.uuid4().hex[:8]}"
    script.script(plan_answer(copy), code_answer(code), code_answer(code))
    trigger_id = await start(temporal_client)
    cycle = await wait_cycle(http, trigger_id, lambda c: c["status"] != "running")
    assert (cycle["stage"], cycle["status"], cycle["attempts"], cycle["mutation_id"]) == (
        "validation_failed",
        "failed",
        2,
        None,
    )
    assert cycle["error"].startswith("code rejected twice: DUPLICATE_CODE") and original in cycle["error"]
    retry_prompt = script.prompts()[2]
    assert "DUPLICATE_CODE" in retry_prompt and "write different logic" in retry_prompt
    copies = (await http.get("/api/mutations", params={"trait_name": copy})).json()["mutations"]
    assert copies == []
    await temporal_client.get_workflow_handle(f"mutation-{original}").signal("rollback", "test over")


async def test_llm_down_or_unparseable_ends_the_cycle_with_an_llm_error(evo_worker, script, http, temporal_client):
    script.script(
        Answer("busy", status=503), Answer("still busy", status=503)
    )  # every attempt (GENESIS_LLM_ATTEMPTS=2)
    trigger_id = await start(temporal_client)
    cycle = await wait_cycle(http, trigger_id, lambda c: c["status"] != "running")
    assert (cycle["stage"], cycle["status"]) == ("llm_error", "failed") and cycle["error"].startswith("LLM_UNAVAILABLE")
    assert len(script.requests) == 2 and cycle["tokens_in"] == 0
    [message] = [m for m in await feed_of(http, trigger_id) if m["action"] == "llm_error"]
    assert message["agent"] == "architect" and "503" in message["message"] and "world goes on" in message["message"]
    assert message["workflow_id"] == evolution_workflow_id(trigger_id)
    await record_history(temporal_client, evolution_workflow_id(trigger_id), "evolution_llm_error")

    script.requests.clear()
    script.script("I would rather not make a plan today.")
    trigger_id = await start(temporal_client)
    cycle = await wait_cycle(http, trigger_id, lambda c: c["status"] != "running")
    assert cycle["error"].startswith("LLM_UNPARSEABLE") and "no JSON object" in cycle["error"]
    assert len(script.requests) == 1, "an unparseable answer is not retried"
    assert cycle["tokens_in"] == 100, "the tokens of an unusable answer were still spent"


async def test_a_cycle_without_a_provider_ends_cleanly(settings, worker, http, redis_client, operator_http):
    """GENESIS_LLM_PROVIDER=off (the suite's worker): an operator's trigger starts a cycle that
    ends at once with llm_error saying so, and the world goes on."""
    assert settings.llm.provider == "off"
    await redis_client.delete(keys.WATCHER_CIRCUIT_BREAKER, keys.WATCHER_TRIGGER_COUNTER, keys.WATCHER_FORCED_COUNTER)
    await write_snapshots(redis_client, settings.engine.snapshot_interval, {}, {})
    response = await operator_http.post(
        "/api/evolution/trigger", json={"anomaly_type": "stagnation", "severity": "critical"}
    )
    assert response.status_code == 202, response.text
    body = response.json()
    trigger_id = body["trigger_id"]
    try:
        assert body["cycle_workflow_id"] == evolution_workflow_id(trigger_id)
        cycle = await wait_cycle(http, trigger_id, lambda c: c["status"] != "running", timeout_s=60)
        assert (cycle["stage"], cycle["status"], cycle["mutation_id"]) == ("llm_error", "failed", None)
        assert (cycle["problem_type"], cycle["severity"]) == ("stagnation", "critical")
        assert cycle["error"].startswith("LLM_OFF") and "GENESIS_LLM_PROVIDER=off" in cycle["error"]
        actions = [(m["agent"], m["action"]) for m in await feed_of(http, trigger_id)]
        assert actions == [("watcher", "anomaly_detected"), ("architect", "llm_error"), ("evolution", "cycle_failed")]
    finally:
        await redis_client.delete("watcher:cooldown:stagnation")
        await operator_http.post(f"/api/agents/tasks/{body['task_id']}/resolve", json={"reason": "test over"})


async def test_adjust_params_is_applied_observed_and_rolled_back(
    evo_worker, script, http, redis_client, temporal_client
):
    await redis_client.delete(keys.WORLD_PARAMS_OVERRIDES, keys.ENGINE_PARAMS)
    script.script(
        json.dumps(
            {
                "action_type": "adjust_params",
                "description": "more food per resource",
                "params": {"resource_energy": 30.0},
            }
        )
    )
    trigger_id = await start(temporal_client)
    cycle = await wait_cycle(http, trigger_id, lambda c: c["stage"] == "observing")
    record = world_params.read_record(await redis_client.get(keys.WORLD_PARAMS_OVERRIDES))
    assert record["overrides"] == {"resource_energy": 30.0} and record["workflow_id"] == evolution_workflow_id(
        trigger_id
    )
    assert cycle["params_change"]["before"] == {"resource_energy": 25.0}
    handle = temporal_client.get_workflow_handle(evolution_workflow_id(trigger_id))
    await handle.signal("world_snapshot", sample(300, 100, 50.0, 5))
    await handle.signal("world_snapshot", sample(400, 60, 30.0, 30))  # the world got worse
    cycle = await wait_cycle(http, trigger_id, lambda c: c["status"] != "running")
    assert (cycle["stage"], cycle["mutation_status"]) == ("rolled_back", "rolled_back")
    assert cycle["params_change"]["fitness_verdict"] == "negative"
    assert world_params.read_record(await redis_client.get(keys.WORLD_PARAMS_OVERRIDES))["overrides"] == {}
    actions = [m["action"] for m in await feed_of(http, trigger_id)]
    assert actions == ["plan_created", "params_adjusted", "rolled_back", "cycle_completed"], actions
    await record_history(temporal_client, evolution_workflow_id(trigger_id), "evolution_params_rolled_back")


# -- schedules and the feed --------------------------------------------------------------------------


async def test_schedule_starts_periodic_cycles(evo_settings, evo_worker, script, http, operator_http, start_api):
    url = await start_api("api-evolution", task_queue=QUEUE, schedule_min_interval_s=1.0)
    script.script(*["no plan"] * 5)
    schedule_id = f"test-{uuid.uuid4().hex[:8]}"
    async with httpx.AsyncClient(base_url=url, timeout=30, headers=operator_http.headers) as api:
        too_short = await operator_http.post(
            "/api/schedules", json={"interval_s": 30}
        )  # the suite's API: 60 s at least
        assert too_short.status_code == 422 and "between 60 and" in too_short.json()["detail"]
        bad_id = await api.post("/api/schedules", json={"interval_s": 2, "schedule_id": "no spaces"})
        assert bad_id.status_code == 422 and "schedule_id" in bad_id.text
        created = await api.post("/api/schedules", json={"schedule_id": schedule_id, "interval_sec": 2, "note": "test"})
        assert created.status_code == 201, created.text
        body = created.json()
        assert body["schedule_id"] == schedule_id and body["paused"] is False
        assert body["interval_sec"] == body["interval_s"] == 2  # interval_s: the older name, still answered and read
        assert body["note"] == "test" and body["next_run_times"] and body["recent_runs"] == []
        again = await api.post("/api/schedules", json={"schedule_id": schedule_id, "interval_s": 2})
        assert again.status_code == 409 and again.json()["error"] == "SCHEDULE_EXISTS"
        try:
            deadline = time.monotonic() + 30
            while not (described := (await api.get(f"/api/schedules/{schedule_id}")).json())["recent_runs"]:
                assert time.monotonic() < deadline, described
                await asyncio.sleep(0.5)
            paused = (await api.post(f"/api/schedules/{schedule_id}/pause")).json()
            assert paused["paused"] is True and paused["note"] == "test"
            run = described["recent_runs"][0]
            assert run["workflow_id"].startswith(f"evolution-sch_{schedule_id}-")
            cycle = await wait_cycle(http, run["trigger_id"], lambda c: c["status"] != "running")
            assert cycle["kind"] == "periodic_improvement" and cycle["problem_type"] == "periodic_improvement"
            assert "periodic improvement" in script.prompts()[0]
            # beside the operator's own cycle, a task for external agents, with that severity's time to live
            listed = (await http.get("/api/agents/context/tasks", params={"limit": 100})).json()["tasks"]
            [task] = [t for t in listed if t["world_context"].get("trigger_id") == run["trigger_id"]]
            assert task["problem_type"] == task["severity"] == "periodic_improvement" and task["source"] == "schedule"
            assert task["expires_at"] - time.time() <= evo_settings.task.ttl_s("periodic_improvement")
            await operator_http.post(f"/api/agents/tasks/{task['task_id']}/resolve", json={"reason": "test over"})
            deadline = time.monotonic() + 15
            while schedule_id not in [s["schedule_id"] for s in (await api.get("/api/schedules")).json()["schedules"]]:
                assert time.monotonic() < deadline, "the schedule is never listed"
                await asyncio.sleep(0.5)
            resumed = (await api.post(f"/api/schedules/{schedule_id}/resume")).json()
            assert resumed["paused"] is False
        finally:
            deleted = await api.delete(f"/api/schedules/{schedule_id}")
        assert deleted.status_code == 200 and deleted.json()["schedule_id"] == schedule_id
        for method, path in (("GET", ""), ("POST", "/pause"), ("POST", "/resume"), ("DELETE", "")):
            missing = await api.request(method, f"/api/schedules/{schedule_id}{path}")
            assert missing.status_code == 404 and missing.json()["error"] == "SCHEDULE_NOT_FOUND", missing.text
            assert schedule_id in missing.json()["detail"]


async def test_feed_pages_and_websocket(http, api_url, redis_client):
    from websockets.asyncio.client import connect as ws_connect

    from evolution import feed

    marker = uuid.uuid4().hex
    first = await feed.publish(redis_client, "tester", "anomaly_detected", f"first {marker}", trigger_id=marker)
    page = (await http.get("/api/feed", params={"after": first})).json()
    assert page["messages"] == [] and page["last_id"] == first
    newest = (await http.get("/api/feed", params={"limit": 1})).json()  # without after: the newest
    assert [m["id"] for m in newest["messages"]] == [first] and newest["last_id"] == first
    oldest = (await http.get("/api/feed", params={"after": "0-0", "limit": 500})).json()["messages"]
    order = [tuple(map(int, m["id"].split("-"))) for m in oldest]
    assert oldest[-1]["id"] == first and order == sorted(order)
    bad = await http.get("/api/feed", params={"after": "yesterday"})
    assert bad.status_code == 422 and "stream id" in bad.json()["detail"]
    assert (await http.get("/api/feed", params={"limit": 501})).status_code == 422

    ws_url = api_url.replace("http://", "ws://") + f"/ws/feed?after={first}"
    async with ws_connect(ws_url) as socket:
        pubsub = redis_client.pubsub()
        await pubsub.subscribe(Channels.FEED)
        second = await feed.publish(
            redis_client,
            "tester",
            "plan_created",
            f"second {marker}",
            trigger_id=marker,
            mutation_id="mut_abcdef",
            workflow_id="evolution-x",
        )
        pushed = json.loads(await asyncio.wait_for(socket.recv(), 10))
        live = None
        while live is None:
            message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=5)
            if message and json.loads(message["data"]).get("trigger_id") == marker:
                live = json.loads(message["data"])
        await pubsub.aclose()
    page = (await http.get("/api/feed", params={"after": first})).json()
    assert page["messages"] == [pushed] and page["last_id"] == second
    assert pushed == {
        "id": second,
        "agent": "tester",
        "action": "plan_created",
        "message": f"second {marker}",
        "trigger_id": marker,
        "mutation_id": "mut_abcdef",
        "workflow_id": "evolution-x",
        "timestamp": pushed["timestamp"],
    }
    assert live == {k: v for k, v in pushed.items() if k != "id"}  # the same JSON on ch:feed
    assert await redis_client.xlen(keys.FEED_STREAM) <= keys.FEED_STREAM_MAXLEN + 100


async def test_a_live_engine_applies_and_reports_a_parameter_change(
    evo_worker, script, http, redis_client, temporal_client, engine_proc
):
    """The whole adjust_params loop with a real `python -m engine`: it picks the override up from
    Redis (GET /api/world/state shows it), reports its snapshots to the cycle, which judges them."""
    await redis_client.delete(keys.WORLD_PARAMS_OVERRIDES)
    state = (await http.get("/api/world/state")).json()
    before = state["params"]["resource_spawn_chance"]
    wanted = round(before * 0.9, 3)
    script.script(
        json.dumps(
            {
                "action_type": "adjust_params",
                "description": "a little less food",
                "params": {"resource_spawn_chance": wanted},
            }
        )
    )
    trigger_id = await start(temporal_client)
    try:
        deadline = time.monotonic() + 30
        while (await http.get("/api/world/state")).json()["params"]["resource_spawn_chance"] != wanted:
            assert time.monotonic() < deadline, "the engine never applied the override"
            await asyncio.sleep(0.3)
        cycle = await wait_cycle(http, trigger_id, lambda c: c["status"] != "running", timeout_s=60)
        change = cycle["params_change"]
        assert change["before"] == {"resource_spawn_chance": before} and change["after"] == {
            "resource_spawn_chance": wanted
        }
        assert change["effects"]["window_ticks"] >= 60 and change["fitness_verdict"] in (
            "positive",
            "neutral",
            "negative",
        )
        expected = {"negative": ("rolled_back", before)}.get(change["fitness_verdict"], ("completed", wanted))
        assert cycle["stage"] == expected[0]
        deadline = time.monotonic() + 30  # a rollback restores the configured value in the engine too
        while (await http.get("/api/world/state")).json()["params"]["resource_spawn_chance"] != expected[1]:
            assert time.monotonic() < deadline, "the engine never took the rollback"
            await asyncio.sleep(0.3)
    finally:
        await redis_client.delete(keys.WORLD_PARAMS_OVERRIDES)


@pytest.fixture(scope="module")
async def builtin_settings(evo_settings) -> Settings:
    return evo_settings.override(
        task_queue=f"{QUEUE}-builtin", llm_provider="builtin", llm_url="", worker_metrics_port=free_port()
    )


@pytest.fixture(scope="module")
async def builtin_worker(builtin_settings, api_url):
    process = worker_process(builtin_settings, "worker-evolution-builtin")
    process.start()
    await asyncio.sleep(3)  # the worker builds/finds its sandbox image before polling
    yield process
    process.stop()


async def test_the_builtin_operator_runs_a_whole_cycle_without_a_model(
    builtin_settings, builtin_worker, script, http, redis_client, temporal_client
):
    """GENESIS_LLM_PROVIDER=builtin: the Architect's and the Coder's steps come from the built-in
    operator (no LLM is asked), its trait passes the gatekeeper and the sandbox, goes live and is
    kept when its observation window closes well."""
    await redis_client.delete(keys.WATCHER_CIRCUIT_BREAKER, keys.WATCHER_TRIGGER_COUNTER)

    async def temporal():
        return temporal_client

    watcher = Watcher(builtin_settings.override(watcher_cooldown_s=0.0), redis_client, temporal)
    interval = builtin_settings.engine.snapshot_interval
    outcome = await analyze_written(watcher, redis_client, interval, {}, STARVATION)
    await watcher.drain()
    assert outcome.status == GO and outcome.anomaly.type == "starvation"
    trigger_id = outcome.trigger_id
    try:
        cycle = await wait_cycle(http, trigger_id, lambda c: c["mutation_id"] and c["stage"] == "mutation_running")
        mutation_id = cycle["mutation_id"]
        name = f"starvation_{trigger_id.removeprefix('trg_')}"
        assert cycle["action_type"] == "new_trait" and cycle["plan"]["trait_name"] == name
        assert cycle["plan"]["description"].startswith("Built-in operator: a variation of")
        assert cycle["llm_calls"] == 0 and script.requests == []  # no model was asked
        assert cycle["provider"] == "builtin"
        status = await wait_for_status(http, mutation_id, {"activated", "rejected", "failed"}, timeout_s=120)
        assert status["status"] == "activated", status
        assert status["agent_id"] == "genesis-coder" and status["trait_name"] == name

        await observe_well(temporal_client, mutation_id, thriving=name)  # its carriers did well
        cycle = await wait_cycle(http, trigger_id, lambda c: c["status"] != "running")
        assert (cycle["stage"], cycle["status"], cycle["mutation_status"]) == ("completed", "succeeded", "kept")
        status = (await http.get(f"/api/mutations/{mutation_id}/status")).json()
        effects = (await http.get(f"/api/mutations/{mutation_id}/effects")).json()["effects"]
        assert operator.fit_parent(status["fitness_verdict"], effects), (status, effects)
        await check_builtin_lineage(http, status, operator.seed_of(trigger_id, cycle["attempts"]))

        # A second cycle: the first one's trait is live and fit, so the operator varies live
        # traits; their live versions are the new trait's parents, one generation above it.
        second_id = f"trg_{uuid.uuid4().hex[:12]}"
        await cycles.start_cycle(temporal_client, builtin_settings.task_queue, second_id)
        second = await wait_cycle(http, second_id, lambda c: c["mutation_id"] and c["stage"] == "mutation_running")
        child = await wait_for_status(http, second["mutation_id"], {"activated", "rejected", "failed"}, timeout_s=120)
        assert child["status"] == "activated", child
        parents = await check_builtin_lineage(http, child, operator.seed_of(second_id, second["attempts"]))
        assert parents and child["lineage"]["seed_trait"] is None and "seed" not in child["lineage"]["operators"]

        tree = (await http.get(f"/api/traits/{child['trait_name']}/lineage")).json()
        nodes = {n["mutation_id"]: n for n in tree["nodes"]}
        assert nodes[child["mutation_id"]]["generation"] == 0 and nodes[child["mutation_id"]]["origin"] == "builtin"
        assert nodes[child["mutation_id"]]["operators"] == child["lineage"]["operators"]
        assert tree["depth"] >= 1
        for parent in parents:
            assert nodes[parent["mutation_id"]]["generation"] == 1
            assert nodes[parent["mutation_id"]]["fitness_verdict"] in operator.FIT_VERDICTS
            assert {"parent": parent["mutation_id"], "child": child["mutation_id"]} in tree["edges"]
        shallow = (await http.get(f"/api/traits/{child['trait_name']}/lineage", params={"depth": 0})).json()
        assert [n["mutation_id"] for n in shallow["nodes"]] == [child["mutation_id"]]
        assert shallow["edges"] == [] and shallow["truncated"] is True and shallow["depth"] == 0
        await observe_well(temporal_client, child["mutation_id"])
        await wait_cycle(http, second_id, lambda c: c["status"] != "running")
    finally:
        try:
            await temporal_client.get_workflow_handle(task_workflow_id(outcome.task_id)).signal(
                TASK_SIGNAL_RESOLVE, "test over"
            )
        except Exception:
            pass


async def check_builtin_lineage(http, status: dict, seed: int) -> list[dict]:
    """The stored lineage of a built-in operator's proposal: its origin, seed and operators, and
    parents that are versions of other traits whose carriers did well (or a seed trait of the
    library).
    Returns the parents."""
    lineage = status["lineage"]
    assert lineage["origin"] == "builtin" and lineage["seed"] == seed, lineage
    assert lineage["operators"] and set(lineage["operators"]) <= {"seed", *operator.OPERATORS}, lineage
    if not lineage["parents"]:
        assert lineage["operators"][0] == "seed" and lineage["seed_trait"] in operator.SEEDS, lineage
    for parent in lineage["parents"]:
        assert parent["trait_name"] != status["trait_name"]
        versions = (await http.get(f"/api/traits/{parent['trait_name']}")).json()["versions"]
        made = {v["version"]: v["mutation_id"] for v in versions}
        assert made[parent["version"]] == parent["mutation_id"], (parent, versions)
        judged = (await http.get(f"/api/mutations/{parent['mutation_id']}/effects")).json()
        assert operator.fit_parent(judged["fitness_verdict"], judged["effects"]), (parent, judged)
    return lineage["parents"]
