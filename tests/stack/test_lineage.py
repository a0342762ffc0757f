"""Lineage of agents' proposals and the family tree ``GET /api/traits/{name}/lineage`` over HTTP
on real services: a new trait has no parent, a replacement records the version it replaces
(with ``replaces`` and under GENESIS_TRAIT_EXISTS_POLICY=replace), the tree shows two
generations with their fitness verdicts, an older record without lineage falls back on the
version it replaced, and unknown or malformed names get the API's error shape.

Observation windows are driven through the mutation workflow's signal (no engine here)."""

from __future__ import annotations

import random

import httpx
import pytest
from sqlalchemy import update

from genesis.db.models import Mutation
from genesis.db.session import get_sessionmaker
from tests import agents, traits
from tests.pipeline_steps import sample, signal_window, wait_for_status

_variants = iter(random.sample(range(20_000_000, 30_000_000), 50))

GOOD = (sample(300, 100, 50.0, 5), sample(600, 110, 55.0, 2))  # a positive verdict: kept
BAD = (sample(300, 100, 50.0, 5), sample(600, 55, 31.0, 25))  # a negative verdict: rolled back


def fresh_name(prefix: str) -> str:
    return f"{prefix}_{random.randrange(16**8):08x}"


async def propose(http, agent, trait_name: str, replaces: dict | None = None) -> str:
    body = {"trait_name": trait_name, "goal": "lineage test", "code": traits.seeker(next(_variants))}
    if replaces is not None:
        body["replaces"] = replaces
    response = await http.post("/api/mutations/propose", json=body, headers=agent.headers)
    assert response.status_code == 202, response.text
    return response.json()["mutation_id"]


async def live_and_judged(http, temporal_client, mutation_id: str, window, verdict: str) -> dict:
    status = await wait_for_status(http, mutation_id, {"activated", "rejected", "failed"}, 90)
    assert status["status"] == "activated", status
    await signal_window(temporal_client, mutation_id, *window)
    status = await wait_for_status(http, mutation_id, {"kept", "rolled_back"})
    assert status["fitness_verdict"] == verdict, status
    return status


async def test_a_replacement_descends_from_the_version_it_replaced(http, settings, temporal_client):
    me = await agents.register(http, "lineage")
    name = fresh_name("lineage")

    first = await propose(http, me, name)
    v1 = await live_and_judged(http, temporal_client, first, GOOD, "positive")
    assert v1["lineage"] == {"origin": "agent", "parents": [], "operators": [], "seed": None, "seed_trait": None}

    second = await propose(http, me, name, replaces={"trait_name": name, "version": 1})
    parent = {"trait_name": name, "version": 1, "mutation_id": first}
    queued = (await http.get(f"/api/mutations/{second}/status")).json()
    assert queued["lineage"]["origin"] == "agent" and queued["lineage"]["parents"] == [parent]  # from the proposal on
    v2 = await live_and_judged(http, temporal_client, second, BAD, "negative")
    assert v2["trait_version"] == 2 and v2["status"] == "rolled_back"

    tree = (await http.get(f"/api/traits/{name}/lineage")).json()
    assert tree["trait_name"] == name and tree["depth"] == 0 and tree["truncated"] is False
    assert [(n["version"], n["status"], n["fitness_verdict"]) for n in tree["nodes"]] == [
        (2, "rolled_back", "negative"),
        (1, "active", "positive"),
    ]
    assert tree["edges"] == [{"parent": first, "child": second}]
    node = tree["nodes"][1]
    assert (node["mutation_id"], node["trait_name"], node["agent_id"], node["origin"]) == (
        first,
        name,
        me.agent_id,
        "agent",
    )
    assert node["mutation_status"] == "kept" and node["operators"] == [] and node["generation"] == 0
    assert node["created_at"] > 0

    # A record from before lineage existed: the version its activation replaced is its parent.
    async with get_sessionmaker(settings.database_url)() as session:
        await session.execute(update(Mutation).where(Mutation.mutation_id == second).values(lineage=None))
        await session.commit()
    older = (await http.get(f"/api/traits/{name}/lineage")).json()
    assert older["edges"] == [{"parent": first, "child": second}]
    assert older["nodes"][0]["origin"] is None and older["nodes"][0]["operators"] == []
    assert (await http.get(f"/api/mutations/{second}/status")).json()["lineage"] is None


async def test_replacing_without_replaces_under_the_replace_policy_records_the_live_parent(
    http, start_api, temporal_client
):
    me = await agents.register(http, "lineage-policy")
    name = fresh_name("lineage_policy")
    first = await propose(http, me, name)
    await wait_for_status(http, first, {"activated"}, 90)
    replace_url = await start_api("api-lineage-replace", trait_exists_policy="replace")
    async with httpx.AsyncClient(base_url=replace_url, timeout=30) as other:
        second = await propose(other, me, name)  # the same name, no replaces: it replaces v1
    status = (await http.get(f"/api/mutations/{second}/status")).json()
    assert status["lineage"]["parents"] == [{"trait_name": name, "version": 1, "mutation_id": first}]
    for mutation_id in (first, second):  # leave nothing live or observing behind
        await wait_for_status(http, mutation_id, {"activated", "rejected", "failed"}, 90)
        await http.post(
            f"/api/mutations/{mutation_id}/rollback", json={"reason": "lineage test done"}, headers=me.headers
        )


@pytest.mark.parametrize(
    ("path", "code", "field"),
    [
        ("/api/traits/no_such_trait_ever/lineage", 404, None),
        ("/api/traits/Not-Snake/lineage", 422, "trait_name"),
        ("/api/traits/some_trait/lineage?depth=11", 422, "query.depth"),
        ("/api/traits/some_trait/lineage?depth=-1", 422, "query.depth"),
    ],
)
async def test_unknown_or_malformed_names_get_the_error_shape(http, path, code, field):
    response = await http.get(path)
    assert response.status_code == code, response.text
    body = response.json()
    assert body["error"] == ("TRAIT_NOT_FOUND" if code == 404 else "VALIDATION_ERROR") and body["detail"]
    if field:
        assert [e["field"] for e in body["errors"]] == [field], body
