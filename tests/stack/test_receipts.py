"""Signed receipts end to end: every stage of real mutations through the pipeline gets an Ed25519
receipt in one linear chain, served by the API (which holds no private key), verifying with the
public keys of GET /v1/keys — and `genesis verify` checks them on this machine, refusing a
tampered file with the reason. Receipts of the world are read by the agent they concern and
operators; concurrent issuers in several processes keep one chain, which Postgres itself refuses
to fork; a rotated key's receipts still verify."""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import os
import sys
import time
import uuid
from datetime import UTC, datetime

import pytest
from sqlalchemy.exc import IntegrityError

from audit import receipts
from genesis import canonical, signing
from genesis.config import PROJECT_ROOT
from genesis.db.models import ReceiptRow
from genesis.db.session import get_sessionmaker
from tests import agents, traits
from tests.cli_runs import invoke
from tests.pipeline_steps import propose, sample, signal_window, wait_for_status, wait_for_verdict


async def receipts_of(http, mutation_id: str, kinds: set[str], timeout_s: float = 60) -> list[dict]:
    deadline = time.monotonic() + timeout_s
    while True:
        answer = await http.get("/v1/receipts", params={"mutation_id": mutation_id})
        assert answer.status_code == 200, answer.text
        found = answer.json()["receipts"]
        if {r["kind"] for r in found} >= kinds or time.monotonic() > deadline:
            return found
        await asyncio.sleep(0.2)


async def public_keys(http) -> dict[str, bytes]:
    answer = (await http.get("/v1/keys")).json()
    assert all(k["algorithm"] == "Ed25519" for k in answer["keys"])
    return signing.keys_of_listing(answer)


async def whole_chain(http) -> list[dict]:
    chain, cursor = [], None
    while True:
        page = (await http.get("/v1/receipts", params={"limit": 200, **({"cursor": cursor} if cursor else {})})).json()
        chain += page["receipts"]
        if (cursor := page["next_cursor"]) is None:
            return chain


def assert_one_verified_chain(chain: list[dict], keys: dict[str, bytes]) -> None:
    assert [r["seq"] for r in chain] == sorted(r["seq"] for r in chain)
    assert chain[0]["prev"] is None
    for before, after in itertools.pairwise(chain):
        assert after["prev"] == before["hash"], (before["id"], after["id"])
    for r in chain:
        receipt = receipts.from_json(r)
        signing.verify(receipt, keys)
        assert signing.receipt_hash(receipt) == r["hash"]


