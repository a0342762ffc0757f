"""Modifying a live trait over HTTP on real services: ``replaces`` at propose time
(TRAIT_EXISTS, TRAIT_NOT_LIVE, VERSION_CONFLICT), the optimistic check again inside the activation
(a replacement that lost the race ends rejected VERSION_CONFLICT), version swap and rollback
restoring the replaced version in the registry and in a real engine, and the traits endpoints.

The API of this module runs with a huge observation window, so activated versions stay live
(no verdict) until the test rolls them back, even with the engine reporting snapshots."""

from __future__ import annotations

import asyncio
import time

import pytest
from sqlalchemy import select

from genesis.db.models import Mutation, TraitVersion
from genesis.db.session import get_sessionmaker
from genesis.redis_keys import Channels
from pipeline import registry
from tests import agents
from tests.pipeline_steps import next_message, replay_and_maybe_record, wait_for_status
from tests.trait_versions import code, count_mutations, fresh_name, go_live, propose

UNPOLLED = "genesis-test-modify-unpolled"


@pytest.fixture(scope="module")
async def modify_url(start_api):
    return await start_api("api-modify", observation_window_ticks=1_000_000_000)


@pytest.fixture
async def client(modify_url):
    import httpx

    async with httpx.AsyncClient(base_url=modify_url, timeout=30) as http:
        yield http


