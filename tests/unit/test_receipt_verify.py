"""Receipts as clients hold them (``GET /v1/receipts/{id}``'s JSON) and ``genesis verify``, offline:
the JSON fields must say what the signed bytes say, a file of receipts verifies with a saved key
listing and no server, a tampered file fails naming the receipt and the reason, ``--chain`` shows
a receipt left out, and a server that lies (another receipt, a swapped key) is caught here."""

from __future__ import annotations

import base64
import json
import math

import pytest
from typer.testing import CliRunner

from activities.mutations import stage_receipts
from api.audit.schemas import EXAMPLE_KEYS, EXAMPLE_RECEIPT
from audit import receipts
from cli import app
from genesis import canonical, signing
from genesis.dto import MutationStatus, StatusUpdate
from tests.cli_runs import OddServer


@pytest.fixture
def keyring(tmp_path):
    return signing.ensure_keyring(tmp_path / "keys")


def served(receipt: dict, seq: int = 1) -> dict:
    """A receipt in the API's form (audit/receipts.py as_json, without a database row)."""
    out = {k: v for k, v in receipt.items() if k != "sig"}
    out.update(
        sig=base64.b64encode(receipt["sig"]).decode(),
        hash=signing.receipt_hash(receipt),
        seq=seq,
        journal_seq=None,
        cbor=base64.b64encode(canonical.encode(receipt)).decode(),
    )
    return out


def a_head(keyring, chain: list[dict], count: int | None = None) -> dict:
    """The chain's signed head as the API serves it beside a listing."""
    statement = signing.sign_head(keyring, chain[-1]["hash"], len(chain) if count is None else count)
    return receipts.signed_json(canonical.encode(statement))


def a_chain(keyring, n: int = 4) -> list[dict]:
    chain, prev = [], None
    for i in range(n):
        subject = {"mutation_id": "mut_00c0ffee", "agent_id": "agt_1", "trait_name": "forager"}
        receipt = signing.sign(keyring, signing.KINDS[i % 7], subject, {"step": i}, prev)
        prev = signing.receipt_hash(receipt)
        chain.append(served(receipt, seq=i + 1))
    return chain


def listing(keyring) -> dict:
    keys = keyring.public_keys()
    return {"keys": [{"key_id": kid, "public_key": base64.b64encode(raw).decode()} for kid, raw in keys.items()]}


def verify(tmp_path, items, keys: dict, *options: str, url: str = "http://127.0.0.1:9") -> tuple[int, str]:
    """``genesis verify FILE --keys KEYS`` with no server behind GENESIS_API_URL."""
    (tmp_path / "r.json").write_text(items if isinstance(items, str) else json.dumps(items))
    (tmp_path / "k.json").write_text(json.dumps(keys))
    env = {"GENESIS_API_URL": url, "GENESIS_API_KEY": "", "GENESIS_OPERATOR_KEY": "", "COLUMNS": "200"}
    result = CliRunner().invoke(
        app, ["verify", str(tmp_path / "r.json"), "--keys", str(tmp_path / "k.json"), *options], env=env
    )
    return result.exit_code, result.stdout + result.stderr


def test_the_fields_shown_must_be_the_fields_signed(keyring):
    item = served(signing.sign(keyring, "mutation.kept", {"mutation_id": "mut_00c0ffee"}, {"fitness": 0.5}, None))
    assert receipts.from_json(item) == canonical.decode(base64.b64decode(item["cbor"]))
    for name, value in (("body", {"fitness": 0.9}), ("kind", "mutation.rolled_back"), ("v", True), ("sig", "AA==")):
        with pytest.raises(signing.ReceiptInvalid, match=f"its {name} differs from the {name} in its signed bytes"):
            receipts.from_json({**item, name: value})
    with pytest.raises(signing.ReceiptInvalid, match="cbor is not base64"):
        receipts.from_json({**item, "cbor": "not base64!"})
    with pytest.raises(signing.ReceiptInvalid, match="canonical"):
        receipts.from_json({**item, "cbor": base64.b64encode(b"\xff\x00").decode()})


