"""A trait's verdict is an experiment: paired forks of the live world with and without it.

On a stack of its own (Postgres database, Redis db, worker, API, and an engine with a journal, so
there are snapshots to fork) whose world already runs many live traits, a harmful trait and a
helpful one are proposed through the API at once: the harmful one is judged `negative` and
rolled back, the helpful one `positive` and kept, each with a report of its effects and
intervals; the report computed again from its recorded plan has the same hash.
"""

from __future__ import annotations

import asyncio

import docker
import httpx
import pytest
from redis import asyncio as aioredis

from activities.verdict_experiment import recompute
from cli.processes import engine_process, worker_and_api
from genesis.db.models import TraitVersion
from genesis.db.session import get_sessionmaker
from pipeline import registry
from tests.example_traits import EXAMPLES_DIR
from tests.own_stack import own_settings
from tests.pipeline_steps import propose, replay_and_maybe_record, wait_for_status, wait_until
from tests.trait_hosts import registry_entry

LIVE_TRAITS = 12
HORIZON = 250  # ticks a copy runs: enough for the planted traits' effects to show, in fewer seconds
# Benign traits of the world the planted ones join: each steers a little and labels itself.
FILLER = """class BaseTrait:
    pass

class Filler{k}(BaseTrait):
    async def execute(self, entity) -> None:
        entity.state = "filler {k}"
        if entity.age % 7 == {k} % 7:
            entity.direction = entity.direction + 0.1
"""


@pytest.fixture(scope="module")
async def world(settings):
    """A stack of its own whose engine keeps a journal; ``LIVE_TRAITS`` benign traits are live
    (rows and registry entries, as activation writes them) before the engine starts, and every
    Molbot the population floor spawns gains one of them."""
    own = await own_settings(
        settings,
        "verdicts",
        journal_enabled=True,
        journal_keep_last=10_000,  # the recomputation below forks the verdicts' snapshot again
        journal_snapshot_interval=60,  # a snapshot of a populated world to fork soon after the start
        verdict_mode="experiment",
        verdict_horizon_ticks=HORIZON,
        engine_initial_population=0,
        engine_min_population=100,
        engine_trait_gain_chance=1.0,
    )
    entries = [
        registry_entry(f"filler_{k:02d}", FILLER.replace("{k}", str(k)), f"filler-agent-{k % 4}", k)
        for k in range(LIVE_TRAITS)
    ]
    sessions = get_sessionmaker(own.database_url)
    async with sessions() as session, session.begin():
        for e in entries:
            session.add(
                TraitVersion(
                    trait_name=e.trait_name,
                    version=e.version,
                    mutation_id=e.mutation_id,
                    class_name=e.class_name,
                    code=e.code,
                    code_hash=e.code_hash,
                    file_path="",
                    status="active",
                )
            )
    redis = aioredis.from_url(own.redis_url)
    for e in entries:
        await registry.put_entry(redis, e)
    await redis.aclose()
    engine = engine_process(own, "engine-verdicts")
    engine.start()
    try:
        async with worker_and_api(own, "verdicts") as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
            await wait_until(lambda: _ticked(http, 120), timeout_s=120, what="the world to run 120 ticks")
            yield own, http
    finally:
        engine.stop()


async def _ticked(http, ticks: int) -> bool:
    response = await http.get("/api/world/state")
    return response.status_code == 200 and (response.json().get("tick") or 0) >= ticks


def example(name: str) -> str:
    return (EXAMPLES_DIR / f"{name}.py").read_text()


@pytest.mark.timeout(600)  # two verdicts, then one computed again
async def test_a_harmful_trait_is_judged_negative_and_a_helpful_one_positive(world, temporal_client):
    own, http = world
    harmful, helpful = await asyncio.gather(
        propose(http, example("reckless"), trait_name="reckless"),
        propose(http, example("careful_forager"), trait_name="careful_forager"),
    )
    ended = await asyncio.gather(
        *(
            wait_for_status(http, m, {"kept", "rolled_back", "rejected", "failed"}, timeout_s=400)
            for m in (harmful, helpful)
        )
    )
    bad, good = ended
    print({s["trait_name"]: round(s["updated_at"] - s["created_at"], 1) for s in ended})
    assert bad["status"] == "rolled_back" and bad["fitness_verdict"] == "negative", bad
    assert bad["rollback_reason"].startswith("negative verdict: its carriers' fitness changed by -"), bad
    assert good["status"] == "kept" and good["fitness_verdict"] == "positive", good
    for status in ended:
        report = status["verdict_report"]
        assert report["verdict"] == status["fitness_verdict"] and report["reason"] == status["verdict_reason"]
        assert report["replicates"] >= 3 and report["ticks"] == report["replicates"] * 2 * HORIZON
        plan = report["plan"]
        assert len(plan["treated"]) == len(plan["control"]) + 1 and len(plan["control"]) >= LIVE_TRAITS
        for outcome in report["outcomes"]:
            assert outcome["units"]["count"] >= 40 and outcome["others"]["count"] >= 40
            assert outcome["control"]["restarts"] == outcome["treated"]["restarts"] == 0
    fitness = bad["verdict_report"]["effects"]["fitness"]
    assert fitness["high"] < -0.05, fitness
    assert good["verdict_report"]["effects"]["fitness"]["low"] > 0.05
    line = bad["validation_log"][-2]
    assert line.startswith("Verdict: negative — its carriers' fitness changed by"), bad["validation_log"]

    effects = (await http.get(f"/api/mutations/{harmful}/effects")).json()
    assert (
        effects["observed"] is True and effects["verdict_report"]["report_hash"] == bad["verdict_report"]["report_hash"]
    )

    await replay_and_maybe_record(temporal_client, harmful, "mutation_experiment_rolled_back")
    await replay_and_maybe_record(temporal_client, helpful, "mutation_experiment_kept")

    again = await recompute(good["verdict_report"], own, get_sessionmaker(own.database_url), docker.from_env())
    assert again["report_hash"] == good["verdict_report"]["report_hash"]