async def test_every_stage_of_a_mutation_has_a_signed_receipt_in_one_chain(
    http, operator_http, api_url, temporal_client, tmp_path
):
    live = await propose(http, traits.unique_seeker(), trait_name="receipted_seeker")
    kept = await propose(http, traits.unique_seeker(), trait_name="receipted_keeper")
    raises = await propose(http, traits.RAISES, trait_name="receipted_raiser")
    forbidden = await propose(http, traits.FORBIDDEN_IMPORT, trait_name="receipted_importer")
    await wait_for_verdict(http, raises)
    forbidden_status = await wait_for_verdict(http, forbidden)
    await wait_for_status(http, live, {"activated", "kept"})
    answer = await operator_http.post(f"/api/mutations/{live}/rollback", json={"reason": "receipts test"})
    assert answer.status_code in (200, 202), answer.text
    await wait_for_status(http, kept, {"activated"})
    await signal_window(temporal_client, kept, sample(300, 100, 50.0, 5), sample(600, 110, 55.0, 2))

    stages = ["mutation.validated", "mutation.sandbox_verdict", "mutation.activated", "mutation.rolled_back"]
    found = await receipts_of(http, live, set(stages))
    assert [r["kind"] for r in found] == stages
    assert found[1]["body"] == {"verdict": "passed"} and found[-1]["body"]["reason"].startswith("receipts test")
    proposer = await agents.agent(http)
    assert all(
        r["subject"]["agent_id"] == proposer.agent_id and r["subject"]["trait_name"] == "receipted_seeker"
        for r in found
    )
    observed = await receipts_of(http, kept, {"mutation.observed", "mutation.kept"})
    assert [r["kind"] for r in observed][-2:] == ["mutation.observed", "mutation.kept"]
    assert observed[-2]["body"]["fitness_verdict"] == "positive" and observed[-2]["body"]["window_ticks"] == 300
    assert observed[-1]["body"] == {"fitness_verdict": "positive"}
    sandbox_failed = await receipts_of(http, raises, {"mutation.sandbox_verdict", "mutation.rejected"})
    assert {r["kind"]: r["body"] for r in sandbox_failed}["mutation.sandbox_verdict"]["verdict"] == "failed"
    gate_failed = await receipts_of(http, forbidden, {"mutation.rejected"})
    assert [r["kind"] for r in gate_failed] == ["mutation.rejected"]  # never validated, never tested
    assert gate_failed[0]["body"]["failure_reason_code"] == forbidden_status["failure_reason_code"]

    # the whole chain: each names the previous one's hash, and each verifies with the public keys
    keys = await public_keys(http)
    assert_one_verified_chain(await whole_chain(operator_http), keys)
    one = await http.get(f"/v1/receipts/{found[0]['id']}")
    assert one.status_code == 200 and one.json() == found[0]
    by_kind = (await http.get("/v1/receipts", params={"kind": "mutation.kept", "agent_id": proposer.agent_id})).json()
    assert observed[-1]["id"] in [r["id"] for r in by_kind["receipts"]]
    assert {r["kind"] for r in by_kind["receipts"]} == {"mutation.kept"}
    for path, params, field in (
        ("/v1/receipts/rcpt_nothex", {}, "receipt_id"),
        ("/v1/receipts", {"kind": "nope"}, "query.kind"),
        ("/v1/receipts", {"mutation_id": "mut_../x"}, "mutation_id"),
        ("/v1/receipts", {"limit": 0}, "limit"),
        ("/v1/receipts", {"cursor": "eyJ4Ijo1fQ"}, "cursor"),
        ("/v1/receipts", {"mutation": live}, "mutation"),  # an unknown query parameter
        ("/v1/keys", {"all": 1}, "all"),
    ):
        answer = await http.get(path, params=params)
        assert answer.status_code == 422 and answer.json()["error"] == "VALIDATION_ERROR", (path, params, answer.text)
        assert field in answer.json()["detail"], answer.text
    missing = await http.get(f"/v1/receipts/rcpt_{'0' * 24}")
    assert missing.status_code == 404 and missing.json()["error"] == "RECEIPT_NOT_FOUND"

    # `genesis verify`: a saved file with saved keys, offline; a tampered one fails with the reason
    saved, keys_file = tmp_path / "receipts.json", tmp_path / "keys.json"
    saved.write_text(json.dumps(found))
    keys_file.write_text((await http.get("/v1/keys")).text)
    code, out, _ = await invoke(api_url, "verify", str(saved), "--keys", str(keys_file))
    assert code == 0 and "4 of 4 receipt(s) verified here" in out, out
    tampered = [dict(r) for r in found]
    tampered[2]["body"] = {"trait_version": 99}  # beside its unchanged signed bytes
    saved.write_text(json.dumps(tampered))
    code, out, _ = await invoke(api_url, "verify", str(saved), "--keys", str(keys_file))
    assert code == 1 and f"FAILED {found[2]['id']}: its body differs from the body in its signed bytes" in out, out
    tampered[2]["cbor"] = None  # checked from its fields alone, one of which is changed
    saved.write_text(json.dumps(tampered))
    code, out, _ = await invoke(api_url, "verify", str(saved), "--keys", str(keys_file))
    assert code == 1 and "does not verify" in out, out
    code, out, _ = await invoke(api_url, "verify", found[0]["id"], "--trust", found[0]["key_id"])
    assert code == 0 and "1 of 1" in out, out


