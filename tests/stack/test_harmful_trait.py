"""A harmful trait is rolled back by the world itself: it goes live in a real engine, the observing
workflow measures the world over its window, judges it negative and rolls it back, and every
carrier loses it; the world itself is not rewound (an operator's decision, which the feed
suggests).

This runs on a stack of its own (Postgres database, Redis db, worker, API, engine): the suite's
registry holds the traits other modules left live, and a newborn gains one trait among all of
them, so in the shared world only a few entities would carry this one. Here the engine starts with
an empty world and a population floor, so every entity it spawns carries the only live trait.
"""

from __future__ import annotations

import httpx
import pytest

from cli.processes import engine_process, worker_and_api
from tests.own_stack import own_settings
from tests.pipeline_steps import propose, wait_for_status, wait_until

# Burns energy at the highest rate and speed allowed, and runs away from food.
BURNER = """
class BaseTrait:
    pass

class EnergyBurnerTrait(BaseTrait):
    async def execute(self, entity) -> None:
        entity.energy_consumption_rate = 1.5
        entity.speed = 4.0
        found = entity.nearest_resource()
        if found is not None:
            entity.move(-found[0], -found[1])
"""


@pytest.fixture(scope="module")
async def own_stack(settings):
    """A stack of its own (tests/own_stack.py) with a 300-tick window and a -0.05 rollback
    threshold, a worker and an API."""
    own = await own_settings(
        settings,
        "world",
        observation_window_ticks=300,
        rollback_threshold=-0.05,
        engine_initial_population=0,
        engine_min_population=200,
        engine_trait_gain_chance=1.0,
    )
    async with worker_and_api(own, "harm") as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
        await wait_until(lambda: _healthy(http), timeout_s=90, what="the stack's worker to poll")
        yield own, http


async def _healthy(http) -> bool:
    return (await http.get("/api/health")).status_code == 200


async def _carriers(http, trait: str) -> int:
    response = await http.get("/api/world/entities", params={"limit": 500})
    if response.status_code == 503:  # the engine has not written its first frame yet
        return 0
    return sum(trait in e["traits"] for e in response.json()["entities"])


async def test_a_harmful_trait_is_rolled_back_by_its_observation_and_leaves_every_carrier(own_stack):
    own, http = own_stack
    mutation_id = await propose(http, BURNER, trait_name="energy_burner")
    await wait_for_status(http, mutation_id, {"activated"})
    # The engine starts after activation: its first tick spawns 200 entities, all carrying the trait.
    engine = engine_process(own, "engine-harm")
    engine.start()
    try:
        carriers = await wait_until(lambda: _carriers(http, "energy_burner"), timeout_s=60, what="carriers")
        assert carriers >= 150
        status = await wait_for_status(http, mutation_id, {"kept", "rolled_back"}, timeout_s=120)
        assert status["status"] == "rolled_back", status
        # A quarantine also ends it rolled_back (with no verdict): this trait runs without error
        # and must be judged by its observation, never quarantined.
        assert status["quarantine"] is None, f"quarantined instead of judged by its window: {status}"
        assert status["fitness_verdict"] == "negative"
        effects = (await http.get(f"/api/mutations/{mutation_id}/effects")).json()
        assert effects["observed"] is True and effects["effects"]["avg_energy_delta"] < 0
        assert effects["effects"]["carriers_before"] >= 150
        assert effects["effects"]["fitness_delta"] <= -0.05

        async def gone() -> bool:
            stats = (await http.get("/api/stats")).json()
            return "energy_burner" not in stats["active_traits"] and await _carriers(http, "energy_burner") == 0

        await wait_until(gone, timeout_s=30, what="the trait to leave every carrier")
        # The trait is out; the world is not rewound (only an operator does that): the feed
        # suggests it when the trait did harm, as the journal's harm threshold says.
        messages = (await http.get("/api/feed", params={"limit": 500})).json()["messages"]
        actions = [m["action"] for m in messages if m.get("mutation_id") == mutation_id]
        assert "rolled_back" in actions and "world_rollback" not in actions, actions
        harm = status["rollback_reason"] == "population_decline" and (
            effects["effects"]["fitness_delta"] <= own.journal.harm_fitness
        )
        assert ("rewind_suggested" in actions) == harm, (actions, status["rollback_reason"], effects)
    finally:
        engine.stop()