async def wait_for_log_line(path, offset: int, needle: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with open(path, "rb") as f:
            f.seek(offset)
            if needle in f.read().decode(errors="replace"):
                return
        await asyncio.sleep(0.2)
    raise AssertionError(f"the engine never logged {needle!r} (see {path})")


async def test_modify_flow_end_to_end(client, settings, redis_client, engine_proc, temporal_client):
    """v1 live → propose with replaces → activated as v2 → registry and engine run v2 →
    rollback → v1 is live again (registry, engine, trait_versions, event, status)."""
    http = client
    me = await agents.register(http, "modifier")
    name = fresh_name("modded")
    log_offset = engine_proc.log_path.stat().st_size
    source_v1, source_v2 = code(), code()

    v1 = await go_live(http, me, name, source_v1)
    assert v1["trait_version"] == 1 and v1["replaces"] is None and v1["replaced_version"] is None
    await wait_for_log_line(engine_proc.log_path, log_offset, f"loaded trait {name} v1 ({v1['mutation_id']})")

    detail = (await http.get(f"/api/traits/{name}")).json()
    assert detail["live_version"] == 1 and detail["live"]["code"] == source_v1
    assert detail["live"]["mutation_id"] == v1["mutation_id"] and detail["live"]["agent_id"] == me.agent_id

    v2 = await go_live(http, me, name, source_v2, replaces={"trait_name": name, "version": 1})
    assert v2["trait_version"] == 2 and v2["replaced_version"] == 1
    assert v2["replaces"] == {"trait_name": name, "version": 1}
    assert any(
        line.startswith(f"Activation: trait_{name}_v2.py is live") and "replacing v1" in line
        for line in v2["validation_log"]
    )
    entry = (await registry.read_entries(redis_client))[name]
    assert (entry.version, entry.mutation_id, entry.code) == (2, v2["mutation_id"], source_v2)
    await wait_for_log_line(engine_proc.log_path, log_offset, f"loaded trait {name} v2 ({v2['mutation_id']})")

    detail = (await http.get(f"/api/traits/{name}")).json()
    assert detail["live_version"] == 2 and detail["live"]["code"] == source_v2
    assert [(v["version"], v["status"]) for v in detail["versions"]] == [(2, "active"), (1, "superseded")]
    assert detail["versions"][0]["replaced_version"] == 1
    listed = {t["trait_name"]: t for t in (await http.get("/api/traits")).json()["traits"]}
    assert listed[name]["version"] == 2 and listed[name]["mutation_id"] == v2["mutation_id"]

    effects = (await http.get(f"/api/mutations/{v2['mutation_id']}/effects")).json()
    assert effects["replaces"] == {"trait_name": name, "version": 1} and effects["trait_version"] == 2
    assert effects["replaced_version"] == 1

    pubsub = redis_client.pubsub()
    await pubsub.subscribe(Channels.MUTATION_ROLLBACK)
    log_offset = engine_proc.log_path.stat().st_size
    response = await http.post(
        f"/api/mutations/{v2['mutation_id']}/rollback", json={"reason": "v2 is worse"}, headers=me.headers
    )
    assert response.status_code == 202, response.text
    rolled = await wait_for_status(http, v2["mutation_id"], {"rolled_back"})
    assert rolled["restored_version"] == 1 and rolled["validation_log"][-1] == "Rollback: v2 is worse; v1 restored"
    event = await next_message(pubsub)
    while event.get("mutation_id") != v2["mutation_id"]:
        event = await next_message(pubsub)
    assert event["restored_version"] == 1 and event["trait_name"] == name and event["reason"] == "v2 is worse"
    await pubsub.aclose()

    entry = (await registry.read_entries(redis_client))[name]
    assert (entry.version, entry.mutation_id, entry.code) == (1, v1["mutation_id"], source_v1)
    await wait_for_log_line(engine_proc.log_path, log_offset, f"loaded trait {name} v1 ({v1['mutation_id']})")
    detail = (await http.get(f"/api/traits/{name}")).json()
    assert detail["live_version"] == 1 and detail["live"]["code"] == source_v1
    assert [(v["version"], v["status"]) for v in detail["versions"]] == [(2, "rolled_back"), (1, "active")]
    assert detail["versions"][0]["rollback_reason"] == "v2 is worse"
    assert isinstance(detail["carriers"], int), "the engine's snapshots count the carriers"
    effects = (await http.get(f"/api/mutations/{v2['mutation_id']}/effects")).json()
    assert effects["status"] == "rolled_back" and effects["restored_version"] == 1
    await replay_and_maybe_record(temporal_client, v2["mutation_id"], "mutation_modify_rolled_back")


async def test_propose_time_checks(client, settings):
    http = client
    me = await agents.register(http, "modify-checks")
    name = fresh_name("checked")
    v1 = await go_live(http, me, name)
    before = await count_mutations(settings, me.agent_id)

    stale = await propose(http, me, name, code(), replaces={"trait_name": name, "version": 7})
    assert stale.status_code == 409, stale.text
    body = stale.json()
    assert body["error"] == "VERSION_CONFLICT" and body["live_version"] == 1
    assert "live as v1" in body["detail"] and f"GET /api/traits/{name}" in body["detail"]

    exists = await propose(http, me, name, code())
    assert exists.status_code == 409 and exists.json()["error"] == "TRAIT_EXISTS"
    assert exists.json()["live_version"] == 1 and '"replaces"' in exists.json()["detail"]

    ghost = fresh_name("ghost")
    not_live = await propose(http, me, ghost, code(), replaces={"trait_name": ghost})
    assert not_live.status_code == 409 and not_live.json()["error"] == "TRAIT_NOT_LIVE"
    assert "was ever activated" in not_live.json()["detail"]

    for replaces, field, message in [
        ({"trait_name": "other_trait", "version": 1}, "replaces", "must equal trait_name"),
        ({"version": 1}, "replaces.trait_name", "field required"),
        ({"trait_name": name, "version": 0}, "replaces.version", "greater than or equal to 1"),
        ({"trait_name": name, "version": "1"}, "replaces.version", "valid integer"),
        ({"trait_name": name, "version": True}, "replaces.version", "valid integer"),
        ({"trait_name": name, "version": 2**31}, "replaces.version", "less than or equal"),
        ({"trait_name": name, "ver": 1}, "replaces.ver", "unknown field"),
        ({"trait_name": "Not-Snake"}, "replaces.trait_name", "snake_case"),
        ("v1", "replaces", "valid dictionary"),
    ]:
        response = await propose(http, me, name, code(), replaces=replaces)
        assert response.status_code == 422, (replaces, response.text)
        error = response.json()
        assert error["error"] == "VALIDATION_ERROR" and error["errors"][0]["field"] == field, (replaces, error)
        assert message in error["errors"][0]["message"], (replaces, error)
    assert await count_mutations(settings, me.agent_id) == before, "refused proposals record nothing"

    # Batch items are checked one by one, exactly like single proposals.
    batch = await http.post(
        "/api/mutations/propose/batch",
        headers=me.headers,
        json={
            "proposals": [
                {"trait_name": name, "code": code(), "replaces": {"trait_name": name, "version": 3}},
                {"trait_name": name, "code": code()},
                {"trait_name": ghost, "code": code(), "replaces": {"trait_name": ghost, "version": 1}},
                {"trait_name": name, "code": code(), "replaces": {"trait_name": "x_y"}},
                {"trait_name": name, "code": code(), "replaces": {"trait_name": name, "version": 1}},
            ]
        },
    )
    assert batch.status_code == 207, batch.text
    results = batch.json()["results"]
    assert [r["status_code"] for r in results] == [409, 409, 409, 422, 202]
    assert [r.get("error") for r in results[:3]] == ["VERSION_CONFLICT", "TRAIT_EXISTS", "TRAIT_NOT_LIVE"]
    assert results[0]["live_version"] == 1 and results[1]["live_version"] == 1
    v2 = await wait_for_status(http, results[4]["mutation_id"], {"activated", "rejected"}, 90)
    assert v2["status"] == "activated" and v2["trait_version"] == 2 and v2["replaces"]["version"] == 1

    # After rolling back every version nothing is live: replaces is TRAIT_NOT_LIVE, a new proposal is fine.
    for mutation_id in (v2["mutation_id"], v1["mutation_id"]):
        assert (await http.post(f"/api/mutations/{mutation_id}/rollback", headers=me.headers)).status_code == 202
        await wait_for_status(http, mutation_id, {"rolled_back"})
    gone = await propose(http, me, name, code(), replaces={"trait_name": name})
    assert gone.status_code == 409 and gone.json()["error"] == "TRAIT_NOT_LIVE"
    assert "v2 is rolled_back" in gone.json()["detail"]
    again = await go_live(http, me, name)
    assert again["trait_version"] == 3 and again["replaced_version"] is None
    detail = (await http.get(f"/api/traits/{name}")).json()
    assert [(v["version"], v["status"]) for v in detail["versions"]] == [
        (3, "active"),
        (2, "rolled_back"),
        (1, "rolled_back"),
    ]


async def test_replacement_that_lost_the_race_is_rejected_at_activation(
    client, settings, redis_client, temporal_client
):
    """Two replacements of v1 pass the propose-time check together; whichever is activated first
    becomes v2, and the other — still in its sandbox test then — finds v2 live where it expected
    v1: it ends rejected with VERSION_CONFLICT and the registry keeps v2."""
    http = client
    me = await agents.register(http, "racer")
    name = fresh_name("raced")
    v1 = await go_live(http, me, name)
    responses = await asyncio.gather(
        *(propose(http, me, name, code(), replaces={"trait_name": name, "version": 1}) for _ in range(2))
    )
    assert [r.status_code for r in responses] == [202, 202], [r.text for r in responses]
    ids = [r.json()["mutation_id"] for r in responses]
    finals = [await wait_for_status(http, i, {"activated", "rejected", "failed"}, 120) for i in ids]
    winner = next(s for s in finals if s["status"] == "activated")
    loser = next(s for s in finals if s["status"] == "rejected")
    assert winner["trait_version"] == 2 and winner["replaced_version"] == 1
    assert loser["failure_reason_code"] == "VERSION_CONFLICT" and loser["trait_version"] is None
    assert any(line.startswith("Sandbox: OK") for line in loser["validation_log"]), "it passed its sandbox test"
    last = loser["validation_log"][-1]
    assert last.startswith("Activation: FAILED — VERSION_CONFLICT") and f"replaces '{name}' v1" in last
    assert f"v2 (mutation {winner['mutation_id']}) is live now" in last and '"version": 2' in last

    entry = (await registry.read_entries(redis_client))[name]
    assert entry.mutation_id == winner["mutation_id"] and entry.version == 2
    async with get_sessionmaker(settings.database_url)() as session:
        rows = (
            await session.scalars(
                select(TraitVersion).where(TraitVersion.trait_name == name).order_by(TraitVersion.version)
            )
        ).all()
        record = await session.get(Mutation, loser["mutation_id"])
    assert [(r.version, r.status, r.mutation_id) for r in rows] == [
        (1, "superseded", v1["mutation_id"]),
        (2, "active", winner["mutation_id"]),
    ]
    assert not record.holds_code_hash, "its code may be proposed again"
    assert not list(settings.mutations_dir.glob(f"trait_{name}_v3.py")), "no audit file for the loser"
    await replay_and_maybe_record(temporal_client, loser["mutation_id"], "mutation_version_conflict")


async def test_two_new_traits_of_one_name_only_one_goes_live(client):
    """GENESIS_TRAIT_EXISTS_POLICY=reject (the default) also at activation: two proposals of a
    brand-new name pass the propose-time check; the one activated second would overwrite the
    first, so it is rejected with VERSION_CONFLICT instead."""
    http = client
    me = await agents.register(http, "twins")
    name = fresh_name("twin")
    responses = await asyncio.gather(*(propose(http, me, name, code()) for _ in range(2)))
    assert [r.status_code for r in responses] == [202, 202], [r.text for r in responses]
    finals = [
        await wait_for_status(http, r.json()["mutation_id"], {"activated", "rejected", "failed"}, 120)
        for r in responses
    ]
    assert sorted(s["status"] for s in finals) == ["activated", "rejected"], finals
    loser = next(s for s in finals if s["status"] == "rejected")
    assert loser["failure_reason_code"] == "VERSION_CONFLICT"
    assert f"adds '{name}' as a new trait" in loser["validation_log"][-1]
    assert (await http.get(f"/api/traits/{name}")).json()["live_version"] == 1


async def test_replace_policy_keeps_the_old_implicit_behaviour(start_api, settings):
    url = await start_api("api-implicit-replace", trait_exists_policy="replace", observation_window_ticks=1_000_000_000)
    import httpx

    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        me = await agents.register(http, "implicit")
        name = fresh_name("implicit")
        v1 = await go_live(http, me, name)
        v2 = await go_live(http, me, name)  # no replaces: accepted, and it replaces v1
        assert v2["trait_version"] == 2 and v2["replaced_version"] == 1 and v2["replaces"] is None
        assert v1["trait_version"] == 1
        # replaces is still checked under this policy
        stale = await propose(http, me, name, code(), replaces={"trait_name": name, "version": 1})
        assert stale.status_code == 409 and stale.json()["error"] == "VERSION_CONFLICT"


async def test_traits_endpoints(client, start_api):
    http = client
    me = await agents.register(http, "reader")
    name = fresh_name("readable")
    source = code()
    v1 = await go_live(http, me, name, source)

    listing = await http.get("/api/traits")
    assert listing.status_code == 200
    ours = [t for t in listing.json()["traits"] if t["trait_name"] == name]
    assert len(ours) == 1
    assert set(ours[0]) == {
        "trait_name",
        "version",
        "mutation_id",
        "agent_id",
        "class_name",
        "code_hash",
        "activated_at",
        "carriers",
        "running",
        "mutation_status",
        "fitness_verdict",
        "verdict_reason",
        "ledger",
    }
    assert ours[0]["mutation_status"] in ("activated", "kept")
    assert set(listing.json()) == {
        "traits",
        "quarantined",
        "departed",
        "snapshot_tick",
        "max_live_traits",
        "next_cursor",
    }
    assert ours[0]["version"] == 1 and ours[0]["mutation_id"] == v1["mutation_id"]
    assert ours[0]["agent_id"] == me.agent_id and ours[0]["class_name"] == "SeekerTrait"
    assert ours[0]["code_hash"] == v1["code_hash"] and ours[0]["activated_at"] <= time.time()
    names = [t["trait_name"] for t in listing.json()["traits"]]
    assert names == sorted(names) and len(names) == len(set(names)), "one live version per trait"

    # A replacement still in flight is listed as pending (a task queue no worker polls keeps it queued).
    unpolled = await start_api("api-modify-unpolled", task_queue=UNPOLLED)
    import httpx

    async with httpx.AsyncClient(base_url=unpolled, timeout=30) as other:
        queued = await propose(other, me, name, code(), replaces={"trait_name": name, "version": 1})
        assert queued.status_code == 202, queued.text
    detail = (await http.get(f"/api/traits/{name}")).json()
    assert detail["trait_name"] == name and detail["live_version"] == 1
    assert detail["live"]["code"] == source and detail["live"]["file_path"].endswith(f"trait_{name}_v1.py")
    assert detail["live"]["status"] == "active" and detail["live"]["mutation_status"] == "activated"
    assert [p["mutation_id"] for p in detail["pending"]] == [queued.json()["mutation_id"]]
    assert detail["pending"][0]["replaces"] == {"trait_name": name, "version": 1}
    assert detail["pending"][0]["status"] == "queued"

    one = await http.get(f"/api/traits/{name}", params={"limit": 1})
    assert one.status_code == 200 and len(one.json()["versions"]) == 1

    for path, status, error in [
        ("/api/traits/Not-Snake", 422, "VALIDATION_ERROR"),
        ("/api/traits/" + "a" * 65, 422, "VALIDATION_ERROR"),
        ("/api/traits/9lives", 422, "VALIDATION_ERROR"),
        (f"/api/traits/{fresh_name('never')}", 404, "TRAIT_NOT_FOUND"),
        (f"/api/traits/{name}?limit=0", 422, "VALIDATION_ERROR"),
        (f"/api/traits/{name}?limit=x", 422, "VALIDATION_ERROR"),
    ]:
        response = await http.get(path)
        assert response.status_code == status, (path, response.text)
        body = response.json()
        assert body["error"] == error and body["detail"], (path, body)
    missing = (await http.get("/api/traits/never_there_at_all")).json()
    assert "was ever activated" in missing["detail"]
