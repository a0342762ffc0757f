"""Agents acting through their members in rounds, on real services and a real engine (rounds of
one second): registration hands out members; submissions are admitted only while a round
accepts, idempotent per agent and key; each round settles with a signed receipt that lists every
accepted submission once (applied, with each action's outcome, or rejected with its reason, for
hostile code too); the settled round is in the journal and replays to the same state hashes."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from audit import receipts
from cli.processes import engine_process
from engine.core.verify import verify_range
from genesis import signing
from genesis.config import Settings
from genesis.db.models import Agent, RoundSubmission
from governance.records import manifests
from journal.reader import JournalReader
from rounds import records
from tests import agents
from tests.services import fresh_journal

ROUND_TICKS = 60

FORAGE = """
def agent_action(engine, member_id):
    me = engine.member
    if engine.resources:
        food = engine.resources[0]
        engine.move_towards(member_id, food.x, food.y)
    engine.eat(member_id)
    engine.send_message(member_id, member_id, "note to self at " + str(me.energy))
"""
BUSY = "def agent_action(engine, member_id):\n    while True:\n        pass\n"
BOMB = "def agent_action(engine, member_id):\n    x = 'a' * (2 ** 40)\n"
RAISES = "def agent_action(engine, member_id):\n    raise ValueError('no')\n"


@pytest.fixture(scope="module")
async def database(settings):
    engine = create_async_engine(settings.database_url, poolclass=NullPool)
    yield engine
    await engine.dispose()


@pytest.fixture(scope="module")
async def short_rounds(database, settings):
    """Rounds of ROUND_TICKS ticks in the manifest, for this module."""
    async with database.begin() as conn:
        before = await manifests.current(conn, settings)
        document = {**before.document, "rounds": {"ticks": ROUND_TICKS}}
        now = await manifests.record(conn, document, "test: short rounds", before.hash)
    yield
    async with database.begin() as conn:
        await manifests.record(conn, before.document, "test: restored", now.hash)


@pytest.fixture(scope="module")
async def round_engine(settings, short_rounds, api_url):
    """``python -m engine`` with rounds and a journal of its own."""
    engine_settings = fresh_journal(settings, "rounds").override(rounds_enabled=True, journal_enabled=True)
    process = engine_process(engine_settings, "engine-rounds")
    process.start()
    deadline = time.monotonic() + 90
    try:
        while not await accepting(api_url):
            if time.monotonic() > deadline or process.proc.poll() is not None:
                raise RuntimeError(f"the engine opened no round; see {process.log_path}")
            await asyncio.sleep(0.2)
        yield engine_settings
    finally:
        process.stop()


async def accepting(api_url: str) -> bool:
    async with httpx.AsyncClient(base_url=api_url, timeout=10) as http:
        answer = await http.get("/v1/world/rounds/current/deadline")
    return answer.status_code == 200 and answer.json()["state"] == "accepting"


async def submit(http, agent, code: str, key: str):
    return await http.post("/v1/world/actions", json={"code": code, "idempotency_key": key}, headers=agent.headers)


async def settled(http, round_id: int, timeout_s: float = 60) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        body = (await http.get(f"/v1/world/rounds/{round_id}")).json()
        if body.get("state") == "settled":
            return body
        await asyncio.sleep(0.2)
    raise AssertionError(f"round {round_id} did not settle: {body}")


async def test_a_member_comes_at_the_first_action_goes_back_idle_or_given_up_and_is_never_reused(
    http, database, start_api
):
    async def member(agent) -> int | None:
        return (await http.get("/v1/agents/me", headers=agent.headers)).json()["member_id"]

    ann = await agents.register(http, "member-ann")
    assert await member(ann) is None  # registering takes nothing from the pool
    async with database.begin() as conn:  # a round that accepts, with no engine yet
        round_id = await records.open_round(conn, 0, 0, 10, datetime.now(UTC) + timedelta(seconds=60))
    try:
        assert (await submit(http, ann, FORAGE, "member-1")).status_code == 202
        first = await member(ann)
        assert isinstance(first, int)
        given = await http.delete("/v1/agents/me/member", headers=ann.headers)
        assert given.status_code == 200 and given.json()["released"] == first and await member(ann) is None
        assert (await submit(http, ann, FORAGE, "member-2")).status_code == 202
        second = await member(ann)
        assert second is not None and second > first  # a number is never given out twice

        # The pool is full: Ann's member goes back once she has been idle for the manifest's time.
        async with database.begin() as conn:
            held = await conn.scalar(select(func.count()).where(Agent.member_id.is_not(None)))
            two_hours_ago = func.now() - timedelta(hours=2)
            await conn.execute(update(Agent).where(Agent.agent_id == ann.agent_id).values(last_action_at=two_hours_ago))
        full = await start_api("members-full", rounds_max_members=held)
        async with httpx.AsyncClient(base_url=full, timeout=30) as crowded:
            bob = await agents.register(crowded, "member-bob")
            assert (await submit(crowded, bob, FORAGE, "member-bob-1")).status_code == 202
            assert await member(ann) is None and await member(bob) not in (None, first, second)
            # ... and with every member held by an agent that acted lately (Bob), none is free
            async with database.begin() as conn:
                now_held = await conn.scalar(select(func.count()).where(Agent.member_id.is_not(None)))
            tight = await start_api("members-tight", rounds_max_members=now_held)
            async with httpx.AsyncClient(base_url=tight, timeout=30) as none_free:
                refused = await submit(none_free, ann, FORAGE, "member-3")
            assert refused.status_code == 409 and refused.json()["error"] == "NO_FREE_MEMBER", refused.text
    finally:
        async with database.begin() as conn:
            await records.close_round(conn, round_id)


async def test_nothing_is_accepted_while_no_round_accepts(http, database):
    me = await agents.register(http, "round-closed")
    async with database.begin() as conn:  # an executing round and no accepting one: between rounds
        round_id = await records.open_round(conn, 0, 0, 10, datetime.now(UTC) + timedelta(seconds=1))
        await records.close_round(conn, round_id)
    refused = await submit(http, me, FORAGE, "closed-1")
    assert refused.status_code == 409, refused.text
    assert refused.json() | {"detail": None} == {
        "error": "ROUND_NOT_ACCEPTING",
        "detail": None,
        "status": "rejected",
        "reason": "Round not accepting submissions",
    }


async def test_an_agent_makes_at_most_its_quota_of_submissions_to_a_round(http, database, settings):
    me = await agents.register(http, "round-quota")
    async with database.begin() as conn:  # a round that accepts, with no engine yet
        round_id = await records.open_round(conn, 0, 0, 10, datetime.now(UTC) + timedelta(seconds=30))
    try:
        cap = settings.rounds.max_submissions_per_agent
        answers = [await submit(http, me, FORAGE, f"quota-{i}") for i in range(cap + 1)]
        assert [a.status_code for a in answers] == [202] * cap + [429], [a.text for a in answers]
        over = answers[-1]
        assert over.json()["error"] == "ROUND_QUOTA_EXCEEDED" and int(over.headers["Retry-After"]) >= 1
        assert f"at most {cap} submissions" in over.json()["reason"]
        assert (await submit(http, me, FORAGE, "quota-0")).status_code == 202  # a retry is no new submission
    finally:
        async with database.begin() as conn:
            await records.close_round(conn, round_id)


async def test_a_round_settles_with_a_receipt_listing_every_submission(http, round_engine, database, settings):
    ann, bob = await agents.register(http, "round-ann"), await agents.register(http, "round-bob")
    answers = [
        await submit(http, ann, FORAGE, "ann-forage"),
        await submit(http, ann, RAISES, "ann-raises"),
        await submit(http, bob, BUSY, "bob-busy"),
        await submit(http, bob, BOMB, "bob-bomb"),
    ]
    assert [a.status_code for a in answers] == [202] * 4, [a.text for a in answers]
    rounds_of = {a.json()["round_id"] for a in answers}
    assert len(rounds_of) <= 2  # a round may have closed between two submissions
    by_id = {}
    for round_id in sorted(rounds_of):
        done = await settled(http, round_id)
        by_id.update({s["id"]: (round_id, s) for s in done["submissions"]})
        assert done["receipt_id"] and done["summary"]["submissions"] == len(done["submissions"])
        served = (await http.get(f"/v1/receipts/{done['receipt_id']}")).json()  # public, like the round
        keys = {k["key_id"]: base64.b64decode(k["public_key"]) for k in (await http.get("/v1/keys")).json()["keys"]}
        receipt = receipts.from_json(served)
        signing.verify(receipt, keys)
        assert receipt["kind"] == "round.settled" and receipt["body"]["round_id"] == round_id
        listed = [s["id"] for s in receipt["body"]["submissions"]]
        assert sorted(listed) == sorted(s["id"] for s in done["submissions"])  # each exactly once
    ids = [a.json()["submission_id"] for a in answers]
    forage, raises, busy, bomb = (by_id[i][1] for i in ids)
    assert forage["status"] == "applied"
    kinds = [(o["action"][0], o["applied"]) for o in forage["actions"]]
    assert kinds[-2:] == [("eat", True), ("message", True)]
    assert (raises["status"], raises["error"]) == ("rejected", "error") and "ValueError" in raises["reason"]
    assert (busy["status"], busy["error"]) == ("rejected", "timeout")
    assert (bomb["status"], bomb["error"]) == ("rejected", "memory")
    # the engine keeps its pace: later rounds open and settle (a round may be between its
    # accepting window and its settlement at the moment it is read: read again)
    for _ in range(50):
        later = (await http.get("/v1/world/rounds/current/deadline")).json()
        if later["round_id"] > max(rounds_of) and later["state"] == "accepting":
            break
        await asyncio.sleep(0.1)
    assert later["round_id"] > max(rounds_of) and later["state"] == "accepting", later


async def test_the_command_line_follows_a_submission_to_its_round_outcome(http, round_engine, api_url, tmp_path):
    """`genesis rounds submit` waits for the round to settle and shows what became of the
    submission and of each action; `genesis rounds show` lists every action and whole reasons."""
    from tests.cli_runs import invoke

    cat = await agents.register(http, "round-cli")
    action = tmp_path / "forage.py"
    action.write_text(FORAGE)
    code, out, err = await invoke(api_url, "rounds", "submit", str(action), "--key", "cli-forage", key=cat.api_key)
    assert code == 0, out + err
    assert "settled: your submission" in out and "applied" in out and "eat() applied" in out, out
    code, out, err = await invoke(
        api_url, "rounds", "submit", str(action), "--key", "cli-forage", "--json", key=cat.api_key
    )
    answer = json.loads(out)
    assert answer["round"]["state"] == "settled" and answer["submission"]["status"] == "applied", answer
    code, out, err = await invoke(api_url, "rounds", "show", str(answer["round_id"]))
    assert code == 0 and "eat() applied" in out and cat.agent_id in out, out + err


ECHO = """
def agent_action(engine, member_id):
    for m in engine.inbox:
        engine.send_message(member_id, member_id, "got " + m.text + " from " + str(m.from_member_id))