async def test_receipts_of_the_world_are_read_by_their_agent_and_operators(http, operator_http, settings):
    """A trait-set change and an audit export (issued as the engine and the worker do) carry what
    the audit shows: not public, unlike a mutation's stages."""
    owner, other = await agents.agent(http, "receipt-owner"), await agents.agent(http, "receipt-stranger")
    keyring = signing.ensure_keyring(settings.receipt_keys_path)
    sessions = get_sessionmaker(settings.database_url)
    async with sessions() as session, session.begin():
        changed = await receipts.issue(
            session,
            keyring,
            "trait_set.changed",
            f"test:{uuid.uuid4().hex}",
            {"agent_id": owner.agent_id, "trait_name": "t", "journal_seq": 7, "epoch": 0, "tick": 70},
            {"event": "trait.arrived", "cause": None, "summary": "t v1 arrived"},
        )
        export = await receipts.issue(
            session, keyring, "audit.export", f"test:{uuid.uuid4().hex}", {}, {"manifest": {"count": 0}}
        )
    assert changed is not None and export is not None
    path = f"/v1/receipts/{changed['id']}"

    anonymous = await http.get(path)
    assert anonymous.status_code == 401 and anonymous.json()["error"] == "API_KEY_REQUIRED"
    assert "read by the agent they concern" in anonymous.json()["detail"]
    stranger = await http.get(path, headers=other.headers)
    assert stranger.status_code == 403 and f"does not concern agent '{other.agent_id}'" in stranger.json()["detail"]
    assert (await http.get(path, headers=owner.headers)).json()["id"] == changed["id"]
    assert (await operator_http.get(path)).json()["id"] == changed["id"]
    assert (await http.get(f"/v1/receipts/{export['id']}", headers=owner.headers)).status_code == 403
    assert (await operator_http.get(f"/v1/receipts/{export['id']}")).status_code == 200
    bad_key = await http.get(path, headers={"X-API-Key": "gen_00000000_nope"})
    assert bad_key.status_code == 401 and bad_key.json()["error"] == "INVALID_API_KEY"

    async def listed(client, headers: dict | None = None, **params: str) -> set[str]:
        page = await client.get("/v1/receipts", params={"limit": 500, **params}, headers=headers or {})
        return {r["id"] for r in page.json()["receipts"]}

    mine = {"agent_id": owner.agent_id}
    assert changed["id"] not in await listed(http, **mine)
    assert changed["id"] not in await listed(http, other.headers, **mine)
    assert changed["id"] in await listed(http, owner.headers, **mine)
    assert export["id"] not in await listed(http, owner.headers, kind="audit.export")
    assert export["id"] not in await listed(http, kind="audit.export")
    assert changed["id"] in await listed(operator_http, **mine)
    assert export["id"] in await listed(operator_http, kind="audit.export")


ISSUER = """
import asyncio, sys
from pathlib import Path
from genesis import canonical, signing
from genesis.db.session import get_sessionmaker
from audit import receipts

async def main(url, keys, name, n):
    sessions, keyring = get_sessionmaker(url), signing.load_keyring(Path(keys))
    async def one(i):
        async with sessions() as session, session.begin():
            await receipts.issue(session, keyring, "world.rollback", f"test:{name}:{i}", {"tick": i}, {"by": name})
    await asyncio.gather(*(one(i) for i in range(n)))

asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
"""


async def test_concurrent_issuers_in_several_processes_keep_one_chain(operator_http, settings):
    keys_dir = str(signing.ensure_keyring(settings.receipt_keys_path).directory)
    run = uuid.uuid4().hex[:8]
    env = {k: v for k, v in os.environ.items() if not k.startswith("GENESIS_")}
    issuers = [
        await asyncio.create_subprocess_exec(
            sys.executable, "-c", ISSUER, settings.database_url, keys_dir, f"{run}-{p}", "12", cwd=PROJECT_ROOT, env=env
        )
        for p in range(3)
    ]
    assert [await asyncio.wait_for(p.wait(), 60) for p in issuers] == [0, 0, 0]
    chain = await whole_chain(operator_http)
    assert sum(1 for r in chain if r["body"].get("by", "").startswith(run)) == 36
    assert_one_verified_chain(chain, await public_keys(operator_http))

    # Postgres itself refuses a fork: a second receipt naming the same previous one, or a second first
    sessions = get_sessionmaker(settings.database_url)
    keyring = signing.load_keyring(settings.receipt_keys_path)
    for prev in (chain[-2]["hash"], None):
        receipt = signing.sign(keyring, "world.rollback", {}, {"fork": True}, prev)
        with pytest.raises(IntegrityError, match="ux_receipts_prev_hash"):
            async with sessions() as session, session.begin():
                session.add(
                    ReceiptRow(
                        id=receipt["id"],
                        kind=receipt["kind"],
                        key_id=receipt["key_id"],
                        topic=f"test:fork:{receipt['id']}",
                        issued_at=datetime.now(UTC),
                        hash=signing.receipt_hash(receipt),
                        prev_hash=prev,
                        body=base64.b64decode(chain[-1]["cbor"]),
                    )
                )