def test_a_saved_file_verifies_offline_in_every_form(keyring, tmp_path):
    chain = a_chain(keyring)
    page = {"receipts": chain, "head": a_head(keyring, chain), "next_cursor": None}
    for form in (chain, chain[0], page, "\n".join(json.dumps(r) for r in chain)):
        code, out = verify(tmp_path, form, listing(keyring))
        n = 1 if isinstance(form, dict) and "receipts" not in form else 4
        assert code == 0 and f"{n} of {n} receipt(s) verified here, with the public keys only" in out, out
    code, out = verify(tmp_path, page, listing(keyring), "--chain")
    assert code == 0 and "one unbroken run of the chain, to its signed head" in out, out


def test_a_listing_cut_at_its_end_shows_against_the_signed_head(keyring, tmp_path):
    """Each receipt of a cut listing verifies, and its links hold: only the chain's signed head,
    which names the newest receipt and counts them, shows what is missing."""
    chain = a_chain(keyring, 5)
    head = a_head(keyring, chain)
    code, out = verify(tmp_path, {"receipts": chain[:3], "head": head}, listing(keyring), "--chain")
    assert code == 1 and f"CHAIN BROKEN the run ends at {chain[2]['id']}, which is not the chain's newest" in out, out
    assert "5 of 5" not in out and "3 of 3 receipt(s) verified here" in out
    code, out = verify(tmp_path, chain[:3], listing(keyring), "--chain")  # the head left out
    assert code == 1 and "no signed chain head came with the receipts" in out, out
    code, out = verify(
        tmp_path, {"receipts": chain, "head": a_head(keyring, chain, count=6)}, listing(keyring), "--chain"
    )
    assert code == 1 and "the chain holds 6 receipt(s) by its signed head; this whole run holds 5" in out, out
    code, out = verify(tmp_path, {"receipts": chain[1:], "head": head}, listing(keyring), "--chain")
    assert code == 0, out  # a run from the middle to the head: what precedes it is not claimed

    impostor = signing.ensure_keyring(tmp_path / "impostor")
    forged = a_head(impostor, chain[:3], count=3)  # a head for the cut listing, by another key
    code, out = verify(tmp_path, {"receipts": chain[:3], "head": forged}, listing(keyring), "--chain")
    assert code == 1 and f"the chain's head does not verify: signed with key {impostor.current}" in out, out
    not_a_head = {"receipts": chain[:3], "head": chain[2]}  # a receipt passed off as the head
    code, out = verify(tmp_path, not_a_head, listing(keyring), "--chain")
    assert code == 1 and "the head is a 'mutation.sandbox_verdict' receipt, not a 'chain.head'" in out, out


def test_a_tampered_file_fails_with_the_receipt_and_the_reason(keyring, tmp_path):
    chain = a_chain(keyring)
    changed_field = [dict(r) for r in chain]
    changed_field[1]["body"] = {"step": 99}  # what a reader sees, beside unchanged signed bytes
    code, out = verify(tmp_path, changed_field, listing(keyring))
    assert code == 1 and f"FAILED {chain[1]['id']}: its body differs from the body in its signed bytes" in out, out
    assert "3 of 4 receipt(s) verified here" in out

    raw = bytearray(base64.b64decode(chain[2]["cbor"]))
    raw[raw.index(b"step") + 4] ^= 0x01  # the value after the key "step": 2 -> 3, in the signed bytes
    forged = [dict(r) for r in chain]
    forged[2] = {"cbor": base64.b64encode(bytes(raw)).decode()}
    code, out = verify(tmp_path, forged, listing(keyring))
    assert code == 1 and "the signature does not verify with key" in out, out

    gap = {"receipts": [*chain[:1], *chain[2:]], "head": a_head(keyring, chain)}
    code, out = verify(tmp_path, gap, listing(keyring), "--chain")
    assert code == 1 and f"CHAIN BROKEN {chain[2]['id']} does not name the hash of {chain[0]['id']}" in out, out

    code, out = verify(tmp_path, chain, {"keys": []})
    assert code == 1 and "which is not among the keys given" in out
    code, out = verify(tmp_path, "[1, {}]", listing(keyring))
    assert code == 1 and "not a receipt: expected a JSON object" in out and "missing" in out
    code, out = verify(tmp_path, "{not json", listing(keyring))
    assert code == 2 and "neither JSON nor NDJSON" in out
    code, out = verify(tmp_path, {"receipts": [], "next_cursor": None}, listing(keyring))
    assert code == 1 and "no receipt to verify: the listing is empty" in out, out