"""


async def test_a_message_reaches_its_member_in_a_later_round_once(http, round_engine):
    ann, bob = await agents.register(http, "mail-ann"), await agents.register(http, "mail-bob")

    async def run(agent, code: str, key: str) -> dict:
        answer = await submit(http, agent, code, key)
        assert answer.status_code == 202, answer.text
        done = await settled(http, answer.json()["round_id"])
        return next(s for s in done["submissions"] if s["id"] == answer.json()["submission_id"])

    bob_member = (await run(bob, ECHO, "bob-first"))["member_id"]  # an empty inbox: no action
    ann_member = (
        await run(
            ann,
            f"def agent_action(engine, member_id):\n    engine.send_message(member_id, {bob_member}, 'hello bob')\n",
            "ann-says",
        )
    )["member_id"]
    heard = await run(bob, ECHO, "bob-reads")
    assert heard["status"] == "applied", heard
    assert [o["action"] for o in heard["actions"]] == [["message", bob_member, f"got hello bob from {ann_member}"]]
    again = await run(bob, ECHO, "bob-reads-again")
    # delivered once: what comes again is only bob's own echo of it, sent to itself in the round it read it
    assert [o["action"][2] for o in again["actions"]] == [f"got got hello bob from {ann_member} from {bob_member}"]


async def test_idempotency_is_per_agent_and_key(http, round_engine, database):
    ann, bob = await agents.register(http, "idem-ann"), await agents.register(http, "idem-bob")
    answers = await asyncio.gather(*(submit(http, ann, FORAGE, "same-key") for _ in range(100)))
    assert {a.status_code for a in answers} == {202}
    # 100 answers naming one submission (its status may read applied if its round settled meanwhile)
    assert len({(a.json()["round_id"], a.json()["submission_id"]) for a in answers}) == 1
    async with database.connect() as conn:
        count = await conn.scalar(
            select(func.count()).select_from(RoundSubmission).where(RoundSubmission.agent_id == ann.agent_id)
        )
    assert count == 1  # one submission
    other = await submit(http, bob, FORAGE, "same-key")
    assert other.status_code == 202, other.text
    assert other.json()["submission_id"] != answers[0].json()["submission_id"]
    changed = await submit(http, ann, FORAGE + "\n# other\n", "same-key")
    assert changed.status_code == 409 and changed.json()["error"] == "IDEMPOTENCY_KEY_REUSED"
    # Once its round settled, the key is answered with the same submission and its fate.
    first = answers[0].json()
    await settled(http, first["round_id"])
    again = await submit(http, ann, FORAGE, "same-key")
    assert again.status_code == 202, again.text
    assert {k: again.json()[k] for k in ("round_id", "submission_id")} == {
        k: first[k] for k in ("round_id", "submission_id")
    }
    assert again.json()["submission_status"] in ("applied", "rejected"), again.text


async def test_bad_code_and_a_revoked_capability_are_refused_before_a_round_sees_them(
    http, operator_http, round_engine
):
    me = await agents.register(http, "round-refused")
    bad = await submit(http, me, "import os\ndef agent_action(engine, member_id):\n    os.system('id')\n", "bad-1")
    assert bad.status_code == 422 and bad.json()["error"] == "ACTION_INVALID"
    assert bad.json()["failure_code"] == "AST_IMPORT_FORBIDDEN" and bad.json()["status"] == "rejected"
    missing = await submit(http, me, "def act(engine, member_id):\n    pass\n", "bad-2")
    assert missing.status_code == 422 and missing.json()["failure_code"] == "ACTION_NO_ENTRY_POINT"
    await operator_http.delete(f"/v1/agents/{me.agent_id}/capabilities/actions.submit")
    denied = await submit(http, me, FORAGE, "denied-1")
    assert denied.status_code == 403 and denied.json()["rule"] == "capability"
    assert (await http.post("/v1/world/actions", json={"code": FORAGE, "idempotency_key": "k"})).status_code == 401


async def test_settled_rounds_are_journaled_and_replay_equal(http, round_engine: Settings):
    me = await agents.register(http, "round-journaled")
    answer = await submit(http, me, FORAGE, "journaled-1")
    round_id = answer.json()["round_id"]
    done = await settled(http, round_id)
    journal_dir = round_engine.journal_dir
    found = None
    for _ in range(50):  # the engine appends a tick's record at the next tick
        found = next(
            (
                r
                for r in JournalReader(journal_dir / "records").records()
                if r.header.kind == "tick"
                and (r.inputs.get("round") or {}).get("round_id") == round_id
                and r.inputs["round"]["submissions"]
            ),
            None,
        )
        if found is not None:
            break
        await asyncio.sleep(0.2)
    assert found is not None and found.inputs["tick"] == done["settled_tick"]  # the tick it was applied in
    assert answer.json()["submission_id"] in [s[0] for s in found.inputs["round"]["submissions"]]
    report = await asyncio.to_thread(verify_range, journal_dir, 0, found.header.tick)
    assert report["equal"], report.get("divergence")
