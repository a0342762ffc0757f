"""Signed receipts end to end: every stage of real mutations through the pipeline gets an Ed25519
receipt in one linear chain, served by the API (which holds no private key), verifying with the
public keys of GET /v1/keys — and `genesis verify` checks them on this machine, refusing a
tampered file with the reason."""

from __future__ import annotations

import asyncio
import itertools
import json
import time

from genesis import signing
from pipeline import receipts
from tests import agents, traits
from tests.stack.test_cli import invoke
from tests.stack.test_lifecycle import wait_for_status
from tests.stack.test_mutation_pipeline import propose, wait_for_verdict


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
    import base64

    answer = (await http.get("/v1/keys")).json()
    assert all(k["algorithm"] == "Ed25519" for k in answer["keys"])
    return {k["key_id"]: base64.b64decode(k["public_key"]) for k in answer["keys"]}


async def test_every_stage_of_a_mutation_has_a_signed_receipt_in_one_chain(http, operator_http, api_url, tmp_path):
    live = await propose(http, traits.seeker(901), trait_name="receipted_seeker")
    raises = await propose(http, traits.RAISES, trait_name="receipted_raiser")
    forbidden = await propose(http, traits.FORBIDDEN_IMPORT, trait_name="receipted_importer")
    await wait_for_verdict(http, raises)
    forbidden_status = await wait_for_verdict(http, forbidden)
    await wait_for_status(http, live, {"activated", "kept"})
    answer = await operator_http.post(f"/api/mutations/{live}/rollback", json={"reason": "receipts test"})
    assert answer.status_code in (200, 202), answer.text

    stages = ["mutation.validated", "mutation.sandbox_verdict", "mutation.activated", "mutation.rolled_back"]
    found = await receipts_of(http, live, set(stages))
    assert [r["kind"] for r in found] == stages
    assert found[1]["body"] == {"verdict": "passed"} and found[-1]["body"]["reason"].startswith("receipts test")
    proposer = await agents.agent(http)
    assert all(
        r["subject"]["agent_id"] == proposer.agent_id and r["subject"]["trait_name"] == "receipted_seeker"
        for r in found
    )
    sandbox_failed = await receipts_of(http, raises, {"mutation.sandbox_verdict", "mutation.rejected"})
    assert {r["kind"]: r["body"] for r in sandbox_failed}["mutation.sandbox_verdict"]["verdict"] == "failed"
    gate_failed = await receipts_of(http, forbidden, {"mutation.rejected"})
    assert [r["kind"] for r in gate_failed] == ["mutation.rejected"]  # never validated, never tested
    assert gate_failed[0]["body"]["failure_reason_code"] == forbidden_status["failure_reason_code"]

    # the whole chain: each names the previous one's hash, and each verifies with the public keys
    keys = await public_keys(http)
    chain, cursor = [], None
    while True:
        page = (await http.get("/v1/receipts", params={"limit": 50, **({"cursor": cursor} if cursor else {})})).json()
        chain += page["receipts"]
        if (cursor := page["next_cursor"]) is None:
            break
    assert [r["seq"] for r in chain] == sorted(r["seq"] for r in chain)
    for before, after in itertools.pairwise(chain):
        assert after["prev"] == before["hash"]
    for r in chain:
        receipt = receipts.from_json(r)
        signing.verify(receipt, keys)
        assert signing.receipt_hash(receipt) == r["hash"]
    one = await http.get(f"/v1/receipts/{found[0]['id']}")
    assert one.status_code == 200 and one.json() == found[0]
    assert (await http.get("/v1/receipts/rcpt_nothex")).status_code == 422
    assert (await http.get(f"/v1/receipts/rcpt_{'0' * 24}")).status_code == 404
    assert (await http.get("/v1/receipts", params={"kind": "nope"})).status_code == 422

    # `genesis verify`: a saved file with saved keys, offline; a tampered one fails with the reason
    saved, keys_file = tmp_path / "receipts.json", tmp_path / "keys.json"
    saved.write_text(json.dumps(found))
    keys_file.write_text((await http.get("/v1/keys")).text)
    code, out, _ = await invoke(api_url, "verify", str(saved), "--keys", str(keys_file))
    assert code == 0 and "4 of 4 receipt(s) verified here" in out, out
    tampered = [dict(r) for r in found]
    tampered[2]["cbor"] = None  # checked from its fields, one of which is changed
    tampered[2]["body"] = {"trait_version": 99}
    saved.write_text(json.dumps(tampered))
    code, out, _ = await invoke(api_url, "verify", str(saved), "--keys", str(keys_file))
    assert code == 1 and "FAILED" in out and "does not verify" in out, out
    code, out, _ = await invoke(api_url, "verify", found[0]["id"])
    assert code == 0 and "1 of 1" in out, out
