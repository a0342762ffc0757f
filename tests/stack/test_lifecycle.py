"""Activation, observation verdicts and rollback on real Postgres, Redis and Temporal."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from activities.lifecycle import LifecycleActivities
from activities.mutations import MutationRecordActivities
from genesis.db.models import Mutation, TraitVersion
from genesis.db.session import get_sessionmaker
from genesis.dto import RollbackRequest
from genesis.effects import compute_effects, verdict
from genesis.redis_keys import Channels
from pipeline import registry
from tests import agents, traits
from tests.pipeline_steps import (
    activation,
    next_message,
    propose,
    replay_and_maybe_record,
    sample,
    signal_window,
    wait_for_status,
    wait_for_verdict,
)


@pytest.fixture
def lifecycle(settings, redis_client):
    sessions = get_sessionmaker(settings.database_url)
    records = MutationRecordActivities(sessions, redis_client)
    return LifecycleActivities(sessions, redis_client, settings.mutations_dir, records.record)


async def test_activation_is_recorded_registered_announced_and_idempotent(settings, lifecycle, redis_client):
    pubsub = redis_client.pubsub()
    await pubsub.subscribe(Channels.MUTATION_APPLIED)
    request = await activation(settings, "forager_one", 11)
    first = await lifecycle.activate_trait(request)
    retried = await lifecycle.activate_trait(request)  # a retried activity must not activate twice
    assert first.trait_version == retried.trait_version == 1
    assert first.file_path.endswith("trait_forager_one_v1.py")
    with open(first.file_path) as f:
        assert f.read() == request.code
    async with get_sessionmaker(settings.database_url)() as session:
        rows = (await session.scalars(select(TraitVersion).where(TraitVersion.trait_name == "forager_one"))).all()
        record = await session.get(Mutation, request.mutation_id)
    assert [(r.version, r.status) for r in rows] == [(1, "active")]
    assert record.trait_version == 1 and record.activated_at is not None
    entry = (await registry.read_entries(redis_client))["forager_one"]
    assert entry.mutation_id == request.mutation_id and entry.code == request.code
    event = await next_message(pubsub)
    assert event["event"] == "MutationActivated" and event["mutation_id"] == request.mutation_id
    await pubsub.aclose()


async def test_rollback_restores_the_previous_version(settings, lifecycle, redis_client):
    v1 = await activation(settings, "forager_two", 21)
    v2 = await activation(settings, "forager_two", 22)
    await lifecycle.activate_trait(v1)
    second = await lifecycle.activate_trait(v2)
    assert second.trait_version == 2 and second.previous_version == 1
    assert (await registry.read_entries(redis_client))["forager_two"].mutation_id == v2.mutation_id

    pubsub = redis_client.pubsub()
    await pubsub.subscribe(Channels.MUTATION_ROLLBACK)
    result = await lifecycle.rollback_trait(
        RollbackRequest(
            mutation_id=v2.mutation_id, trait_name="forager_two", reason="population_decline", fitness_delta=-0.31
        )
    )
    assert result.rolled_back and result.restored_version == 1
    assert (await registry.read_entries(redis_client))["forager_two"].mutation_id == v1.mutation_id
    event = await next_message(pubsub)
    assert event == {
        "event": "MutationRolledBack",
        "mutation_id": v2.mutation_id,
        "trait_name": "forager_two",
        "reason": "population_decline",
        "fitness_delta": -0.31,
        "restored_version": 1,
    }
    again = await lifecycle.rollback_trait(
        RollbackRequest(mutation_id=v2.mutation_id, trait_name="forager_two", reason="again")
    )
    assert not again.rolled_back, "rollback is idempotent"
    await pubsub.aclose()

    only = await lifecycle.rollback_trait(
        RollbackRequest(mutation_id=v1.mutation_id, trait_name="forager_two", reason="x")
    )
    assert only.restored_version is None
    assert "forager_two" not in await registry.read_entries(redis_client)


async def test_registry_is_rebuilt_from_postgres(settings, lifecycle, redis_client):
    request = await activation(settings, "forager_three", 31)
    await lifecycle.activate_trait(request)
    await redis_client.delete("meta:registry:traits")  # Redis lost its state
    await registry.rebuild_from_postgres(get_sessionmaker(settings.database_url), redis_client)
    assert (await registry.read_entries(redis_client))["forager_three"].mutation_id == request.mutation_id


def test_effects_and_verdicts():
    good = compute_effects("t", sample(300, 100, 50.0, 10), sample(600, 112, 58.3, 5, carriers=10))
    assert (good.entity_count_delta, good.avg_energy_delta, good.death_starvation_delta) == (12, 8.3, -5)
    assert good.window_ticks == 300 and good.carriers_after == 10
    assert verdict(good, -0.1) == "positive"
    bad = compute_effects("t", sample(300, 100, 50.0, 5), sample(600, 60, 30.0, 30))
    assert verdict(bad, -0.1) == "negative"
    flat = compute_effects("t", sample(300, 100, 50.0, 5), sample(600, 100, 50.0, 5))
    assert verdict(flat, -0.1) == "neutral"


async def test_negative_window_rolls_back_and_effects_are_served(http, temporal_client):
    """Drives the observation through the workflow's public signal with a chosen window, so the
    verdict logic is checked without waiting for a world that happens to decline."""
    mutation_id = await propose(http, traits.seeker(501), trait_name="doomed")
    await wait_for_status(http, mutation_id, {"activated"})
    before = (await http.get(f"/api/mutations/{mutation_id}/effects")).json()
    assert before["observed"] is False and before["effects"] is None and before["status"] == "activated"
    await signal_window(temporal_client, mutation_id, sample(300, 100, 50.0, 5), sample(600, 55, 31.0, 25))
    status = await wait_for_status(http, mutation_id, {"rolled_back"})
    assert status["fitness_verdict"] == "negative" and status["rollback_reason"] == "population_decline"
    assert status["validation_log"][-1].startswith("Rollback: population_decline")
    effects = (await http.get(f"/api/mutations/{mutation_id}/effects")).json()
    assert effects["observed"] is True and effects["fitness_verdict"] == "negative"
    assert effects["effects"]["entity_count_delta"] == -45
    await replay_and_maybe_record(temporal_client, mutation_id, "mutation_rolled_back_negative")


async def test_kept_mutation_can_be_rolled_back_over_the_api(http, temporal_client):
    mutation_id = await propose(http, traits.seeker(502), trait_name="keeper")
    await wait_for_status(http, mutation_id, {"activated"})
    await signal_window(temporal_client, mutation_id, sample(300, 100, 50.0, 5), sample(600, 110, 55.0, 2))
    kept = await wait_for_status(http, mutation_id, {"kept"})
    assert kept["fitness_verdict"] == "positive"
    await replay_and_maybe_record(temporal_client, mutation_id, "mutation_kept")
    response = await http.post(
        f"/api/mutations/{mutation_id}/rollback",
        json={"reason": "operator said so"},
        headers=await agents.headers(http),
    )
    assert response.status_code == 202, response.text
    assert response.json()["status"] == "rollback_requested" and response.json()["previous_status"] == "kept"
    assert response.json()["status_url"] == f"/api/mutations/{mutation_id}/status"
    rolled = await wait_for_status(http, mutation_id, {"rolled_back"})
    assert rolled["rollback_reason"] == "operator said so"
    again = await http.post(f"/api/mutations/{mutation_id}/rollback", headers=await agents.headers(http))
    assert again.status_code == 200 and again.json()["message"] == "already rolled back"
    assert again.json()["status"] == again.json()["previous_status"] == "rolled_back"


async def test_too_few_carriers_keep_the_trait_with_an_inconclusive_verdict(http, temporal_client):
    """No Molbot carried the trait during its window while the world collapsed: that is not its
    doing. It is kept, its verdict is inconclusive with the reason, and nothing says positive."""
    mutation_id = await propose(http, traits.seeker(504), trait_name="uncarried")
    await wait_for_status(http, mutation_id, {"activated"})
    collapse = (sample(300, 180, 50.0, 5, carriers=0), sample(600, 90, 30.0, 40, carriers=0))
    await signal_window(temporal_client, mutation_id, *collapse)
    status = await wait_for_status(http, mutation_id, {"kept", "rolled_back"})
    reason = (
        "too few carriers to judge: 0 Molbots carried it during the 300-tick window, a verdict needs at least 5 "
        "(the world's fitness change of -0.409 is not its doing)"
    )
    assert status["status"] == "kept" and status["fitness_verdict"] == "inconclusive", status
    assert status["verdict_reason"] == reason and status["rollback_reason"] is None
    assert status["validation_log"][-1].endswith("→ inconclusive: only 0 Molbot(s) carried it, a verdict needs 5; kept")
    effects = (await http.get(f"/api/mutations/{mutation_id}/effects")).json()
    assert effects["fitness_verdict"] == "inconclusive" and effects["verdict_reason"] == reason
    assert (effects["effects"]["carriers_seen"], effects["effects"]["carriers_needed"]) == (0, 5)
    feed = (await http.get("/api/feed", params={"limit": 500})).json()["messages"]
    [kept] = [m for m in feed if m["mutation_id"] == mutation_id and m["action"] == "kept"]
    assert kept["message"] == f"Trait 'uncarried' v1 kept: fitness inconclusive — {reason}", kept
    assert kept["fitness_verdict"] == "inconclusive" and "positive" not in kept["message"]
    await replay_and_maybe_record(temporal_client, mutation_id, "mutation_kept_inconclusive")
    response = await http.post(
        f"/api/mutations/{mutation_id}/rollback", json={"reason": "test over"}, headers=await agents.headers(http)
    )
    assert response.status_code == 202, response.text


async def test_enough_carriers_give_a_verdict_with_its_reason(http, temporal_client):
    mutation_id = await propose(http, traits.seeker(505), trait_name="carried")
    await wait_for_status(http, mutation_id, {"activated"})
    await signal_window(temporal_client, mutation_id, sample(300, 100, 50.0, 5, carriers=6), sample(600, 100, 50.0, 5))
    status = await wait_for_status(http, mutation_id, {"kept", "rolled_back"})
    assert status["status"] == "kept" and status["fitness_verdict"] == "neutral", status
    assert status["verdict_reason"] == (
        "the world's fitness change +0.000 is between the rollback threshold -0.100 and +0.020; "
        "6 Molbots carried it during the 300-tick window"
    )
    assert status["validation_log"][-1].endswith("→ neutral (6 carriers)")
    feed = (await http.get("/api/feed", params={"limit": 500})).json()["messages"]
    [kept] = [m for m in feed if m["mutation_id"] == mutation_id and m["action"] == "kept"]
    assert kept["message"].startswith("Trait 'carried' v1 kept: fitness neutral — the world's fitness change")
    response = await http.post(
        f"/api/mutations/{mutation_id}/rollback", json={"reason": "test over"}, headers=await agents.headers(http)
    )
    assert response.status_code == 202, response.text


async def test_rollback_during_observation(http):
    mutation_id = await propose(http, traits.seeker(503), trait_name="withdrawn")
    await wait_for_status(http, mutation_id, {"activated"})
    response = await http.post(
        f"/api/mutations/{mutation_id}/rollback", json={"reason": "changed my mind"}, headers=await agents.headers(http)
    )
    assert response.status_code == 202
    status = await wait_for_status(http, mutation_id, {"rolled_back"})
    assert status["rollback_reason"] == "changed my mind"


async def test_rejected_mutation_cannot_be_rolled_back(http):
    mutation_id = await propose(http, traits.FORBIDDEN_IMPORT.replace("hi", "nope"), trait_name="never_live")
    await wait_for_verdict(http, mutation_id)
    response = await http.post(f"/api/mutations/{mutation_id}/rollback", headers=await agents.headers(http))
    assert response.status_code == 409 and response.json()["error"] == "NOT_ROLLBACKABLE"