def test_a_server_that_lies_is_caught_here(keyring, tmp_path):
    """Fetched by id: a server answering with another receipt, or a key listing whose key is not
    the one its id names, fails on this machine."""
    chain = a_chain(keyring, 2)
    server = OddServer()
    try:
        env = {"GENESIS_API_URL": server.url, "GENESIS_API_KEY": "", "GENESIS_OPERATOR_KEY": "", "COLUMNS": "200"}
        server.json("GET /v1/keys", listing(keyring))
        server.json(f"GET /v1/receipts/{chain[0]['id']}", chain[0])
        unpinned = CliRunner().invoke(app, ["verify", chain[0]["id"]], env=env)  # the API's keys alone: no
        assert unpinned.exit_code == 2 and "no key is pinned" in unpinned.stderr, unpinned.output
        assert keyring.current in unpinned.stderr  # what it serves, to be confirmed on the signing host
        trusted = ["--trust", keyring.current]
        result = CliRunner().invoke(app, ["verify", chain[0]["id"], *trusted], env=env)
        assert result.exit_code == 0 and "1 of 1 receipt(s) verified here" in result.stdout, result.output
        other = CliRunner().invoke(app, ["verify", chain[0]["id"], "--trust", "k_0000000000000000"], env=env)
        assert other.exit_code == 2 and "serves no key k_0000000000000000" in other.stderr, other.output

        server.json(f"GET /v1/receipts/{chain[0]['id']}", chain[1])
        result = CliRunner().invoke(app, ["verify", chain[0]["id"], *trusted], env=env)
        assert result.exit_code == 1 and f"the API answered with '{chain[1]['id']}'" in result.stderr

        impostor = signing.ensure_keyring(tmp_path / "impostor")
        swapped = {"keys": [{**listing(keyring)["keys"][0], "public_key": listing(impostor)["keys"][0]["public_key"]}]}
        server.json("GET /v1/keys", swapped)
        server.json(f"GET /v1/receipts/{chain[0]['id']}", chain[0])
        result = CliRunner().invoke(app, ["verify", chain[0]["id"], *trusted], env=env)
        assert result.exit_code == 2 and f"the key given for {keyring.current} is another key" in result.stderr
    finally:
        server.close()


def test_the_documented_example_receipt_verifies_with_the_documented_keys():
    keys = signing.keys_of_listing(EXAMPLE_KEYS)
    receipt = receipts.from_json(EXAMPLE_RECEIPT)
    signing.verify(receipt, keys)
    assert signing.receipt_hash(receipt) == EXAMPLE_RECEIPT["hash"]


def test_each_recorded_status_stands_for_its_stages():
    def kinds(**change) -> list[str]:
        return [kind for kind, _ in stage_receipts(StatusUpdate(mutation_id="mut_00c0ffee", **change))]

    assert kinds(status=MutationStatus.validating) == []  # accepted, not yet validated
    assert kinds(status=MutationStatus.validating, code_hash="ab" * 32) == ["mutation.validated"]
    assert kinds(status=MutationStatus.sandbox_ok) == ["mutation.sandbox_verdict"]
    assert kinds(status=MutationStatus.rejected, failure_reason_code="FORBIDDEN_IMPORT") == ["mutation.rejected"]
    assert kinds(status=MutationStatus.rejected, failure_reason_code="SANDBOX_TIMEOUT") == [
        "mutation.sandbox_verdict",
        "mutation.rejected",
    ]
    assert kinds(status=MutationStatus.activated, trait_version=2) == ["mutation.activated"]
    effects = {"fitness_delta": 0.1, "window_ticks": 300}
    assert kinds(status=MutationStatus.activated, effects=effects, fitness_verdict="positive") == ["mutation.observed"]
    assert kinds(status=MutationStatus.kept, effects=effects) == ["mutation.observed", "mutation.kept"]
    assert kinds(status=MutationStatus.kept) == ["mutation.kept"]
    assert kinds(status=MutationStatus.rolled_back, rollback_reason="operator") == ["mutation.rolled_back"]
    assert kinds(status=MutationStatus.failed) == ["mutation.failed"]
    assert kinds(status=MutationStatus.queued) == []
    [(_, body)] = stage_receipts(
        StatusUpdate(mutation_id="mut_00c0ffee", status=MutationStatus.activated, effects={"fitness_delta": math.nan})
    )
    assert body["fitness_delta"] == "nan"  # signable: canonical CBOR has no NaN
    canonical.encode(body)