async def test_the_signed_head_shows_a_listing_cut_at_its_end(operator_http, api_url, settings, tmp_path):
    """Every receipt carries the chain's signed head in its transaction; the engine re-signs a quiet
    head; `genesis verify chain` checks the whole chain to its head, and a listing that stops
    before the head fails though each of its receipts verifies."""
    keyring = signing.ensure_keyring(settings.receipt_keys_path)
    sessions = get_sessionmaker(settings.database_url)
    run = uuid.uuid4().hex[:8]
    for i in range(3):
        async with sessions() as session, session.begin():
            await receipts.issue(session, keyring, "world.rollback", f"test:{run}:{i}", {"tick": i}, {"by": run})
    page = (await operator_http.get("/v1/receipts", params={"kind": "world.rollback", "limit": 1})).json()
    head = page["head"]
    assert head["kind"] == "chain.head" and head["subject"] == {}
    signing.verify(receipts.from_json(head), await public_keys(operator_http))
    chain = await whole_chain(operator_http)  # read after the head: it holds the head's newest receipt
    newest = next(i for i, r in enumerate(chain) if r["hash"] == head["prev"])  # later ones: issued since
    assert head["body"]["count"] == newest + 1

    async with sessions() as session:
        before = canonical.decode(await receipts.head(session))
    assert not await receipts.refresh_head(sessions, keyring)  # fresh (receipts were just issued): left
    assert await receipts.refresh_head(sessions, keyring, max_age_s=0)
    async with sessions() as session:
        after = canonical.decode(await receipts.head(session))
    assert after["issued_at"] > before["issued_at"] and after["id"] != before["id"]
    if after["prev"] == before["prev"]:  # no receipt was issued meanwhile (the suite's engine may issue some)
        assert after["body"] == before["body"]  # the same chain, re-signed
    else:
        assert after["body"]["count"] > before["body"]["count"]

    operator = (await agents.operator_headers(settings))["X-Operator-Key"]
    # the suite's chain holds receipts of other modules' keys too (governance's own keyring): trust each
    trusted = [arg for kid in (await public_keys(operator_http)) for arg in ("--trust", kid)]
    code, out, err = await invoke(api_url, "verify", "chain", *trusted, operator_key=operator)
    assert code == 0 and "one unbroken run of the chain, to its signed head" in out, out + err

    whole = (await operator_http.get("/v1/receipts", params={"limit": 500})).json()
    cut = {"receipts": whole["receipts"][:-1], "head": whole["head"]}
    (tmp_path / "cut.json").write_text(json.dumps(cut))
    code, out, err = await invoke(api_url, "verify", str(tmp_path / "cut.json"), *trusted, "--chain")
    assert code == 1 and "which is not the chain's newest receipt as of its signed head" in out, out + err


async def test_a_rotated_key_still_verifies_and_a_stale_process_cannot_undo_it(http, settings, tmp_path):
    """`genesis keys rotate` on a key directory of its own (the session's worker keeps its key)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GENESIS_")}
    env.update({"GENESIS_DATABASE_URL": settings.database_url, "GENESIS_RECEIPT_KEYS_DIR": str(tmp_path / "keys")})

    async def keys_cli(*args: str) -> dict:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "cli", "keys", *args, "--json", cwd=PROJECT_ROOT, env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, err.decode()
        return json.loads(out)

    first = (await keys_cli("init"))["current"]
    assert (await keys_cli("init"))["current"] == first  # created once
    stale = signing.load_keyring(tmp_path / "keys")  # a process that loaded the keys before the rotation
    sessions = get_sessionmaker(settings.database_url)
    async with sessions() as session, session.begin():
        old = await receipts.issue(session, stale, "world.rollback", f"test:{uuid.uuid4().hex}", {}, {"key": "old"})
    second = (await keys_cli("rotate"))["current"]
    assert second != first and (await keys_cli("list"))["keys"] == sorted([first, second])
    async with sessions() as session, session.begin():
        new = await receipts.issue(
            session, signing.load_keyring(tmp_path / "keys"), "world.rollback", f"test:{uuid.uuid4().hex}", {}, {}
        )
    assert old is not None and new is not None and (old["key_id"], new["key_id"]) == (first, second)

    await asyncio.gather(*(receipts.publish_public_keys(sessions, stale) for _ in range(3)))  # at once, and stale
    listing = {k["key_id"]: k for k in (await http.get("/v1/keys")).json()["keys"]}
    assert listing[first]["current"] is False and listing[first]["retired_at"] is not None
    assert listing[second]["current"] is True and listing[second]["retired_at"] is None
    keys = await public_keys(http)
    for receipt in (old, new):
        signing.verify(receipt, keys)
